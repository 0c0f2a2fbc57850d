"""elastic: among jobs of equal priority, a job below its minimum goes before one at it, before one above it
(elastic growth comes last); the same state ranks victims."""

from __future__ import annotations

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job


class Elastic(Plugin):
    name = "elastic"
    default_priority = 600

    def hooks(self) -> Hooks:
        return Hooks(job_order=self, elastic=self)

    def elastic_state(self, job: Job) -> int:
        return job.elastic_state()

    def job_order_key(self, job: Job) -> tuple[object, ...]:
        return (job.elastic_state(),)


PLUGIN = Elastic
