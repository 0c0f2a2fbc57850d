"""searchbackoff (KAI v0.18's failed-search back-off, opt-in through `scenarioSearchBudgets`): a job whose search
failed in an evicting action is not tried by that action again until its back-off ends (see
`decide.searchbackoff` for the schedule and what clears it). KAI keeps this in its scheduler cache rather than
in a plugin; here the gate is a plugin so the other actions' job order pays nothing when no back-off is set."""

from __future__ import annotations

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job
from operators.scheduler.decide.searchbackoff import ACTIONS, blocked, job_key
from operators.scheduler.decide.session import Session


class SearchBackoff(Plugin):
    name = "searchbackoff"
    default_priority = 440

    def hooks(self) -> Hooks:
        return Hooks(job_gate=self, scope=self)

    @staticmethod
    def in_use(session: Session) -> bool:
        return bool(session.snapshot.search_backoff)

    @staticmethod
    def may_try(session: Session, job: Job, action: str) -> bool:
        if action not in ACTIONS:
            return True
        rec = job.rec
        return not blocked(session.snapshot.search_backoff, action, job_key(rec.namespace, rec.name, rec.uid),
                           session.now)


PLUGIN = SearchBackoff
