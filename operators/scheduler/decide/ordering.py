"""Queue, job, podset and task order and the per-action job tree.

The tree mirrors the queue hierarchy; each pop descends from the roots always taking the best child by the
queue-order plugin's comparator (proportion's), fed with each subtree's representative (next) job. Comparator
facts are cached per queue and invalidated only along the path of the queue whose jobs or allocation changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter

from operators.scheduler.decide.model import Job, PodSet, QueueState, Task


def task_order_key(task: Task) -> tuple[object, ...]:
    """Ray head / Kubeflow master first, then task-priority label (labelled, higher first), age, UID."""
    rec = task.rec
    prio = rec.task_priority
    return (0 if rec.is_leader else 1, 0 if prio is not None else 1, -(prio or 0), rec.created, rec.uid)


def podset_order_key(ps: PodSet) -> tuple[object, ...]:
    if ps.active_allocated < ps.min_available:
        return (0, 0.0, ps.name)
    # A minimum of 0 (a leaf an elastic SubGroup tree does not need): every pod is above it.
    return (1, ps.active_allocated / ps.min_available if ps.min_available else float(ps.active_allocated), ps.name)


def job_order_key(job: Job) -> tuple[object, ...]:
    rec = job.rec
    podsets = job.podsets
    if len(podsets) == 1:  # Job.elastic_state() of one podset
        ps = podsets[0]
        have, need = ps.active_allocated, ps.min_available
        elastic = 0 if have < need else 1 if have == need else 2
    else:
        elastic = job.elastic_state()
    return (-job.priority, elastic, rec.created, rec.uid, rec.namespace, rec.name)


def age_order_key(job: Job) -> tuple[object, ...]:
    """The last job-order rule: older first, then UID, namespace and name."""
    rec = job.rec
    return (rec.created, rec.uid, rec.namespace, rec.name)


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


# Comparator facts of one queue, as a plain tuple (built on every pop, so no object overhead):
# (rules 1-4 as one lexicographic key, drf with the job, drf without it, allocatable share, created, uid). The
# queue-order plugin (proportion: `plugins/proportion/queueorder.py`) builds and compares them.
QueueFacts = tuple[tuple[bool, bool, int, bool], float, float, tuple[int, int, int], float, str]


TasksOf = Callable[[Job], list[Task]]  # the pods of a job's next attempt (the gang plugin's rule)
RequestOf = Callable[[list[Task]], Sequence[int]]  # what those pods ask, summed
# Per tree node: (facts, representative job, best child or None for a queue that holds the jobs itself).
_Eval = tuple[QueueFacts, Job, "QueueState | None"]


class JobTree:
    """Jobs of one action arranged by queue hierarchy; pop() gives the next job to try.

    Each tree node caches its facts, representative job and best child; a pop or push invalidates only the
    path of the queue it touched, so a pop re-evaluates one queue per level and compares cached siblings.
    """

    def __init__(self, jobs: Iterable[Job], tasks_of: TasksOf, request_of: RequestOf, depth: int | None = None, *,
                 job_key: Callable[[Job], tuple[object, ...]] = job_order_key,
                 facts: Callable[[QueueState, Sequence[int]], QueueFacts],
                 before: Callable[[QueueFacts, QueueFacts], bool]) -> None:
        self._tasks_of = tasks_of
        self._request_of = request_of
        self._job_key = job_key
        self._facts = facts
        self._before = before
        self._seq = itertools.count()
        # Keyed by QueueState identity. Each leaf's jobs as (key, seq, job) sorted descending: the next job is the
        # last entry, so a pop is O(1) (most jobs are popped once and not pushed back); a push inserts in order.
        # The order is a heap's on (key, seq).
        self._stacks: dict[QueueState, list[tuple[tuple[object, ...], int, Job]]] = {}
        self._count: dict[QueueState, int] = {}
        self._children: dict[QueueState, list[QueueState]] = {}
        self._eval: dict[QueueState, _Eval] = {}
        # (tasks, request) of each job's next attempt, by id(job); a job changes only between pop and push.
        self._requests: dict[int, tuple[list[Task], Sequence[int]]] = {}
        self._roots: list[QueueState] = []
        # The last pop's path (leaf first) with each queue's allocation then, and the popped job's request: the
        # next pop may repeat it without comparing any queue (`_repeat`). None after a push or an invalidate.
        # The allocations are copies of the queues' lists, compared as lists (no tuple built per check).
        self._last: tuple[list[tuple[QueueState, list[int]]], Sequence[int]] | None = None
        by_leaf: dict[str, list[Job]] = {}
        for job in jobs:
            assert job.queue is not None
            by_leaf.setdefault(job.queue.name, []).append(job)
        for _, leaf_jobs in sorted(by_leaf.items()):
            keyed = [(job_key(job), job) for job in leaf_jobs]
            keyed.sort(key=itemgetter(0))
            if depth is not None and depth >= 0:
                del keyed[depth:]  # keep the best `depth` jobs (KAI drops a fixed heap slot instead)
            if not keyed:
                continue
            q = keyed[0][1].queue
            assert q is not None
            self._link(q)
            # Same as pushing them one by one in this order (one leaf queue per name, so the list is new).
            entries = [(key, next(self._seq), job) for key, job in keyed]
            entries.reverse()
            self._stacks[q] = entries
            for node in q.lineage():
                self._count[node] = self._count.get(node, 0) + len(keyed)
            self.invalidate(q)

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
        self._last = None
        self._requests.pop(id(job), None)
        _insert_descending(self._stacks.setdefault(q, []), (self._job_key(job), next(self._seq), job))
        count = self._count
        node: QueueState | None = q
        while node is not None:
            count[node] = count.get(node, 0) + 1
            node = node.parent
        self.invalidate(q)

    def invalidate(self, q: QueueState | None) -> None:
        """Forget cached comparator facts on the path of q (its allocation or jobs changed)."""
        self._last = None
        cache = self._eval
        while q is not None:
            cache.pop(q, None)
            q = q.parent

    def _best(self, candidates: list[QueueState]) -> QueueState | None:
        """The first candidate with jobs that no later one beats (`before` strictly): the scan order decides ties."""
        best: QueueState | None = None
        best_facts: QueueFacts | None = None
        count, cache, before = self._count, self._eval, self._before
        for q in candidates:
            if not count.get(q):
                continue
            ev = cache.get(q)
            if ev is None:
                ev = self._evaluate(q)
            if best_facts is None or before(ev[0], best_facts):
                best, best_facts = q, ev[0]
        return best

    def _evaluate(self, q: QueueState) -> _Eval:
        stack = self._stacks.get(q)
        child: QueueState | None = None
        if stack:
            job = stack[-1][2]
        else:
            child = self._best(self._children[q])
            assert child is not None
            # _best left the child's facts in the cache.
            job = self._eval[child][1]
        key = id(job)
        requests = self._requests
        known = requests.get(key)
        if known is None:
            tasks = self._tasks_of(job)
            known = requests[key] = (tasks, self._request_of(tasks))
        out = self._eval[q] = (self._facts(q, known[1]), job, child)
        return out

    def attempt_tasks(self, job: Job) -> list[Task] | None:
        """The pods of the next attempt of `job`, as the tree computed them to order it (None: not computed).

        Exact for a job just popped, until it is changed (allocate changes only the job it popped, and pushes it
        back or drops it); an action that changes other jobs (evictions) must compute them itself.
        """
        known = self._requests.get(id(job))
        return known[0] if known is not None else None

    def _rep_job(self, q: QueueState) -> Job:
        ev = self._eval.get(q)
        return (ev if ev is not None else self._evaluate(q))[1]

    def _facts_of(self, q: QueueState) -> QueueFacts:
        ev = self._eval.get(q)
        return (ev if ev is not None else self._evaluate(q))[0]

    def pop(self) -> Job | None:
        last = self._last
        if last is not None:
            job = self._repeat(last[0], last[1])
            if job is not None:
                return job
            self._last = None
        q = self._best(self._roots)
        if q is None:
            return None
        stacks, cache = self._stacks, self._eval
        stack = stacks.get(q)
        while not stack:
            # The best child was found (and cached) while the parent's facts were computed.
            nxt = cache[q][2]
            assert nxt is not None
            q = nxt
            stack = stacks.get(q)
        job = stack.pop()[2]
        count = self._count
        path: list[tuple[QueueState, list[int]]] = []
        node: QueueState | None = q
        while node is not None:
            count[node] -= 1
            cache.pop(node, None)
            path.append((node, node.allocated[:]))
            node = node.parent
        self._last = (path, self._requests[id(job)][1])
        return job

    def _repeat(self, path: list[tuple[QueueState, list[int]]], request: Sequence[int]) -> Job | None:
        """The next job when the last pop provably repeats: None when a full pick is needed.

        The rule: a queue's facts are a function of its allocation and of the request of its representative job
        (every other input of `facts` is fixed for the session). When, since the last pop, nothing was pushed or
        invalidated, no queue on its path changed its allocation (a failed attempt rolls back to the same
        amounts), and the leaf's next job asks what the popped one asked, then every queue on that path has the
        facts it had, every other queue keeps its cached ones, and the same comparisons pick the same leaf. So
        its next job is popped without re-evaluating or comparing any queue: most pops of a cycle follow a
        failed attempt in the same queue, with a job of the same shape next.
        """
        leaf = path[0][0]
        stack = self._stacks.get(leaf)
        if not stack:
            return None
        job = stack[-1][2]
        requests = self._requests
        key = id(job)
        known = requests.get(key)
        if known is None:
            tasks = self._tasks_of(job)
            known = requests[key] = (tasks, self._request_of(tasks))
        if known[1] != request:
            return None
        for node, allocated in path:
            if node.allocated != allocated:
                return None
        stack.pop()
        count, cache = self._count, self._eval
        for node, _ in path:
            count[node] -= 1
            cache.pop(node, None)
        return job


def _insert_descending(stack: list[tuple[tuple[object, ...], int, Job]],
                       entry: tuple[tuple[object, ...], int, Job]) -> None:
    """Insert into a list sorted descending (entries are unique by their sequence number: jobs never compared)."""
    lo, hi = 0, len(stack)
    while lo < hi:
        mid = (lo + hi) // 2
        if stack[mid] > entry:
            lo = mid + 1
        else:
            hi = mid
    stack.insert(lo, entry)
