"""allocate: place pending jobs on idle (or releasing, as pipelines) resources; never evicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.actions.common import allocate_job
from operators.scheduler.ordering import JobTree, tasks_to_allocate

if TYPE_CHECKING:
    from operators.scheduler.session import Session


class Allocate:
    name = "allocate"
    enabled = True

    def execute(self, session: Session) -> None:
        depth = session.config.queue_depth_per_action.get(self.name)
        tree = JobTree(session.schedulable_jobs(), lambda job: session.job_request(tasks_to_allocate(job)), depth)
        while (job := tree.pop()) is not None:
            stmt = session.statement()
            if allocate_job(session, stmt, job):
                stmt.commit()
                # Elastic growth: one more pod per attempt while pods remain and fit.
                if any(p.pending for p in job.podsets):
                    tree.push(job)
            else:
                stmt.discard()
            # No invalidate needed: pop() already dropped the cached facts on this job's queue path, and
            # nothing reads them between the pop and the next pop.
