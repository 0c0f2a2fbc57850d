"""safetoconsolidate (KAI v0.18): a PodGroup with `spec.safeToConsolidate: false` (the pod-grouper sets it from the
workload's or its pods' `kai.scheduler/safe-to-consolidate: "false"`) is never a victim of consolidation, which
would delete its pods to recreate them elsewhere. Reclaim and preempt may still evict it, and while pending it may
still have others consolidated for it.
"""

from __future__ import annotations

from operator import attrgetter

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job
from operators.scheduler.decide.session import Session

CONSOLIDATION = "consolidation"
_SAFE = attrgetter("rec.safe_to_consolidate")  # read in C over every job


class SafeToConsolidate(Plugin):
    name = "safetoconsolidate"
    default_priority = 190

    def __init__(self, arguments: dict[str, object] | None = None) -> None:
        super().__init__(arguments)
        self.pinned = False

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, victim_filter=self)

    def on_session_open(self, session: Session) -> None:
        self.pinned = not all(map(_SAFE, session.feature_jobs))  # the pinned jobs are among them

    def in_use(self, session: Session) -> bool:
        return self.pinned

    @staticmethod
    def may_evict(session: Session, preemptor: Job, victim: Job, action: str) -> bool:
        return action != CONSOLIDATION or victim.rec.safe_to_consolidate


PLUGIN = SafeToConsolidate
