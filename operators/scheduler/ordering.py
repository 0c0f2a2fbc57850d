"""Queue, job, podset and task order (spec/algorithms.md section 3) and the per-action job tree.

The tree mirrors the queue hierarchy; each pop descends from the roots always taking the best child by the
proportion comparator, fed with each subtree's representative (next) job. Comparator facts are cached per
queue and invalidated only along the path of the queue whose jobs or allocation changed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from operators.scheduler.fairshare import UNLIMITED
from operators.scheduler.model import Job, PodSet, QueueState, Task

_EPS = 1e-9


def task_order_key(task: Task) -> tuple[object, ...]:
    """Ray head / Kubeflow master first, then task-priority label (labelled, higher first), age, UID."""
    rec = task.rec
    prio = rec.task_priority
    return (0 if rec.is_leader else 1, 0 if prio is not None else 1, -(prio or 0), rec.created, rec.uid)


def podset_order_key(ps: PodSet) -> tuple[object, ...]:
    if ps.active_allocated < ps.min_available:
        return (0, 0.0, ps.name)
    return (1, ps.active_allocated / ps.min_available, ps.name)


def job_order_key(job: Job) -> tuple[object, ...]:
    return (-job.priority, job.elastic_state(), job.rec.created, job.rec.uid, job.rec.namespace, job.rec.name)


def tasks_to_allocate(job: Job) -> list[Task]:
    """The gang core (every podset below minimum brought up to it), else one pod for elastic growth."""
    if len(job.podsets) == 1:
        ps = job.podsets[0]
        missing = ps.min_available - ps.active_allocated
        return ps.pending[:missing] if missing > 0 else ps.pending[:1]
    podsets = sorted((p for p in job.podsets if p.pending), key=podset_order_key)
    below = [p for p in podsets if p.active_allocated < p.min_available]
    if below:
        out: list[Task] = []
        for ps in below:
            out.extend(ps.pending[: ps.min_available - ps.active_allocated])
        return out
    return [podsets[0].pending[0]] if podsets else []


@dataclass(slots=True)
class QueueFacts:
    over_utilised: bool
    starved: bool
    priority: int
    zero_penalty: bool
    drf_with: float
    drf_without: float
    alloc_share: tuple[float, float, float]
    created: float
    uid: str


def _drf(x0: float, x1: float, x2: float, s0: float, s1: float, s2: float) -> float:
    # dominant_share() unrolled for the hot path.
    v0 = x0 / s0 if s0 > 0 else x0 * 1000.0
    v1 = x1 / s1 if s1 > 0 else x1 * 1000.0
    v2 = x2 / s2 if s2 > 0 else x2 * 1000.0
    return max(v0, v1, v2, 0.0)


def queue_facts(q: QueueState, request: Sequence[float]) -> QueueFacts:
    # Unrolled over the three resources (gpu, cpu, memory): this runs on every pop of every action.
    a0, a1, a2 = q.allocated
    f0, f1, f2 = q.fair_share
    s0, s1, s2 = q.alloc_share
    d0, d1, d2 = q.rec.quota
    w0, w1, w2 = a0 + request[0], a1 + request[1], a2 + request[2]
    return QueueFacts(
        over_utilised=f0 < a0 - _EPS and f1 < a1 - _EPS and f2 < a2 - _EPS,
        starved=((d0 == UNLIMITED or w0 <= d0 + _EPS) and (d1 == UNLIMITED or w1 <= d1 + _EPS)
                 and (d2 == UNLIMITED or w2 <= d2 + _EPS)),
        priority=q.rec.priority,
        zero_penalty=(s0 <= 0 and w0 > _EPS) or (s1 <= 0 and w1 > _EPS) or (s2 <= 0 and w2 > _EPS),
        drf_with=_drf(w0, w1, w2, s0, s1, s2),
        drf_without=_drf(a0, a1, a2, s0, s1, s2),
        alloc_share=q.alloc_share,
        created=q.rec.created,
        uid=q.rec.uid or q.rec.name,
    )


def queue_before(a: QueueFacts, b: QueueFacts) -> bool:
    """True when queue `a` should be served before `b` (first decisive rule wins)."""
    if a.over_utilised != b.over_utilised:
        return not a.over_utilised
    if a.starved != b.starved:
        return a.starved
    if a.priority != b.priority:
        return a.priority > b.priority
    if a.zero_penalty != b.zero_penalty:
        return not a.zero_penalty
    if abs(a.drf_with - b.drf_with) > _EPS:
        return a.drf_with < b.drf_with
    if abs(a.drf_without - b.drf_without) > _EPS:
        return a.drf_without < b.drf_without
    le = all(x <= y for x, y in zip(a.alloc_share, b.alloc_share, strict=True))
    ge = all(x >= y for x, y in zip(a.alloc_share, b.alloc_share, strict=True))
    if le != ge:
        return le
    return (a.created, a.uid) < (b.created, b.uid)


RequestOf = Callable[[Job], Sequence[float]]


class JobTree:
    """Jobs of one action arranged by queue hierarchy; pop() gives the next job to try."""

    def __init__(self, jobs: Iterable[Job], request_of: RequestOf, depth: int | None = None) -> None:
        self._request_of = request_of
        self._seq = itertools.count()
        # Keyed by QueueState identity.
        self._heaps: dict[QueueState, list[tuple[tuple[object, ...], int, Job]]] = {}
        self._count: dict[QueueState, int] = {}
        self._children: dict[QueueState, list[QueueState]] = {}
        self._facts: dict[QueueState, QueueFacts] = {}
        self._rep: dict[QueueState, Job] = {}
        self._requests: dict[int, Sequence[float]] = {}  # by id(job); a job changes only between pop and push
        self._roots: list[QueueState] = []
        by_leaf: dict[str, list[Job]] = {}
        for job in jobs:
            assert job.queue is not None
            by_leaf.setdefault(job.queue.name, []).append(job)
        for _, leaf_jobs in sorted(by_leaf.items()):
            leaf_jobs.sort(key=job_order_key)
            if depth is not None and depth >= 0:
                del leaf_jobs[depth:]  # keep the best `depth` jobs (KAI drops a fixed heap slot instead)
            for job in leaf_jobs:
                self.push(job)

    def _link(self, q: QueueState) -> None:
        """Register q (and its ancestors) as tree nodes."""
        child: QueueState | None = q
        while child is not None:
            parent = child.parent
            siblings = self._children.setdefault(parent, []) if parent else self._roots
            if child in siblings:
                break
            siblings.append(child)
            child = parent

    def push(self, job: Job) -> None:
        q = job.queue
        assert q is not None
        self._link(q)
        self._requests.pop(id(job), None)
        heapq.heappush(self._heaps.setdefault(q, []), (job_order_key(job), next(self._seq), job))
        for node in q.lineage():
            self._count[node] = self._count.get(node, 0) + 1
        self.invalidate(q)

    def invalidate(self, q: QueueState | None) -> None:
        """Forget cached comparator facts on the path of q (its allocation or jobs changed)."""
        while q is not None:
            self._facts.pop(q, None)
            self._rep.pop(q, None)
            q = q.parent

    def _best(self, candidates: list[QueueState]) -> QueueState | None:
        best: QueueState | None = None
        best_facts: QueueFacts | None = None
        for q in candidates:
            if not self._count.get(q):
                continue
            facts = self._facts_of(q)
            if best_facts is None or queue_before(facts, best_facts):
                best, best_facts = q, facts
        return best

    def _rep_job(self, q: QueueState) -> Job:
        job = self._rep.get(q)
        if job is None:
            heap = self._heaps.get(q)
            if heap:
                job = heap[0][2]
            else:
                child = self._best(self._children.get(q, []))
                assert child is not None
                job = self._rep_job(child)
            self._rep[q] = job
        return job

    def _facts_of(self, q: QueueState) -> QueueFacts:
        facts = self._facts.get(q)
        if facts is None:
            job = self._rep_job(q)
            request = self._requests.get(id(job))
            if request is None:
                request = self._requests[id(job)] = self._request_of(job)
            facts = queue_facts(q, request)
            self._facts[q] = facts
        return facts

    def pop(self) -> Job | None:
        q = self._best(self._roots)
        if q is None:
            return None
        while not self._heaps.get(q):
            nxt = self._best(self._children.get(q, []))
            assert nxt is not None
            q = nxt
        _, _, job = heapq.heappop(self._heaps[q])
        for node in q.lineage():
            self._count[node] -= 1
        self.invalidate(q)
        return job
