"""State derivation at session open: task statuses, node usage, jobs, podsets, queue accounting, fair shares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.model import (
    ACTIVE_USED,
    BINDING,
    BOUND,
    FAILED,
    GATED,
    ON_NODE,
    PENDING,
    QUEUE_ALLOCATED,
    RELEASING,
    RUNNING,
    SCALAR_IDLE,
    SCALAR_RELEASING,
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
from operators.scheduler.decide.placement.gpus import portion_on_node
from operators.scheduler.decide.placement.predicates import PodIndex
from operators.scheduler.decide.records import (
    Constraints,
    NodeRecord,
    PodGroupRecord,
    PodRecord,
    QueueRecord,
    SubGroupSpec,
)
from operators.scheduler.decide.session.accounting import DEFAULT_SUBGROUP, Accounting
from operators.scheduler.decide.session.carry import Opened
from operators.scheduler.decide.units import GPU

_EXPLICIT = (keys.PREEMPTIBLE, keys.NON_PREEMPTIBLE)
_constraints = attrgetter("constraints")
_namespace, _name = attrgetter("namespace"), attrgetter("name")


def by_namespace_name(podgroups: Iterable[PodGroupRecord]) -> list[PodGroupRecord]:
    """`sorted(podgroups, key=attrgetter("namespace", "name"))`, as two stable sorts: by name, then by namespace.

    A stable sort keeps the order of equal keys, so the second pass leaves records of one namespace in name order
    (and records equal in both in their given order): the lexicographic order of the pairs. Two passes comparing
    strings cost about a quarter of one comparing (namespace, name) tuples it builds per record (~20 ms at 25,000
    PodGroups)."""
    out = sorted(podgroups, key=_name)
    out.sort(key=_namespace)
    return out


def _needs_pod_index(c: Constraints) -> bool:
    """Pods with these constraints read where other pods are (inter-pod affinity, or a preference scored)."""
    return bool(c.pod_anti_affinity or c.pod_affinity or c.has_preferred)


@dataclass(slots=True)
class JobRules:
    """What `_open_jobs` reads besides the PodGroup and its tasks, computed once per session open."""

    priorities: dict[str, int]
    default: int
    lineages: dict[QueueState, list[QueueState]]
    node_pool: str
    queue_parents: dict[str, str]


class Opening(Accounting):
    """State derivation at session open: nodes, queues, task statuses, jobs and podsets, queue
    accounting and fair shares, all from one pass over the snapshot."""

    def _open_nodes(self) -> None:
        fresh = self._fresh_node
        self.nodes = [fresh(i, rec) for i, rec in enumerate(sorted(self.snapshot.nodes, key=lambda n: n.name))]
        self.node_by_name = {n.name: n for n in self.nodes}
        memories = [n.rec.gpu_memory_mib for n in self.nodes if n.rec.gpu_memory_mib]
        self.min_gpu_memory = min(memories) if memories else 100

    @staticmethod
    def _fresh_node(i: int, rec: NodeRecord) -> NodeState:
        """A node with no pods on it yet."""
        scalars = {name: [q, q, 0] for name, q in rec.scalars} if rec.scalars else None
        return NodeState(
            # A cordoned node is usable: only pods tolerating its taint pass its predicates (KAI need_gpu.18).
            idx=i, rec=rec, ok=rec.ready, cap_cpu=rec.cpu, cap_mem=rec.memory,
            cap_gpu=rec.gpus, max_pods=rec.max_pods, idle_cpu=rec.cpu, idle_mem=rec.memory,
            idle_gpu=rec.gpus, scalars=scalars, gpu_total=rec.gpu_count_label or rec.gpus)

    def _open_queues(self) -> None:
        recs = {q.name: q for q in self.snapshot.queues}
        self.queues: dict[str, QueueState] = {}
        for name in sorted(recs):
            self._resolve_queue(recs, name, frozenset())
        for q in self.queues.values():
            q.children.sort(key=lambda c: (c.rec.created, c.rec.uid, c.name))

    def _resolve_queue(self, recs: dict[str, QueueRecord], name: str, seen: frozenset[str]) -> QueueState | None:
        # A method, not a recursive closure: such a closure refers to itself and would hold the session in a
        # reference cycle past `release()`.
        if name in self.queues:
            return self.queues[name]
        rec = recs.get(name)
        if rec is None or name in seen:
            return None  # orphans (missing parent, or a cycle) are dropped with their subtree
        parent = None
        if rec.parent:
            parent = self._resolve_queue(recs, rec.parent, seen | {name})
            if parent is None:
                return None
        q = QueueState(rec=rec, parent=parent, depth=parent.depth + 1 if parent else 0)
        if parent is not None:
            parent.children.append(q)
        self.queues[name] = q
        return q

    def _task_status(self, pod: PodRecord, binds: dict[tuple[str, str], tuple[str, tuple[str, ...]]]
                     ) -> tuple[str, str, tuple[str, ...]]:
        """(status, node, gpu groups): Succeeded/Failed keep their phase; Running is Releasing when deleting;
        Pending is Releasing when deleting, Bound with a node, Binding with a live BindRequest, else Gated or
        Pending; any other phase is Unknown."""
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

    def _binds(self) -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
        return {(b.namespace, b.pod_name): (b.selected_node, b.gpu_groups)
                for b in self.snapshot.bindrequests if not b.failed and b.selected_node}

    def _open_pods_and_jobs(self) -> None:
        # The hottest code of session open (one pass over every pod and every PodGroup): common cases are
        # inlined; the general rules live in _task_status / _occupy / _count / task_vector (sums are exact
        # integers, so the order does not matter). `_open_carried` rebuilds only what changed by the same rules.
        binds = self._binds()
        other = self.other_usage = [0, 0, 0]
        by_group: dict[tuple[str, str], list[Task]] = {}
        name = self.config.scheduler_name
        node_by_name = self.node_by_name
        occupy = self._occupy
        opened = self.carrying.opened
        tasks: list[Task] = opened.tasks_in_order if opened is not None else []
        tasks_append = tasks.append
        others = opened.others if opened is not None else {}
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
            tasks_append(task)
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
                        self._other_at_open(others, node.idx, pod)
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
        for o in others.values():
            other[0] += o[0]
            other[1] += o[1]
            other[2] += o[2]
        # Jobs asking for an optional feature (SubGroups, a topology constraint, a preemption delay on the
        # PodGroup or its first pod): the plugins of those features look only at these, not at every job.
        self.jobs, self.feature_jobs = [], []
        self._open_jobs(by_namespace_name(self.snapshot.podgroups), by_group,
                        self._job_rules(), True, opened)
        if opened is not None:  # the tasks of a PodGroup in no job, for a carried open (persist.py)
            loose, by_key = opened.loose, opened.by_key
            for key, members in by_group.items():
                entry = by_key.get(key)
                if entry is None or entry[1] is None:
                    loose[key] = members
                elif len(entry[1].tasks) != len(members):
                    loose[key] = [t for t in members if t.job is None]

    def _other_at_open(self, others: dict[int, list[int]], idx: int, pod: PodRecord) -> None:
        """A pod of another scheduler on node `idx` (not a reservation, not releasing): the queues do not divide
        what it uses. Kept per node so a carried open re-counts only the nodes it rebuilds."""
        o = others.get(idx)
        if o is None:
            o = others[idx] = [0, 0, 0]
        o[0] += pod.gpu.whole * GPU  # [gpu, cpu, memory]
        o[1] += pod.cpu
        o[2] += pod.memory

    def _job_rules(self) -> JobRules:
        priorities = {p.name: p.value for p in self.snapshot.priority_classes}
        default = next((p.value for p in sorted(self.snapshot.priority_classes, key=lambda p: p.name)
                        if p.global_default), keys.DEFAULT_PODGROUP_PRIORITY)
        return JobRules(priorities, default, {q: q.lineage() for q in self.queues.values()}, self.snapshot.node_pool,
                        {q.name: q.parent for q in self.snapshot.queues})

    def _open_jobs(self, podgroups: Iterable[PodGroupRecord], by_group: Mapping[tuple[str, str], list[Task]],
                   rules: JobRules, listed: bool, opened: Opened | None) -> list[Job | None]:
        """The job of each PodGroup from its member tasks (`by_group`), its usage added up its queue lineage; None
        for a PodGroup that sits out this node pool (one attempt per node pool). One loop for every job of a full
        open or the few a carried open rebuilds (`persist.py`), the per-session lookups hoisted out of it.
        `listed`: each job also joins the session's lists (jobs, victim candidates, feature jobs) and a job without
        its queue gets its error, in PodGroup order, as a full open does; `opened`: each PodGroup, its job and the
        job's usage are recorded for the next session's open."""
        out: list[Job | None] = []
        out_append = out.append
        jobs_append, victims_append, feature_append = self.jobs.append, self._victims.append, self.feature_jobs.append
        outcome, queue_parents = self.outcome, rules.queue_parents
        pgs = opened.pgs if opened is not None else None
        by_key = opened.by_key if opened is not None else None
        no_members: list[Task] = []
        queues = self.queues
        priorities, default, lineages, node_pool = rules.priorities, rules.default, rules.lineages, rules.node_pool
        count = self._count
        task_vector = self.task_vector
        task_order_key = self.framework.task_order_key
        threshold = keys.NON_PREEMPTIBLE_PRIORITY_THRESHOLD
        sums: dict[QueueState, list[int]] = {}  # per queue: allocated, allocated non-preemptible, requested
        for pg in podgroups:
            key = (pg.namespace, pg.name)
            if pg.scheduling_backoff == 1 and node_pool in pg.unschedulable_pools:
                if pgs is not None and by_key is not None:
                    pgs[id(pg)] = by_key[key] = (pg, None)
                out_append(None)
                continue
            members = by_group.get(key, no_members)
            queue = queues.get(pg.queue)
            priority = priorities.get(pg.priority_class, default)
            if pg.preemptibility in _EXPLICIT:
                preemptible = pg.preemptibility == keys.PREEMPTIBLE
            elif pg.preemptibility == keys.SEMI_PREEMPTIBLE:
                preemptible = True  # above its core; the semipreemptible plugin keeps the core's rules
            else:
                preemptible = priority < threshold
            if pg.subgroups:
                podsets = self._podsets(pg.subgroups, pg.min_member)
                podset_list = list(podsets.values())
            else:  # _podsets() of a PodGroup without sub-groups, without the dict (and max() inlined)
                min_member = pg.min_member
                podset_list = [PodSet(DEFAULT_SUBGROUP, min_member if min_member > 1 else 1)]
                podsets = None
            # Positional (rec, queue, priority, preemptible, podsets, has_subgroups, key): cheaper than keywords;
            # the key is the record's own, formatted once per record.
            job = Job(pg, queue, priority, preemptible, podset_list, bool(pg.subgroups), pg.key)
            if len(members) > 1:
                members.sort(key=task_order_key)
            alloc_gpu = alloc_cpu = alloc_mem = req_gpu = req_cpu = req_mem = 0
            job_tasks = job.tasks
            victim = False  # some task Running/Bound/Binding on a node (victim_candidates())
            for task in members:
                rec = task.rec
                if podsets is None:
                    sub = rec.subgroup
                    ps = podset_list[0] if not sub or sub == DEFAULT_SUBGROUP else None
                else:
                    ps = podsets.get(rec.subgroup or DEFAULT_SUBGROUP)
                if ps is None:
                    continue  # a pod whose subgroup is not in the PodGroup is ignored
                task.job, task.podset = job, ps
                job_tasks.append(task)
                ps.tasks.append(task)
                # Per status: the podset's counters (_count), whether the task is a victim candidate's (Running /
                # Bound / Binding on a node), whether it counts for the queue's request (Pending, allocated, or
                # waiting only for quota: quotagates' demand) and allocation (QUEUE_ALLOCATED). The two common
                # statuses take their answers without a set lookup.
                status = task.status
                if status == RUNNING:
                    if not victim and task.node >= 0:
                        victim = True
                    ps.active_allocated += 1
                    ps.active_used += 1
                    ps.alive += 1
                    queued = allocated = True
                elif status == PENDING:
                    ps.alive += 1
                    task.fit_key = rec.fit_key
                    ps.pending.append(task)
                    queued, allocated = True, False
                else:
                    if not victim and status in VICTIM_STATUSES and task.node >= 0:
                        victim = True
                    count(ps, status, +1)
                    allocated = status in QUEUE_ALLOCATED
                    queued = allocated or (status == GATED and rec.quota_gated)
                if queued and queue is not None:
                    gpu = rec.gpu
                    if gpu.is_shared:
                        need_gpu, need_cpu, need_mem = task_vector(task)
                    else:  # task_vector() of a whole-GPU or CPU-only task, inlined (once per pod)
                        need_gpu, need_cpu, need_mem = gpu.whole * GPU, rec.cpu, rec.memory
                    req_gpu += need_gpu
                    req_cpu += need_cpu
                    req_mem += need_mem
                    if allocated:
                        alloc_gpu += need_gpu
                        alloc_cpu += need_cpu
                        alloc_mem += need_mem
            out_append(job)
            if listed:
                jobs_append(job)
            if victim and preemptible and queue is not None:
                job.open_victim = True
                if listed:
                    victims_append(job)
            if podsets is None:
                job.allocated_at_open = podset_list[0].active_allocated - podset_list[0].pipelined
            else:
                job.allocated_at_open = sum(p.active_allocated - p.pipelined for p in podset_list)
            if pg.optional_features or (job_tasks and job_tasks[0].rec.preemption_delay is not None):
                job.feature = True
                if listed:
                    feature_append(job)
            if pgs is not None and by_key is not None:
                pgs[id(pg)] = by_key[key] = (pg, job)
            if queue is None:
                if listed:
                    outcome(job).errors.append(explain.unusable_queue(pg.queue, queue_parents))
                continue
            if opened is not None:
                job.usage = (alloc_gpu, alloc_cpu, alloc_mem, req_gpu, req_cpu, req_mem)
            # _add_queue(queue, allocated, preemptible, +1), then the request: summed per queue here and added up
            # each queue's lineage once below, not once per job (exact integer sums, so the order does not matter).
            acc = sums.get(queue)
            if acc is None:
                acc = sums[queue] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
            acc[0] += alloc_gpu
            acc[1] += alloc_cpu
            acc[2] += alloc_mem
            if not preemptible:
                acc[3] += alloc_gpu
                acc[4] += alloc_cpu
                acc[5] += alloc_mem
            acc[6] += req_gpu
            acc[7] += req_cpu
            acc[8] += req_mem
        for queue, acc in sums.items():
            for q in lineages[queue]:
                alloc, anp, req = q.allocated, q.allocated_np, q.request
                alloc[0] += acc[0]
                alloc[1] += acc[1]
                alloc[2] += acc[2]
                anp[0] += acc[3]
                anp[1] += acc[4]
                anp[2] += acc[5]
                req[0] += acc[6]
                req[1] += acc[7]
                req[2] += acc[8]
        return out

    @staticmethod
    def _podsets(subgroups: tuple[SubGroupSpec, ...], min_member: int) -> dict[str, PodSet]:
        if not subgroups:
            return {DEFAULT_SUBGROUP: PodSet(DEFAULT_SUBGROUP, max(min_member, 1))}
        parents = {s.parent for s in subgroups}
        return {s.name: PodSet(s.name, max(s.min_member, 1)) for s in subgroups if s.name not in parents}

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
                    s[SCALAR_IDLE] -= qty
                    if releasing:
                        s[SCALAR_RELEASING] += qty
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
            portion = portion_on_node(rec.gpu, node) or 0
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

    def _open_total(self) -> None:
        # What the queues divide: the ready nodes' capacity less what pods outside the queues use (the
        # proportion plugin's fair shares are computed from it when the session opens).
        ready = [n for n in self.nodes if n.rec.ready]
        other_gpu, other_cpu, other_mem = self.other_usage
        self.total = (
            max(0, sum(n.cap_gpu for n in ready) * GPU - other_gpu),
            max(0, sum(n.cap_cpu for n in ready) - other_cpu),
            max(0, sum(n.cap_mem for n in ready) - other_mem),
        )

    def _open_pod_index(self) -> PodIndex | None:
        opened = self.carrying.opened
        needed = opened.affinity if opened is not None else None  # known from a carried open (persist.py)
        if needed is None:
            # Most pods share a few Constraints objects: look at each distinct object once before scanning pods.
            distinct = {id(c): c for c in map(_constraints, self.snapshot.pods)}
            needed = any(map(_needs_pod_index, distinct.values()))
            if opened is not None:
                opened.affinity = needed
        if not needed:
            return None
        index = PodIndex()
        for pod_task in self._tasks_on_nodes():
            index.add(pod_task.rec, pod_task.node)
        return index

    def _tasks_on_nodes(self) -> list[Task]:
        # Rebuilt on demand (rare: only when inter-pod affinity is in play).
        binds = self._binds()
        out = []
        for pod in self.snapshot.pods:
            status, node_name, _ = self._task_status(pod, binds)
            node = self.node_by_name.get(node_name) if node_name else None
            if node is not None and status in ACTIVE_USED:
                out.append(Task(rec=pod, status=status, node=node.idx))
        return out
