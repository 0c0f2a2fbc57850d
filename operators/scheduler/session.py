"""One scheduling cycle's session: state derived from the snapshot, accounting, statements, decisions.

Opening the session derives task statuses, node usage, jobs and queue accounting (contracts 8.2), then
computes fair shares. Actions change state only through a `Statement`, whose operations fire the same
accounting updates (node free resources and index, GPU groups, podset counters, queue allocation) and can be
rolled back in reverse order; `commit()` turns the surviving operations into decisions.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from operator import add, attrgetter

from operators.core import keys
from operators.scheduler import explain
from operators.scheduler.config import SPREAD, SchedulerConfig
from operators.scheduler.decisions import (
    AnnotationUpdate,
    Bind,
    Decisions,
    Eviction,
    NotReady,
    Pipelined,
    QueueShare,
    Unschedulable,
)
from operators.scheduler.fairshare import UNLIMITED, QueueSpec, allocatable_share, fair_shares
from operators.scheduler.framework import Framework
from operators.scheduler.model import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    ALIVE,
    ALLOCATED,
    BINDING,
    BOUND,
    FAILED,
    GATED,
    ON_NODE,
    PENDING,
    PIPELINED,
    QUEUE_ALLOCATED,
    RELEASING,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    VICTIM_STATUSES,
    GpuGroup,
    Job,
    NodeState,
    PodSet,
    QueueState,
    Task,
)
from operators.scheduler.ordering import JobTree
from operators.scheduler.placement.gpus import format_portion, portion_on_node
from operators.scheduler.placement.predicates import PodIndex
from operators.scheduler.placement.scoring import NodeIndex
from operators.scheduler.placement.search import Placement, Placer
from operators.scheduler.records import PodRecord, SubGroupSpec
from operators.scheduler.snapshot import Snapshot

DEFAULT_SUBGROUP = "default"
_EPS = 1e-9


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class FailedAttempt:
    """Why a job's last allocation attempt failed, explained lazily at session close."""

    task: Task
    found: int
    required: int
    subgroup: str | None  # set for the sub-group gang message
    gang: bool
    summary: str  # the failing task's per-node fit summary, taken at the moment of failure


@dataclass(slots=True)
class Op:
    kind: str  # allocate | pipeline | evict
    task: Task
    prev_status: str
    placement: Placement | None = None
    taken: tuple[float, ...] = ()  # (idle cpu, rel cpu, idle mem, rel mem, idle gpu, rel gpu)
    action: str = ""
    for_job: str = ""
    message: str = ""
    # Where an evicted (Releasing) task was before it was pipelined elsewhere (a consolidation move):
    # (node, gpu groups, portion), restored on rollback so the undone eviction finds its node again.
    moved_from: tuple[int, tuple[str, ...], float] | None = None


@dataclass(slots=True)
class JobOutcome:
    errors: list[explain.JobError] = field(default_factory=list)
    failure: FailedAttempt | None = None


# cluster_free(): which total each per-node term goes to (gpu, shared-gpu free, cpu, memory).
_FREE_RESOURCE = (0, 0, 1, 2)


class ExactSum:
    """The sum of floats that are multiples of 2**-scale, kept as an exact integer (O(1) per replaced term).

    When every term is such a multiple and the sum of their magnitudes stays below 2**53 (in units of
    2**-scale), every partial sum of a left-to-right float sum is exactly representable, so that float sum is
    exact and equals `total()` whatever the order; otherwise `usable()` is False and the caller sums the floats.
    """

    __slots__ = ("exact", "inexact", "magnitude", "unit")

    def __init__(self, scale: int) -> None:
        self.unit = float(1 << scale)  # x * unit is exact (a power of two) and integral iff x is a multiple
        self.exact = 0  # sum of the terms, in units of 2**-scale
        self.magnitude = 0  # sum of their absolute values, same units
        self.inexact = 0  # terms that are not such multiples (or not finite)

    def rebuild(self, terms: list[float]) -> None:
        scaled = [x * self.unit for x in terms]
        if all(map(float.is_integer, scaled)):
            units = list(map(int, scaled))
            self.exact, self.magnitude, self.inexact = sum(units), sum(map(abs, units)), 0
        else:
            units = [int(y) for y in scaled if y.is_integer()]
            self.exact, self.magnitude = sum(units), sum(map(abs, units))
            self.inexact = len(scaled) - len(units)

    def replace(self, old: float, new: float) -> None:
        y = old * self.unit
        if y.is_integer():
            self.exact -= int(y)
            self.magnitude -= abs(int(y))
        else:
            self.inexact -= 1
        y = new * self.unit
        if y.is_integer():
            self.exact += int(y)
            self.magnitude += abs(int(y))
        else:
            self.inexact += 1

    def usable(self) -> bool:
        return self.inexact == 0 and self.magnitude < (1 << 53)

    def total(self) -> float:
        return self.exact / int(self.unit)  # correctly rounded int division: exact, the value is representable


class Session:
    def __init__(self, snapshot: Snapshot, config: SchedulerConfig, now: float) -> None:
        self.config = config
        self.now = now
        self.now_text = rfc3339(now)
        self.snapshot = snapshot
        self.decisions = Decisions()
        self.outcomes: dict[str, JobOutcome] = {}
        self.last_start: dict[str, str] = {}
        self._summaries: dict[tuple[object, ...], str] = {}
        self._unlimited_cache: dict[QueueState, bool] = {}
        # cluster_free(): per-node terms, and the nodes changed since they were last read.
        self._free_terms: tuple[list[float], list[float], list[float]] | None = None
        self._free_dirty: set[int] = set()
        self._free_exact = (ExactSum(30), ExactSum(20), ExactSum(0))
        self._pending_jobs: list[Job] | None = None  # schedulable_jobs(): jobs with pending pods at its last call
        self._victims: list[Job] = []  # victim_candidates(), as of its last call (or session open)
        self._touched: set[Job] = set()  # jobs whose tasks changed status or node since then
        # The enabled plugins' hooks, resolved once into plain callables and lists.
        fw = self.framework = Framework.build(config.plugins)
        self.task_order_key = fw.task_order_key
        self.tasks_to_allocate = fw.gang.tasks_to_allocate
        self._on_allocate = fw.on_allocate
        self._on_deallocate = fw.on_deallocate
        self.min_runtime_enabled = "minruntime" in fw.names
        self._open_nodes()
        self._open_queues()
        self._open_pods_and_jobs()
        self._open_fair_shares()
        self.index = NodeIndex(self.nodes, config.gpu_placement, config.cpu_placement)
        self.pod_index = self._open_pod_index()
        self.placer = Placer(self.nodes, self.index, snapshot.configmaps, self.pod_index, config.group_id,
                             config.gpu_placement == SPREAD)
        if fw.prefilters or fw.node_filters or fw.scorers:
            self.placer.extend(self, fw.prefilters, fw.node_filters, fw.scorers)
        for hook in fw.session_open:
            hook(self)

    # --- open -----------------------------------------------------------------------------------

    def _open_nodes(self) -> None:
        self.nodes: list[NodeState] = []
        for i, rec in enumerate(sorted(self.snapshot.nodes, key=lambda n: n.name)):
            scalars = {name: [q, q, 0.0] for name, q in rec.scalars} if rec.scalars else None
            self.nodes.append(NodeState(
                idx=i, rec=rec, ok=rec.ready and not rec.unschedulable, cap_cpu=rec.cpu, cap_mem=rec.memory,
                cap_gpu=float(rec.gpus), max_pods=rec.max_pods, idle_cpu=rec.cpu, idle_mem=rec.memory,
                idle_gpu=float(rec.gpus), scalars=scalars,
                gpu_total=float(rec.gpu_count_label or rec.gpus)))
        self.node_by_name = {n.name: n for n in self.nodes}
        memories = [n.rec.gpu_memory_mib for n in self.nodes if n.rec.gpu_memory_mib]
        self.min_gpu_memory = min(memories) if memories else 100

    def _open_queues(self) -> None:
        recs = {q.name: q for q in self.snapshot.queues}
        self.queues: dict[str, QueueState] = {}

        def resolve(name: str, seen: frozenset[str]) -> QueueState | None:
            if name in self.queues:
                return self.queues[name]
            rec = recs.get(name)
            if rec is None or name in seen:
                return None  # orphans (missing parent, or a cycle) are dropped with their subtree
            parent = None
            if rec.parent:
                parent = resolve(rec.parent, seen | {name})
                if parent is None:
                    return None
            q = QueueState(rec=rec, parent=parent, depth=parent.depth + 1 if parent else 0)
            if parent is not None:
                parent.children.append(q)
            self.queues[name] = q
            return q

        for name in sorted(recs):
            resolve(name, frozenset())
        for q in self.queues.values():
            q.children.sort(key=lambda c: (c.rec.created, c.rec.uid, c.name))

    def _task_status(self, pod: PodRecord, binds: dict[tuple[str, str], tuple[str, tuple[str, ...]]]
                     ) -> tuple[str, str, tuple[str, ...]]:
        """(status, node, gpu groups) per contracts 8.2."""
        phase = pod.phase
        if phase in (SUCCEEDED, FAILED):
            return phase, pod.node_name, pod.gpu_groups
        if phase == RUNNING:
            return (RELEASING if pod.deleting else RUNNING), pod.node_name, pod.gpu_groups
        if phase == PENDING:
            if pod.deleting:
                return RELEASING, pod.node_name, pod.gpu_groups
            if pod.node_name:
                return BOUND, pod.node_name, pod.gpu_groups
            bind = binds.get((pod.namespace, pod.name))
            if bind is not None:
                return BINDING, bind[0], bind[1] or pod.gpu_groups
            return (GATED if pod.gated else PENDING), "", ()
        return UNKNOWN, pod.node_name, pod.gpu_groups

    def _open_pods_and_jobs(self) -> None:
        # The hottest code of session open (one pass over every pod and every PodGroup): common cases are
        # inlined; the general rules live in _task_status / _occupy / _count / task_vector. Sums are taken in
        # the same order as the general code so the floating-point results are identical.
        binds = {(b.namespace, b.pod_name): (b.selected_node, b.gpu_groups)
                 for b in self.snapshot.bindrequests if not b.failed and b.selected_node}
        other = self.other_usage = [0.0, 0.0, 0.0]
        by_group: dict[tuple[str, str], list[Task]] = {}
        name = self.config.scheduler_name
        node_by_name = self.node_by_name
        occupy = self._occupy
        for pod in self.snapshot.pods:
            # Fast paths for the two common cases; everything else goes through the full rules.
            phase = pod.phase
            if phase == RUNNING and not pod.deleting:
                status, node_name, groups = RUNNING, pod.node_name, pod.gpu_groups
            elif phase == PENDING and not (pod.deleting or pod.node_name or pod.gated) and (
                    not binds or (pod.namespace, pod.name) not in binds):
                status, node_name, groups = PENDING, "", ()
            else:
                status, node_name, groups = self._task_status(pod, binds)
            task = Task(pod, status)
            if node_name and status in ON_NODE:
                node = node_by_name.get(node_name)
                if node is not None:
                    gpu = pod.gpu
                    if (status != RELEASING and not pod.scalars and not pod.is_reservation
                            and not pod.constraints.host_ports and not gpu.is_shared):
                        # _occupy() for a plain running pod.
                        task.node = node.idx
                        node.n_pods += 1
                        node.idle_cpu -= pod.cpu
                        node.idle_mem -= pod.memory
                        if gpu.whole:
                            node.idle_gpu -= gpu.whole
                        task.groups = groups
                    else:
                        occupy(task, node, groups)
                    if pod.scheduler_name != name and not pod.is_reservation and status != RELEASING:
                        other[0] += pod.gpu.whole
                        other[1] += pod.cpu
                        other[2] += pod.memory
            if pod.pod_group:
                key = (pod.namespace, pod.pod_group)
                members = by_group.get(key)
                if members is None:
                    by_group[key] = [task]
                else:
                    members.append(task)
        for n in self.nodes:  # whole devices of fully releasing shared GPUs count as releasing
            for g in n.groups.values():
                if g.fully_releasing:
                    n.rel_gpu += 1
        priorities = {p.name: p.value for p in self.snapshot.priority_classes}
        default = next((p.value for p in sorted(self.snapshot.priority_classes, key=lambda p: p.name)
                        if p.global_default), keys.DEFAULT_PODGROUP_PRIORITY)
        self.jobs: list[Job] = []
        jobs_append = self.jobs.append
        victims_append = self._victims.append
        lineages = {q: q.lineage() for q in self.queues.values()}
        node_pool = self.snapshot.node_pool
        queues = self.queues
        count = self._count
        task_vector = self.task_vector
        explicit = (keys.PREEMPTIBLE, keys.NON_PREEMPTIBLE)
        threshold = keys.NON_PREEMPTIBLE_PRIORITY_THRESHOLD
        no_members: list[Task] = []
        queue_parents = {q.name: q.parent for q in self.snapshot.queues}
        for pg in sorted(self.snapshot.podgroups, key=attrgetter("namespace", "name")):
            if pg.scheduling_backoff == 1 and node_pool in pg.unschedulable_pools:
                continue  # one attempt per node pool
            queue = queues.get(pg.queue)
            priority = priorities.get(pg.priority_class, default)
            if pg.preemptibility in explicit:
                preemptible = pg.preemptibility == keys.PREEMPTIBLE
            else:
                preemptible = priority < threshold
            if pg.subgroups:
                podsets = self._podsets(pg.subgroups, pg.min_member)
                podset_list = list(podsets.values())
            else:  # _podsets() of a PodGroup without sub-groups, without the dict
                podset_list = [PodSet(DEFAULT_SUBGROUP, max(pg.min_member, 1))]
                podsets = None
            job = Job(rec=pg, queue=queue, priority=priority, preemptible=preemptible,
                      podsets=podset_list, has_subgroups=bool(pg.subgroups))
            jobs_append(job)
            members = by_group.get((pg.namespace, pg.name), no_members)
            if len(members) > 1:
                members.sort(key=self.task_order_key)
            a0 = a1 = a2 = r0 = r1 = r2 = 0.0
            job_tasks = job.tasks
            victim = False  # some task Running/Bound/Binding on a node (victim_candidates())
            for task in members:
                rec = task.rec
                if podsets is None:
                    ps = podset_list[0] if (rec.subgroup or DEFAULT_SUBGROUP) == DEFAULT_SUBGROUP else None
                else:
                    ps = podsets.get(rec.subgroup or DEFAULT_SUBGROUP)
                if ps is None:
                    continue  # a pod whose subgroup is not in the PodGroup is ignored
                task.job, task.podset = job, ps
                job_tasks.append(task)
                ps.tasks.append(task)
                status = task.status
                if not victim and status in VICTIM_STATUSES and task.node >= 0:
                    victim = True
                if status == PENDING:
                    ps.alive += 1
                    task.fit_key = (rec.constraints, rec.cpu, rec.memory, rec.gpu, rec.scalars, rec.nominated_node)
                    ps.pending.append(task)
                elif status == RUNNING:
                    ps.active_allocated += 1
                    ps.active_used += 1
                    ps.alive += 1
                else:
                    count(ps, status, +1)
                if queue is not None and (status == PENDING or status in QUEUE_ALLOCATED):
                    gpu = rec.gpu
                    if gpu.is_shared:
                        v0, v1, v2 = task_vector(task)
                    else:
                        v0, v1, v2 = float(gpu.whole), rec.cpu, rec.memory
                    r0 += v0
                    r1 += v1
                    r2 += v2
                    if status != PENDING:
                        a0 += v0
                        a1 += v1
                        a2 += v2
            if victim and preemptible and queue is not None:
                victims_append(job)
            if podsets is None:
                job.allocated_at_open = podset_list[0].active_allocated - podset_list[0].pipelined
            else:
                job.allocated_at_open = sum(p.active_allocated - p.pipelined for p in podset_list)
            if queue is None:
                self.outcome(job).errors.append(explain.unusable_queue(pg.queue, queue_parents))
                continue
            for q in lineages[queue]:  # _add_queue(queue, allocated, preemptible, +1), then the request
                alloc = q.allocated
                alloc[0] += a0
                alloc[1] += a1
                alloc[2] += a2
                if not preemptible:
                    anp = q.allocated_np
                    anp[0] += a0
                    anp[1] += a1
                    anp[2] += a2
                req = q.request
                req[0] += r0
                req[1] += r1
                req[2] += r2

    @staticmethod
    def _podsets(subgroups: tuple[SubGroupSpec, ...], min_member: int) -> dict[str, PodSet]:
        if not subgroups:
            return {DEFAULT_SUBGROUP: PodSet(DEFAULT_SUBGROUP, max(min_member, 1))}
        parents = {s.parent for s in subgroups}
        return {s.name: PodSet(s.name, max(s.min_member, 1)) for s in subgroups if s.name not in parents}

    @staticmethod
    def _count(ps: PodSet, status: str, sign: int) -> None:
        if status in ACTIVE_ALLOCATED:
            ps.active_allocated += sign
        if status == PIPELINED:
            ps.pipelined += sign
        if status in ACTIVE_USED:
            ps.active_used += sign
        if status in ALIVE:
            ps.alive += sign
        if status == GATED:
            ps.gated += sign

    def _occupy(self, task: Task, node: NodeState, groups: tuple[str, ...]) -> None:
        """Account a pod already on a node (snapshot state)."""
        rec = task.rec
        releasing = task.status == RELEASING
        task.node = node.idx
        node.n_pods += 1
        if releasing:
            node.rel_cpu += rec.cpu
            node.rel_mem += rec.memory
        node.idle_cpu -= rec.cpu
        node.idle_mem -= rec.memory
        if rec.scalars and node.scalars:
            for name, qty in rec.scalars:
                s = node.scalars.get(name)
                if s:
                    s[1] -= qty
                    if releasing:
                        s[2] += qty
        if rec.constraints.host_ports:
            ports = node.ports if node.ports is not None else {}
            for p in rec.constraints.host_ports:
                ports[p] = ports.get(p, 0) + 1
            node.ports = ports
        if rec.is_reservation:
            # The reservation pod holds its shared GPU; the group accounts for it, not a whole-GPU request.
            for gid in groups:
                if gid not in node.groups:
                    node.groups[gid] = GpuGroup(gid)
                    node.idle_gpu -= 1
            return
        if rec.gpu.whole:
            node.idle_gpu -= rec.gpu.whole
            if releasing:
                node.rel_gpu += rec.gpu.whole
        if rec.gpu.is_shared:
            portion = portion_on_node(rec.gpu, node) or 0.0
            task.portion = portion
            ids = list(groups[: rec.gpu.num_devices])
            while len(ids) < rec.gpu.num_devices:  # not yet labelled: still holds a device
                ids.append(f"unknown/{rec.namespace}/{rec.name}/{len(ids)}")
            task.groups = tuple(ids)
            for gid in ids:
                g = node.groups.get(gid)
                if g is None:
                    g = node.groups[gid] = GpuGroup(gid)
                    node.idle_gpu -= 1
                if releasing:
                    g.releasing += portion
                else:
                    g.used += portion
                g.pods += 1
        else:
            task.groups = groups

    def _open_fair_shares(self) -> None:
        started = time.perf_counter()  # the proportion plugin's OnSessionOpen time, for metrics only
        ready = [n for n in self.nodes if n.rec.ready]
        self.total = (
            max(0.0, sum(n.cap_gpu for n in ready) - self.other_usage[0]),
            max(0.0, sum(n.cap_cpu for n in ready) - self.other_usage[1]),
            max(0.0, sum(n.cap_mem for n in ready) - self.other_usage[2]),
        )
        specs = {q.name: QueueSpec(q.name, q.parent.name if q.parent else "", q.rec.quota, q.rec.limit,
                                   q.rec.weight, (q.request[0], q.request[1], q.request[2]), q.rec.priority,
                                   q.rec.created, q.rec.uid) for q in self.queues.values()}
        shares = fair_shares(specs, self.total, self.config.k_value)
        for q in self.queues.values():
            q.fair_share = shares[q.name]
            q.alloc_share = (
                allocatable_share(q.rec.quota[0], q.fair_share[0], q.rec.limit[0], self.total[0]),
                allocatable_share(q.rec.quota[1], q.fair_share[1], q.rec.limit[1], self.total[1]),
                allocatable_share(q.rec.quota[2], q.fair_share[2], q.rec.limit[2], self.total[2]),
            )
        self.decisions.timings["plugin/proportion"] = (time.perf_counter() - started) * 1000

    def _open_pod_index(self) -> PodIndex | None:
        # Most pods share a few Constraints objects: look at each distinct object once before scanning pods.
        distinct = {id(c): c for c in map(attrgetter("constraints"), self.snapshot.pods)}
        needed = any(c.pod_anti_affinity or c.pod_affinity for c in distinct.values()) and any(
            p.constraints.pod_anti_affinity or (p.constraints.pod_affinity and not p.node_name)
            for p in self.snapshot.pods if p.constraints.has_dynamic)
        if not needed:
            return None
        index = PodIndex()
        for pod_task in self._tasks_on_nodes():
            index.add(pod_task.rec, pod_task.node)
        return index

    def _tasks_on_nodes(self) -> list[Task]:
        # Rebuilt on demand (rare: only when inter-pod affinity is in play).
        binds = {(b.namespace, b.pod_name): (b.selected_node, b.gpu_groups)
                 for b in self.snapshot.bindrequests if not b.failed and b.selected_node}
        out = []
        for pod in self.snapshot.pods:
            status, node_name, _ = self._task_status(pod, binds)
            node = self.node_by_name.get(node_name) if node_name else None
            if node is not None and status in ACTIVE_USED:
                out.append(Task(rec=pod, status=status, node=node.idx))
        return out

    # --- accounting helpers ---------------------------------------------------------------------

    def task_vector(self, task: Task) -> tuple[float, float, float]:
        """(gpu, cpu millicores, memory bytes) a task counts for its queue."""
        rec = task.rec
        gpu = float(rec.gpu.whole)
        if rec.gpu.is_shared:
            if task.node >= 0 and task.portion:
                gpu += task.portion * rec.gpu.num_devices
            elif rec.gpu.portion is not None:
                gpu += rec.gpu.portion * rec.gpu.num_devices
            elif rec.gpu.memory_mib is not None:
                gpu += rec.gpu.num_devices * rec.gpu.memory_mib / self.min_gpu_memory
        return gpu, rec.cpu, rec.memory

    def job_request(self, tasks: Iterable[Task]) -> list[float]:
        t0 = t1 = t2 = 0.0
        for t in tasks:
            rec = t.rec
            if rec.gpu.is_shared:
                v0, v1, v2 = self.task_vector(t)
            else:  # task_vector() of a whole-GPU or CPU-only task
                v0, v1, v2 = float(rec.gpu.whole), rec.cpu, rec.memory
            t0 += v0
            t1 += v1
            t2 += v2
        return [t0, t1, t2]

    @staticmethod
    def _add_queue(queue: QueueState, vec: tuple[float, float, float], preemptible: bool, sign: int) -> None:
        v0, v1, v2 = sign * vec[0], sign * vec[1], sign * vec[2]
        q: QueueState | None = queue
        while q is not None:
            alloc = q.allocated
            alloc[0] += v0
            alloc[1] += v1
            alloc[2] += v2
            if not preemptible:
                anp = q.allocated_np
                anp[0] += v0
                anp[1] += v1
                anp[2] += v2
            q = q.parent

    def unlimited(self, queue: QueueState) -> bool:
        """No limit on any resource at this queue or any ancestor (limits are fixed for the session)."""
        cache = self._unlimited_cache
        hit = cache.get(queue)
        if hit is None:
            hit = cache[queue] = all(limit == UNLIMITED for q in queue.lineage() for limit in q.rec.limit)
        return hit

    def cluster_free(self) -> list[float]:
        """Idle plus releasing resources of schedulable nodes: (gpu, cpu, memory).

        Per-node terms are cached and refreshed only for nodes changed since the last call; the totals add
        the terms in node order from 0.0 (an absent term is 0.0), exactly as one loop over the nodes would.
        """
        nodes = self.nodes
        terms = self._free_terms
        changed: Iterable[int]
        if terms is None:
            terms = self._free_terms = ([0.0] * (2 * len(nodes)), [0.0] * len(nodes), [0.0] * len(nodes))
            changed = range(len(nodes))
        else:
            changed = self._free_dirty
        g, c, m = terms
        exact = self._free_exact
        initial = isinstance(changed, range)
        for i in changed:
            n = nodes[i]
            if not n.ok:
                continue
            new = (n.idle_gpu + n.rel_gpu,
                   sum((gr.free for gr in n.groups.values() if not gr.fully_releasing), 0.0) if n.groups else 0.0,
                   n.idle_cpu + n.rel_cpu, n.idle_mem + n.rel_mem)
            old = (g[2 * i], g[2 * i + 1], c[i], m[i])
            if new == old:
                continue
            g[2 * i], g[2 * i + 1], c[i], m[i] = new
            if not initial:
                for k in range(4):
                    if new[k] != old[k]:
                        exact[_FREE_RESOURCE[k]].replace(old[k], new[k])
        self._free_dirty = set()
        lists = (g, c, m)
        if initial:
            for r in range(3):
                exact[r].rebuild(lists[r])
        return [exact[r].total() if exact[r].usable() else reduce(add, lists[r], 0.0) for r in range(3)]

    def outcome(self, job: Job) -> JobOutcome:
        out = self.outcomes.get(job.key)
        if out is None:
            out = self.outcomes[job.key] = JobOutcome()
        return out

    # --- capacity, gates and node subsets (plugins) ------------------------------------------------

    def capacity_error(self, job: Job, tasks: Iterable[Task],
                       freed: dict[QueueState, list[float]] | None = None) -> explain.JobError | None:
        """The first capacity error of the enabled capacity plugins (proportion: OverLimit and
        NonPreemptibleOverQuota), or None. `freed`: per queue, what victims could still release under it."""
        for check in self.framework.capacity:
            error = check(self, job, tasks, freed)
            if error is not None:
                return error
        return None

    def may_try(self, job: Job, action: str) -> bool:
        """Every job gate lets `action` try `job` now."""
        return all(gate(self, job, action) for gate in self.framework.job_gates)

    def gate_jobs(self, jobs: list[Job], action: str) -> list[Job]:
        """`jobs` that `action` may try (the list itself when no plugin gates jobs)."""
        if not self.framework.job_gates:
            return jobs
        return [j for j in jobs if self.may_try(j, action)]

    def node_subsets(self, job: Job) -> list[Iterable[int]] | None:
        """Node subsets to try the job's attempt in, in order; None: all nodes (no plugin restricts it)."""
        for hook in self.framework.node_subsets:
            subsets = hook(self, job)
            if subsets is not None:
                return list(subsets)
        return None

    def job_tree(self, jobs: Iterable[Job], action: str) -> JobTree:
        """The action's job tree: queue and job order of the enabled plugins, `queueDepthPerAction`."""
        fw = self.framework
        return JobTree(jobs, lambda job: self.job_request(self.tasks_to_allocate(job)),
                       self.config.queue_depth_per_action.get(action), job_key=fw.job_order_key,
                       facts=fw.queue_facts, before=fw.queue_before)

    # --- statements -----------------------------------------------------------------------------

    def statement(self) -> Statement:
        return Statement(self)

    def _place(self, task: Task, placement: Placement, status: str) -> tuple[float, ...]:
        node = self.nodes[placement.node]
        rec = task.rec
        ic = min(rec.cpu, max(node.idle_cpu, 0.0))
        im = min(rec.memory, max(node.idle_mem, 0.0))
        whole = float(rec.gpu.whole)
        ig = min(whole, max(node.idle_gpu, 0.0))
        taken = (ic, rec.cpu - ic, im, rec.memory - im, ig, whole - ig)
        node.idle_cpu -= ic
        node.rel_cpu -= taken[1]
        node.idle_mem -= im
        node.rel_mem -= taken[3]
        node.idle_gpu -= ig
        node.rel_gpu -= taken[5]
        node.n_pods += 1
        if rec.scalars and node.scalars:
            for name, qty in rec.scalars:
                s = node.scalars[name]
                s[1] -= qty
        choice = placement.gpu
        if choice is not None:
            for gid, new, from_rel in zip(choice.groups, choice.new, choice.from_releasing, strict=True):
                if new:
                    if from_rel:
                        node.rel_gpu -= 1
                    else:
                        node.idle_gpu -= 1
                    node.groups[gid] = GpuGroup(gid)
                g = node.groups[gid]
                g.used += placement.portion
                g.pods += 1
            task.groups = choice.groups
            task.portion = placement.portion
        if rec.constraints.host_ports:
            ports = node.ports if node.ports is not None else {}
            for p in rec.constraints.host_ports:
                ports[p] = ports.get(p, 0) + 1
            node.ports = ports
        task.node = node.idx
        self._set_status(task, status)
        if self.pod_index is not None:
            self.pod_index.add(rec, node.idx)
        self._free_dirty.add(node.idx)
        self.index.update(node)
        return taken

    def _unplace(self, task: Task, placement: Placement, taken: tuple[float, ...], prev: str) -> None:
        node = self.nodes[placement.node]
        rec = task.rec
        if self.pod_index is not None:
            self.pod_index.remove(rec)
        self._set_status(task, prev)
        node.idle_cpu += taken[0]
        node.rel_cpu += taken[1]
        node.idle_mem += taken[2]
        node.rel_mem += taken[3]
        node.idle_gpu += taken[4]
        node.rel_gpu += taken[5]
        node.n_pods -= 1
        if rec.scalars and node.scalars:
            for name, qty in rec.scalars:
                node.scalars[name][1] += qty
        choice = placement.gpu
        if choice is not None:
            for gid, new, from_rel in zip(choice.groups, choice.new, choice.from_releasing, strict=True):
                g = node.groups[gid]
                g.used -= placement.portion
                g.pods -= 1
                if new:
                    del node.groups[gid]
                    if from_rel:
                        node.rel_gpu += 1
                    else:
                        node.idle_gpu += 1
            task.groups = ()
            task.portion = 0.0
        if rec.constraints.host_ports and node.ports is not None:
            for p in rec.constraints.host_ports:
                node.ports[p] -= 1
        task.node = -1
        self._free_dirty.add(node.idx)
        self.index.update(node)

    def _set_status(self, task: Task, status: str) -> None:
        """Move a task between statuses, keeping podset counters, pending lists and queue accounting."""
        if task.job is not None:
            self._touched.add(task.job)
        old = task.status
        if old == status:
            return
        ps, job = task.podset, task.job
        if ps is not None:
            self._count(ps, old, -1)
            self._count(ps, status, +1)
            if old == PENDING:
                ps.pending.remove(task)
            if status == PENDING:
                ps.pending.append(task)
                ps.pending.sort(key=self.task_order_key)
        if job is not None and job.queue is not None:
            # Virtual allocations (incl. pipelined) count for ordering and capacity checks in this session.
            was = old in QUEUE_ALLOCATED or old == PIPELINED
            now = status in QUEUE_ALLOCATED or status == PIPELINED
            if was != now:
                self._add_queue(job.queue, self.task_vector(task), job.preemptible, +1 if now else -1)
        task.status = status

    def _evict(self, task: Task) -> None:
        node = self.nodes[task.node]
        rec = task.rec
        node.rel_cpu += rec.cpu
        node.rel_mem += rec.memory
        if not rec.is_reservation:
            node.rel_gpu += rec.gpu.whole
        for gid in task.groups:
            g = node.groups.get(gid)
            if g is not None:
                g.used -= task.portion
                g.releasing += task.portion
                if g.fully_releasing:
                    node.rel_gpu += 1
        self._set_status(task, RELEASING)
        self._free_dirty.add(node.idx)
        self.index.update(node)

    def _unevict(self, task: Task, prev: str) -> None:
        node = self.nodes[task.node]
        rec = task.rec
        node.rel_cpu -= rec.cpu
        node.rel_mem -= rec.memory
        if not rec.is_reservation:
            node.rel_gpu -= rec.gpu.whole
        for gid in task.groups:
            g = node.groups.get(gid)
            if g is not None:
                if g.fully_releasing:
                    node.rel_gpu -= 1
                g.releasing -= task.portion
                g.used += task.portion
        self._set_status(task, prev)
        self._free_dirty.add(node.idx)
        self.index.update(node)

    def _restore_origin(self, task: Task, origin: tuple[int, tuple[str, ...], float]) -> None:
        """Undo of a move: the task is back (Releasing) on the node it was evicted from."""
        task.node, task.groups, task.portion = origin
        if task.job is not None:
            self._touched.add(task.job)
        if self.pod_index is not None:
            self.pod_index.add(task.rec, task.node)

    def _commit(self, ops: list[Op]) -> None:
        started: set[str] = set()
        pipelined_jobs: set[str] = set()
        for op in ops:
            task, job = op.task, op.task.job
            pg = job.name if job else ""
            node = self.nodes[task.node].name if task.node >= 0 else ""
            if op.kind == "allocate":
                self.decisions.binds.append(self._bind(task, node, pg))
                if job is not None:
                    started.add(job.key)
            elif op.kind == "pipeline":
                self.decisions.pipelined.append(Pipelined(
                    task.namespace, task.name, pg, node, explain.pipelined_message(task.namespace, task.name, node),
                    task.groups))
                if job is not None:
                    pipelined_jobs.add(job.key)
            else:
                self.decisions.evictions.append(Eviction(task.namespace, task.name, pg, op.action, op.for_job,
                                                         op.message))
        for job in {op.task.job.key: op.task.job for op in ops if op.task.job is not None}.values():
            if job.key in started and job.key not in pipelined_jobs and job.allocated_at_open == 0 \
                    and not job.bound_in_session:
                self.last_start[job.key] = self.now_text
            if job.key in started:
                job.bound_in_session = True

    def _bind(self, task: Task, node: str, pod_group: str) -> Bind:
        rec = task.rec
        if rec.gpu.is_shared:
            return Bind(task.namespace, task.name, pod_group, node, keys.RESOURCE_TYPE_FRACTION, task.groups,
                        format_portion(task.portion), rec.gpu.num_devices)
        return Bind(task.namespace, task.name, pod_group, node, keys.RESOURCE_TYPE_REGULAR, (),
                    format_portion(1.0 if rec.gpu.whole else 0.0), rec.gpu.whole)

    # --- close ----------------------------------------------------------------------------------

    def close(self) -> Decisions:
        d = self.decisions
        for hook in self.framework.session_close:
            hook(self)
        pool = self.config.node_pool_name
        annotations = d.annotations
        now_text = self.now_text
        gang = self.framework.gang
        builtin_gang = self.framework.builtin_gang
        for job in self.jobs:
            # The stale-timestamp annotation (stale: some active pod, a podset below its minimum, no Succeeded
            # pod; the task scan only if needed) and the counters test below, in one pass over the podsets.
            below = active = False
            settled = True
            for p in job.podsets:
                if p.active_used < p.min_available:
                    below = True
                if p.active_used:
                    active = True
                if p.alive != p.active_allocated:
                    settled = False
            if builtin_gang:  # the gang plugin's is_stale(), inlined
                stale = below and active and not any(t.status == SUCCEEDED for t in job.tasks)
            else:
                stale = gang.is_stale(job)
            since = job.rec.stale_since
            if stale:
                if since is None:
                    annotations.append(AnnotationUpdate(job.namespace, job.name, keys.STALE_PODGROUP_TIMESTAMP,
                                                        now_text))
            elif since is not None:
                annotations.append(AnnotationUpdate(job.namespace, job.name, keys.STALE_PODGROUP_TIMESTAMP, None))
            if settled:
                continue  # alive - active-allocated = Pending + Gated: nothing to explain (most jobs)
            pending = [t for t in job.tasks if t.status == PENDING]
            gated = any(t.status == GATED for t in job.tasks)
            if not pending and not gated:
                continue
            if job.queue is not None and not gang.job_ready(job):
                d.not_ready.append(NotReady(job.namespace, job.name, gang.not_ready_message(job)))
                continue
            if not pending:
                continue
            d.unschedulable.append(self._unschedulable(job, pending, pool))
        for job_key, stamp in sorted(self.last_start.items()):
            ns, name = job_key.split("/", 1)
            d.annotations.append(AnnotationUpdate(ns, name, keys.LAST_START_TIMESTAMP, stamp))
        d.queues = [self._queue_share(q) for q in sorted(self.queues.values(), key=lambda q: q.name)]
        return d

    def fit_summary(self, task: Task) -> str:
        """Per-node histogram for a task that found no node, on the current (virtual) state.

        Computed once per placement signature and cycle: later failures of identical tasks reuse it, which
        keeps failing gangs cheap at the price of counts that may lag by the nodes filled meanwhile.
        """
        if task.rec.gpu_error:
            return task.rec.gpu_error
        key = task.fit_key
        summary = self._summaries.get(key)
        if summary is None:
            fit_reasons = self.placer.fit_reasons
            per_node: dict[tuple[str, ...], int] = {}
            for n in self.nodes:
                reasons = tuple(fit_reasons(task, n))
                per_node[reasons] = per_node.get(reasons, 0) + 1
            # One flat list: the histogram is the same, counted in C instead of one Counter.update per node.
            summary = explain.fit_summary([[r for reasons, k in per_node.items() for r in reasons * k]])
            self._summaries[key] = summary
        return summary

    def _unschedulable(self, job: Job, pending: list[Task], pool: str) -> Unschedulable:
        out = self.outcomes.get(job.key) or JobOutcome()
        errors = list(out.errors)
        task_summary: dict[str, str] = {}
        failure = out.failure
        if failure is not None:
            task_summary[failure.task.name] = failure.summary
            msg = self.framework.gang.failure_message(failure)
            errors.append(explain.JobError(keys.REASON_POD_SCHEDULING_ERRORS, (msg,)))
        message = explain.job_message(errors)
        backoff = job.rec.scheduling_backoff
        # explain.pod_message() per pod: the failing task's summary, else the job message (computed once).
        other = explain.with_pool_prefix(explain.pod_message(None, errors) if not errors else message, pool, backoff)
        pod_messages = dict.fromkeys([t.rec.name for t in pending], other)
        for name, text in task_summary.items():  # at most one: the failing task
            if name in pod_messages:
                pod_messages[name] = explain.with_pool_prefix(explain.pod_message(text, errors), pool, backoff)
        has_allocated = False
        for p in job.podsets:
            if p.active_allocated > 0:
                has_allocated = True
                break
        rec = job.rec
        return Unschedulable(rec.namespace, rec.name, pool, explain.with_pool_prefix(message, pool, backoff),
                             tuple([e.to_reason() for e in errors]), pod_messages, has_allocated,
                             rec.mark_unschedulable)

    def _queue_share(self, q: QueueState) -> QueueShare:
        def vec(v: tuple[float, ...] | list[float]) -> dict[str, float]:
            def conv(x: float, scale: float) -> float:
                return -1.0 if x == UNLIMITED else round(x * scale, 3)
            return {"gpu": conv(v[0], 1.0), "cpu": conv(v[1], 1.0), "memory": conv(v[2], 1e-6)}
        return QueueShare(q.name, vec(q.fair_share), vec(q.allocated), vec(q.request), vec(q.rec.quota),
                          vec(q.rec.limit))

    # --- candidates -----------------------------------------------------------------------------

    def schedulable_jobs(self) -> list[Job]:
        """Jobs allocate may try: leaf queue exists, pending pods, gang ready.

        A task becomes Pending again only when an operation on it is rolled back, so between actions the jobs
        with pending pods are a subset of those that had some at the first call: later calls filter that list.
        """
        source = self._pending_jobs if self._pending_jobs is not None else self.jobs
        builtin_gang, job_ready = self.framework.builtin_gang, self.framework.gang.job_ready
        out: list[Job] = []
        pending: list[Job] = []
        for j in source:
            for p in j.podsets:
                if p.pending:
                    break
            else:
                continue
            pending.append(j)
            q = j.queue
            if q is None or q.children:
                continue
            if not builtin_gang:
                if job_ready(j):
                    out.append(j)
                continue
            for p in j.podsets:  # the gang plugin's job_ready(), inlined
                if p.alive - p.gated < p.min_available:
                    break
            else:
                out.append(j)
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
            self._touched = set()
        return list(self._victims)


class Statement:
    """Ordered, undoable operations of one job attempt (KAI framework.Statement)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ops: list[Op] = []

    def allocate(self, task: Task, placement: Placement) -> None:
        prev = task.status
        session = self.session
        taken = session._place(task, placement, ALLOCATED)
        self.ops.append(Op("allocate", task, prev, placement, taken))
        for handler in session._on_allocate:
            handler(session, task, "allocate")

    def pipeline(self, task: Task, placement: Placement) -> None:
        prev = task.status
        moved_from = (task.node, task.groups, task.portion) if task.node >= 0 else None
        session = self.session
        taken = session._place(task, placement, PIPELINED)
        self.ops.append(Op("pipeline", task, prev, placement, taken, moved_from=moved_from))
        for handler in session._on_allocate:
            handler(session, task, "pipeline")

    def evict(self, task: Task, action: str, for_job: str, message: str) -> None:
        prev = task.status
        session = self.session
        session._evict(task)
        self.ops.append(Op("evict", task, prev, action=action, for_job=for_job, message=message))
        for handler in session._on_deallocate:
            handler(session, task, "evict")

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        session = self.session
        while len(self.ops) > checkpoint:
            op = self.ops.pop()
            if op.kind == "evict":
                session._unevict(op.task, op.prev_status)
                for handler in session._on_allocate:
                    handler(session, op.task, "rollback")
            else:
                assert op.placement is not None
                session._unplace(op.task, op.placement, op.taken, op.prev_status)
                if op.moved_from is not None:
                    session._restore_origin(op.task, op.moved_from)
                for handler in session._on_deallocate:
                    handler(session, op.task, "rollback")

    def discard(self) -> None:
        self.rollback(0)

    def pipeline_all(self, job: Job) -> None:
        """Turn this statement's binds for `job` into pipelines (a gang never starts half-bound)."""
        for op in self.ops:
            if op.kind == "allocate" and op.task.job is job:
                op.kind = "pipeline"
                self.session._set_status(op.task, PIPELINED)

    def commit(self) -> None:
        self.session._commit(self.ops)
        self.ops = []
