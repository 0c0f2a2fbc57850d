"""fewergangs (an extension beyond KAI, off by default): a victim-order tie-break by the pods a job's eviction moves.

Between victim jobs of the same priority and elastic state, the job with fewer alive pods is evicted first, and
age (KAI's newest-first) decides only after it. Equally good victims then break fewer gangs and move fewer pods:
a single-pod job goes before a newer gang of the same priority. Off by default because it changes which victim KAI
would take; enable it in the SchedulingShard's `plugins` map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import ALIVE, Job

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


class FewerGangs(Plugin):
    name = "fewergangs"
    default_priority = 640  # after gpujoborder: a GPU tie-break, when both are on, decides first
    default_enabled = False

    def hooks(self) -> Hooks:
        return Hooks(victim_order=self)

    def victim_order_key(self, session: Session, job: Job) -> tuple[object, ...]:
        return (sum(1 for t in job.tasks if t.status in ALIVE),)


PLUGIN = FewerGangs
