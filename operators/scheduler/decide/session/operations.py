"""Statement operations and their accounting; `Statement`, the undoable operations of one job attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.decisions import Bind, Eviction, Pipelined
from operators.scheduler.decide.model import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    RELEASING,
    SCALAR_IDLE,
    GpuGroup,
    Job,
    QueueState,
    Task,
)
from operators.scheduler.decide.placement.gpus import format_portion
from operators.scheduler.decide.placement.search import Placement
from operators.scheduler.decide.session.accounting import STATUS_MOVES, Accounting, status_move
from operators.scheduler.decide.units import GPU

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


class Operations(Accounting):
    """What statement operations do to the session state: place / unplace a task (node resources, GPU
    groups, ports, pod index, node index), status moves with their podset and queue accounting, evictions, and
    the decisions a commit turns the surviving operations into."""

    def _place(self, task: Task, placement: Placement, status: str) -> tuple[int, ...]:
        node = self.nodes[placement.node]
        rec = task.rec
        # Each resource is taken from what is idle first, min(request, max(idle, 0)), the rest from what is
        # releasing; written as comparisons (requests are never negative), not min/max calls (hot: once per pod).
        cpu, mem, whole = rec.cpu, rec.memory, rec.gpu.whole
        idle = node.idle_cpu
        ic = cpu if idle >= cpu else idle if idle > 0 else 0
        idle = node.idle_mem
        im = mem if idle >= mem else idle if idle > 0 else 0
        idle = node.idle_gpu
        ig = whole if idle >= whole else idle if idle > 0 else 0
        rc, rm, rg = cpu - ic, mem - im, whole - ig  # the rest comes out of what is releasing
        taken = (ic, rc, im, rm, ig, rg)
        node.idle_cpu -= ic
        node.rel_cpu -= rc
        node.idle_mem -= im
        node.rel_mem -= rm
        node.idle_gpu -= ig
        node.rel_gpu -= rg
        node.n_pods += 1
        if rec.scalars and node.scalars:
            for name, qty in rec.scalars:
                s = node.scalars[name]
                s[SCALAR_IDLE] -= qty
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

    def _unplace(self, task: Task, placement: Placement, taken: tuple[int, ...], prev: str) -> None:
        node = self.nodes[placement.node]
        rec = task.rec
        if self.pod_index is not None:
            self.pod_index.remove(rec)
        self._set_status(task, prev)
        ic, rc, im, rm, ig, rg = taken  # (idle, releasing) cpu, memory, gpu, as _place took them
        node.idle_cpu += ic
        node.rel_cpu += rc
        node.idle_mem += im
        node.rel_mem += rm
        node.idle_gpu += ig
        node.rel_gpu += rg
        node.n_pods -= 1
        if rec.scalars and node.scalars:
            for name, qty in rec.scalars:
                node.scalars[name][SCALAR_IDLE] += qty
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
            task.portion = 0
        if rec.constraints.host_ports and node.ports is not None:
            for p in rec.constraints.host_ports:
                node.ports[p] -= 1
        task.node = -1
        self._free_dirty.add(node.idx)
        self.index.update(node)

    def _set_status(self, task: Task, status: str) -> None:
        """Move a task between statuses, keeping podset counters, pending lists and queue accounting."""
        job = task.job
        if job is not None:
            self._touched.add(job)
        old = task.status
        if old == status:
            return
        # `status_move`, `_move_counts` and `_add_queue` inlined: this runs at every placement, eviction and undo.
        move = STATUS_MOVES.get((old, status)) or status_move(old, status)
        a, p, u, al, g, sign = move
        ps = task.podset
        if ps is not None:
            if a:
                ps.active_allocated += a
            if p:
                ps.pipelined += p
            if u:
                ps.active_used += u
            if al:
                ps.alive += al
            if g:
                ps.gated += g
            if old == PENDING:
                ps.pending.remove(task)
            if status == PENDING:
                ps.pending.append(task)
                ps.pending.sort(key=self.framework.task_order_key)
        # Virtual allocations (incl. pipelined) count for ordering and capacity checks in this session: the task's
        # vector, signed, added to its queue and every ancestor ([gpu, cpu, memory] lists written in place).
        if sign and job is not None and job.queue is not None:
            rec = task.rec  # task_vector() of a whole-GPU or CPU-only task inlined (once per placement)
            if rec.gpu.is_shared:
                v0, v1, v2 = self.task_vector(task)
            else:
                v0, v1, v2 = rec.gpu.whole * GPU, rec.cpu, rec.memory
            if sign != 1:
                v0, v1, v2 = sign * v0, sign * v1, sign * v2
            q: QueueState | None = job.queue
            if job.preemptible:
                while q is not None:
                    alloc = q.allocated
                    alloc[0] += v0
                    alloc[1] += v1
                    alloc[2] += v2
                    q = q.parent
            else:
                while q is not None:
                    alloc = q.allocated
                    alloc[0] += v0
                    alloc[1] += v1
                    alloc[2] += v2
                    alloc = q.allocated_np
                    alloc[0] += v0
                    alloc[1] += v1
                    alloc[2] += v2
                    q = q.parent
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

    def _restore_origin(self, task: Task, origin: tuple[int, tuple[str, ...], int]) -> None:
        """Undo of a move: the task is back (Releasing) on the node it was evicted from."""
        task.node, task.groups, task.portion = origin
        if task.job is not None:
            self._touched.add(task.job)
        if self.pod_index is not None:
            self.pod_index.add(task.rec, task.node)

    def _commit(self, ops: list[Op]) -> None:
        started: set[str] = set()
        pipelined_jobs: set[str] = set()
        jobs: dict[str, Job] = {}  # the ops' jobs, in the order they first appear
        nodes, decisions = self.nodes, self.decisions
        binds = decisions.binds
        for op in ops:
            task = op.task
            job = task.job
            if job is not None:
                jobs[job.key] = job
                pg = job.rec.name
            else:
                pg = ""
            node = nodes[task.node].rec.name if task.node >= 0 else ""
            kind = op.kind
            if kind == "allocate":
                binds.append(self._bind(task, node, pg))
                if job is not None:
                    started.add(job.key)
            elif kind == "pipeline":
                decisions.pipelined.append(Pipelined(
                    task.namespace, task.name, pg, node, explain.pipelined_message(task.namespace, task.name, node),
                    task.groups))
                if job is not None:
                    pipelined_jobs.add(job.key)
            else:
                decisions.evictions.append(Eviction(task.namespace, task.name, pg, op.action, op.for_job,
                                                    op.message))
        for key, job in jobs.items():
            if key in started:
                if key not in pipelined_jobs and job.allocated_at_open == 0 and not job.bound_in_session:
                    self.last_start[key] = self.now_text
                job.bound_in_session = True

    def _bind(self, task: Task, node: str, pod_group: str) -> Bind:
        rec = task.rec
        gpu = rec.gpu
        if gpu.is_shared:
            return Bind(rec.namespace, rec.name, pod_group, node, keys.RESOURCE_TYPE_FRACTION, task.groups,
                        format_portion(task.portion), gpu.num_devices, task.claims)
        whole = gpu.whole
        return Bind(rec.namespace, rec.name, pod_group, node, keys.RESOURCE_TYPE_REGULAR, (),
                    _WHOLE_PORTION if whole else _NO_PORTION, whole, task.claims)


# The portion a whole-GPU or CPU-only pod's BindRequest carries, formatted once.
_WHOLE_PORTION = format_portion(GPU)
_NO_PORTION = format_portion(0)


@dataclass(slots=True)
class Op:
    kind: str  # allocate | pipeline | evict
    task: Task
    prev_status: str
    placement: Placement | None = None
    taken: tuple[int, ...] = ()  # (idle cpu, rel cpu, idle mem, rel mem, idle gpu, rel gpu)
    action: str = ""
    for_job: str = ""
    message: str = ""
    # Where an evicted (Releasing) task was before it was pipelined elsewhere (a consolidation move):
    # (node, gpu groups, portion), restored on rollback so the undone eviction finds its node again.
    moved_from: tuple[int, tuple[str, ...], int] | None = None


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
        for handler in session.framework.on_allocate:
            handler(session, task, "allocate")

    def pipeline(self, task: Task, placement: Placement) -> None:
        prev = task.status
        moved_from = (task.node, task.groups, task.portion) if task.node >= 0 else None
        session = self.session
        taken = session._place(task, placement, PIPELINED)
        self.ops.append(Op("pipeline", task, prev, placement, taken, moved_from=moved_from))
        for handler in session.framework.on_allocate:
            handler(session, task, "pipeline")

    def evict(self, task: Task, action: str, for_job: str, message: str) -> None:
        prev = task.status
        session = self.session
        session._evict(task)
        self.ops.append(Op("evict", task, prev, action=action, for_job=for_job, message=message))
        for handler in session.framework.on_deallocate:
            handler(session, task, "evict")

    def unevict(self, task: Task) -> None:
        """Undo this statement's eviction of `task` alone, whatever came after it (the background pods plugin
        gives a pod its place back at session close)."""
        i = next(i for i, op in enumerate(self.ops) if op.kind == "evict" and op.task is task)
        op = self.ops.pop(i)
        session = self.session
        session._unevict(task, op.prev_status)
        for handler in session.framework.on_allocate:
            handler(session, task, "rollback")

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        session = self.session
        while len(self.ops) > checkpoint:
            op = self.ops.pop()
            if op.kind == "evict":
                session._unevict(op.task, op.prev_status)
                for handler in session.framework.on_allocate:
                    handler(session, op.task, "rollback")
            else:
                assert op.placement is not None
                session._unplace(op.task, op.placement, op.taken, op.prev_status)
                if op.moved_from is not None:
                    session._restore_origin(op.task, op.moved_from)
                for handler in session.framework.on_deallocate:
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
