"""consolidation: move preemptible pods to other nodes to make room for a pending preemptible job.

A scenario evicts victim chunks (an elastic job's pods above minMember one at a time, then the rest of a job
whole) and must pipeline the pending job *and every victim pod* elsewhere (another node, or for a fractional
pod another GPU of its node); if any victim pod cannot be re-placed the scenario is dropped, so consolidation
never kills a pod for good.
At most `max_consolidation_preemptees` victim jobs per scenario; disabled with a spread placement strategy or
a cap of 0 (`SchedulerConfig.effective_actions`). Beyond KAI, victims protected by `preemptMinRuntime` are
not moved either (a move restarts the pod).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from operators.scheduler.decide.actions.common import record_search
from operators.scheduler.decide.actions.solver import Solver, cluster_free
from operators.scheduler.decide.actions.victims import (
    JobOrder,
    MergedVictims,
    OrderHandover,
    VictimLists,
    commit_count,
    consolidation_message,
    preempt_min_runtime,
)
from operators.scheduler.decide.model import Chunk, Job, QueueState, Task
from operators.scheduler.decide.units import AXES

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

def fits_free(request: Sequence[int], free: Sequence[int]) -> bool:
    """Moving pods never frees capacity: the cluster's idle + releasing total must already cover the job."""
    return not any(request[r] > free[r] for r in AXES)


def _may_fit(session: Session, job: Job, free: Sequence[int]) -> bool:
    """fits_free(job_request(tasks_to_allocate(job)), free). With one podset the first pending pod is among
    the tasks, and a sum of non-negative vectors is at least each of them, so a first pod that does not
    fit settles it without building the request."""
    if len(job.podsets) == 1:
        pending = job.podsets[0].pending
        if pending:
            gpu, cpu, mem = session.task_vector(pending[0])
            free_gpu, free_cpu, free_mem = free
            if gpu > free_gpu or cpu > free_cpu or mem > free_mem:
                return False
    return fits_free(session.job_request(session.tasks_to_allocate(job)), free)


class Consolidation:
    name = "consolidation"
    enabled = True

    def execute(self, session: Session) -> None:
        limit = session.config.max_consolidation_preemptees
        if limit == 0:
            return
        jobs = [j for j in session.gate_jobs(session.schedulable_jobs(), self.name) if j.preemptible]
        if not jobs:
            return
        candidates = session.victim_candidates()
        if not candidates:
            return
        # A run that provably repeats the previous cycle's is reproduced, not run (session/repeats.py).
        session.carrying.repeating.run_action(session, self.name, jobs,
                                              lambda: self._search(session, jobs, candidates, limit))

    def _search(self, session: Session, jobs: list[Job], candidates: list[Job], limit: int) -> None:
        session.placer.failed.clear()  # allocate's memory of failures holds only without evictions
        free = cluster_free(session)
        # Nothing changes until a job succeeds, and none can while every job is short of the free total.
        if not any(_may_fit(session, j, free) for j in jobs):
            return
        tree = session.job_tree(jobs, self.name)
        solver = Solver(session, self.name)
        failed: set[tuple[object, ...]] = set()
        ordered: MergedVictims | None = None  # victims in victim order (the solver skips those taken)
        lists = VictimLists(session)
        handover: dict[QueueState, tuple[list[Job], JobOrder]] = {}
        built = -1  # commit_count() when the orders were built
        while not solver.exhausted and (job := tree.pop()) is not None:
            tasks = session.tasks_to_allocate(job)
            if not tasks:
                continue
            signature = tuple(t.fit_key for t in tasks)
            request = session.job_request(tasks)
            if not fits_free(request, free):
                continue  # moving pods never frees capacity: the cluster must already have room in total
            if signature in failed:
                record_search(session, self.name, job, False)  # an equal job's search failed this cycle
                continue
            if session.capacity_error(job, tasks) is not None:
                continue
            if ordered is None:
                ordered = self._victims(session, lists, candidates, handover)
                built = commit_count(session)
            chunks = ordered
            if not chunks:
                record_search(session, self.name, job, False)
                continue
            stmt = session.statement()

            def describe(task: Task, chunk: Chunk, node: str, job: Job = job) -> str:
                return consolidation_message(task, job, node)

            lists.prepare(job)
            if solver.solve(stmt, job, tasks, chunks, describe=describe, move_victims=True,
                            max_victim_jobs=limit if limit > 0 else None):
                record_search(session, self.name, job, True)
                lists.committing({id(op.task.job): op.task.job for op in stmt.ops if op.task.job}.values())
                stmt.commit()
                tree.invalidate(job.queue)
                solver.changed()
                free = cluster_free(session)
                if any(p.pending for p in job.podsets):
                    tree.push(job)
            else:
                stmt.discard()
                failed.add(signature)
                record_search(session, self.name, job, False)
        if handover:
            session.victim_orders = OrderHandover(built, lists._made, handover)

    @staticmethod
    def _victims(session: Session, lists: VictimLists, candidates: list[Job],
                 handover: dict[QueueState, tuple[list[Job], JobOrder]]) -> MergedVictims:
        """order_chunks() of every unprotected candidate's chunks (an elastic job's pods above minMember one at a
        time, then its core), merged across queues and ordered within each queue lazily: a search that stops after
        a few hundred scenarios makes and sees a short prefix of the cluster's victims."""
        by_queue: dict[QueueState, list[Job]] = {}
        for other in candidates:
            assert other.queue is not None
            by_queue.setdefault(other.queue, []).append(other)
        # Protected jobs are left out: a move restarts the pod. The protection is the victim queue's.
        per_queue: list[tuple[QueueState, JobOrder]] = []
        for q, jobs in by_queue.items():
            runtime = preempt_min_runtime(session, q)
            order = lists.order(jobs, runtime, True)
            per_queue.append((q, order))
            if runtime == 0 and not order.any_protected:  # reclaim may take it over (OrderHandover)
                handover[q] = (jobs, order)
        return MergedVictims(session, per_queue)
