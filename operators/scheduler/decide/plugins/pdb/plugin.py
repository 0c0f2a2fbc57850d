"""pdb: victims that would take a PodDisruptionBudget below its minimum are tried last (Volcano's `pdb`).

Beyond KAI, with KAI-compatible defaults. Each search orders its victim chunks by the budgets
(`budget.order_by_budget`): within the budgets first, beyond them last. Disruptions this session already planned
(evictions of covered pods, moves included) are spent from `status.disruptionsAllowed`, so two preemptors in one
cycle share a budget. Going beyond a budget is allowed by default (as KAI, which ignores budgets); the Queue
annotation `kai.scheduler/pdb-violation: forbid` (the nearest queue up the victim's lineage that sets it) or the
plugin argument `violation: forbid` (the SchedulingShard) forbids it. The eviction message names the budget.

It also carries the live loop's refused evictions (`RefusedEviction`: a 429 from the Eviction API): a victim chunk
holding a refused pod is left out of every search while the refusal is remembered, and the job the eviction was
for is told why it waits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from operators.scheduler.decide import explain
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import PENDING, Job, QueueState, Task
from operators.scheduler.decide.plugins.pdb.budget import ALLOW, FORBID, SETTINGS, budget_note, order_by_budget
from operators.scheduler.decide.records import PdbRecord, RefusedEviction
from operators.scheduler.decide.session import Session

REASON_REFUSED = "EvictionRefused"


class Pdb(Plugin):
    name = "pdb"
    default_priority = 210
    argument_names = frozenset({"violation"})

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        value = arguments.get("violation")
        if value is not None and str(value).lower() not in SETTINGS:
            raise ValueError(f"pdb violation must be allow or forbid, got {value!r}")

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(arguments)
        self.default = str(self.arguments.get("violation") or ALLOW).lower()
        self.pdbs: list[PdbRecord] = []
        self.covered: dict[Task, list[int]] = {}
        self.spent: list[int] = []
        self.refused: dict[str, RefusedEviction] = {}
        self.refused_tasks: set[Task] = set()
        self._queue_setting: dict[QueueState, bool] = {}

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, victim_chunk_order=self, deallocate_event=self, allocate_event=self,
                     session_close=self)

    def on_session_open(self, session: Session) -> None:
        snapshot = session.snapshot
        self.pdbs = [p for p in snapshot.pdbs if p.selector is not None]
        self.spent = [0] * len(self.pdbs)
        by_namespace: dict[str, list[int]] = {}
        for i, p in enumerate(self.pdbs):
            by_namespace.setdefault(p.namespace, []).append(i)
        self.refused = {r.pod: r for r in snapshot.refused_evictions}
        if not self.pdbs and not self.refused:
            return  # nothing to look up per pod (the common case: the per-task loop costs ~30 ms at 50k pods)
        for job in session.jobs:
            indexes = by_namespace.get(job.namespace)
            for t in job.tasks:
                if indexes:
                    hit = [i for i in indexes if self.pdbs[i].covers(t.rec)]
                    if hit:
                        self.covered[t] = hit
                if t.rec.key in self.refused:
                    self.refused_tasks.add(t)

    def in_use(self, session: Session) -> bool:
        """Some pod is covered by a budget, or some eviction was refused lately."""
        return bool(self.covered) or bool(self.refused)

    # --- victims -------------------------------------------------------------------------------------

    def order_victims(self, session: Session, preemptor: Job, chunks: Sequence[Sequence[Task]],
                      action: str) -> list[int]:
        indexes = list(range(len(chunks)))
        if self.refused_tasks:
            refused = self.refused_tasks
            indexes = [i for i in indexes if refused.isdisjoint(chunks[i])]
        if not self.covered:
            return indexes
        budget = [max(p.disruptions_allowed - s, 0) for p, s in zip(self.pdbs, self.spent, strict=True)]
        return [indexes[i] for i in order_by_budget([chunks[i] for i in indexes], self.covered, budget,
                                                    self._may_break)]

    def _may_break(self, task: Task) -> bool:
        queue = task.job.queue if task.job is not None else None
        if queue is None:
            return self.default != FORBID
        verdict = self._queue_setting.get(queue)
        if verdict is None:
            setting = next((q.rec.pdb_violation for q in queue.lineage() if q.rec.pdb_violation in SETTINGS),
                           self.default)
            verdict = self._queue_setting[queue] = setting != FORBID
        return verdict

    def on_deallocate(self, session: Session, task: Task, kind: str) -> None:
        if kind == "evict":
            for k in self.covered.get(task, ()):
                self.spent[k] += 1

    def on_allocate(self, session: Session, task: Task, kind: str) -> None:
        if kind == "rollback":  # an eviction taken back
            for k in self.covered.get(task, ()):
                self.spent[k] -= 1

    # --- explanations --------------------------------------------------------------------------------

    def on_session_close(self, session: Session) -> None:
        if self.covered:
            self._name_budgets(session)
        jobs = {j.key: j for j in session.jobs}
        for r in sorted(self.refused.values(), key=lambda r: r.pod):
            job = jobs.get(r.for_pod_group)
            if job is not None and any(t.status == PENDING for t in job.tasks):
                message = (f"the eviction of {r.pod} was refused by the API server ({r.message}); the scheduler "
                           "plans without that pod for a while")
                session.outcome(job).errors.append(explain.JobError(REASON_REFUSED, (message,)))

    def _name_budgets(self, session: Session) -> None:
        by_key = {t.rec.key: hit for t, hit in self.covered.items()}
        evictions = session.decisions.evictions
        taken = [0] * len(self.pdbs)
        for i, e in enumerate(evictions):
            hit = by_key.get(f"{e.namespace}/{e.pod}")
            if not hit:
                continue
            for k in hit:
                taken[k] += 1
            broken = any(taken[k] > self.pdbs[k].disruptions_allowed for k in hit)
            note = budget_note([self.pdbs[k].key for k in hit], [self.pdbs[k].disruptions_allowed for k in hit],
                               broken)
            evictions[i] = replace(e, message=f"{e.message} {note}")


PLUGIN = Pdb
