"""preemptiondelay: a pending workload with a preemption delay makes no evictions until it has waited it out.

The delay is the PodGroup's `spec.preemptionDelay`, else its pods' `kai.scheduler/preemption-delay`.
It counts from the later of the PodGroup's creation and its `kai.scheduler/last-eviction-timestamp`. Until it
passes, the job is not tried by preempt, reclaim or consolidation (allocate into free resources is untouched) and
its PodGroup says how long remains. Each eviction stamps `kai.scheduler/last-eviction-timestamp` on the PodGroups
involved that have a delay: the preemptor's (its window re-arms after the evictions it caused) and the evicted
one's (back to pending, it waits its own window again before evicting others).
"""

from __future__ import annotations

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.decisions import AnnotationUpdate
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job
from operators.scheduler.decide.plugins.preemptiondelay.delay import REASON, DelayVerdict, effective_delay, verdict
from operators.scheduler.decide.session import Session

DISRUPTIVE = frozenset({"preempt", "reclaim", "consolidation"})


def job_delay(job: Job) -> float:
    """The PodGroup's delay, else its first pod's (the pods of one workload share their template's value): one
    look per job, whatever its size."""
    if job.rec.preemption_delay is not None or not job.tasks:
        return effective_delay(job.rec.preemption_delay)
    return effective_delay(None, (job.tasks[0].rec.preemption_delay,))


class PreemptionDelay(Plugin):
    name = "preemptiondelay"
    default_priority = 450

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, job_gate=self, session_close=self)

    def __init__(self, arguments: dict[str, object] | None = None) -> None:
        super().__init__(arguments)
        self.delays: dict[str, float] = {}  # job key -> delay (jobs with one)
        self.held: dict[Job, DelayVerdict] = {}
        self.gated: set[Job] = set()

    def on_session_open(self, session: Session) -> None:
        for job in session.feature_jobs:  # the jobs with a delay are among them
            if job.rec.preemption_delay is None and (not job.tasks or job.tasks[0].rec.preemption_delay is None):
                continue
            delay = job_delay(job)
            if delay <= 0:
                continue
            self.delays[job.key] = delay
            v = verdict(delay, job.rec.created, job.rec.last_eviction, session.now)
            if not v.may_disrupt:
                self.held[job] = v

    def in_use(self, session: Session) -> bool:
        """Some job has a preemption delay (none: no job is held and no timestamp is stamped)."""
        return bool(self.delays)

    def may_try(self, session: Session, job: Job, action: str) -> bool:
        if action not in DISRUPTIVE or job not in self.held:
            return True
        self.gated.add(job)
        return False

    def on_session_close(self, session: Session) -> None:
        explain.explain_gated(session, self.gated, REASON, lambda job: self.held[job].message)
        if not self.delays:
            return
        stamped: set[str] = set()
        for e in session.decisions.evictions:
            for key in (e.for_pod_group, f"{e.namespace}/{e.pod_group}"):
                if key in self.delays and key not in stamped:
                    stamped.add(key)
                    namespace, name = key.split("/", 1)
                    session.decisions.annotations.append(
                        AnnotationUpdate(namespace, name, keys.LAST_EVICTION_TIMESTAMP, session.now_text))


PLUGIN = PreemptionDelay
