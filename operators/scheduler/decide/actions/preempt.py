"""preempt: within one leaf queue, a pending job evicts preemptible jobs of strictly lower priority.

Never crosses queues and applies no fairness rule; the preemptor must itself pass the capacity checks (queue
limits, on the scenario's state once its victims left, and for a non-preemptible preemptor the non-preemptible
quota at every level). Victims protected by
`preemptMinRuntime` (resolved from the victim's queue upward) are skipped, elastic ones keep their minimum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.decide.actions.common import record_search
from operators.scheduler.decide.actions.solver import Solver
from operators.scheduler.decide.actions.victims import (
    order_chunks,
    preempt_message,
    preempt_min_runtime,
    protected,
    releasable,
    victim_chunks,
)
from operators.scheduler.decide.model import Chunk, Job, QueueState, Task

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


# Why a preemptor's attempt failed, for `preemption_failures_total{reason}` (KAI PR #2111): KAI's search-result
# reasons, plus the early return for a capacity check that no victim can change (named here: the PR's own
# value for it is not published).
FAILURE_REASONS = {"NonPreemptibleOverQuota": "non_preemptible_over_quota", "OverLimit": "over_limit"}


def count_failure(session: Session, reason: str, n: int = 1) -> None:
    """For metrics (`Decisions.counters`): `n` failed preemption attempts, by reason."""
    counters = session.decisions.counters
    key = f"preemption_failures/{reason}"
    counters[key] = counters.get(key, 0) + n


def could_preempt(job: Job, lowest: dict[int, int]) -> bool:
    """Necessary for `job` to preempt: some candidate victim in its queue has strictly lower priority
    (`lowest`: the lowest candidate priority per id(queue))."""
    low = lowest.get(id(job.queue))
    return low is not None and low < job.priority


class Preempt:
    name = "preempt"
    enabled = True

    def execute(self, session: Session) -> None:
        jobs = session.gate_jobs(session.schedulable_jobs(), self.name)
        if not jobs:
            return
        candidates = session.victim_candidates()
        queues_with_victims = {id(j.queue) for j in candidates}
        jobs = [j for j in jobs if id(j.queue) in queues_with_victims]
        if not jobs:
            return
        # A run that provably repeats the previous cycle's is reproduced, not run (session/repeats.py).
        session.carrying.repeating.run_action(session, self.name, jobs, lambda: self._search(session, jobs, candidates))

    def _search(self, session: Session, jobs: list[Job], candidates: list[Job]) -> None:
        session.placer.failed.clear()  # allocate's memory of failures holds only without evictions
        # A job can preempt only if its queue has a candidate of strictly lower priority. Candidates are fixed
        # for the action and only lose pods, so a job without one never gets one: such jobs are skipped
        # without any work, and the action ends once no job that has one is left (pops have no side effects).
        lowest: dict[int, int] = {}
        for other in candidates:  # the least priority per queue (a comparison, not a min() call per candidate)
            q = id(other.queue)
            priority = other.priority
            low = lowest.get(q)
            if low is None or priority < low:
                lowest[q] = priority
        hopeful = sum(1 for j in jobs if could_preempt(j, lowest))
        if not hopeful:
            return
        solver = Solver(session, self.name)
        freed: dict[QueueState, list[int]] | None = None
        cache: dict[tuple[object, ...], list[Chunk]] = {}  # ordered victims per (queue, priority) until a commit
        cfg = session.config
        if not cfg.min_failed_search_backoff and cfg.queue_depth_per_action.get(self.name) is None:
            freed = releasable(session, candidates)
            failures = self._futile(session, jobs, lowest, candidates, solver, freed, cache)
            if failures is not None:
                for reason, n in failures.items():
                    count_failure(session, reason, n)
                return
        tree = session.job_tree(jobs, self.name)
        failed: set[tuple[object, ...]] = set()
        while hopeful > 0 and not solver.exhausted and (job := tree.pop()) is not None:
            assert job.queue is not None
            if not could_preempt(job, lowest):
                continue
            hopeful -= 1
            tasks = session.tasks_to_allocate(job)
            if not tasks:
                continue
            signature = (job.queue.name, job.priority, job.preemptible, tuple(t.fit_key for t in tasks))
            if signature in failed:
                record_search(session, self.name, job, False)  # an equal job's search failed this cycle
                count_failure(session, "generators_exhausted")
                continue
            # Limits are checked in each scenario, after its victims left (they are all in this queue); here
            # only what no scenario can change: the non-preemptible quota, and a limit even every candidate of
            # the queue leaving would not make room under.
            if freed is None:
                freed = releasable(session, candidates)
            mine = freed.get(job.queue)
            error = session.capacity_error(job, tasks, dict.fromkeys(job.queue.lineage(), mine) if mine else {})
            if error is not None:
                count_failure(session, FAILURE_REASONS.get(error.reason, "generators_exhausted"))
                continue
            key = (job.queue, job.priority)
            chunks = cache.get(key)
            if chunks is None:
                chunks = cache[key] = self._victims(session, job, candidates)
            if not chunks:
                record_search(session, self.name, job, False)
                count_failure(session, "generators_exhausted")
                continue
            stmt = session.statement()

            def describe(task: Task, chunk: Chunk, reason: str, job: Job = job) -> str:
                return preempt_message(task, chunk.job, job)

            if solver.solve(stmt, job, tasks, chunks, describe=describe):
                record_search(session, self.name, job, True)
                stmt.commit()
                tree.invalidate(job.queue)
                solver.changed()
                if any(p.pending for p in job.podsets):
                    tree.push(job)
                    hopeful += 1
            else:
                stmt.discard()
                failed.add(signature)
                record_search(session, self.name, job, False)
                count_failure(session, "deadline_exhausted" if solver.exhausted else "generators_exhausted")

    def _futile(self, session: Session, jobs: list[Job], lowest: dict[int, int], candidates: list[Job],
                solver: Solver, freed: dict[QueueState, list[int]],
                cache: dict[tuple[object, ...], list[Chunk]]) -> dict[str, int] | None:
        """The failure counts of the action when provably no job evicts anything, else None.

        Without a commit the state is fixed, so each job's attempt has the same outcome whenever the job tree
        pops it: a capacity error, no victim, or a search whose walk provably finds no scenario
        (`Solver.futile_walk`). The order then changes nothing as long as jobs of one signature share their
        outcome (a later one is counted as a repeat of the first's failed search) and the searches' work stays
        under the budget; without a recorded search outcome (the back-off) and a queue depth (the tree would drop
        jobs), the job tree's walk is not needed. None, and the walk decides, whenever any of this fails.
        """
        outcome: dict[tuple[object, ...], str] = {}
        counts: dict[str, int] = {}
        work = 0
        for job in jobs:
            if not could_preempt(job, lowest):
                continue
            assert job.queue is not None
            tasks = session.tasks_to_allocate(job)
            if not tasks:
                continue
            signature = (job.queue.name, job.priority, job.preemptible, tuple(t.fit_key for t in tasks))
            mine = freed.get(job.queue)
            error = session.capacity_error(job, tasks, dict.fromkeys(job.queue.lineage(), mine) if mine else {})
            if error is not None:
                verdict = reason = FAILURE_REASONS.get(error.reason, "generators_exhausted")
            else:
                reason = "generators_exhausted"
                key = (job.queue, job.priority)
                chunks = cache.get(key)
                if chunks is None:
                    chunks = cache[key] = self._victims(session, job, candidates)
                verdict = "no victims"
                if chunks:
                    spent = solver.futile_walk(job, tasks, chunks)
                    if spent is None:
                        return None
                    verdict = "searched"
                    if signature not in outcome:
                        work += spent
            if outcome.setdefault(signature, verdict) != verdict:
                return None
            counts[reason] = counts.get(reason, 0) + 1
        return counts if work < solver.work else None

    @staticmethod
    def _victims(session: Session, job: Job, candidates: list[Job]) -> list[Chunk]:
        assert job.queue is not None
        chunks: list[Chunk] = []
        for other in candidates:
            if other is job or other.queue is not job.queue or other.priority >= job.priority:
                continue
            guarded = protected(session, other, preempt_min_runtime(session, other.queue))
            chunks.extend(victim_chunks(other, guarded))
        return order_chunks(session, chunks)
