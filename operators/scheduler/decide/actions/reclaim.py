"""reclaim: a pending job of a queue below its fair share evicts preemptible work of queues above theirs.

Victims are preemptible jobs of other queues, not protected by `reclaimMinRuntime`, taken in victim order (5.4).
Which queue may reclaim, from which queues, and which scenarios are fair are the proportion plugin's rules
(`plugins/proportion/reclaimable.py`), asked through the framework's `reclaim_rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from operators.scheduler.decide.actions.common import record_search
from operators.scheduler.decide.actions.solver import Solver
from operators.scheduler.decide.actions.victims import (
    JobOrder,
    MergedVictims,
    OrderHandover,
    VictimLists,
    reclaim_message,
    reclaim_min_runtime,
    releasable,
)
from operators.scheduler.decide.model import Chunk, Job, QueueState, Task
from operators.scheduler.decide.units import AXES

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


def reclaimable_bound(session: Session, candidates: list[Job]) -> dict[QueueState, list[int]]:
    """`releasable()` for the capacity checks, or nothing when no queue has a limit: `freed` only lowers the
    allocation a limit is checked against (the `Capacity` contract), so without limits no check reads it, and
    summing every candidate's live pods (tens of thousands of jobs at twice the envelope) would be wasted."""
    if all(session.unlimited(q) for q in session.queues.values()):
        return {}
    return releasable(session, candidates)


class Reclaim:
    name = "reclaim"
    enabled = True

    def execute(self, session: Session) -> None:
        jobs = session.gate_jobs(session.schedulable_jobs(), self.name)
        if not jobs:
            return
        candidates = session.victim_candidates()
        if not candidates:
            return
        # A run that provably repeats the previous cycle's is reproduced, not run (session/repeats.py).
        session.carrying.repeating.run_action(session, self.name, jobs, lambda: self._search(session, jobs, candidates))

    def _search(self, session: Session, jobs: list[Job], candidates: list[Job]) -> None:
        session.placer.failed.clear()  # allocate's memory of failures holds only without evictions
        tree = session.job_tree(jobs, self.name)
        solver = Solver(session, self.name)
        rules = session.framework.reclaim_rules
        failed: set[tuple[object, ...]] = set()
        freed: dict[QueueState, list[int]] | None = None
        # Ordered victims per (reclaimer queue, contested resources); valid until the next commit. Victim-side
        # queues and per-job chunks (with their min-runtime protection) stay valid until their job is evicted.
        cache: dict[tuple[object, ...], MergedVictims] = {}
        self._sides: dict[tuple[QueueState, QueueState], tuple[QueueState, QueueState]] = {}
        # Candidates by leaf queue (in session order); per (victim queue, reclaimer queue) the victim queue's
        # chunks in within-queue order, fixed when that reclaimer queue first needs them; per (victim queue,
        # min-runtime) the latest such list with the queue's epoch (bumped when a commit touches its jobs).
        self._by_queue: dict[QueueState, list[Job]] = {}
        for other in candidates:
            assert other.queue is not None
            self._by_queue.setdefault(other.queue, []).append(other)
        self._per_reclaimer: dict[tuple[QueueState, QueueState], JobOrder] = {}
        self._shared: dict[tuple[QueueState, float], tuple[int, JobOrder]] = {}
        # Consolidation's orders, when no commit came since it built them (`OrderHandover`): their chunks then are
        # the committed state's, and these lists keep them.
        handover, session.victim_orders = session.victim_orders, None
        lists = handover.lists(session) if isinstance(handover, OrderHandover) else None
        self._handover = handover if isinstance(handover, OrderHandover) and lists is not None else None
        self._lists = lists if lists is not None else VictimLists(session)
        self._epoch: dict[QueueState, int] = {}
        while not solver.exhausted and (job := tree.pop()) is not None:
            assert job.queue is not None
            tasks = session.tasks_to_allocate(job)
            if not tasks:
                continue
            signature = (job.queue.name, job.preemptible, tuple(t.fit_key for t in tasks))
            if signature in failed:
                record_search(session, self.name, job, False)  # an equal job's search failed this cycle
                continue
            request = session.job_request(tasks)
            existing, steady_path = rules.may_reclaim(session, job.queue, request)
            if not (existing or steady_path):
                continue
            # Limits are checked in each scenario, after its victims left: a victim below a limited queue makes
            # room under it. Here only a limit that every candidate leaving would not relieve rules the job out.
            if freed is None:
                freed = reclaimable_bound(session, candidates)
            if session.capacity_error(job, tasks, freed) is not None:
                continue
            key = (job.queue, tuple(r for r in AXES if request[r] > 0))
            chunks = cache.get(key)
            if chunks is None:
                chunks = cache[key] = self._victims(session, job, request)
            if not chunks:
                record_search(session, self.name, job, False)
                continue
            stmt = session.statement()

            def describe(task: Task, chunk: Chunk, reason: str, job: Job = job) -> str:
                return reclaim_message(task, job, reason)

            validator = rules.scenario_validator(session, job, request, self._sides, existing=existing,
                                                 steady_path=steady_path)
            self._lists.prepare(job)
            if solver.solve(stmt, job, tasks, chunks, describe=describe, validate=validator,
                            viable=validator.viable):
                record_search(session, self.name, job, True)
                victims = {id(op.task.job): op.task.job for op in stmt.ops if op.kind == "evict" and op.task.job}
                touched = {op.task.job.queue for op in stmt.ops if op.task.job is not None}
                self._lists.committing({id(op.task.job): op.task.job for op in stmt.ops if op.task.job}.values())
                stmt.commit()
                for victim in victims.values():
                    tree.invalidate(victim.queue)
                for q in touched:
                    if q is not None:
                        self._epoch[q] = self._epoch.get(q, 0) + 1
                solver.changed()
                # Victim lists stay cached: the solver skips chunks already taken, and re-ranking the
                # queues after every commit would cost more than it changes.
                if any(p.pending for p in job.podsets):
                    tree.push(job)
            else:
                stmt.discard()
                failed.add(signature)
                record_search(session, self.name, job, False)

    def _victims(self, session: Session, job: Job, request: Sequence[int]) -> MergedVictims:
        """Victims of other queues whose victim side is above its share or quota now, in victim order.

        The same as order_chunks() over every candidate's chunks, but cheaper: a queue's chunks, in their
        within-queue order, are computed when the reclaimer's queue first needs that queue (as per-job chunk
        lists always were) and shared with other reclaimer queues while none of its jobs changed and the
        min-runtime that protects them is the same; the merge across queues is lazy.
        """
        mine = job.queue
        assert mine is not None
        contested = [r for r in AXES if request[r] > 0]
        may_take_from = session.framework.reclaim_rules.may_take_from
        per_queue: list[tuple[QueueState, JobOrder]] = []
        for victim in self._by_queue:
            if victim is not mine and may_take_from(session, mine, victim, contested, self._sides):
                per_queue.append((victim, self._queue_chunks(session, mine, victim)))
        return MergedVictims(session, per_queue)

    def _queue_chunks(self, session: Session, mine: QueueState, victim: QueueState) -> JobOrder:
        hit = self._per_reclaimer.get((victim, mine))
        if hit is not None:
            return hit
        runtime = reclaim_min_runtime(session, mine, victim)
        epoch = self._epoch.get(victim, 0)
        shared = self._shared.get((victim, runtime))
        if shared is not None and shared[0] == epoch:
            hit = shared[1]
        else:
            # Consolidation's order while no commit touched the queue's jobs (epoch 0), else made and ordered
            # lazily: a search reads a prefix of each queue's chunks (JobOrder).
            taken = None
            if epoch == 0 and self._handover is not None:
                taken = self._handover.take(self._lists, victim, self._by_queue[victim], runtime)
            hit = taken if taken is not None else self._lists.order(self._by_queue[victim], runtime, False)
            self._shared[(victim, runtime)] = (epoch, hit)
        self._per_reclaimer[(victim, mine)] = hit
        return hit
