"""gang: a job runs only with every podset at its minimum (minMember / sub-group minMember).

Owns the gang rules: readiness (enough live pods), the pods of the next attempt (the gang core, else one pod of
elastic growth), how a failed attempt is recorded and explained, and staleness (a running gang below its
minimum, evicted by stalegangeviction after the grace period).
"""

from __future__ import annotations

from collections.abc import Iterable

from operators.scheduler.decide import explain
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import SUCCEEDED, Job, Task
from operators.scheduler.decide.ordering import tasks_to_allocate
from operators.scheduler.decide.session import FailedAttempt


class Gang(Plugin):
    name = "gang"
    default_priority = 500
    required = True

    tasks_to_allocate = staticmethod(tasks_to_allocate)

    def hooks(self) -> Hooks:
        return Hooks(gang=self)

    @staticmethod
    def job_ready(job: Job) -> bool:
        return all(p.alive - p.gated >= p.min_available for p in job.podsets)

    @staticmethod
    def ready_jobs(jobs: Iterable[Job]) -> list[Job]:
        """job_ready() over a list, as plain loops: every action asks it of every pending job."""
        out: list[Job] = []
        for job in jobs:
            for p in job.podsets:
                if p.alive - p.gated < p.min_available:
                    break
            else:
                out.append(job)
        return out

    @staticmethod
    def not_ready_message(job: Job) -> str:
        unready = [(p.name, p.min_available, p.alive, p.gated) for p in job.podsets
                   if p.alive - p.gated < p.min_available]
        return explain.not_ready_message(unready, job.has_subgroups)

    @staticmethod
    def attempt_state(job: Job) -> tuple[bool, int]:
        below = False
        found = 0
        for p in job.podsets:  # one pass, no generators: called for every gang attempt
            if p.active_allocated < p.min_available:
                below = True
            found += p.active_allocated
        return below and job.min_total > 1, found

    @staticmethod
    def failure(job: Job, task: Task, state: tuple[bool, int], placed: int, summary: str) -> FailedAttempt:
        assert task.podset is not None
        gang, found_before = state
        subgroup = task.podset.name if gang and job.has_subgroups else None
        required = task.podset.min_available if subgroup is not None else job.min_total
        return FailedAttempt(task, found_before + placed, required, subgroup, gang, summary)

    @staticmethod
    def failure_message(failure: FailedAttempt) -> str:
        t = failure.task
        if failure.subgroup is not None:
            return explain.subgroup_gang_not_found(failure.found, failure.subgroup, failure.required,
                                                   failure.summary)
        if failure.gang:
            return explain.gang_not_found(failure.found, failure.required, failure.summary)
        return explain.pod_not_found(t.namespace, t.name, failure.summary)

    @staticmethod
    def is_stale(job: Job) -> bool:
        if any(t.status == SUCCEEDED for t in job.tasks):
            return False
        return any(p.active_used for p in job.podsets) and any(
            p.active_used < p.min_available for p in job.podsets)

    @staticmethod
    def stale_jobs(jobs: Iterable[Job]) -> set[Job]:
        """is_stale() over a list, one pass over the podsets per job (session close asks it of every job)."""
        out: set[Job] = set()
        for job in jobs:
            below = active = False
            for p in job.podsets:
                if p.active_used < p.min_available:
                    below = True
                if p.active_used:
                    active = True
            if below and active and not any(t.status == SUCCEEDED for t in job.tasks):
                out.add(job)
        return out

    @staticmethod
    def stale_message(job: Job) -> str:
        active = sum(p.active_used for p in job.podsets)
        unmet = [(p.name, p.min_available, p.active_used) for p in job.podsets
                 if p.active_used < p.min_available and job.has_subgroups]
        return explain.stale_message(active, job.min_total, unmet)


PLUGIN = Gang
