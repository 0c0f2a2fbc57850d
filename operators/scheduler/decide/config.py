"""Scheduler configuration: defaults of KAI's scheduler flags and the SchedulingShard fields that apply.

Precedence: defaults < YAML file (SchedulingShard-shaped: either a whole object with `spec`, or the spec
itself) < command-line flags.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from operators.core import keys
from operators.core.booleans import parse_bool
from operators.core.durations import parse_seconds
from operators.scheduler.decide.actionorder import PRIORITIES
from operators.scheduler.decide.framework import Framework, PluginSetting, merge_settings, parse_plugin_settings
from operators.scheduler.decide.usageconfig import UsageDBSettings, parse_usage_db_config

BINPACK = "binpack"
SPREAD = "spread"
# KAI's action order (operator priorities 500..100).
ALL_ACTIONS: tuple[str, ...] = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")

# Pods one preemptor may evict per cycle unless configured (a whole 64-node gang plus its head fits).
DEFAULT_MAX_EVICTIONS_PER_JOB = 128
# (node, namespace, pod, device index) -> GPU group id. Deterministic by default so `kai simulate` is.
GroupIdFactory = Callable[[str, str, str, int], str]
_GROUP_NAMESPACE = uuid.UUID("6f1c2a4e-6b0e-4a53-9d57-2f5b1d8f0a11")


def deterministic_group_id(node: str, namespace: str, pod: str, index: int) -> str:
    return str(uuid.uuid5(_GROUP_NAMESPACE, f"{node}/{namespace}/{pod}/{index}"))


def random_group_id(node: str, namespace: str, pod: str, index: int) -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_name: str = keys.SCHEDULER_NAME
    schedule_period: float = 1.0
    actions: tuple[str, ...] = ALL_ACTIONS
    gpu_placement: str = BINPACK
    cpu_placement: str = BINPACK
    stale_grace_period: float = 60.0  # negative = never evict stale gangs
    queue_depth_per_action: Mapping[str, int] = field(default_factory=dict)
    max_consolidation_preemptees: int = 16
    k_value: float = 1.0
    node_pool_label: str = keys.NODE_POOL_LABEL
    partition: str = ""
    detailed_fit_errors: bool = False
    group_id: GroupIdFactory = deterministic_group_id
    # Disruptive actions. Beyond KAI: a cap on what one preemptor may evict in a cycle (negative = no cap).
    max_evictions_per_job: int = DEFAULT_MAX_EVICTIONS_PER_JOB
    max_evicted_gpus_per_job: float = -1.0
    # minruntime plugin arguments (seconds) and reclaimResolveMethod (lca | queue).
    default_preempt_min_runtime: float = 0.0
    default_reclaim_min_runtime: float = 0.0
    reclaim_min_runtime_resolve: str = "lca"
    # proportion plugin `relcaimerSaturationMultiplier` (>= 1).
    reclaimer_saturation_multiplier: float = 1.0
    # proportion plugin `queuePriorityInQuotaReclaim` (KAI v0.18, alpha, off): a queue may reclaim in-quota
    # resources of a strictly lower-priority queue while it stays within its own quota, and the deserved band
    # of the fair share is granted by queue priority, capped by what is left.
    queue_priority_in_quota_reclaim: bool = False
    # proportion plugin `steadyFairShareReclaim` (KAI v0.18, alpha, off): a GPU job of a queue below its steady fair
    # share may reclaim GPUs from queues above theirs, down to their steady fair share.
    steady_fair_share_reclaim: bool = False
    # `scenarioSearchBudgets.minFailedSearchBackoff` / `.maxFailedSearchBackoff` (KAI v0.18, off): per action (or
    # `default`), seconds a job whose search failed is left out of that action (see `searchbackoff`).
    min_failed_search_backoff: Mapping[str, float] = field(default_factory=dict)
    max_failed_search_backoff: Mapping[str, float] = field(default_factory=dict)
    # The `plugins` map of every configuration layer, merged per plugin (enabled set, order, arguments, class).
    plugins: tuple[PluginSetting, ...] = ()
    # How a victim leaves: `eviction` (the pods/eviction subresource: PodDisruptionBudgets and admission may
    # refuse it) or `delete` (KAI's way: the pod is deleted, nothing can refuse it).
    eviction_method: str = "eviction"
    # Time-based fair share: the SchedulingShard's usageDBConfig (None: plain fair share).
    usage_db: UsageDBSettings | None = None

    @property
    def effective_actions(self) -> tuple[str, ...]:
        # Any spread placement disables consolidation (operator rule).
        if SPREAD in (self.gpu_placement, self.cpu_placement) or self.max_consolidation_preemptees == 0:
            return tuple(a for a in self.actions if a != "consolidation")
        return self.actions

    @property
    def node_pool_name(self) -> str:
        return self.partition or "default"


def _known_actions() -> dict[str, int]:
    """Registered action names and their default priorities (the action registry)."""
    return dict(PRIORITIES)


def _actions_from_map(raw: Mapping[str, Any], base: tuple[str, ...]) -> tuple[str, ...]:
    # SchedulingShard `actions: {name: {enabled, priority}}`; higher priority runs first, ties by name.
    default_priority = _known_actions()
    unknown = sorted(name for name in raw if name not in default_priority)
    if unknown:
        raise ValueError(f"unknown actions: {', '.join(unknown)} (known: {', '.join(default_priority)})")
    enabled = {name: default_priority[name] for name in base}
    for name, opts in raw.items():
        opts = opts or {}
        if opts.get("enabled") is False:
            enabled.pop(name, None)
            continue
        enabled[name] = int(opts.get("priority", enabled.get(name, default_priority[name])))
    return tuple(sorted(enabled, key=lambda n: (-enabled[n], n)))


# SchedulingShard `spec.args` (scheduler flags without the dashes) that the scheduler applies.
SHARD_ARGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "schedule-period": ("schedule_period", parse_seconds),
    "default-staleness-grace-period": ("stale_grace_period", parse_seconds),
    "max-consolidation-preemptees": ("max_consolidation_preemptees", int),
    "scheduler-name": ("scheduler_name", str),
    "nodepool-label-key": ("node_pool_label", str),
    "partition-label-value": ("partition", str),
    "detailed-fit-errors": ("detailed_fit_errors", lambda v: parse_bool(v, loose=True)),
    "max-evictions-per-job": ("max_evictions_per_job", int),
    "max-evicted-gpus-per-job": ("max_evicted_gpus_per_job", float),
    "eviction-method": ("eviction_method", lambda v: _eviction_method(str(v))),
}
# `spec.plugins.<name>.arguments` keys the scheduler applies, per plugin (KAI's argument names).
PLUGIN_ARGUMENTS: dict[str, frozenset[str]] = {
    "nodeplacement": frozenset({"gpu", "cpu"}),
    "minruntime": frozenset({"defaultPreemptMinRuntime", "defaultReclaimMinRuntime", "reclaimResolveMethod"}),
    "proportion": frozenset({"kValue", "relcaimerSaturationMultiplier", "queuePriorityInQuotaReclaim",
                             "steadyFairShareReclaim"}),
}


def plugin_settings(plugins: Mapping[str, Any]) -> dict[str, Any]:
    """SchedulingShard `plugins: {name: {enabled, priority, arguments}}` -> the SchedulerConfig fields that plugin
    arguments set (nodeplacement, minruntime, proportion); `enabled`/`priority` and other plugins set nothing here."""
    changes: dict[str, Any] = {}
    args: dict[str, Any] = {}
    for name, opts in plugins.items():
        if opts is not None and not isinstance(opts, Mapping):
            raise ValueError(f"plugins.{name} must be an object {{enabled, priority, arguments}}, got {opts!r}")
        args[name] = (opts or {}).get("arguments") or {}
    placement = args.get("nodeplacement", {})
    for resource in ("gpu", "cpu"):
        if placement.get(resource):
            changes[f"{resource}_placement"] = _strategy(placement[resource])
    min_runtime = args.get("minruntime", {})
    for arg, attr in (("defaultPreemptMinRuntime", "default_preempt_min_runtime"),
                      ("defaultReclaimMinRuntime", "default_reclaim_min_runtime")):
        if min_runtime.get(arg) is not None:
            changes[attr] = parse_seconds(min_runtime[arg])
    if min_runtime.get("reclaimResolveMethod"):
        changes["reclaim_min_runtime_resolve"] = _resolve_method(min_runtime["reclaimResolveMethod"])
    proportion = args.get("proportion", {})
    if proportion.get("kValue") is not None:
        changes["k_value"] = max(0.0, float(proportion["kValue"]))  # KAI: k <= 0 is 0
    if proportion.get("relcaimerSaturationMultiplier") is not None:
        changes["reclaimer_saturation_multiplier"] = float(proportion["relcaimerSaturationMultiplier"])
    for arg, attr in (("queuePriorityInQuotaReclaim", "queue_priority_in_quota_reclaim"),
                      ("steadyFairShareReclaim", "steady_fair_share_reclaim")):
        if proportion.get(arg) is not None:
            changes[attr] = parse_bool_argument(arg, proportion[arg])
    return changes


def parse_bool_argument(name: str, value: Any) -> bool:
    """A boolean plugin argument, spelled as KAI reads it (Go's strconv.ParseBool); a YAML boolean is accepted."""
    try:
        return parse_bool(value)
    except ValueError:
        raise ValueError(f"plugin argument {name} must be true or false, got {value!r}") from None


def _action_durations(field_name: str, raw: Any) -> dict[str, float]:
    """A map of action name (or `default`) to a duration, in seconds."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field_name} must map action names to durations, got {raw!r}")
    return {str(action): parse_seconds(value) for action, value in raw.items()}


def _resolve_method(value: Any) -> str:
    method = str(value)
    if method not in ("lca", "queue"):
        raise ValueError(f"reclaimResolveMethod must be lca or queue, got {method!r}")
    return method


def config_from_mapping(raw: Mapping[str, Any], base: SchedulerConfig | None = None) -> SchedulerConfig:
    """Apply a SchedulingShard spec (or a whole object with `spec`) on top of `base`.

    Raises ValueError with an actionable message for a value the scheduler cannot use.
    """
    cfg = base or SchedulerConfig()
    spec = raw.get("spec", raw) if isinstance(raw.get("spec"), Mapping) else raw
    changes: dict[str, Any] = {}
    placement = spec.get("placementStrategy") or {}
    if placement.get("gpu"):
        changes["gpu_placement"] = _strategy(placement["gpu"])
    if placement.get("cpu"):
        changes["cpu_placement"] = _strategy(placement["cpu"])
    if "partitionLabelValue" in spec:
        changes["partition"] = str(spec["partitionLabelValue"] or "")
    if "queueDepthPerAction" in spec:
        changes["queue_depth_per_action"] = {str(k): int(v) for k, v in (spec["queueDepthPerAction"] or {}).items()}
    if "kValue" in spec:
        changes["k_value"] = max(0.0, float(spec["kValue"]))  # KAI: k <= 0 is 0
    if "usageDBConfig" in spec:
        changes["usage_db"] = parse_usage_db_config(spec["usageDBConfig"])
    if isinstance(spec.get("actions"), Mapping):
        changes["actions"] = _actions_from_map(spec["actions"], cfg.actions)
    elif isinstance(spec.get("actions"), list | str):
        changes["actions"] = parse_actions(spec["actions"])
    args = spec.get("args") or {}
    for flag, (attr, conv) in SHARD_ARGS.items():
        if flag in args:
            changes[attr] = conv(args[flag])
    for camel, attr, conv in (("maxEvictionsPerJob", "max_evictions_per_job", int),
                              ("maxEvictedGpusPerJob", "max_evicted_gpus_per_job", float)):
        if camel in spec:
            changes[attr] = conv(spec[camel])
    min_runtime = spec.get("minRuntime") or {}
    for camel, attr in (("preemptMinRuntime", "default_preempt_min_runtime"),
                        ("reclaimMinRuntime", "default_reclaim_min_runtime")):
        if min_runtime.get(camel) is not None:
            changes[attr] = parse_seconds(min_runtime[camel])
    if min_runtime.get("reclaimResolveMethod"):
        changes["reclaim_min_runtime_resolve"] = _resolve_method(min_runtime["reclaimResolveMethod"])
    budgets = spec.get("scenarioSearchBudgets") or {}
    for camel, attr in (("minFailedSearchBackoff", "min_failed_search_backoff"),
                        ("maxFailedSearchBackoff", "max_failed_search_backoff")):
        if camel in budgets:
            changes[attr] = _action_durations(f"scenarioSearchBudgets.{camel}", budgets[camel])
    # Plugin arguments replace what the dedicated fields set (KAI renders those fields as plugin arguments).
    if isinstance(spec.get("plugins"), Mapping):
        changes["plugins"] = merge_settings(cfg.plugins, parse_plugin_settings(spec["plugins"], cfg.plugins))
        Framework.check(changes["plugins"])
        changes.update(plugin_settings(spec["plugins"]))
    for attr in ("schedule_period", "stale_grace_period"):
        camel = "schedulePeriod" if attr == "schedule_period" else "staleGracePeriod"
        if camel in spec:
            changes[attr] = parse_seconds(spec[camel])
    out = replace(cfg, **changes)
    unknown_depth = sorted(a for a in out.queue_depth_per_action if a not in out.actions)
    if unknown_depth:
        raise ValueError(f"the scheduler's actions are {', '.join(out.actions)}. {unknown_depth[0]} isn't one of "
                         "them, making the queueDepthPerAction invalid")
    return out


def _strategy(value: str) -> str:
    value = str(value).lower()
    if value not in (BINPACK, SPREAD):
        raise ValueError(f"placement strategy must be {BINPACK} or {SPREAD}, got {value!r}")
    return value


EVICTION_METHODS = ("eviction", "delete")


def _eviction_method(value: str) -> str:
    if value not in EVICTION_METHODS:
        raise ValueError(f"eviction-method must be eviction or delete, got {value!r}")
    return value


def parse_actions(value: str | list[str]) -> tuple[str, ...]:
    names = value.split(",") if isinstance(value, str) else list(value)
    out = tuple(n.strip() for n in names if n.strip())
    known = _known_actions()
    unknown = [n for n in out if n not in known]
    if unknown:
        raise ValueError(f"unknown actions: {', '.join(unknown)} (known: {', '.join(known)})")
    return out


def load_config(path: str | Path, base: SchedulerConfig | None = None) -> SchedulerConfig:
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: expected a mapping")
    return config_from_mapping(raw, base)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `kai simulate` and the live scheduler."""
    parser.add_argument("--config", help="SchedulingShard-shaped YAML file")
    parser.add_argument("--actions", help=f"comma-separated actions (default: {','.join(ALL_ACTIONS)})")
    parser.add_argument("--placement-strategy", metavar="[gpu=|cpu=]binpack|spread", action="append",
                        help="placement strategy for both resources, or per resource (repeatable)")
    parser.add_argument("--stale-grace-period", help="e.g. 60s; negative disables stale-gang eviction")
    parser.add_argument("--schedule-period", help="e.g. 1s")
    parser.add_argument("--max-consolidation-preemptees", type=int)
    parser.add_argument("--partition-label-value", help="node pool served by this scheduler")
    parser.add_argument("--max-evictions-per-job", type=int,
                        help="pods one job may evict per cycle (reclaim, preempt, consolidation; negative: no cap)")
    parser.add_argument("--max-evicted-gpus-per-job", type=float,
                        help="GPUs one job may evict per cycle (negative: no cap, the default)")
    parser.add_argument("--eviction-method", choices=EVICTION_METHODS,
                        help="eviction (the pods/eviction subresource, honours PodDisruptionBudgets; the default) "
                             "or delete (KAI's: delete the pod)")


def config_from_args(args: argparse.Namespace, base: SchedulerConfig | None = None) -> SchedulerConfig:
    cfg = base or SchedulerConfig()
    if getattr(args, "config", None):
        cfg = load_config(args.config, cfg)
    changes: dict[str, Any] = {}
    if getattr(args, "actions", None):
        changes["actions"] = parse_actions(args.actions)
    for item in getattr(args, "placement_strategy", None) or ():
        target, _, value = item.rpartition("=")
        if target in ("", "gpu"):
            changes["gpu_placement"] = _strategy(value)
        if target in ("", "cpu"):
            changes["cpu_placement"] = _strategy(value)
        if target not in ("", "gpu", "cpu"):
            raise ValueError(f"--placement-strategy target must be gpu or cpu, got {target!r}")
    if getattr(args, "stale_grace_period", None) is not None:
        changes["stale_grace_period"] = parse_seconds(args.stale_grace_period)
    if getattr(args, "schedule_period", None) is not None:
        changes["schedule_period"] = parse_seconds(args.schedule_period)
    if getattr(args, "max_consolidation_preemptees", None) is not None:
        changes["max_consolidation_preemptees"] = args.max_consolidation_preemptees
    for attr in ("max_evictions_per_job", "max_evicted_gpus_per_job"):
        if getattr(args, attr, None) is not None:
            changes[attr] = getattr(args, attr)
    if getattr(args, "partition_label_value", None) is not None:
        changes["partition"] = args.partition_label_value
    if getattr(args, "eviction_method", None) is not None:
        changes["eviction_method"] = args.eviction_method
    return replace(cfg, **changes)
