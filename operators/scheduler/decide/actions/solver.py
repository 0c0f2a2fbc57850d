"""The victim solver shared by reclaim, preempt and consolidation.

For a pending job the solver walks the ordered victim chunks and grows a prefix one chunk at a time. For each
prefix it builds scenarios — for every node hosting the newest chunk, the prefix's chunks touching that node
(KAI's by-node scenarios, which keep victim sets small), then the whole prefix — and simulates each inside
the job's statement: evict the scenario, pipeline the job onto what is being released (and, for
consolidation, pipeline every victim pod onto another node). The job's capacity checks (queue limits) run in
the simulation, on the state without the scenario's victims, so a victim under a limited queue makes room
under that limit. The first scenario that passes the action's validator and places the whole gang is kept;
anything else is rolled back, so nothing is evicted unless the job then fits. A kept scenario is then made
minimal (every victim the job does not need is dropped, newest first), and reclaim/preempt victims that fit
elsewhere are moved there (pipelined, in job order) instead of being evicted for good. As KAI validates a
scenario only after re-placing such victims, a reclaim/preempt scenario the validator refuses as a whole is also
simulated with its victims moved, and kept when the victims still evicted pass. Victim sets equivalent to one that
already failed for the job (same pods' shapes freed on the same nodes and devices, same queues) are skipped.
Difference from KAI, on purpose: the job's tasks are solved together rather than one task prefix at a time
(the whole-prefix scenario covers gangs spread over several nodes).
Early in its walk, a reclaim/preempt search tests an upper bound of what any of its scenarios could free (`Reach`):
when no node's victims, and no prefix within the eviction caps, could cover the job beside the cluster's free
resources, no scenario would pass the walk's own resource checks, so the rest of the walk is skipped and charged
the work it would have spent (one unit per chunk): the budget ends where it did, the decisions are the same.
Every action's scenario is refused before its placement attempts when its evictions leave the nodes fewer pod
slots than the job has pods (`Room`): the attempts would fail (so reclaim's and preempt's job-alone placements too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Sized
from typing import TYPE_CHECKING

from operators.scheduler.decide.actions.common import allocate_job
from operators.scheduler.decide.actions.victims import moved_note
from operators.scheduler.decide.model import VICTIM_STATUSES, Chunk, Job, NodeState, Task
from operators.scheduler.decide.units import AXES, GPU, GPU_AXIS, queue_amount

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session, Statement

# Scenarios validated or simulated per job and action: a safety valve for huge clusters.
MAX_SIMULATIONS = 256
# Work one action may spend per cycle (victim chunks scanned + scenario sizes validated + 50 per simulation).
# Deterministic, so `kai simulate` stays reproducible; jobs not reached are tried again next cycle.
ACTION_WORK_BUDGET = 20_000
# Simulations one successful scenario may spend on dropping victims it does not need.
MAX_MINIMIZE_SIMULATIONS = 16
# Work one action may spend per cycle on re-validating refused scenarios with their victims moved (50 per
# simulation): its own budget, so that this search never takes work from the jobs after it.
MOVED_WORK_BUDGET = 5_000
# The reason given for a victim that is kept in a scenario only because it moves to another node.
MOVED_REASON = "it is re-placed on another node, so its queue keeps its share"
# Chunks a reclaim/preempt walk takes before it tests whether any later scenario could cover the job (`Reach`).
REACH_AFTER = 256
# Node reads a Room check's scan costs about as much as one failed placement attempt of reclaim or preempt: a
# Room key's scan past the point its answers need is deferred for (nodes // this) checks, attempting those.
ROOM_READS_PER_ATTEMPT = 500
# Scenarios up to this many chunks are remembered (by equivalence) when they fail, and not tried again.
MAX_KEYED_CHUNKS = 32

# Per-chunk reasons (aligned with the scenario) when the action accepts the scenario, None when it refuses.
Validator = Callable[[Sequence[Chunk]], "list[str] | None"]
# (victim pod, its chunk, reason or destination node) -> the Eviction message.
Describe = Callable[[Task, Chunk, str], str]
# A necessary condition of the validator for one chunk (evaluated once per chunk and search).
Viable = Callable[[Chunk], bool]


def cluster_free(session: Session) -> list[int]:
    """Idle plus releasing resources of schedulable nodes: (micro-GPUs, millicores, bytes)."""
    return session.cluster_free()


def _short(request: Sequence[int], available: Sequence[int]) -> bool:
    return any(request[r] > available[r] for r in AXES)


class Reach:
    """What the chunks of one victim list could free, at most: per node the summed vectors of the chunks touching
    it (each chunk's whole vector, as the walk's per-node check counts it), their per-axis maximum, and the total.
    Taken chunks and the job's own are included, so it bounds every search over the list while its chunks are
    fixed (an action's victim lists only lose chunks); amounts are clamped at 0 so a subset never exceeds it."""

    __slots__ = ("count", "most", "per_node", "total")

    def __init__(self, session: Session, chunks: Iterable[Chunk]) -> None:
        per_node: dict[int, list[int]] = {}
        total = [0, 0, 0]
        count = 0
        for chunk in chunks:
            count += 1
            gpu, cpu, mem = (max(x, 0) for x in chunk.vector(session))
            total[0] += gpu
            total[1] += cpu
            total[2] += mem
            for n in {t.node for t in chunk.tasks}:
                acc = per_node.setdefault(n, [0, 0, 0])
                acc[0] += gpu
                acc[1] += cpu
                acc[2] += mem
        self.count = count  # the walk's iterations over the list: one work unit each
        self.per_node = per_node
        self.most = [max((v[r] for v in per_node.values()), default=0) for r in AXES]
        self.total = total


class Room:
    """How many of a job's pods the nodes could hold at most (pipelined, as the simulations place them): per node
    the fewest of its free pod slots and, per axis, its idle plus releasing amount over the smallest request of
    the job's pods. Placing a pod takes a slot and at least that request from its node's idle plus releasing
    resources (the fit's first tests refuse a node short of them), evicting frees, moving a victim only takes:
    so when the nodes' total after a scenario's evictions is below the job's pod count, no order of placing
    the job and the victims can place the job. Read only through `Solver`, which keeps one total per request
    and node mask on the committed state."""

    __slots__ = ("cpu", "gpu", "mask", "mem", "need")

    def __init__(self, tasks: Sequence[Task], mask: bytearray) -> None:
        self.need = len(tasks)
        self.gpu = min(t.rec.gpu.whole for t in tasks)
        self.cpu = min(t.rec.cpu for t in tasks)
        self.mem = min(t.rec.memory for t in tasks)
        self.mask = mask

    def slots(self, node: NodeState) -> int:
        if not self.mask[node.idx]:
            return 0
        # The least of the pod-count room and each asked resource's room, as integer comparisons (the value
        # min() gives): this runs for every node a Room total reads.
        k = node.max_pods - node.n_pods
        need = self.gpu
        if need > 0:
            v = (node.idle_gpu + node.rel_gpu) // need
            if v < k:
                k = v
        need = self.cpu
        if need > 0:
            v = (node.idle_cpu + node.rel_cpu) // need
            if v < k:
                k = v
        need = self.mem
        if need > 0:
            v = (node.idle_mem + node.rel_mem) // need
            if v < k:
                k = v
        return k if k > 0 else 0


class Solver:
    def __init__(self, session: Session, action: str) -> None:
        self.session = session
        self.action = action
        cfg = session.config
        self.max_pods = cfg.max_evictions_per_job
        self.max_gpus = cfg.max_evicted_gpus_per_job
        # The cap in micro-GPUs (the configured decimal, exactly); meaningful when max_gpus >= 0.
        self.max_gpu_units = queue_amount(self.max_gpus, GPU) if self.max_gpus >= 0 else -1
        self.work = ACTION_WORK_BUDGET
        self.moved_work = MOVED_WORK_BUDGET
        self._free: list[int] | None = None
        self._request: list[int] = [0, 0, 0]  # the request of the job being solved
        # Per pending job: equivalence keys of victim sets that failed for it since the last commit.
        self._failed_sets: dict[str, set[tuple[object, ...]]] = {}
        # Per victim list (by identity, the list kept alive here): its Reach. Lists are fixed within an action.
        self._reach: dict[int, tuple[object, Reach]] = {}
        # The job being solved's Room (None: not used for it) and, per Room key, the nodes' slots on the committed
        # state summed so far and the next node to read (`_room_holds`).
        self._room: Room | None = None
        self._room_keys: tuple[object, ...] = ()
        self._room_totals: dict[tuple[object, ...], list[int]] = {}
        self._room_defer = 0  # checks a Room key answers "may hold" before its scan goes on (`_room_holds`)

    def changed(self) -> None:
        """Call after committing a statement: cluster-wide free resources are recomputed on next use, and
        victim sets that failed before may work now."""
        self._free = None
        self._failed_sets.clear()
        self._room_totals.clear()

    @property
    def exhausted(self) -> bool:
        return self.work <= 0

    def within_cap(self, chunks: Sequence[Chunk]) -> bool:
        """The per-preemptor eviction cap (beyond KAI): pods and GPUs one job may evict in a cycle."""
        if self.max_pods >= 0 and sum(len(c.tasks) for c in chunks) > self.max_pods:
            return False
        if self.max_gpus >= 0:
            gpus = sum(c.vector(self.session)[GPU_AXIS] for c in chunks)
            if gpus > self.max_gpu_units:
                return False
        return True

    def solve(self, stmt: Statement, job: Job, tasks: Sequence[Task], chunks: Iterable[Chunk], *,
              describe: Describe, validate: Validator | None = None, move_victims: bool = False,
              max_victim_jobs: int | None = None, viable: Viable | None = None) -> bool:
        """Find and apply (inside `stmt`) the first working scenario; False leaves `stmt` as it was.

        `viable`, if given, is a necessary condition of the validator: a scenario holding a chunk it rejects
        is refused without running the validator (and counted as if it had been, so the outcome is the same).
        The job's recorded explanation (why allocate failed) is kept whatever the simulations tried.
        """
        session = self.session
        fw = session.framework
        if fw.victim_filters:
            chunks = self._allowed(job, chunks)
        for order in fw.victim_orders:
            listed = list(chunks)
            chunks = [listed[i] for i in order(session, job, [c.tasks for c in listed], self.action)]
        if fw.scenario_validators:
            validate = self._with_plugins(job, validate)
        known = session.outcomes.get(job.key)
        saved = (list(known.errors), known.failure) if known is not None else None
        was_simulating, session.simulating = session.simulating, True
        try:
            return self._solve(stmt, job, tasks, chunks, describe, validate, move_victims, max_victim_jobs, viable)
        finally:
            session.simulating = was_simulating
            if saved is None:
                session.outcomes.pop(job.key, None)
            else:
                out = session.outcome(job)
                out.errors, out.failure = saved

    def _allowed(self, job: Job, chunks: Iterable[Chunk]) -> list[Chunk]:
        """The chunks whose job every victim filter lets this action evict for `job`."""
        session, action = self.session, self.action
        filters = session.framework.victim_filters
        verdict: dict[int, bool] = {}
        out: list[Chunk] = []
        for chunk in chunks:
            ok = verdict.get(id(chunk.job))
            if ok is None:
                ok = verdict[id(chunk.job)] = all(f(session, job, chunk.job, action) for f in filters)
            if ok:
                out.append(chunk)
        return out

    def _with_plugins(self, job: Job, validate: Validator | None) -> Validator:
        """`validate` followed by the plugins' scenario validators (each sees the victim jobs in order)."""
        session, action = self.session, self.action
        validators = session.framework.scenario_validators

        def combined(scenario: Sequence[Chunk]) -> list[str] | None:
            reasons = validate(scenario) if validate is not None else [""] * len(scenario)
            if reasons is None:
                return None
            victims = list({id(c.job): c.job for c in scenario}.values())
            if not all(v(session, job, victims, action) for v in validators):
                return None
            return reasons

        return combined

    def _solve(self, stmt: Statement, job: Job, tasks: Sequence[Task], chunks: Iterable[Chunk],
               describe: Describe, validate: Validator | None, move_victims: bool,
               max_victim_jobs: int | None, viable: Viable | None) -> bool:
        # Scenarios are tried in a fixed order: for each prefix of `chunks` (skipping chunks of the job itself
        # and chunks already taken), the per-node scenarios of the newest chunk's nodes (sorted), then the whole
        # prefix. Everything a scenario check needs is kept incrementally (no per-step copies or sums): within
        # one search no chunk changes status (simulations either succeed and end it, or are rolled back).
        session = self.session
        request = self._request = session.job_request(tasks)
        if self._free is None:
            self._free = cluster_free(session)
        free = self._free
        failed_sets = self._failed_sets.setdefault(job.key, set())
        if move_victims and _short(request, free):
            return False  # moving pods around never frees capacity
        # A single pod's reclaim/preempt scenarios are its node's alone, tried only when that node then has the pod's
        # resources: the Room, counting every node's slots, would refuse next to none (none at either envelope).
        self._room = self._room_for(job, tasks) if move_victims or len(tasks) > 1 else None
        # Consolidation's attempts move every victim: a scan pays at once. Reclaim's and preempt's place the job.
        self._room_defer = 0 if move_victims else len(session.nodes) // ROOM_READS_PER_ATTEMPT
        # The bound is tested once the walk is REACH_AFTER chunks in without a scenario reaching validation: a
        # search that finds scenarios early never pays for it.
        check_at = REACH_AFTER if not move_victims and isinstance(chunks, Sized) else -1
        steps = 0
        req_gpu, req_cpu, req_mem = request
        free_gpu, free_cpu, free_mem = free
        # A single pod lands on one node: only that node's scenario can work, and only if the node then has room.
        single = len(tasks) == 1
        check_caps = self.max_pods >= 0 or self.max_gpus >= 0
        nodes_of = session.nodes
        prefix: list[Chunk] = []  # the chunks that passed so far, in order (the whole-prefix scenario)
        freed_gpu = freed_cpu = freed_mem = 0  # their summed vector
        prefix_pods = 0
        prefix_jobs: set[int] = set()
        prefix_dead = False  # some chunk of the prefix fails `viable`
        on_node: dict[int, list[Chunk]] = {}
        freed_on: dict[int, list[int]] = {}  # per node: the victims' pods' vectors on that node
        sum_on: dict[int, list[int]] = {}  # per node: the full vectors of the chunks touching it
        dead_on: set[int] = set()
        budget = MAX_SIMULATIONS
        for newest in chunks:
            if steps == check_at and budget == MAX_SIMULATIONS:
                reach = self.reach(chunks)
                if not self._may_cover(job, request, free, chunks, reach, single, max_victim_jobs):
                    self._charge(reach.count - steps)  # what the rest of the walk would spend
                    return False
            steps += 1
            self.work -= 1
            if self.work <= 0:
                return False
            first_task = newest.tasks[0]
            if newest.job is job or first_task.status not in VICTIM_STATUSES:
                continue  # never its own victim; or taken already (chunk lists are reused within an action)
            v = newest.vector(session)
            gpu, cpu, mem = v
            freed_gpu += gpu
            freed_cpu += cpu
            freed_mem += mem
            prefix.append(newest)
            prefix_pods += len(newest.tasks)
            if max_victim_jobs is not None:
                prefix_jobs.add(id(newest.job))
            dead = viable is not None and not viable(newest)
            if dead:
                prefix_dead = True
            first = first_task.node
            multi_node = False
            for t in newest.tasks:
                if t.node != first:
                    multi_node = True
                    break
            if not multi_node:  # the common case: one node, use the chunk's total
                nodes: list[int] = [first]
                lst = on_node.get(first)
                if lst is None:
                    on_node[first] = [newest]
                    freed_on[first] = [gpu, cpu, mem]
                    sum_on[first] = [gpu, cpu, mem]
                else:
                    lst.append(newest)
                    acc = freed_on[first]
                    acc[0] += gpu
                    acc[1] += cpu
                    acc[2] += mem
                    acc = sum_on[first]
                    acc[0] += gpu
                    acc[1] += cpu
                    acc[2] += mem
                if dead:
                    dead_on.add(first)
            else:
                seen: set[int] = set()
                for t in newest.tasks:
                    if t.node not in seen:
                        seen.add(t.node)
                        on_node.setdefault(t.node, []).append(newest)
                        acc = sum_on.setdefault(t.node, [0, 0, 0])
                        for r in AXES:
                            acc[r] += v[r]
                        if dead:
                            dead_on.add(t.node)
                    tv = session.task_vector(t)
                    acc = freed_on.setdefault(t.node, [0, 0, 0])
                    for r in AXES:
                        acc[r] += tv[r]
                nodes = sorted(seen)
            if not move_victims and (req_gpu > free_gpu + freed_gpu or req_cpu > free_cpu + freed_cpu
                                     or req_mem > free_mem + freed_mem):
                continue
            # (scenario, known to fail the validator, its node or -1 for the whole prefix)
            scenarios: list[tuple[list[Chunk], bool, int]] = []
            for n in nodes:
                if single:
                    node = nodes_of[n]
                    if not node.ok:
                        continue
                    if not move_victims:
                        fo_gpu, fo_cpu, fo_mem = freed_on[n]
                        room_gpu = (node.idle_gpu + node.rel_gpu) * GPU
                        if node.groups:
                            room_gpu += sum(g.free for g in node.groups.values() if not g.fully_releasing)
                        if (req_gpu > room_gpu + fo_gpu or req_cpu > node.idle_cpu + node.rel_cpu + fo_cpu
                                or req_mem > node.idle_mem + node.rel_mem + fo_mem):
                            continue
                scenarios.append((on_node[n], n in dead_on, n))
            if not single:
                scenarios.append((prefix, prefix_dead, -1))
            for i, (scenario, known_dead, n) in enumerate(scenarios):
                if budget <= 0:
                    return False
                # Every scenario of this step ends with `newest`, so only this step's can repeat.
                if any(len(other) == len(scenario) and other == scenario for other, _, _ in scenarios[:i]):
                    continue
                if n < 0:
                    if max_victim_jobs is not None and len(prefix_jobs) > max_victim_jobs:
                        continue
                    if check_caps and ((self.max_pods >= 0 and prefix_pods > self.max_pods)
                                       or (self.max_gpus >= 0 and freed_gpu > self.max_gpu_units)):
                        continue
                    # The prefix's total was checked above.
                else:
                    if max_victim_jobs is not None and len({id(c.job) for c in scenario}) > max_victim_jobs:
                        continue
                    if check_caps and not self.within_cap(scenario):
                        continue
                    if not move_victims:
                        got_gpu, got_cpu, got_mem = sum_on[n]
                        if (req_gpu > free_gpu + got_gpu or req_cpu > free_cpu + got_cpu
                                or req_mem > free_mem + got_mem):
                            continue
                budget -= 1  # validations and simulations both count: keeps a job's search linear
                if known_dead:
                    self.work -= 1
                    self._count("scenarios_filtered")
                    continue
                self.work -= len(scenario)
                key = self._equivalence(scenario) if len(scenario) <= MAX_KEYED_CHUNKS else None
                if key is not None and key in failed_sets:
                    self._count("scenarios_duplicate")
                    continue
                reasons = validate(scenario) if validate is not None else [""] * len(scenario)
                if reasons is None and validate is not None and not move_victims and len(scenario) > 1 \
                        and self.moved_work > 0:
                    self.moved_work -= 50
                    self._count("scenarios_simulation")
                    if self._simulate_moved(stmt, job, scenario, describe, validate):
                        return True
                if reasons is None:
                    self._count("scenarios_filtered")
                    if key is not None:
                        failed_sets.add(key)
                    continue
                self.work -= 50
                self._count("scenarios_simulation")
                if self._simulate(stmt, job, scenario, reasons, describe, move_victims, validate):
                    return True
                if key is not None:
                    failed_sets.add(key)
        return False

    def _room_for(self, job: Job, tasks: Sequence[Task]) -> Room | None:
        """The Room of a search for `job`, or None when its pods are under different node constraints
        (one mask per Room). Jobs asking for optional features are bounded too: what their plugins do inside a
        simulated attempt is undone with it (a topology subset only narrows the mask, the plans are memoized on
        their inputs, the job's outcome is restored after the search, and `session.simulating` keeps the domains
        tried out of its explanation); only the fit summaries are left behind, which `_room_before` guards."""
        if not tasks:
            return None
        placer = self.session.placer
        mask = placer.mask(tasks[0])
        if any(placer.mask(t) is not mask for t in tasks):
            return None
        self._room_keys = tuple({t.fit_key: None for t in tasks})
        return Room(tasks, mask)

    def _room_before(self, room: Room, scenario: Sequence[Chunk]) -> dict[int, int] | None:
        """On the committed state: the slots of the nodes a scenario's victims leave, or None when a failed attempt
        would compute a pod's fit summary first (a summary is made once per shape and cycle, on the state of its
        first failure, so the attempt must run to make it)."""
        if not self.session.has_fit_summaries(self._room_keys):
            return None
        nodes = self.session.nodes
        return {n: room.slots(nodes[n]) for n in {t.node for c in scenario for t in c.tasks}}

    def _room_holds(self, room: Room, before: dict[int, int], after: int) -> bool:
        """Whether the nodes may hold the job's pods once a scenario's victims are evicted: `after` slots on the
        nodes they leave (`before`: those nodes' slots on the committed state) and the other nodes' slots on the
        committed state. Those are summed only as far as the answer needs: one running sum over the nodes (touched
        ones at their committed slots) and its position per Room key, until the next commit. "May hold" only lets the
        attempt run, so a key's first `_room_defer` checks that would read on answer it without reading."""
        need = room.need - after
        if need <= 0:
            return True
        key = (id(room.mask), room.gpu, room.cpu, room.mem)
        acc = self._room_totals.get(key)
        if acc is None:
            acc = self._room_totals[key] = [0, 0, 0]
        total, i, asked = acc
        left = total - sum(v for n, v in before.items() if n < i)
        if left >= need:
            return True
        nodes = self.session.nodes
        end = len(nodes)
        if i < end and asked < self._room_defer:
            acc[2] = asked + 1
            return True
        slots = room.slots
        while i < end and left < need:
            v = before.get(i)
            if v is None:
                v = slots(nodes[i])
                left += v
            total += v
            i += 1
        acc[0], acc[1] = total, i
        return left >= need

    def reach(self, chunks: Iterable[Chunk]) -> Reach:
        """The Reach of a victim list, computed once per list and action."""
        hit = self._reach.get(id(chunks))
        if hit is None or hit[0] is not chunks:
            hit = self._reach[id(chunks)] = (chunks, Reach(self.session, chunks))
        return hit[1]

    def _may_cover(self, job: Job, request: Sequence[int], free: Sequence[int], chunks: Iterable[Chunk],
                   reach: Reach, single: bool, max_victim_jobs: int | None) -> bool:
        """Necessary for any scenario of the walk to be validated or simulated (reclaim, preempt): its per-node
        check (the job covered by the cluster's free resources plus the node's chunks) or, for a gang, the
        whole-prefix check within the caps. False proves the walk ends without effect."""
        most = reach.most
        if not (request[0] > free[0] + most[0] or request[1] > free[1] + most[1] or request[2] > free[2] + most[2]):
            for got in reach.per_node.values():
                if not (request[0] > free[0] + got[0] or request[1] > free[1] + got[1]
                        or request[2] > free[2] + got[2]):
                    return True
        if single:
            return False  # a single pod is tried only in per-node scenarios
        if self.max_pods < 0 and self.max_gpus < 0 and max_victim_jobs is None:
            return not _short(request, [free[r] + reach.total[r] for r in AXES])
        # The prefix only grows, and with it its pods, GPUs and jobs: once over a cap it stays over.
        session = self.session
        got = list(free)
        pods = 0
        jobs: set[int] = set()
        for chunk in chunks:
            if chunk.job is job or chunk.tasks[0].status not in VICTIM_STATUSES:
                continue
            v = chunk.vector(session)
            for r in AXES:
                got[r] += v[r]
            pods += len(chunk.tasks)
            jobs.add(id(chunk.job))
            if (0 <= self.max_pods < pods or (self.max_gpus >= 0 and got[0] - free[0] > self.max_gpu_units)
                    or (max_victim_jobs is not None and len(jobs) > max_victim_jobs)):
                return False
            if not _short(request, got):
                return True
        return False

    def futile_walk(self, job: Job, tasks: Sequence[Task], chunks: Iterable[Chunk]) -> int | None:
        """The work units a reclaim/preempt search of `job` over `chunks` (no victim-job cap) spends when its walk
        provably ends without a scenario (`Reach`); None when it might find one, or when plugins filter or order
        the victims (then only the search itself tells)."""
        fw = self.session.framework
        if fw.victim_filters or fw.victim_orders or not isinstance(chunks, Sized):
            return None
        if self._free is None:
            self._free = cluster_free(self.session)
        reach = self.reach(chunks)
        request = self.session.job_request(tasks)
        if self._may_cover(job, request, self._free, chunks, reach, len(tasks) == 1, None):
            return None
        return reach.count

    def _charge(self, steps: int) -> None:
        """The work a walk of `steps` chunks without a scenario spends: one unit per chunk, stopping at 0."""
        if steps > 0:
            self.work = self.work - steps if self.work > steps else min(self.work - 1, 0)

    def _count(self, what: str) -> None:
        """For metrics (`Decisions.counters`, never printed): scenarios filtered, simulated or skipped as
        duplicates of a victim set that already failed, per action."""
        counters = self.session.decisions.counters
        key = f"{what}/{self.action}"
        counters[key] = counters.get(key, 0) + 1

    def _equivalence(self, scenario: Sequence[Chunk]) -> tuple[object, ...] | None:
        """What a scenario's outcome depends on: per victim pod its node, devices, shape and queue (the
        validators look at queues, the simulation at what is freed where, and a move at the pod's constraints).
        None while inter-pod affinity is in play: then which pod leaves matters, not only what it frees."""
        if self.session.pod_index is not None:
            return None
        counts: dict[tuple[object, ...], int] = {}
        for chunk in scenario:
            queue = chunk.job.queue.name if chunk.job.queue is not None else ""
            for t in chunk.tasks:
                rec = t.rec
                item = (t.node, t.groups, t.portion, rec.cpu, rec.memory, rec.gpu, rec.scalars,
                        id(rec.constraints), queue)
                counts[item] = counts.get(item, 0) + 1
        return (frozenset(counts.items()),)

    def _simulate(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], reasons: Sequence[str],
                  describe: Describe, move_victims: bool, validate: Validator | None) -> bool:
        """Apply the scenario; on success make its victim set minimal and (reclaim, preempt) move the victims
        that fit elsewhere instead of evicting them for good. False leaves `stmt` as it was."""
        start = stmt.checkpoint()
        if not self._apply(stmt, job, scenario, reasons, describe, move_victims):
            return False
        if len(scenario) > 1:
            scenario = self._minimize(stmt, job, list(scenario), list(reasons), describe, move_victims, validate,
                                      start)
        if not move_victims:
            self._move_victims(stmt, job, scenario, start)
        return True

    def _apply(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], reasons: Sequence[str],
               describe: Describe, move_victims: bool) -> bool:
        """Evict the scenario and place the job (and, for consolidation, every victim pod) with pipelines.

        The job's capacity checks (queue limits) run here, on the state without the victims."""
        session = self.session
        start = stmt.checkpoint()
        # On the committed state: when the nodes cannot hold the job's pods once the scenario's victims are
        # evicted, no order of placing it (and, for consolidation, moving them) can (`Room`); the attempts are
        # not made. Reclaim and preempt place the job alone, so the same bound holds for their scenarios, with
        # or without the moves `_simulate_moved` makes after the job is placed.
        room = self._room if start == 0 else None
        before = self._room_before(room, scenario) if room is not None else None
        for chunk, reason in zip(scenario, reasons, strict=True):
            for task in chunk.tasks:
                stmt.evict(task, self.action, job.key, describe(task, chunk, reason))
        if before is not None and room is not None:
            nodes = session.nodes
            if not self._room_holds(room, before, sum(room.slots(nodes[n]) for n in before)):
                stmt.rollback(start)
                return False
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

    def _minimize(self, stmt: Statement, job: Job, scenario: list[Chunk], reasons: list[str],
                  describe: Describe, move_victims: bool, validate: Validator | None, start: int) -> list[Chunk]:
        """Drop every victim the job does not need, newest first (so the victims kept are the earliest in
        victim order); `stmt` ends with the minimal scenario applied."""
        session = self.session
        request = self._request
        free = self._free if not move_victims else None
        applied = True  # `scenario` is what stmt holds after `start`
        trials = MAX_MINIMIZE_SIMULATIONS
        for chunk in list(reversed(scenario)):
            if len(scenario) == 1 or trials <= 0 or self.work <= 0:
                break
            trial = [c for c in scenario if c is not chunk]
            if free is not None:
                # Before the scenario the victims' resources were not free: without `chunk` the job must still
                # be covered by what the other victims release.
                base = free
                got = [base[r] + sum(c.vector(session)[r] for c in trial) for r in AXES]
                if _short(request, got):
                    continue
            key = self._equivalence(trial)
            failed = self._failed_sets.setdefault(job.key, set())
            if key is not None and key in failed:
                self._count("scenarios_duplicate")
                continue
            # The validator reads the queues' accounting: on the state before any scenario, as in the search.
            stmt.rollback(start)
            applied = False
            trial_reasons = validate(trial) if validate is not None else [""] * len(trial)
            if trial_reasons is None:
                self._count("scenarios_filtered")
                if key is not None:
                    failed.add(key)
                continue
            trials -= 1
            self.work -= 50
            self._count("scenarios_simulation")
            if self._apply(stmt, job, trial, trial_reasons, describe, move_victims):
                scenario, reasons, applied = trial, trial_reasons, True
            else:
                applied = False
                if key is not None:
                    failed.add(key)
        if not applied:
            ok = self._apply(stmt, job, scenario, reasons, describe, move_victims)
            assert ok, "a scenario that worked works again on the same state"
        return scenario

    def _move_victims(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], start: int) -> list[Chunk]:
        """Consolidating reclaim/preempt: a victim chunk that fits elsewhere (within its queue's limits, on the
        state with the job placed) is pipelined there instead of being evicted for good. A chunk moves whole
        or not at all; moved victims only leave the fairness checks easier to pass (they keep their share).
        Victims are re-placed in job order (KAI re-allocates them as it allocates jobs: higher priority, then
        older, first; a job's own pods in its task order, as KAI allocates a job), so when not all fit, the ones this
        order puts last stay evicted. Returns the moved."""
        session = self.session
        evict_ops = {id(op.task): op for op in stmt.ops[start:] if op.kind == "evict"}
        job_key = session.framework.job_order_key
        moved: list[Chunk] = []
        # Within a job its core first, then its pods above minMember in task order (the reverse of victim order).
        for *_, chunk in sorted((job_key(c.job), not c.core, -i, c) for i, c in enumerate(scenario)):
            if chunk.job.queue is None or session.capacity_error(chunk.job, chunk.tasks) is not None:
                continue
            checkpoint = stmt.checkpoint()
            if all(self._move(stmt, t) for t in chunk.tasks):
                moved.append(chunk)
                for t in chunk.tasks:
                    op = evict_ops.get(id(t))
                    if op is not None:
                        op.message = f"{op.message} {moved_note(session.nodes[t.node].name)}"
            else:
                stmt.rollback(checkpoint)
        return moved

    def _simulate_moved(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], describe: Describe,
                        validate: Validator) -> bool:
        """KAI validates a reclaim/preempt scenario once its victims that fit elsewhere were moved there (they
        keep their place in their queue): a scenario the validator refuses as a whole is simulated with its
        victims moved, and kept when the victims still evicted pass on their own. False leaves `stmt` as it was.
        """
        start = stmt.checkpoint()
        if not self._apply(stmt, job, scenario, [""] * len(scenario), describe, False):
            return False
        moved = {id(c) for c in self._move_victims(stmt, job, scenario, start)}
        stmt.rollback(start)  # the validator reads the accounting as it was before the scenario
        evicted = [c for c in scenario if id(c) not in moved]
        if not moved or not evicted:
            return False
        reasons = validate(evicted)
        if reasons is None:
            return False
        by_chunk = {id(c): r for c, r in zip(evicted, reasons, strict=True)}
        all_reasons = [by_chunk.get(id(c), MOVED_REASON) for c in scenario]
        ok = self._apply(stmt, job, scenario, all_reasons, describe, False)
        assert ok, "a scenario that worked works again on the same state"
        self._move_victims(stmt, job, scenario, start)
        return True

    def _place_all(self, stmt: Statement, job: Job, scenario: Sequence[Chunk], preemptor_first: bool) -> bool:
        def preemptor() -> bool:
            return allocate_job(self.session, stmt, job, pipeline_only=True)

        def victims() -> bool:
            return all(self._move(stmt, t) for c in scenario for t in c.tasks)

        steps = (preemptor, victims) if preemptor_first else (victims, preemptor)
        return all(step() for step in steps)

    def _move(self, stmt: Statement, task: Task) -> bool:
        """Pipeline an evicted pod elsewhere: a whole-GPU or CPU pod onto another node, a fractional pod onto
        another node or another GPU of its node (never back onto the devices it is leaving)."""
        origin = self.session.nodes[task.node]
        blocked = [origin.groups[g] for g in task.groups if g in origin.groups] if task.rec.gpu.is_shared else []
        if blocked:
            saved_used = [g.used for g in blocked]
            released = sum(1 for g in blocked if g.fully_releasing)  # counted as whole releasing GPUs
            for g in blocked:
                g.used = 2 * GPU  # no room left on the devices it leaves, for this one search
            origin.rel_gpu -= released
            try:
                placement = self.session.placer.find(task)
            finally:
                for g, used in zip(blocked, saved_used, strict=True):
                    g.used = used
                origin.rel_gpu += released
        else:
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

