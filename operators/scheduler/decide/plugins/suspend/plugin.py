"""suspend: suspend instead of kill, and resume whole (an extension beyond KAI, opt-in).

A victim job of reclaim or preempt whose workload (its top owner's annotations reach the PodGroup) or queue says
`kai.scheduler/suspend-on-preemption: "true"`, whose top owner can be suspended (`rules.owner_kind`: a batch Job,
JobSet, RayJob, Kubeflow job, or any owner with a boolean `spec.suspend`) and whose evictions would leave its gang
below its minimum, is not evicted pod by pod: the cycle decides one `Suspension` of the owner instead (its
controller removes the pods) and remembers the gang on the PodGroup (`kai.scheduler/suspended-by-scheduler`).
Evictions that only take pods above the gang's minimum stay evictions.

While the PodGroup carries that annotation and none of its pods exists any more, each cycle checks, after every
action has placed what it could, whether the gang's minimum fits at once on what is free and within its queue's
limits (`rules.fits`); then, and only then, it decides a `Resume` and drops the annotation. The gang rule still
holds its pods together when they come back: none binds while the others wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.core import keys
from operators.scheduler.decide.decisions import AnnotationUpdate, Eviction, Resume, Suspension
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import ACTIVE_ALLOCATED, ACTIVE_USED, ALIVE, Job
from operators.scheduler.decide.plugins.suspend import rules

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

# The actions that stop a victim to make room for another workload. Consolidation moves its victims (they are
# placed again in the same cycle), stale-gang and resize evictions are not made for anyone: those stay evictions.
STOPPING = frozenset({"reclaim", "preempt"})


class Suspend(Plugin):
    name = "suspend"
    default_priority = 430

    def hooks(self) -> Hooks:
        return Hooks(scope=self, session_close=self)

    def in_use(self, session: Session) -> bool:
        """Some PodGroup or Queue opts in, or a gang is suspended (none: the plugin leaves the session)."""
        snapshot = session.snapshot
        return (any(q.suspend_on_preemption for q in snapshot.queues)
                or any(g.suspend_on_preemption or g.suspended for g in snapshot.podgroups))

    def on_session_close(self, session: Session) -> None:
        jobs = {j.key: j for j in session.jobs}
        self._suspend(session, jobs)
        self._resume(session, jobs)

    def _suspend(self, session: Session, jobs: dict[str, Job]) -> None:
        d = session.decisions
        by_job: dict[str, list[Eviction]] = {}
        for e in d.evictions:
            if e.action not in STOPPING:
                continue
            by_job.setdefault(f"{e.namespace}/{e.pod_group}", []).append(e)
        taken: set[str] = set()
        for key, evictions in by_job.items():
            job = jobs.get(key)
            if job is None or job.rec.owner is None or not rules.opted_in(job.rec.suspend_on_preemption, job.queue):
                continue
            kind = rules.owner_kind(job.rec.owner[0], job.rec.owner[1])
            left = sum(1 for t in job.tasks if t.status in ACTIVE_ALLOCATED)
            if kind is None or left >= job.rec.min_member:
                continue  # not suspendable, or only pods above the gang's minimum go: evict those
            first = evictions[0]
            gang = rules.remember([t for t in job.tasks if t.status in ACTIVE_USED or t.status in ALIVE],
                                  job.rec.min_member, first.action, first.for_pod_group, session.now)
            message = (f"{first.message} Its {job.rec.owner[1]} is suspended instead of losing its pods one by one "
                       f"({len(evictions)} pod(s) go). {rules.resume_condition(gang)}.")
            d.suspensions.append(Suspension(job.namespace, job.name, job.rec.owner, kind.field_path, kind.verify,
                                            first.action, first.for_pod_group, message, tuple(evictions)))
            if job.rec.suspended is None:
                d.annotations.append(AnnotationUpdate(job.namespace, job.name, keys.SUSPENDED_BY_SCHEDULER,
                                                      gang.encode()))
            taken.update(f"{e.namespace}/{e.pod}" for e in evictions)
        if taken:
            d.evictions = [e for e in d.evictions if f"{e.namespace}/{e.pod}" not in taken]

    def _resume(self, session: Session, jobs: dict[str, Job]) -> None:
        d = session.decisions
        waiting = [j for j in jobs.values() if j.rec.suspended is not None and j.rec.owner is not None]
        if not waiting:
            return
        free = rules.free_nodes(session.nodes)
        for job in sorted(waiting, key=lambda j: (-j.priority, j.rec.created, j.key)):
            gang = rules.decode(job.rec.suspended)
            kind = rules.owner_kind(job.rec.owner[0], job.rec.owner[1]) if job.rec.owner else None
            if gang is None or kind is None:
                d.annotations.append(AnnotationUpdate(job.namespace, job.name, keys.SUSPENDED_BY_SCHEDULER, None))
                continue
            if any(t.status in ACTIVE_ALLOCATED and t.rec.created > gang.at for t in job.tasks):
                # Running again without us (its user resumed it): nothing left to resume.
                d.annotations.append(AnnotationUpdate(job.namespace, job.name, keys.SUSPENDED_BY_SCHEDULER, None))
                continue
            if any(t.status in ACTIVE_USED or t.status in ALIVE for t in job.tasks):
                continue  # its pods are still going: never resume before the whole gang is gone
            if rules.fits(gang, free, job.queue):
                continue
            assert job.rec.owner is not None
            d.resumes.append(Resume(job.namespace, job.name, job.rec.owner, kind.field_path,
                                    f"Resumed by kai-scheduler: its gang of {rules.describe(gang)} fits whole now."))
            d.annotations.append(AnnotationUpdate(job.namespace, job.name, keys.SUSPENDED_BY_SCHEDULER, None))


PLUGIN = Suspend
