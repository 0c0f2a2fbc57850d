"""Placing one job inside a statement, shared by every action (KAI actions/common/allocate.go)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from operators.scheduler.decide.model import Job, Task
from operators.scheduler.decide.searchbackoff import job_key

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session, Statement


def record_search(session: Session, action: str, job: Job, solved: bool) -> None:
    """Note the outcome of a scenario search for `job` (the failed-search back-off; only when configured)."""
    if session.config.min_failed_search_backoff:
        rec = job.rec
        session.decisions.search_outcomes.append((action, job_key(rec.namespace, rec.name, rec.uid), solved))


def allocate_job(session: Session, stmt: Statement, job: Job, *, pipeline_only: bool = False,
                 other_choices: bool = False, tasks: list[Task] | None = None) -> bool:
    """Try the job's next tasks (gang core, or one more pod): all placed, or False with nothing kept.

    The attempt is tried in each node subset the plugins give (`node_subsets`; default: all nodes), in order,
    until one holds it. The caller commits on True and discards on False; on False the reason is recorded on
    the job. `other_choices`: when the gang attempt fails, the gang plugin's other ways to meet the job's gang
    rule (`gang_choices`) are tried in turn; a failure is explained by the first choice. `tasks`: the pods of
    the attempt when the caller has them already (the job tree's `attempt_tasks`, for the job as it is now).
    """
    fw = session.framework
    if other_choices and fw.gang_choices is not None:
        return _with_choices(session, stmt, job, pipeline_only, fw.gang_choices, tasks)
    if tasks is None:
        tasks = fw.gang.tasks_to_allocate(job)
    if not tasks:
        return False
    capacity = fw.capacity
    # One capacity plugin (proportion, by default): called directly.
    error = capacity[0](session, job, tasks, None) if len(capacity) == 1 else session.capacity_error(job, tasks)
    if error is not None:
        session.outcome(job).errors.append(error)
        return False
    subsets = session.node_subsets(job) if fw.node_subsets else None
    if subsets is None:
        return _attempt(session, stmt, job, tasks, pipeline_only)
    placer = session.placer
    for subset in subsets_to_try(placer.failed, tasks, subsets):
        placer.restrict(subset)
        try:
            if _attempt(session, stmt, job, tasks, pipeline_only):
                return True
        finally:
            placer.restrict(None)
    return False


def subsets_to_try(failed: set[tuple[object, ...]], tasks: list[Task], subsets: list[Iterable[int]],
                   ) -> list[Iterable[int]]:
    """The node subsets whose attempts can differ. When the first pod's shape is in the placer's failed memory
    (no node of this action's state fits it; an attempt inside a subset never adds to it), the search refuses that
    pod before anything else in every subset: each attempt fails at it with nothing placed, on the same state (a
    failed attempt is rolled back), so with the same failure. One attempt, on the last subset (the failure the loop
    would leave), stands for them all: a topology-bound gang whose shape fits nowhere tries one domain, not each."""
    if len(subsets) > 1 and tasks[0].fit_key in failed:
        return subsets[-1:]
    return subsets


def _with_choices(session: Session, stmt: Statement, job: Job, pipeline_only: bool,
                  choices: Callable[[Session, Job], Iterator[None] | None], tasks: list[Task] | None) -> bool:
    prior = session.outcomes.get(job.key)
    before = (prior.failure, len(prior.errors)) if prior is not None else (None, 0)
    if allocate_job(session, stmt, job, pipeline_only=pipeline_only, tasks=tasks):  # the job's own rule first
        return True
    others = choices(session, job)
    if others is None:
        return False
    out = session.outcome(job)
    first = (out.failure, len(out.errors))
    for _ in others:
        if allocate_job(session, stmt, job, pipeline_only=pipeline_only):
            out.failure = before[0]  # the failures of the other choices no longer apply
            del out.errors[before[1]:]
            return True
    out.failure = first[0]
    del out.errors[first[1]:]
    return False


def _attempt(session: Session, stmt: Statement, job: Job, tasks: list[Task], pipeline_only: bool) -> bool:
    gang = session.framework.gang
    # Needed only to explain a failure, on the state before this attempt: a single task fails before anything
    # changed, so its job's values are computed then.
    several = len(tasks) > 1
    if several:
        state = gang.attempt_state(job)
    checkpoint = stmt.checkpoint()
    for placed, task in enumerate(tasks):
        if not place_task(session, stmt, task, pipeline_only):
            if not several:
                state = gang.attempt_state(job)
            session.outcome(job).failure = gang.failure(job, task, state, placed, session.fit_summary(task))
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
        if not stmt.ops and not task.rec.constraints.pod_affinity and placer.subset is None:
            placer.failed.add(task.fit_key)
        return False
    if placement.pipeline or pipeline_only:
        stmt.pipeline(task, placement)
    else:
        stmt.allocate(task, placement)
    return True
