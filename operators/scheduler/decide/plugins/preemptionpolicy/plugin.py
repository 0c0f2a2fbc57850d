"""preemptionpolicy: Kubernetes' `preemptionPolicy: Never` for the preemptor (KAI issue #1032).

A job whose PriorityClass has `preemptionPolicy: Never`, or whose pods carry `spec.preemptionPolicy: Never`
(admission copies it there from the pod's PriorityClass), is not tried by preempt, reclaim or consolidation:
it waits for free resources, whatever its priority or its queue's fair share. It may still be a victim itself,
as in kube-scheduler. While it stays pending its PodGroup says so (`kai why` shows it). Disabling the plugin
gives KAI's behaviour (the policy is ignored).
"""

from __future__ import annotations

from operator import attrgetter

from operators.scheduler.decide import explain
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job
from operators.scheduler.decide.session import Session

_NEVER = attrgetter("preempt_never")

REASON = "PreemptionPolicyNever"
DISRUPTIVE = frozenset({"preempt", "reclaim", "consolidation"})


def never_message(job: Job, priority_class: str) -> str:
    source = f"its PriorityClass {priority_class}" if priority_class else "its pods"
    return (f"{source} has preemptionPolicy Never: {job.key} waits for free resources and evicts no other "
            "workload (no preempt, reclaim or consolidation)")


class PreemptionPolicy(Plugin):
    name = "preemptionpolicy"
    default_priority = 440

    def __init__(self, arguments: dict[str, object] | None = None) -> None:
        super().__init__(arguments)
        self.never_classes: frozenset[str] = frozenset()
        self.default_class = ""
        self.any_pod = False
        self.verdicts: dict[Job, str | None] = {}  # job -> the class it names ("" for its pods), None: may preempt
        self.gated: set[Job] = set()

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, job_gate=self, session_close=self)

    def on_session_open(self, session: Session) -> None:
        classes = session.snapshot.priority_classes
        self.never_classes = frozenset(pc.name for pc in classes if pc.preempt_never)
        self.default_class = next((pc.name for pc in sorted(classes, key=lambda p: p.name) if pc.global_default), "")
        self.any_pod = session.any_pod("preempt_never", _NEVER)

    def in_use(self, session: Session) -> bool:
        """Some PriorityClass or pod says Never (none: no job is held)."""
        return bool(self.never_classes) or self.any_pod

    def never(self, job: Job) -> str | None:
        """The PriorityClass naming Never ("" when only its pods do), None when the job may evict."""
        if job in self.verdicts:
            return self.verdicts[job]
        name = job.rec.priority_class or self.default_class
        verdict: str | None = None
        if name in self.never_classes:
            verdict = name
        elif self.any_pod and any(t.rec.preempt_never for t in job.tasks):
            verdict = ""
        self.verdicts[job] = verdict
        return verdict

    def may_try(self, session: Session, job: Job, action: str) -> bool:
        if action not in DISRUPTIVE or self.never(job) is None:
            return True
        self.gated.add(job)
        return False

    def on_session_close(self, session: Session) -> None:
        explain.explain_gated(session, self.gated, REASON, lambda job: never_message(job, self.verdicts[job] or ""))


PLUGIN = PreemptionPolicy
