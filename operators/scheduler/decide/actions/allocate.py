"""allocate: place pending jobs on idle (or releasing, as pipelines) resources; never evicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from operators.scheduler.decide.actions.common import allocate_job

if TYPE_CHECKING:
    from operators.scheduler.decide.decisions import Bind
    from operators.scheduler.decide.session import Session


class Allocate:
    name = "allocate"
    enabled = True
    # Told each bind as soon as its job's allocation is committed (never for an attempt rolled back, nor for a
    # pipelined task), in commit order, while the cycle goes on: the live loop starts writing it at once.
    on_bind: Callable[[Bind], None] | None = None

    def execute(self, session: Session) -> None:
        jobs = session.gate_jobs(session.schedulable_jobs(), self.name)
        # A failed attempt that provably repeats the previous cycle's is replayed, not run; so is the whole action
        # when it would pop the same jobs on the same state (session/repeats.py).
        repeating = session.carrying.repeating
        if repeating.begin(session, jobs):
            return
        tree = session.job_tree(jobs, self.name)
        while (job := tree.pop()) is not None:
            if repeating.clean and repeating.replay(session, job):
                continue
            seen = repeating.watch(session, job)
            stmt = session.statement()
            if allocate_job(session, stmt, job, other_choices=True, tasks=tree.attempt_tasks(job)):
                first = len(session.decisions.binds)
                stmt.commit()
                repeating.committed()
                if self.on_bind is not None:
                    for bind in session.decisions.binds[first:]:
                        self.on_bind(bind)
                # Elastic growth: one more pod per attempt while pods remain and fit (a loop, not any() over a
                # generator: this runs after every commit).
                for ps in job.podsets:
                    if ps.pending:
                        tree.push(job)
                        break
            else:
                stmt.discard()
                repeating.failed(session, job, seen)
            # No invalidate needed: pop() already dropped the cached facts on this job's queue path, and
            # nothing reads them between the pop and the next pop.
        repeating.end()
