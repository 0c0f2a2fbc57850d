"""Refusals: what in a SchedulingShard or the Config the operator cannot run, each named by its field path.

Pure. A refused object changes nothing that runs: the operator keeps the objects it rendered from the last
valid spec and reports the first problems in the condition `SpecValid` and a Warning event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operators.core.durations import delay_error

STRATEGIES = ("binpack", "spread")
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction", "resizeeviction")
# This scheduler's plugins, and KAI's (accepted; the scheduler names what it does not honour).
PLUGINS = frozenset({
    "predicates", "proportion", "priority", "elastic", "gang", "subgroups", "preemptiondelay", "taskorder",
    "gpusharing", "nodeplacement", "minruntime", "podaffinity", "topology", "preemptionpolicy", "pdb",
    "nodeavailability", "resourcetype", "kubeflow", "ray", "subgrouporder", "nominatednode", "dynamicresources",
    "snapshot", "gpupack", "gpuspread", "gpusharingorder",
    "backgroundpods", "semipreemptible", "safetoconsolidate", "gpujoborder", "searchbackoff", "fewergangs",
    "quotagates", "suspend",
})
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
COMPONENT_KEYS = ("admission", "binder", "podGrouper", "podGroupController", "queueController", "scheduler")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class ShardRef:
    """What the conflict check needs of every shard."""

    name: str
    partition: str
    created: str  # metadata.creationTimestamp (RFC 3339 sorts as text)


def shard_problems(name: str, spec: Mapping[str, Any], created: str, others: list[ShardRef]) -> list[Problem]:
    out: list[Problem] = []
    for kind in ("gpu", "cpu"):
        value = (spec.get("placementStrategy") or {}).get(kind)
        if value is not None and value not in STRATEGIES:
            out.append(Problem(f"spec.placementStrategy.{kind}", f"{value!r} is not one of {', '.join(STRATEGIES)}"))
    actions = spec.get("actions")
    configured = set(ACTIONS)
    if isinstance(actions, Mapping):
        for action, opts in sorted(actions.items()):
            if action not in ACTIONS:
                out.append(Problem(f"spec.actions.{action}", f"unknown action (known: {', '.join(ACTIONS)})"))
            elif isinstance(opts, Mapping) and opts.get("enabled") is False:
                configured.discard(action)
    for plugin, opts in sorted((spec.get("plugins") or {}).items()):
        if plugin not in PLUGINS and not (isinstance(opts, Mapping) and opts.get("class")):
            out.append(Problem(f"spec.plugins.{plugin}", "unknown plugin (give `class: module:Class` for your own)"))
    for action, depth in sorted((spec.get("queueDepthPerAction") or {}).items()):
        if action not in configured:
            out.append(Problem(f"spec.queueDepthPerAction.{action}", f"the scheduler's actions are "
                               f"{', '.join(sorted(configured))}; {action} isn't one of them"))
        elif not isinstance(depth, int) or depth < 0:
            out.append(Problem(f"spec.queueDepthPerAction.{action}", f"{depth!r} is not a non-negative integer"))
    for key in ("preemptMinRuntime", "reclaimMinRuntime"):
        value = (spec.get("minRuntime") or {}).get(key)
        if value is not None and delay_error(key, str(value)) is not None:  # a Go duration, not negative
            out.append(Problem(f"spec.minRuntime.{key}", f"{value!r} is not a duration (e.g. 5m, 1h30m)"))
    partition = str(spec.get("partitionLabelValue") or "")
    for other in sorted(others, key=lambda o: (o.created, o.name)):
        if other.name != name and other.partition == partition and (other.created, other.name) < (created, name):
            out.append(Problem("spec.partitionLabelValue",
                               f"node pool {partition!r} is already served by SchedulingShard {other.name}"))
            break
    return out


def config_problems(spec: Mapping[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    glob = spec.get("global") or {}
    key = glob.get("nodePoolLabelKey")
    if key is not None and not _LABEL_KEY.match(str(key)):
        out.append(Problem("spec.global.nodePoolLabelKey", f"{key!r} is not a label key"))
    for ckey in COMPONENT_KEYS:
        comp = spec.get(ckey) or {}
        if not isinstance(comp, Mapping):
            out.append(Problem(f"spec.{ckey}", "must be an object"))
            continue
        replicas = comp.get("replicas")
        if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
            out.append(Problem(f"spec.{ckey}.replicas", f"{replicas!r} is not a non-negative integer"))
        policy = ((comp.get("service") or {}).get("image") or {}).get("pullPolicy")
        if policy and policy not in PULL_POLICIES:
            out.append(Problem(f"spec.{ckey}.service.image.pullPolicy",
                               f"{policy!r} is not one of {', '.join(PULL_POLICIES)}"))
    return out
