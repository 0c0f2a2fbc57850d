"""What a SchedulingShard and the Config mean to one scheduler instance: pure functions, no I/O.

- `effective_config`: the instance's settings = its flags/config file, overridden by the fields its
  SchedulingShard sets, with the node-pool label key of the Config `kai-config`.
- `unhonoured_fields`: the fields that are accepted but change nothing here (named in a status condition).
- `status_conditions`: `Deployed`/`Available` as KAI's operator writes them, plus `FieldsNotHonoured`.
- `unserved_pools`: PodGroups of a node pool no SchedulingShard serves, as explanations the default shard writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from operators.scheduler.decide.config import SHARD_ARGS, SchedulerConfig, config_from_mapping
from operators.scheduler.decide.decisions import Reason, Unschedulable
from operators.scheduler.decide.framework import builtin_plugins
from operators.scheduler.decide.records import PodGroupRecord, PodRecord
from operators.scheduler.decide.usageconfig import with_connection

# Top-level SchedulingShard spec fields the scheduler applies (the rest of KAI's are accepted and kept).
SHARD_FIELDS = frozenset({"args", "placementStrategy", "partitionLabelValue", "queueDepthPerAction", "minRuntime",
                          "kValue", "plugins", "actions", "usageDBConfig", "scenarioSearchBudgets"})
# `scenarioSearchBudgets` fields the scheduler applies (the failed-search back-off); KAI's search time budgets are not.
SEARCH_BUDGET_FIELDS = frozenset({"minFailedSearchBackoff", "maxFailedSearchBackoff"})
NOT_HONOURED = "FieldsNotHonoured"
REASON_NODE_POOL_NOT_SERVED = "NodePoolNotServed"


@dataclass(frozen=True)
class Effective:
    """The settings one instance runs with, and why they may differ from what its objects ask for."""

    config: SchedulerConfig
    error: str = ""  # the shard or Config asks for something unusable: the last good settings stay


def node_pool_label_key(config_spec: Mapping[str, Any] | None) -> str | None:
    value = ((config_spec or {}).get("global") or {}).get("nodePoolLabelKey")
    return str(value) if value else None


def effective_config(base: SchedulerConfig, shard_spec: Mapping[str, Any] | None,
                     config_spec: Mapping[str, Any] | None, last_good: SchedulerConfig | None = None) -> Effective:
    """`base` (flags and file) < the SchedulingShard's fields < the Config's node-pool label key.

    An unusable shard spec keeps `last_good` (or `base`) and reports why; scheduling never stops over it.
    """
    cfg = base
    if shard_spec:
        try:
            cfg = config_from_mapping(shard_spec, base)
            if cfg.usage_db is not None:
                cfg = replace(cfg, usage_db=with_connection(cfg.usage_db, config_spec))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # any malformed value
            return Effective(last_good or base, f"spec rejected, running with the last valid settings: {exc}")
    key = node_pool_label_key(config_spec)
    if key and "nodepool-label-key" not in ((shard_spec or {}).get("args") or {}):
        cfg = replace(cfg, node_pool_label=key)
    return Effective(cfg)


def unhonoured_fields(spec: Mapping[str, Any] | None) -> list[str]:
    """Dotted paths of SchedulingShard fields that are set but change nothing in this scheduler."""
    spec = spec or {}
    out = [f"spec.{k}" for k in sorted(spec) if k not in SHARD_FIELDS]
    out += [f"spec.args.{k}" for k in sorted(spec.get("args") or {}) if k not in SHARD_ARGS]
    out += [f"spec.scenarioSearchBudgets.{k}" for k in sorted(spec.get("scenarioSearchBudgets") or {})
            if k not in SEARCH_BUDGET_FIELDS]
    known = builtin_plugins()
    for name, opts in sorted((spec.get("plugins") or {}).items()):
        opts = opts or {}
        cls = known.get(name) if not opts.get("class") else None
        if cls is None and not opts.get("class"):
            # A KAI plugin name with no plugin here: accepted, but nothing it sets is used.
            if opts.get("enabled") is False:
                out.append(f"spec.plugins.{name}.enabled")
            if opts.get("priority") is not None:
                out.append(f"spec.plugins.{name}.priority")
            out += [f"spec.plugins.{name}.arguments.{k}" for k in sorted(opts.get("arguments") or {})]
            continue
        names = cls.argument_names if cls is not None else None
        if names is not None:
            out += [f"spec.plugins.{name}.arguments.{k}" for k in sorted(opts.get("arguments") or {})
                    if k not in names and not (k == "weight" and callable(getattr(cls, "score_node", None)))]
    return out


def unhonoured_config_fields(spec: Mapping[str, Any] | None) -> list[str]:
    """Dotted paths of Config fields that are set but not read (the chart's values configure the components)."""
    spec = spec or {}
    out = [f"spec.{k}" for k in sorted(spec) if k not in ("namespace", "global", "prometheus")]
    out += [f"spec.global.{k}" for k in sorted(spec.get("global") or {}) if k != "nodePoolLabelKey"]
    # The usage database's URL (time-based fair share) is read from here; no Prometheus is deployed.
    out += [f"spec.prometheus.{k}" for k in sorted(spec.get("prometheus") or {}) if k != "externalPrometheusUrl"]
    return out


def _condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "observedGeneration": generation}


def status_conditions(generation: int, error: str, unhonoured: Sequence[str]) -> list[dict[str, Any]]:
    """The conditions (without lastTransitionTime) an instance reports on the object it runs from."""
    available = ("System available" if not error else f"System not available: {error}")
    ignored = (f"Accepted but not honoured by this scheduler: {', '.join(unhonoured)}" if unhonoured
               else "Every field set is honoured")
    return [
        _condition("Deployed", True, "deployed", "Resources deployed", generation),
        _condition("Available", not error, "available", available, generation),
        _condition(NOT_HONOURED, bool(unhonoured), "NotHonoured" if unhonoured else "AllHonoured", ignored,
                   generation),
    ]


def served_pools(shard_specs: Iterable[Mapping[str, Any] | None]) -> set[str]:
    return {str((spec or {}).get("partitionLabelValue") or "") for spec in shard_specs}


def unserved_pools(podgroups: Iterable[PodGroupRecord], pods: Iterable[PodRecord], label_key: str,
                   served: set[str]) -> list[Unschedulable]:
    """PodGroups labelled with a node pool no SchedulingShard serves: nothing will ever schedule them."""
    orphans = {pg.key: pg for pg in podgroups
               if pg.labels.get(label_key, "") and pg.labels[label_key] not in served}
    if not orphans:
        return []
    pending: dict[str, list[str]] = {}
    allocated: set[str] = set()
    for pod in pods:
        key = f"{pod.namespace}/{pod.pod_group}"
        if key not in orphans or pod.deleting:
            continue
        if pod.node_name:
            allocated.add(key)
        elif pod.phase == "Pending":
            pending.setdefault(key, []).append(pod.name)
    out = []
    for key, pg in sorted(orphans.items()):
        if key not in pending:
            continue
        pool = pg.labels[label_key]
        message = (f"no SchedulingShard serves node pool '{pool}' ({label_key}={pool}); create a SchedulingShard "
                   f"with partitionLabelValue: {pool}, or remove the label")
        out.append(Unschedulable(
            namespace=pg.namespace, pod_group=pg.name, node_pool=pool, message=message,
            reasons=(Reason(REASON_NODE_POOL_NOT_SERVED, message),),
            pod_messages={name: message for name in sorted(pending[key])},
            has_allocated_pods=key in allocated, mark_unschedulable=pg.mark_unschedulable))
    return out
