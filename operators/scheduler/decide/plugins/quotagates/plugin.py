"""quotagates: the scheduler's half of quota gates (KAI issue #1615; an extension beyond KAI).

With quota gates on (admission `--quota-gates`), a new pod of the scheduler carries the scheduling gate
`keys.QUOTA_GATE`, so the cluster autoscaler never sees it `Unschedulable` while only quota holds it back. Such a
pod is its queue's demand for fair share (session open counts it as pending) but is never placed. At session
close, after the actions, a job's gated pods are lifted (one `Ungate` write per pod) when its queue, and every
ancestor, admits them on top of what is allocated and of the ungated pods still pending (OverLimit /
NonPreemptibleOverQuota, the capacity checks of the allocate action): the pods its gang minimum still needs
together, then one more at a time while they fit. Jobs go by priority, then age; what one job's lift takes is
held for the next ones. A job left gated says why (reason `WaitingForQuota`, shown by `kai why`).

Inert (dropped for the session) when no pod carries the gate, so it is on by default: a pod gated by admission
is never left gated by a scheduler that does not know the gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.decisions import Ungate
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import GATED, PENDING, Job, Task
from operators.scheduler.decide.units import AXES

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


def quota_gated(job: Job) -> list[Task]:
    """The job's pods whose only scheduling gate is the quota gate, in task order."""
    return [t for t in job.tasks if t.status == GATED and t.rec.quota_gated]


def gang_first(job: Job, gated: Sequence[Task]) -> list[Task]:
    """The gated pods the gang minimum still needs (per podset, the first ones), at least one pod."""
    first: list[Task] = []
    for p in job.podsets:
        short = p.min_available - (p.alive - p.gated)
        if short > 0:
            first += [t for t in gated if t.podset is p][:short]
    return first or list(gated[:1])


def waiting_message(gated: int, error: explain.JobError) -> str:
    """Why a job stays gated. Free of the queue's changing numbers (`kai why` shows them), so the PodGroup's
    condition is written once, not again whenever the queue's allocation or demand moves."""
    details = (error.details or {}).get("queueDetails") or {}
    queue = details.get("name", "") if isinstance(details, dict) else ""
    what = "limit" if error.reason == keys.REASON_OVER_LIMIT else "non-preemptible quota"
    return f"{gated} pod(s) gated until queue {queue} admits them under its {what} ({error.reason})"


_QUOTA_GATED = attrgetter("quota_gated")


class QuotaGates(Plugin):
    name = "quotagates"
    default_priority = 430

    def hooks(self) -> Hooks:
        return Hooks(scope=self, session_close=self)

    def in_use(self, session: Session) -> bool:
        return session.any_pod("quota_gated", _QUOTA_GATED)

    def on_session_close(self, session: Session) -> None:
        jobs = sorted((j for j in session.jobs if j.queue is not None and quota_gated(j)),
                      key=lambda j: (-j.priority, j.rec.created, j.key))
        if not jobs:
            return
        held: list[tuple[Job, tuple[int, int, int]]] = []

        def hold(job: Job, tasks: Iterable[Task]) -> None:
            req = session.job_request(tasks)
            vec = (req[0], req[1], req[2])
            _add(job, vec, +1)
            held.append((job, vec))

        # Ungated pods still pending after the actions are ahead of every gated pod in their queue.
        for job in session.jobs:
            pending = [t for t in job.tasks if t.status == PENDING]
            if job.queue is not None and pending:
                hold(job, pending)
        try:
            for job in jobs:
                gated = quota_gated(job)
                first = gang_first(job, gated)
                error = session.capacity_error(job, first)
                if error is not None:
                    session.outcome(job).errors.append(explain.JobError(
                        keys.REASON_WAITING_FOR_QUOTA, (waiting_message(len(gated), error),)))
                    continue
                hold(job, first)
                lifted = list(first)
                taken = {id(t) for t in first}
                for t in gated:
                    if id(t) in taken:
                        continue
                    if session.capacity_error(job, [t]) is not None:
                        break
                    hold(job, [t])
                    lifted.append(t)
                session.decisions.ungates += [Ungate(t.rec.namespace, t.rec.name, job.name) for t in lifted]
        finally:
            for job, vec in held:
                _add(job, vec, -1)


def _add(job: Job, vec: tuple[int, int, int], sign: int) -> None:
    """Hold (or give back) `vec` on the job's queue and its ancestors, as an allocation would."""
    q = job.queue
    while q is not None:
        for r in AXES:
            q.allocated[r] += sign * vec[r]
            if not job.preemptible:
                q.allocated_np[r] += sign * vec[r]
        q = q.parent


PLUGIN = QuotaGates
