"""Placing one job inside a statement, shared by every action (KAI actions/common/allocate.go)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.model import Job, Task
from operators.scheduler.ordering import tasks_to_allocate
from operators.scheduler.session import FailedAttempt

if TYPE_CHECKING:
    from operators.scheduler.session import Session, Statement


def allocate_job(session: Session, stmt: Statement, job: Job, *, pipeline_only: bool = False) -> bool:
    """Try the job's next tasks (gang core, or one more pod): all placed, or False with nothing kept.

    The caller commits on True and discards on False; on False the reason is recorded on the job.
    """
    tasks = tasks_to_allocate(job)
    if not tasks:
        return False
    error = session.capacity_error(job, tasks)
    if error is not None:
        session.outcome(job).errors.append(error)
        return False
    # Needed only to explain a failure, on the state before this attempt: a single task fails before anything
    # changed, so its job's values are computed then.
    several = len(tasks) > 1
    if several:
        gang = any(p.active_allocated < p.min_available for p in job.podsets) and job.min_total > 1
        found_before = sum(p.active_allocated for p in job.podsets)
    checkpoint = stmt.checkpoint()
    for placed, task in enumerate(tasks):
        if not place_task(session, stmt, task, pipeline_only):
            assert task.podset is not None
            if not several:
                gang = any(p.active_allocated < p.min_available for p in job.podsets) and job.min_total > 1
                found_before = sum(p.active_allocated for p in job.podsets)
            subgroup = task.podset.name if gang and job.has_subgroups else None
            required = task.podset.min_available if subgroup is not None else job.min_total
            session.outcome(job).failure = FailedAttempt(task, found_before + placed, required, subgroup, gang,
                                                         session.fit_summary(task))
            stmt.rollback(checkpoint)
            return False
    for ps in job.podsets:
        if ps.pipelined and ps.active_allocated - ps.pipelined < ps.min_available:
            stmt.pipeline_all(job)
            break
    return True


def place_task(session: Session, stmt: Statement, task: Task, pipeline_only: bool = False) -> bool:
    placer = session.placer
    placement = placer.find(task)
    if placement is None:
        # Allocate only consumes resources, so a failure on committed state holds for the rest of the
        # action; remember it (evictions clear the memory). Positive pod affinity is not monotone.
        if not stmt.ops and not task.rec.constraints.pod_affinity:
            placer.failed.add(task.fit_key)
        return False
    if placement.pipeline or pipeline_only:
        stmt.pipeline(task, placement)
    else:
        stmt.allocate(task, placement)
    return True
