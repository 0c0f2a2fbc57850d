"""Candidate lists of the actions: schedulable jobs and victim candidates."""

from __future__ import annotations

from operators.scheduler.decide.model import VICTIM_STATUSES, Job
from operators.scheduler.decide.session.accounting import Accounting


class Candidates(Accounting):
    """The jobs an action may try (schedulable) and the jobs that may lose pods (victim candidates)."""

    def schedulable_jobs(self) -> list[Job]:
        """Jobs allocate may try: leaf queue exists, pending pods, gang ready.

        A task becomes Pending again only when an operation on it is rolled back, so between actions the jobs
        with pending pods are a subset of those that had some at the first call: later calls filter that list.
        """
        source = self._pending_jobs if self._pending_jobs is not None else self.jobs
        leaf: list[Job] = []
        pending: list[Job] = []
        for j in source:
            for p in j.podsets:
                if p.pending:
                    break
            else:
                continue
            pending.append(j)
            q = j.queue
            if q is not None and not q.children:
                leaf.append(j)
        out = self.framework.gang.ready_jobs(leaf)
        self._pending_jobs = pending
        return out

    def victim_candidates(self) -> list[Job]:
        """Preemptible jobs in a known queue with a pod placed and Running/Bound/Binding (`can_be_victim`).

        Listed at session open; between actions a job only stops being a candidate (its pods get a victim status
        back only when an eviction is rolled back), so a call re-checks only the jobs whose tasks changed status
        or node since the last one.
        """
        touched = self._touched
        if touched:
            out: list[Job] = []
            for j in self._victims:
                if j in touched:
                    for t in j.tasks:
                        if t.node >= 0 and t.status in VICTIM_STATUSES:
                            break
                    else:
                        continue
                out.append(j)
            self._victims = out
            self.carrying.touched_jobs |= touched  # for the next session's open (persist.py)
            self._touched = set()
        return list(self._victims)
