"""minruntime: a job that started less than its queue's minimum runtime ago is not a victim (its pods above
minMember still are). Arguments: `defaultPreemptMinRuntime`, `defaultReclaimMinRuntime` (durations) and
`reclaimResolveMethod` (lca | queue: where a reclaim's queue lookup starts). Disabled: nothing is protected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from operators.core.durations import parse_seconds
from operators.scheduler.decide.framework import Hooks, Plugin

if TYPE_CHECKING:
    from operators.scheduler.decide.model import QueueState
    from operators.scheduler.decide.session import Session


class MinRuntime(Plugin):
    name = "minruntime"
    default_priority = 200
    argument_names = frozenset({"defaultPreemptMinRuntime", "defaultReclaimMinRuntime", "reclaimResolveMethod"})

    def hooks(self) -> Hooks:
        return Hooks(victim_min_runtime=self)

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        for arg in ("defaultPreemptMinRuntime", "defaultReclaimMinRuntime"):
            if arguments.get(arg) is not None:
                parse_seconds(arguments[arg])
        method = arguments.get("reclaimResolveMethod")
        if method and str(method) not in ("lca", "queue"):
            raise ValueError(f"reclaimResolveMethod must be lca or queue, got {method!r}")


    @staticmethod
    def min_runtime(session: Session, victim: QueueState, reclaimer: QueueState | None) -> float:
        """The first queue's minimum runtime that is set, walking up from where the lookup starts, else the
        configured default. Preempt and consolidation start at the victim's leaf queue; reclaim starts there with
        `reclaimResolveMethod: queue`, and by default (`lca`) at the victim-side child of the lowest common
        ancestor of reclaimer and victim."""
        config = session.config
        if reclaimer is None:
            return _first_defined(victim, "preempt_min_runtime", config.default_preempt_min_runtime)
        start: QueueState | None = victim
        if config.reclaim_min_runtime_resolve != "queue":
            mine = set(reclaimer.lineage())
            lineage = victim.lineage()
            for i, q in enumerate(lineage):
                if q in mine:
                    start = lineage[i - 1] if i > 0 else q
                    break
            else:
                start = lineage[-1]
        return _first_defined(start, "reclaim_min_runtime", config.default_reclaim_min_runtime)


def _first_defined(start: QueueState | None, attr: str, default: float) -> float:
    q = start
    while q is not None:
        value: float | None = getattr(q.rec, attr)
        if value is not None:
            return value
        q = q.parent
    return default


PLUGIN = MinRuntime
