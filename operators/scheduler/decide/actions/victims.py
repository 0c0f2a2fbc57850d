"""Who may be evicted, in which order, and how an eviction is explained.

A victim *chunk* is the unit the solver adds to a scenario: one pod of an elastic job above its minimum, or
the job's remaining pods (its gang core) as a whole. Only pods whose placement already exists in the cluster
(Running, Bound, Binding) are victims; pods this cycle merely decided on are not.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, overload

from operators.core import keys
from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.model import VICTIM_STATUSES, Chunk, Job, QueueState, Task
from operators.scheduler.decide.ordering import podset_order_key
from operators.scheduler.decide.records import parse_time
from operators.scheduler.decide.units import AXES, WHOLE, as_vector

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

_SEMI = keys.SEMI_PREEMPTIBLE


def live_tasks(job: Job) -> list[Task]:
    return [t for t in job.tasks if t.status in VICTIM_STATUSES and t.node >= 0]


def can_be_victim(job: Job) -> bool:
    """Preemptible, in a known queue, with something running: non-preemptible work is never a victim.
    (`Session.victim_candidates()` lists the session's jobs passing this test.)"""
    return job.preemptible and job.queue is not None and any(
        t.status in VICTIM_STATUSES and t.node >= 0 for t in job.tasks)


def releasable(session: Session, candidates: Iterable[Job]) -> dict[QueueState, list[int]]:
    """Per queue, what all candidate victims below it hold: the most any scenario could free under its limit.

    Limits are checked on a scenario's state after its victims left, so a job over a limit can still succeed
    when victims in that queue's subtree make room; a job whose request exceeds even this bound cannot.
    """
    # Summed per job queue first, then each sum added along that queue's lineage once: the same totals, with
    # one lineage walk per queue instead of one per candidate (tens of thousands at 5,000 nodes).
    per_queue: dict[QueueState, list[int]] = {}
    for job in candidates:
        queue = job.queue
        if queue is None:
            continue
        v0, v1, v2 = session.job_request(live_tasks(job))
        acc = per_queue.get(queue)
        if acc is None:
            per_queue[queue] = [v0, v1, v2]
        else:
            acc[0] += v0
            acc[1] += v1
            acc[2] += v2
    out: dict[QueueState, list[int]] = {}
    for queue, (gpu, cpu, mem) in per_queue.items():
        for q in queue.lineage():
            acc = out.get(q)
            if acc is None:
                out[q] = [gpu, cpu, mem]
            else:
                acc[0] += gpu
                acc[1] += cpu
                acc[2] += mem
    return out


def victim_chunks(job: Job, protected: bool, whole: bool = False) -> list[Chunk]:
    """Pods above minMember one at a time (last podset, reverse task order), then the core as one chunk.

    The task order is the session's (the task-order extension point): a job's tasks are kept in it from session
    open, so the pods a job loses first are the ones its allocation order places last. A leaf SubGroup the job's
    SubGroup tree does not need (its minimum lowered to 0 at session open) is at its own minMember or empty: it
    gives up the pods above its minMember one at a time, then the rest of its pods as one chunk.
    A min-runtime protected job offers only its pods above minMember; `whole` makes one chunk of everything.
    """
    live = [t for t in job.tasks if t.status in VICTIM_STATUSES and t.node >= 0]  # live_tasks(), inlined (hot)
    if not live:
        return []
    if whole:
        return [] if protected else [Chunk(job, live, True)]
    for ps in job.podsets:
        if ps.active_allocated > max(ps.min_available, ps.core):
            break
    else:  # no podset above its minimum: no elastic pods, only the core
        return [] if protected else [Chunk(job, live, True)]
    own_min = {s.name: max(s.min_member, 0) for s in job.rec.subgroups} if job.has_subgroups else {}
    extras: list[Task] = []
    leaves: list[list[Task]] = []
    for ps in sorted(job.podsets, key=podset_order_key, reverse=True):
        surplus = ps.active_allocated - max(ps.min_available, ps.core)
        if surplus <= 0:
            continue
        mine = [t for t in reversed(live) if t.podset is ps]  # reverse task order
        own = own_min.get(ps.name, ps.min_available)
        if own > ps.min_available:  # a leaf the tree does not need
            singles = max(0, ps.active_allocated - own)
            extras.extend(mine[:singles])
            if mine[singles:surplus]:
                leaves.append(mine[singles:surplus])
        else:
            extras.extend(mine[:surplus])
    chunks = [Chunk(job, [t], False) for t in extras]
    chunks += [Chunk(job, tasks, False) for tasks in leaves]
    taken = {*extras, *(t for tasks in leaves for t in tasks)}
    rest = [t for t in live if t not in taken]
    if rest and not protected:
        chunks.append(Chunk(job, rest, True))
    return chunks


def _within_queue_key(chunk: Chunk, index: int, tie: tuple[object, ...] = ()) -> tuple[object, ...]:
    # Lowest priority first, elastic pods above minimum before cores, then the victim-order plugins' tie-break
    # (`tie`), newest job first.
    rec = chunk.job.rec
    return (chunk.job.priority, 1 if chunk.core else 0, tie, -rec.created, rec.namespace, rec.name, index)


def _victim_ties(session: Session | None, chunks: Sequence[Chunk]) -> list[tuple[object, ...]]:
    """Per chunk, the victim-order plugins' keys of its job (empty without such plugins)."""
    providers = session.framework.victim_order_keys if session is not None else []
    if not providers:
        return [()] * len(chunks)
    assert session is not None
    memo: dict[int, tuple[object, ...]] = {}
    out = []
    for c in chunks:
        tie = memo.get(id(c.job))
        if tie is None:
            tie = memo[id(c.job)] = tuple(p(session, c.job) for p in providers)
        out.append(tie)
    return out


def order_chunks(session: Session, chunks: Iterable[Chunk]) -> list[Chunk]:
    """Victim order (5.4): take next from the queue most over its share once the victims already taken from
    it are discounted (so victims spread over over-served queues); inside a queue lowest priority first.
    Queues of lower priority are taken from first."""
    by_queue: dict[QueueState, list[tuple[tuple[object, ...], Chunk]]] = {}
    chunks = list(chunks)
    for i, (chunk, tie) in enumerate(zip(chunks, _victim_ties(session, chunks), strict=True)):
        assert chunk.job.queue is not None
        by_queue.setdefault(chunk.job.queue, []).append((_within_queue_key(chunk, i, tie), chunk))
    for items in by_queue.values():
        items.sort(key=lambda kc: kc[0], reverse=True)  # consumed with pop() from the end
    if len(by_queue) == 1:
        [items] = by_queue.values()
        return [c for _, c in reversed(items)]
    taken: dict[QueueState, list[int]] = {q: [0, 0, 0] for q in by_queue}
    heap = [(q.rec.priority, -_over_ratio(q.allocated, q.alloc_share, taken[q]), q.name, q) for q in by_queue]
    heapq.heapify(heap)
    out: list[Chunk] = []
    while heap:
        _, _, _, q = heapq.heappop(heap)
        items = by_queue[q]
        _, chunk = items.pop()
        out.append(chunk)
        v = chunk.vector(session)
        for r in AXES:
            taken[q][r] += v[r]
        if items:
            heapq.heappush(heap, (q.rec.priority, -_over_ratio(q.allocated, q.alloc_share, taken[q]), q.name, q))
    return out


def _over_ratio(allocated: Sequence[int], alloc_share: Sequence[int], taken: Sequence[int]) -> float:
    best = 0.0
    for r in AXES:
        alloc = allocated[r] - taken[r]
        share = alloc_share[r]
        ratio = alloc / share if share > 0 else alloc / WHOLE[r] * 1000.0
        if ratio > best:  # max(best, ratio) as max() evaluates it, without the call
            best = ratio
    return best


def _keyed(chunks: Iterable[Chunk], session: Session | None) -> list[tuple[tuple[object, ...], Chunk]]:
    """(within-queue key, chunk) pairs; the keys end with the chunk's index, so they are unique and the pairs
    order by key alone."""
    chunks = list(chunks)
    return [(_within_queue_key(c, i, tie), c)
            for i, (c, tie) in enumerate(zip(chunks, _victim_ties(session, chunks), strict=True))]


def within_queue_order(chunks: Iterable[Chunk], session: Session | None = None) -> list[Chunk]:
    """One queue's chunks in the order order_chunks() takes them from that queue."""
    keyed = _keyed(chunks, session)
    keyed.sort()
    return [c for _, c in keyed]


class VictimLists:
    """One action's victim chunks, made when a search first reaches a job, and the lazy per-queue orders over them.

    A queue's order (`JobOrder`) keys its jobs, not their chunks: a job's chunks are made only when the order is
    read that far (most candidates are never reached). That is exact because a job's chunks depend only on its
    own pods, which change only when a statement of the action commits. So each job's chunks on the committed
    state are kept here (`chunks`), and `committing` is called with the jobs a statement touched before the
    statement commits: an order not yet past such a job keeps the chunks it would have made when it was built
    (the job's chunks before the commit, which every touched job has: its chunks were read by the search, or it
    is the job being placed, `prepare`d before the search), and the job's chunks are made again on the new state.
    Orders are read only between simulations (a failed simulation is rolled back before the next chunk is read).
    """

    __slots__ = ("_made", "_orders", "session")

    def __init__(self, session: Session, made: dict[int, list[Chunk]] | None = None) -> None:
        self.session = session
        # id(job) -> victim_chunks(job, False) on the committed state (`made`: an earlier action's, taken over
        # with its orders while no commit came between, `OrderHandover`)
        self._made: dict[int, list[Chunk]] = {} if made is None else made
        self._orders: list[JobOrder] = []

    def chunks(self, job: Job) -> list[Chunk]:
        return _made_chunks(self._made, job)

    def prepare(self, job: Job) -> None:
        """Before a search for `job`: its own chunks (it may be another queue's candidate) on the state before it."""
        self.chunks(job)

    def committing(self, jobs: Iterable[Job]) -> None:
        """Before a statement touching `jobs` commits (its changes are applied already)."""
        for job in jobs:
            before = self._made.get(id(job))
            if before is None:  # no order was read (the search's victims came from elsewhere)
                assert not self._orders, "a touched job's chunks were made before the search changed it"
                continue
            for order in self._orders:
                order.fix(job, before)
            self._made[id(job)] = victim_chunks(job, False)

    def order(self, jobs: Iterable[Job], runtime: float, drop_protected: bool) -> JobOrder:
        """within_queue_order() of one queue's chunks of `jobs` (in candidate order): victim_chunks(job,
        protected(session, job, runtime)) for each, or, with `drop_protected`, victim_chunks(job, False) of the
        unprotected jobs only."""
        out = JobOrder(self, jobs, runtime, drop_protected)
        self._orders.append(out)
        return out


def _made_chunks(made: dict[int, list[Chunk]], job: Job) -> list[Chunk]:
    """victim_chunks(job, False) on the committed state, made once (`VictimLists`)."""
    out = made.get(id(job))
    if out is None:
        out = made[id(job)] = victim_chunks(job, False)
    return out


class JobOrder(Sequence[Chunk]):
    """within_queue_order() of one queue's victim chunks, made and ordered only as far as it is read.

    The within-queue key of a chunk is (priority, core, tie, -created, namespace, name, index) and a job's
    (namespace, name) is unique, so a job's elastic chunks are consecutive in the order (in their list order):
    a heap of one entry per job and part (its elastic chunks 0, its core 1) gives the same order. A job is entered
    at its elastic part when its podsets' counters show a surplus, else at its core (a candidate has live pods
    while no commit of the action touched it, and one that was touched has its chunks made already); its chunks
    are made when its first entry is popped, and its core entered then (a larger key than the one popped, so
    the pops stay in order). The length is known only once the order is read to its end (`has` asks for one
    index). `runtime` is the protection of the queue's jobs; `protected()` is evaluated for every job when the
    order is built, as the eager lists did (it records min-runtime deadlines). A protected job keeps its
    elastic chunks only (or none, with `drop_protected`).
    """

    # Holds the lists' `_made`, not the lists: they hold their orders, and a reference cycle through the session
    # would leave the whole session to the cyclic collector instead of freeing it when the cycle ends.
    __slots__ = ("_done", "_fixed", "_heap", "_made", "_protected", "any_protected")

    def __init__(self, lists: VictimLists, jobs: Iterable[Job], runtime: float, drop_protected: bool) -> None:
        session = lists.session
        providers = session.framework.victim_order_keys
        made = lists._made
        fixed: dict[int, list[Chunk]] = {}
        shielded: set[int] = set()
        heap: list[tuple[object, ...]] = []
        any_protected = False
        # protected() without the call when it reads only the job's preemptibility: with no min-runtime
        # (`runtime <= 0`, the common case) a job is protected exactly when it is semi-preemptible.
        timed = not runtime <= 0
        for i, job in enumerate(jobs):
            prot = protected(session, job, runtime) if timed else job.rec.preemptibility == _SEMI
            if prot:
                any_protected = True
                if drop_protected:
                    continue
            chunks = made.get(id(job))
            if chunks is None:
                part = 0
                for ps in job.podsets:  # some podset above its minimum: elastic chunks (victim_chunks' test)
                    least, core = ps.min_available, ps.core  # above both: max() written as a comparison
                    if ps.active_allocated > (least if least >= core else core):
                        break
                else:
                    if prot:
                        continue  # one core chunk, protected
                    part = 1
            else:
                fixed[id(job)] = chunks  # as of now, whatever a later commit does to the job
                if chunks and not chunks[0].core:
                    part = 0
                elif chunks and not prot:
                    part = 1
                else:
                    continue
            if prot:
                shielded.add(id(job))
            rec = job.rec
            tie = tuple(p(session, job) for p in providers) if providers else ()
            heap.append((job.priority, part, tie, -rec.created, rec.namespace, rec.name, i, job))
        heapq.heapify(heap)
        self._made = made
        self._heap = heap
        self._fixed = fixed
        self._protected = shielded
        self._done: list[Chunk] = []
        # No job of the order was protected: it is the same order with or without `drop_protected`.
        self.any_protected = any_protected

    def fix(self, job: Job, chunks: list[Chunk]) -> None:
        """`job`'s chunks for this order are `chunks` unless it has read them already."""
        self._fixed.setdefault(id(job), chunks)

    def has(self, index: int) -> bool:
        """Whether the order has a chunk at `index` (>= 0), read as far as that."""
        done, heap, fixed = self._done, self._heap, self._fixed
        while len(done) <= index:
            if not heap:
                return False
            entry = heapq.heappop(heap)
            job = entry[-1]
            assert isinstance(job, Job)
            chunks = fixed.get(id(job))
            if chunks is None:
                chunks = fixed[id(job)] = _made_chunks(self._made, job)
            if not chunks:
                continue
            if entry[1] == 1:
                done.append(chunks[-1])
                continue
            core = chunks[-1].core
            done.extend(chunks[:-1] if core else chunks)
            if core and id(job) not in self._protected:
                heapq.heappush(heap, (*entry[:1], 1, *entry[2:]))
        return True

    def __len__(self) -> int:
        while self.has(len(self._done)):
            pass
        return len(self._done)

    @overload
    def __getitem__(self, index: int) -> Chunk: ...

    @overload
    def __getitem__(self, index: slice) -> list[Chunk]: ...

    def __getitem__(self, index: int | slice) -> Chunk | list[Chunk]:
        if isinstance(index, slice):
            start, stop, step = index.start or 0, index.stop, index.step or 1
            if stop is not None and start >= 0 and stop >= 0 and step > 0:
                self.has(stop - 1)  # read as far as the slice goes
                return self._done[index]
            return list(self)[index]
        if index < 0:
            return list(self)[index]
        if not self.has(index):
            raise IndexError(index)
        return self._done[index]

    def __iter__(self) -> Iterator[Chunk]:
        i = 0
        while self.has(i):
            yield self._done[i]
            i += 1


def _has(chunks: Sequence[Chunk], index: int) -> bool:
    """Whether `chunks` has an item at `index`, without the length of a lazy order."""
    return chunks.has(index) if isinstance(chunks, JobOrder) else index < len(chunks)


class MergedVictims:
    """order_chunks() of several queues' chunks (each list already in within_queue_order()), merged lazily.

    The merge uses the queue allocations of the moment the object is created, as order_chunks() would have
    done then; chunks are produced as a search walks further, so a search that stops early pays only for the
    prefix it saw. Iterable any number of times (each pass starts from the first chunk).
    """

    _BATCH = 64

    def __init__(self, session: Session, per_queue: Iterable[tuple[QueueState, Sequence[Chunk]]]) -> None:
        self._session = session
        queues = [(q, chunks) for q, chunks in per_queue if _has(chunks, 0)]
        self._total: int | None = None  # known once every queue's list is read to its end
        self._items: list[Chunk] = []
        self._heap: list[tuple[int, float, str, QueueState]] = []
        # One queue: its chunks in their order, read as far as the search goes (a JobOrder stays lazy).
        self._single: Sequence[Chunk] | None = queues[0][1] if len(queues) == 1 else None
        if self._single is not None:
            return
        self._lists = {q: chunks for q, chunks in queues}
        self._pos = dict.fromkeys(self._lists, 0)
        self._alloc = {q: as_vector(q.allocated) for q, _ in queues}
        self._taken: dict[QueueState, list[int]] = {q: [0, 0, 0] for q, _ in queues}
        self._heap = [(q.rec.priority, -_over_ratio(self._alloc[q], q.alloc_share, self._taken[q]), q.name, q)
                      for q, _ in queues]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        if self._total is None:
            while self._extend():
                pass
            self._total = len(self._items)
        return self._total

    def __bool__(self) -> bool:
        return bool(self._items) or self._extend()

    def _extend(self) -> bool:
        if self._single is not None:
            single, items = self._single, self._items
            start = len(items)
            if not _has(single, start):
                return False
            end = start + self._BATCH
            while start < end and _has(single, start):
                items.append(single[start])
                start += 1
            return True
        heap = self._heap
        if not heap:
            return False
        session, items, lists, pos, taken, alloc = (self._session, self._items, self._lists, self._pos,
                                                    self._taken, self._alloc)
        for _ in range(self._BATCH):
            if not heap:
                break
            q = heapq.heappop(heap)[3]
            chunks = lists[q]
            i = pos[q]
            chunk = chunks[i]
            pos[q] = i + 1
            items.append(chunk)
            v = chunk.vector(session)
            t = taken[q]
            for r in AXES:
                t[r] += v[r]
            if _has(chunks, i + 1):
                heapq.heappush(heap, (q.rec.priority, -_over_ratio(alloc[q], q.alloc_share, t), q.name, q))
        return True

    def __iter__(self) -> Iterator[Chunk]:
        items = self._items
        i = 0
        while True:
            if i < len(items):
                yield items[i]
                i += 1
            elif not self._extend():
                return

    def materialize(self) -> list[Chunk]:
        while self._extend():
            pass
        return list(self._items)


class OrderHandover:
    """Consolidation's per-queue victim orders, handed to reclaim (the session's `victim_orders`).

    Reclaim's order of a victim queue at its start is consolidation's when all of these hold (each checked):
    no commit came between (`commits`: the session's binds, pipelines and evictions, one or more per commit;
    a job's chunks and the queue's candidates change only with a commit), the queue's candidates are the same
    jobs in the same order, reclaim's min-runtime for the queue is 0 and consolidation's was 0, and no job of
    the queue was protected (so none was semi-preemptible: consolidation drops a protected job, reclaim keeps
    its elastic chunks). A protection of 0 records no min-runtime deadline, so the replay's record is the same.
    """

    __slots__ = ("commits", "made", "orders")

    def __init__(self, commits: int, made: dict[int, list[Chunk]],
                 orders: dict[QueueState, tuple[list[Job], JobOrder]]) -> None:
        self.commits = commits
        self.made = made
        self.orders = orders

    def lists(self, session: Session) -> VictimLists | None:
        """Victim lists on consolidation's chunks, for orders taken over (`take`); None if a commit came since the
        orders were built (a touched job's chunks in them would be those of before)."""
        if self.commits != commit_count(session):
            return None
        return VictimLists(session, self.made)

    def take(self, lists: VictimLists, queue: QueueState, jobs: list[Job], runtime: float) -> JobOrder | None:
        """The order of `queue`'s `jobs` under protection `runtime`, if consolidation's is exactly it; taken over
        by `lists` (from `self.lists()`), whose commits fix it from now on like the lists' own orders."""
        assert lists._made is self.made
        hit = self.orders.get(queue)
        if hit is None or runtime != 0:
            return None
        theirs, order = hit
        if len(theirs) != len(jobs) or any(a is not b for a, b in zip(theirs, jobs, strict=True)):
            return None
        lists._orders.append(order)
        return order


def commit_count(session: Session) -> int:
    """Grows with every commit that changed something (each adds a bind, a pipeline or an eviction)."""
    d = session.decisions
    return len(d.binds) + len(d.pipelined) + len(d.evictions)


# --- min-runtime ---------------------------------------------------------------------------------


def preempt_min_runtime(session: Session, victim: QueueState) -> float:
    """The victim queue's protection for preempt and consolidation (the victim-min-runtime hook; 0 without one)."""
    hook = session.framework.min_runtime
    return 0.0 if hook is None else hook(session, victim, None)


def reclaim_min_runtime(session: Session, reclaimer: QueueState, victim: QueueState) -> float:
    """The victim queue's protection against `reclaimer` (the victim-min-runtime hook; 0 without one)."""
    hook = session.framework.min_runtime
    return 0.0 if hook is None else hook(session, victim, reclaimer)


def protected(session: Session, job: Job, min_runtime: float) -> bool:
    """`last-start-timestamp + minRuntime > now`; a job without the annotation is not protected. A
    semi-preemptible job always is: its core (the gang minimum, or minNonPreemptible) is never a victim."""
    if job.rec.preemptibility == keys.SEMI_PREEMPTIBLE:
        return True
    if min_runtime <= 0:
        return False
    started = parse_time(job.rec.last_start)
    if not started:
        return False
    session.carrying.repeating.deadline(started + min_runtime)  # the action's answer depends on `now` here
    return started + min_runtime > session.now


# --- messages ------------------------------------------------------------------------------------


def reclaim_message(task: Task, job: Job, reason: str) -> str:
    kai = f"Pod {task.namespace}/{task.name} was preempted by workload {job.namespace}/{job.name}."
    return f"{kai} Reclaimed by {job.key} (queue {job.queue.name if job.queue else '?'}): {reason}."


def preempt_message(task: Task, victim: Job, job: Job) -> str:
    kai = f"Pod {task.namespace}/{task.name} was preempted by higher priority workload {job.namespace}/{job.name}"
    queue = job.queue.name if job.queue else "?"
    return (f"{kai}. Preempted within queue {queue}: {job.key} has priority {job.priority}"
            f"{_class(job)}, higher than {victim.priority}{_class(victim)} of {victim.key}.")


def consolidation_message(task: Task, job: Job, node: str) -> str:
    kai = (f"Pod {task.namespace}/{task.name} was preempted and rescheduled due to bin packing "
           f"(resource consolidation) procedure")
    return f"{kai}. Moved to node {node} to make room for {job.key}."


def moved_note(node: str) -> str:
    """Appended to the eviction message of a reclaim/preempt victim that is re-placed rather than evicted."""
    return f"It is moved to node {node}."


def stale_eviction_message(task: Task, job: Job, active: int, since: float, now: float, grace: float) -> str:
    unmet = [ps for ps in job.podsets if ps.active_used < ps.min_available]
    if job.has_subgroups and unmet:
        ps = unmet[0]
        kai = (f"Workload doesn't meet the minimum required number of pods ({ps.min_available}) in sub-group "
               f"{ps.name}, evicting remaining pod: {task.namespace}/{task.name}")
    else:
        kai = (f"Workload doesn't meet the minimum required number of pods ({job.min_total}), evicting remaining "
               f"pod: {task.namespace}/{task.name}")
    return (f"{kai}. Gang {job.key} has had {active} of {job.min_total} required pods active for "
            f"{humanize(now - since)}s, longer than the {humanize(grace)}s grace period.")


def _class(job: Job) -> str:
    return f" ({job.rec.priority_class})" if job.rec.priority_class else ""
