"""reclaim: a pending job of a queue below its fair share evicts preemptible work of queues above theirs
(spec/algorithms.md 5.2, contracts 8.4).

A job may reclaim only if its leaf queue stays within its fair share with the job (non-preemptible jobs: also
within quota at every level). Victims are preemptible jobs of other queues, not protected by
`reclaimMinRuntime`, taken in victim order (5.4). A scenario is valid when, for every chunk before it is taken,
the victim side of the hierarchy (the sibling where the reclaimer's and victim's paths diverge) is still above
its allocatable share ("maintain fair share"), or the reclaimer side stays within its quota while the victim
side is above its quota ("guarantee deserved quota"); and no level of the reclaimer's ancestry ends more
saturated than a sibling it takes from. So reclaim takes queues back down to their share, never below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from operators.scheduler.actions.solver import Solver
from operators.scheduler.actions.victims import (
    Chunk,
    amount,
    can_be_victim,
    main_resource,
    order_chunks,
    protected,
    reclaim_message,
    reclaim_min_runtime,
    victim_chunks,
)
from operators.scheduler.fairshare import UNLIMITED
from operators.scheduler.model import Job, QueueState, Task
from operators.scheduler.ordering import JobTree, tasks_to_allocate

if TYPE_CHECKING:
    from operators.scheduler.session import Session

_EPS = 1e-6


def can_reclaim(queue: QueueState, request: Sequence[float]) -> bool:
    """The reclaimer's leaf queue stays within its fair share in every requested resource."""
    return all(request[r] <= _EPS or queue.allocated[r] + request[r] <= queue.fair_share[r] + _EPS
               for r in range(3))


def _diverge(reclaimer: QueueState, victim: QueueState) -> tuple[QueueState, QueueState]:
    """The pair of sibling queues (reclaimer side, victim side) where the two ancestor paths split."""
    mine = reclaimer.lineage()
    theirs = victim.lineage()
    common = set(mine) & set(theirs)
    r_side = next(q for q in mine if q.parent is None or q.parent in common)
    v_side = next(q for q in theirs if q.parent is None or q.parent in common)
    return r_side, v_side


class ReclaimValidator:
    """Fairness rules of one reclaimer against one scenario, on the accounting at the start of its search."""

    def __init__(self, session: Session, job: Job, request: Sequence[float]) -> None:
        assert job.queue is not None
        self.session = session
        self.job = job
        self.queue = job.queue
        self.request = request
        self.res = main_resource(request)
        self.multiplier = max(1.0, session.config.reclaimer_saturation_multiplier)

    def __call__(self, scenario: Sequence[Chunk]) -> list[str] | None:
        alloc: dict[QueueState, list[float]] = {}

        def a(q: QueueState) -> list[float]:
            v = alloc.get(q)
            if v is None:
                v = alloc[q] = list(q.allocated)
            return v

        contested = [r for r in range(3) if self.request[r] > _EPS]
        reasons: list[str] = []
        affected: set[QueueState] = set()
        for chunk in scenario:
            assert chunk.job.queue is not None
            r_side, v_side = _diverge(self.queue, chunk.job.queue)
            vec = chunk.vector(self.session)
            used = [r for r in contested if vec[r] > _EPS] or contested
            remaining = a(v_side)
            above_share = [r for r in used if remaining[r] > v_side.alloc_share[r] + _EPS]
            if above_share:
                r = self.res if self.res in above_share else above_share[0]
                reasons.append(f"queue {v_side.name} uses {amount(remaining, r)}, above its fair share of "
                               f"{amount(v_side.alloc_share, r)}")
            else:
                mine = a(r_side)
                within_quota = all(r_side.rec.quota[r] == UNLIMITED
                                   or mine[r] + self.request[r] <= r_side.rec.quota[r] + _EPS for r in contested)
                above_quota = [r for r in used if v_side.rec.quota[r] != UNLIMITED
                               and remaining[r] > v_side.rec.quota[r] + _EPS]
                if not (within_quota and above_quota):
                    return None
                r = self.res if self.res in above_quota else above_quota[0]
                reasons.append(f"queue {v_side.name} uses {amount(remaining, r)}, above its quota of "
                               f"{amount(v_side.rec.quota, r)}, while queue {r_side.name} is within its quota")
            for q in chunk.job.queue.lineage():
                v = a(q)
                for i in range(3):
                    v[i] -= vec[i]
                affected.add(q)
        if not self._saturation_ok(a, affected, contested):
            return None
        return reasons

    def _saturation_ok(self, a: Callable[[QueueState], list[float]], affected: set[QueueState],
                       contested: list[int]) -> bool:
        """At every level of the reclaimer's ancestry it must end less saturated than each sibling it takes
        from (allocated / fair share), unless it stays within its own fair share."""
        for q in self.queue.lineage():
            siblings = q.parent.children if q.parent is not None else [
                s for s in self.session.queues.values() if s.parent is None]
            takes_from = [s for s in siblings if s is not q and s in affected]
            if not takes_from:
                continue
            mine = a(q)
            for r in contested:
                share = q.fair_share[r]
                after = mine[r] + self.request[r]
                ratio = after / share if share > _EPS else float("inf")
                if ratio <= 1 + _EPS:
                    continue
                for s in takes_from:
                    theirs = s.fair_share[r]
                    if theirs <= _EPS:
                        continue
                    if ratio * self.multiplier >= a(s)[r] / theirs - _EPS:
                        return False
        return True


class Reclaim:
    name = "reclaim"
    enabled = True

    def execute(self, session: Session) -> None:
        jobs = session.schedulable_jobs()
        if not jobs:
            return
        candidates = [j for j in session.jobs if can_be_victim(j)]
        if not candidates:
            return
        session.placer.failed.clear()  # allocate's memory of failures holds only without evictions
        depth = session.config.queue_depth_per_action.get(self.name)
        tree = JobTree(jobs, lambda job: session.job_request(tasks_to_allocate(job)), depth)
        solver = Solver(session, self.name)
        failed: set[tuple[object, ...]] = set()
        # Ordered victims per (reclaimer queue, contested resources); valid until the next commit. Victim-side
        # queues and per-job chunks (with their min-runtime protection) stay valid until their job is evicted.
        cache: dict[tuple[object, ...], list[Chunk]] = {}
        self._sides: dict[tuple[QueueState, QueueState], QueueState] = {}
        self._chunks: dict[tuple[int, QueueState], list[Chunk]] = {}
        while not solver.exhausted and (job := tree.pop()) is not None:
            assert job.queue is not None
            tasks = tasks_to_allocate(job)
            if not tasks:
                continue
            signature = (job.queue.name, job.preemptible, tuple(t.fit_key for t in tasks))
            if signature in failed:
                continue
            request = session.job_request(tasks)
            if not can_reclaim(job.queue, request) or session.capacity_error(job, tasks) is not None:
                continue
            key = (job.queue, tuple(r for r in range(3) if request[r] > _EPS))
            chunks = cache.get(key)
            if chunks is None:
                chunks = cache[key] = self._victims(session, job, candidates, request)
                solver.work -= len(candidates)
            if not chunks:
                continue
            stmt = session.statement()

            def describe(task: Task, chunk: Chunk, reason: str, job: Job = job) -> str:
                return reclaim_message(task, job, reason)

            if solver.solve(stmt, job, tasks, chunks, describe=describe,
                            validate=ReclaimValidator(session, job, request)):
                victims = {id(op.task.job): op.task.job for op in stmt.ops if op.kind == "evict" and op.task.job}
                stmt.commit()
                for victim in victims.values():
                    tree.invalidate(victim.queue)
                solver.changed()
                # Victim lists stay cached: the solver skips chunks already taken, and re-ranking the
                # queues after every commit would cost more than it changes.
                if any(p.pending for p in job.podsets):
                    tree.push(job)
            else:
                stmt.discard()
                failed.add(signature)

    def _victims(self, session: Session, job: Job, candidates: list[Job], request: Sequence[float]) -> list[Chunk]:
        mine = job.queue
        assert mine is not None
        contested = [r for r in range(3) if request[r] > _EPS]
        takeable: dict[QueueState, bool] = {}
        chunks: list[Chunk] = []
        for other in candidates:
            if other is job or other.queue is None or other.queue is mine:
                continue
            # The validator needs the victim side above its share or its quota before anything is taken from it;
            # taking only lowers it, so queues failing that now can be left out of the search altogether.
            v_side = self._sides.get((mine, other.queue))
            if v_side is None:
                v_side = self._sides[(mine, other.queue)] = _diverge(mine, other.queue)[1]
            ok = takeable.get(v_side)
            if ok is None:
                ok = takeable[v_side] = any(
                    v_side.allocated[r] > v_side.alloc_share[r] + _EPS
                    or (v_side.rec.quota[r] != UNLIMITED and v_side.allocated[r] > v_side.rec.quota[r] + _EPS)
                    for r in contested)
            if not ok:
                continue
            mine_chunks = self._chunks.get((id(other), mine))
            if mine_chunks is None:
                guarded = protected(session, other, reclaim_min_runtime(session, mine, other.queue))
                mine_chunks = self._chunks[(id(other), mine)] = victim_chunks(other, guarded)
            chunks.extend(mine_chunks)
        return order_chunks(session, chunks)
