"""gpujoborder (KAI v0.18, opt-in): a GPU tie-break of victim order.

Between two victim jobs of the same priority that the job order calls equal (elastic state included), the one
whose alive pods request more GPUs is evicted first (`mode: evict-larger-first`, the default) or the one with
fewer (`mode: evict-smaller-first`); age decides only after it. It never changes the order pending jobs are
tried in. An unknown mode falls back to the default, as KAI's does (KAI logs a warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import ALIVE, Job

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

EVICT_LARGER_FIRST = "evict-larger-first"
EVICT_SMALLER_FIRST = "evict-smaller-first"


class GpuJobOrder(Plugin):
    name = "gpujoborder"
    default_priority = 650  # KAI registers it right after `priority`
    default_enabled = False  # KAI runs it only where the configuration lists it
    argument_names = frozenset({"mode"})

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(arguments)
        mode = str(self.arguments.get("mode", EVICT_LARGER_FIRST))
        self.sign = 1 if mode == EVICT_SMALLER_FIRST else -1

    def hooks(self) -> Hooks:
        return Hooks(victim_order=self)

    def victim_order_key(self, session: Session, job: Job) -> tuple[object, ...]:
        gpus = session.job_request([t for t in job.tasks if t.status in ALIVE])[0]
        return (self.sign * gpus,)


PLUGIN = GpuJobOrder
