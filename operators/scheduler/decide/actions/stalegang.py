"""stalegangeviction: a gang that lost members below its minimum is evicted whole after a grace period.

Stale: no Succeeded pod, at least one active pod, and some podset with fewer active pods than its minimum.
The session stamps `kai.scheduler/stale-podgroup-timestamp` when it first sees a job stale and clears it when
the job recovers (`Session.close`); once `now - stamp >= stale_grace_period` (negative: never) every
pod of the job that holds a placement is evicted, with a `StaleJob` event on the PodGroup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.decide.actions.victims import stale_eviction_message
from operators.scheduler.decide.decisions import StaleJob
from operators.scheduler.decide.model import VICTIM_STATUSES
from operators.scheduler.decide.records import parse_time

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


class StaleGangEviction:
    name = "stalegangeviction"
    enabled = True

    def execute(self, session: Session) -> None:
        grace = session.config.stale_grace_period
        if grace < 0:
            return
        gang = session.framework.gang
        for job in session.jobs:
            since = parse_time(job.rec.stale_since)
            if not since or session.now - since < grace or not gang.is_stale(job):
                continue
            # Pods this cycle only decided on (allocated / pipelined) have no placement to take back.
            victims = [t for t in job.tasks if t.status in VICTIM_STATUSES and t.node >= 0]
            active = sum(p.active_used for p in job.podsets)
            session.decisions.stale.append(StaleJob(job.namespace, job.name, gang.stale_message(job)))
            if not victims:
                continue
            stmt = session.statement()
            for task in victims:
                stmt.evict(task, self.name, "",
                           stale_eviction_message(task, job, active, since, session.now, grace))
            stmt.commit()
