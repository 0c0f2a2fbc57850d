"""priority: jobs of higher priority (PriorityClass value) are tried first within a queue."""

from __future__ import annotations

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job


class Priority(Plugin):
    name = "priority"
    default_priority = 700

    def hooks(self) -> Hooks:
        return Hooks(job_order=self)

    def job_order_key(self, job: Job) -> tuple[object, ...]:
        return (-job.priority,)


PLUGIN = Priority
