"""semipreemptible (KAI v0.18, alpha): a `preemptibility: semi-preemptible` PodGroup is non-preemptible up to its
core and preemptible above it.

The core of each leaf podset is its gang minimum (`minMember`, or a leaf SubGroup's `minMember` where the
SubGroup tree needs that leaf), raised to `spec.minNonPreemptible` on a PodGroup without SubGroups; the core pods
are the first ones in task order. The core counts in the queue's non-preemptible allocation, so allocating it
must fit the queue's quota (NonPreemptibleOverQuota), and it is never a victim (`victims.protected`); the pods
above it are an ordinary preemptible job's: over quota, offered to reclaim and preempt one at a time, last pod
first. The session marks the job preemptible; this plugin keeps the core's rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import ACTIVE_ALLOCATED, QUEUE_ALLOCATED, Job, PodSet, QueueState, Task
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.units import AXES


def core_size(job: Job, ps: PodSet) -> int:
    """How many of the podset's allocated pods are its non-preemptible core."""
    extra = job.rec.min_non_preemptible
    if extra is None or job.has_subgroups:
        return ps.min_available
    return max(ps.min_available, extra)


class SemiPreemptible(Plugin):
    name = "semipreemptible"
    default_priority = 790  # right below proportion, whose NonPreemptibleOverQuota it extends to the core

    def __init__(self, arguments: dict[str, object] | None = None) -> None:
        super().__init__(arguments)
        self.jobs: set[Job] = set()
        self.core: set[Task] = set()  # tasks counted in their queues' non-preemptible allocation
        self.evicted: set[Task] = set()  # core tasks evicted in a statement (back on its rollback)

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, capacity=self, allocate_event=self, deallocate_event=self)

    def on_session_open(self, session: Session) -> None:
        for job in session.feature_jobs:  # the semi-preemptible jobs are among them
            if job.rec.preemptibility != keys.SEMI_PREEMPTIBLE or job.queue is None:
                continue
            self.jobs.add(job)
            for ps in job.podsets:
                ps.core = core_size(job, ps)
                taken = 0
                for task in ps.tasks:
                    if taken >= ps.core:
                        break
                    if task.status in QUEUE_ALLOCATED:
                        taken += 1
                        self._count(session, task, +1)

    def in_use(self, session: Session) -> bool:
        return bool(self.jobs)

    def _count(self, session: Session, task: Task, sign: int) -> None:
        assert task.job is not None and task.job.queue is not None
        session.add_up_lineage(task.job.queue, "allocated_np", session.task_vector(task), sign)
        if sign > 0:
            self.core.add(task)
        else:
            self.core.discard(task)

    def on_allocate(self, session: Session, task: Task, kind: str) -> None:
        job, ps = task.job, task.podset
        if job not in self.jobs or ps is None:
            return
        if kind == "rollback":  # an eviction undone
            if task in self.evicted:
                self.evicted.discard(task)
                self._count(session, task, +1)
        elif ps.active_allocated <= ps.core:  # this task took a core slot (it is counted already)
            self._count(session, task, +1)

    def on_deallocate(self, session: Session, task: Task, kind: str) -> None:
        if task not in self.core:
            return
        self._count(session, task, -1)
        if kind == "evict":
            self.evicted.add(task)

    def capacity_error(self, session: Session, job: Job, tasks: Iterable[Task],
                       freed: dict[QueueState, list[int]] | None) -> explain.JobError | None:
        """NonPreemptibleOverQuota for the attempt's pods that would take core slots."""
        if job not in self.jobs:
            return None
        assert job.queue is not None
        tasks = list(tasks)
        slots = {ps: max(0, ps.core - sum(1 for t in ps.tasks if t.status in ACTIVE_ALLOCATED))
                 for ps in job.podsets}
        core: list[Task] = []
        for task in tasks:
            ps = task.podset
            if ps is not None and slots.get(ps, 0) > 0 and task.status not in ACTIVE_ALLOCATED:
                slots[ps] -= 1
                core.append(task)
        if not core:
            return None
        req = session.job_request(core)
        for q in job.queue.lineage():
            for r in AXES:
                quota = q.rec.quota[r]
                if quota != UNLIMITED and req[r] > 0 and q.allocated_np[r] + req[r] > quota:
                    msg = explain.non_preemptible_over_quota(q.rec.title, r, quota, q.allocated_np[r], req[r])
                    details = explain.queue_details(q.name, q.request, q.rec.quota, q.allocated, q.allocated_np,
                                                    q.rec.limit, session.job_request(tasks), req)
                    return explain.JobError(keys.REASON_NON_PREEMPTIBLE_OVER_QUOTA, (msg,), details)
        return None


PLUGIN = SemiPreemptible
