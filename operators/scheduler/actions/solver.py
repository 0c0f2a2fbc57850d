"""The victim solver shared by reclaim, preempt and consolidation (spec/algorithms.md 5.1).

For a pending job the solver walks the ordered victim chunks and grows a prefix one chunk at a time. For each
prefix it builds scenarios — for every node hosting the newest chunk, the prefix's chunks touching that node
(KAI's by-node scenarios, which keep victim sets small), then the whole prefix — and simulates each inside
the job's statement: evict the scenario, pipeline the job onto what is being released (and, for
consolidation, pipeline every victim pod onto another node). The first scenario that passes the action's
validator and places the whole gang is kept; anything else is rolled back, so nothing is evicted unless the
job then fits. Differences from KAI, on purpose: the job's tasks are solved together rather than one task
prefix at a time (the whole-prefix scenario covers gangs spread over several nodes), and reclaim/preempt
victims are not re-placed (allocate already ran, so a victim would rarely find room the job did not).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from operators.scheduler.actions.common import allocate_job
from operators.scheduler.actions.victims import VICTIM_STATUSES, Chunk
from operators.scheduler.model import Job, Task

if TYPE_CHECKING:
    from operators.scheduler.session import Session, Statement

_EPS = 1e-6
# Scenarios validated or simulated per job and action: a safety valve for huge clusters.
MAX_SIMULATIONS = 256
# Work one action may spend per cycle (victim chunks scanned + scenario sizes validated + 50 per simulation).
# Deterministic, so `kai simulate` stays reproducible; jobs not reached are tried again next cycle.
ACTION_WORK_BUDGET = 20_000

# Per-chunk reasons (aligned with the scenario) when the action accepts the scenario, None when it refuses.
Validator = Callable[[Sequence[Chunk]], "list[str] | None"]
# (victim pod, its chunk, reason or destination node) -> the Eviction message.
Describe = Callable[[Task, Chunk, str], str]


def cluster_free(session: Session) -> list[float]:
    """Idle plus releasing resources of schedulable nodes: (gpu, cpu, memory)."""
    g = c = m = 0.0
    for n in session.nodes:
        if not n.ok:
            continue
        g += n.idle_gpu + n.rel_gpu
        if n.groups:
            g += sum(gr.free for gr in n.groups.values() if not gr.fully_releasing)
        c += n.idle_cpu + n.rel_cpu
        m += n.idle_mem + n.rel_mem
    return [g, c, m]


def _short(request: Sequence[float], available: Sequence[float]) -> bool:
    return any(request[r] > available[r] + _EPS for r in range(3))


class Solver:
    def __init__(self, session: Session, action: str) -> None:
        self.session = session
        self.action = action
        cfg = session.config
        self.max_pods = cfg.max_evictions_per_job
        self.max_gpus = cfg.max_evicted_gpus_per_job
        self.work = ACTION_WORK_BUDGET
        self._free: list[float] | None = None

    def changed(self) -> None:
        """Call after committing a statement: cluster-wide free resources are recomputed on next use."""
        self._free = None

    @property
    def exhausted(self) -> bool:
        return self.work <= 0

    def within_cap(self, chunks: Sequence[Chunk]) -> bool:
        """The per-preemptor eviction cap (beyond KAI): pods and GPUs one job may evict in a cycle."""
        if self.max_pods >= 0 and sum(len(c.tasks) for c in chunks) > self.max_pods:
            return False
        if self.max_gpus >= 0:
            gpus = sum(c.vector(self.session)[0] for c in chunks)
            if gpus > self.max_gpus + _EPS:
                return False
        return True

    def solve(self, stmt: Statement, job: Job, tasks: Sequence[Task], chunks: Sequence[Chunk], *,
              describe: Describe, validate: Validator | None = None, move_victims: bool = False,
              max_victim_jobs: int | None = None) -> bool:
        """Find and apply (inside `stmt`) the first working scenario; False leaves `stmt` as it was.

        The job's recorded explanation (why allocate failed) is kept whatever the simulations tried.
        """
        session = self.session
        known = session.outcomes.get(job.key)
        saved = (list(known.errors), known.failure) if known is not None else None
        try:
            return self._solve(stmt, job, tasks, chunks, describe, validate, move_victims, max_victim_jobs)
        finally:
            if saved is None:
                session.outcomes.pop(job.key, None)
            else:
                out = session.outcome(job)
                out.errors, out.failure = saved

    def _solve(self, stmt: Statement, job: Job, tasks: Sequence[Task], chunks: Sequence[Chunk],
               describe: Describe, validate: Validator | None, move_victims: bool,
               max_victim_jobs: int | None) -> bool:
        session = self.session
        request = session.job_request(tasks)
        if self._free is None:
            self._free = cluster_free(session)
        free = self._free
        if move_victims and _short(request, free):
            return False  # moving pods around never frees capacity
        # A single pod lands on one node: only that node's scenario can work, and only if the node then has room.
        single = len(tasks) == 1
        freed = [0.0, 0.0, 0.0]
        on_node: dict[int, list[Chunk]] = {}
        freed_on: dict[int, list[float]] = {}
        tried: set[tuple[int, ...]] = set()
        budget = MAX_SIMULATIONS
        for k, newest in enumerate(chunks):
            self.work -= 1
            if self.work <= 0:
                return False
            if newest.job is job or newest.tasks[0].status not in VICTIM_STATUSES:
                continue  # never its own victim; or taken already (chunk lists are reused within an action)
            v = newest.vector(session)
            for r in range(3):
                freed[r] += v[r]
            nodes: set[int] = set()
            first = newest.tasks[0].node
            if all(t.node == first for t in newest.tasks):  # the common case: one node, use the chunk's total
                nodes.add(first)
                on_node.setdefault(first, []).append(newest)
                acc = freed_on.setdefault(first, [0.0, 0.0, 0.0])
                for r in range(3):
                    acc[r] += v[r]
            else:
                for t in newest.tasks:
                    if t.node not in nodes:
                        nodes.add(t.node)
                        on_node.setdefault(t.node, []).append(newest)
                    tv = session.task_vector(t)
                    acc = freed_on.setdefault(t.node, [0.0, 0.0, 0.0])
                    for r in range(3):
                        acc[r] += tv[r]
            if not move_victims and _short(request, [free[r] + freed[r] for r in range(3)]):
                continue
            scenarios: list[list[Chunk]] = []
            for n in sorted(nodes):
                if single:
                    node = session.nodes[n]
                    if not node.ok:
                        continue
                    room = [node.idle_gpu + node.rel_gpu + sum(g.free for g in node.groups.values()
                                                               if not g.fully_releasing),
                            node.idle_cpu + node.rel_cpu, node.idle_mem + node.rel_mem]
                    if not move_victims and _short(request, [room[r] + freed_on[n][r] for r in range(3)]):
                        continue
                scenarios.append([c for c in on_node[n] if c.tasks[0].status in VICTIM_STATUSES])
            if not single:
                scenarios.append([c for c in chunks[: k + 1]
                                  if c.job is not job and c.tasks[0].status in VICTIM_STATUSES])
            for scenario in scenarios:
                if budget <= 0:
                    return False
                key = tuple(id(c) for c in scenario)
                if key in tried:
                    continue
                tried.add(key)
                if max_victim_jobs is not None and len({id(c.job) for c in scenario}) > max_victim_jobs:
                    continue
                if not self.within_cap(scenario):
                    continue
                if not move_victims:
                    got = [free[r] + sum(c.vector(session)[r] for c in scenario) for r in range(3)]
                    if _short(request, got):
                        continue
                budget -= 1  # validations and simulations both count: keeps a job's search linear
                self.work -= len(scenario)
                reasons = validate(scenario) if validate is not None else [""] * len(scenario)
                if reasons is None:
                    continue
                self.work -= 50
                if self._simulate(stmt, job, scenario, reasons, describe, move_victims):
                    return True
        return False

    def _simulate(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], reasons: Sequence[str],
                  describe: Describe, move_victims: bool) -> bool:
        session = self.session
        start = stmt.checkpoint()
        for chunk, reason in zip(scenario, reasons, strict=True):
            for task in chunk.tasks:
                stmt.evict(task, self.action, job.key, describe(task, chunk, reason))
        if not move_victims:
            if allocate_job(session, stmt, job, pipeline_only=True):
                return True
            stmt.rollback(start)
            return False
        evicted = stmt.checkpoint()
        for preemptor_first in (True, False):
            if self._place_all(stmt, job, scenario, preemptor_first):
                owner = {id(t): c for c in scenario for t in c.tasks}
                for op in stmt.ops[start:evicted]:
                    op.message = describe(op.task, owner[id(op.task)], session.nodes[op.task.node].name)
                return True
            stmt.rollback(evicted)
        stmt.rollback(start)
        return False

    def _place_all(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], preemptor_first: bool) -> bool:
        def preemptor() -> bool:
            return allocate_job(self.session, stmt, job, pipeline_only=True)

        def victims() -> bool:
            return all(self._move(stmt, t) for c in scenario for t in c.tasks)

        steps = (preemptor, victims) if preemptor_first else (victims, preemptor)
        return all(step() for step in steps)

    def _move(self, stmt: Statement, task: Task) -> bool:
        """Pipeline an evicted pod onto another node (never back onto the one it is leaving)."""
        origin = self.session.nodes[task.node]
        saved = origin.n_pods
        origin.n_pods = origin.max_pods  # makes the origin node refuse the pod for this one search
        try:
            placement = self.session.placer.find(task)
        finally:
            origin.n_pods = saved
        if placement is None:
            return False
        stmt.pipeline(task, placement)
        return True
