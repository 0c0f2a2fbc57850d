"""The session's state declarations and the accounting shared by all its parts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from operators.scheduler.decide import explain
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.framework import Framework
from operators.scheduler.decide.model import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    ALIVE,
    GATED,
    PIPELINED,
    QUEUE_ALLOCATED,
    Job,
    NodeState,
    PodSet,
    QueueState,
    Task,
)
from operators.scheduler.decide.placement.gpus import fraction_units
from operators.scheduler.decide.placement.predicates import PodIndex
from operators.scheduler.decide.placement.scoring import NodeIndex
from operators.scheduler.decide.placement.search import Placer
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.session.carry import Carrying
from operators.scheduler.decide.snapshot import Snapshot
from operators.scheduler.decide.units import CPU_AXIS, GPU, GPU_AXIS, MEMORY_AXIS, gpu_memory_share

DEFAULT_SUBGROUP = "default"

# What a task's move between two statuses changes: its podset's (active_allocated, pipelined, active_used, alive,
# gated) counters and its queue's allocation (+1 / -1 / 0: counted as allocated, pipelined included, after / before).
StatusMove = tuple[int, int, int, int, int, int]
STATUS_MOVES: dict[tuple[str, str], StatusMove] = {}


def _counted(status: str) -> tuple[int, int, int, int, int, int]:
    return (int(status in ACTIVE_ALLOCATED), int(status == PIPELINED), int(status in ACTIVE_USED),
            int(status in ALIVE), int(status == GATED), int(status in QUEUE_ALLOCATED or status == PIPELINED))


def status_move(old: str, new: str) -> StatusMove:
    """The differences a move from `old` to `new` makes (statuses are a few constants: each pair is derived from
    the status sets once, then looked up, instead of testing both statuses against every set at every move)."""
    move = STATUS_MOVES.get((old, new))
    if move is None:
        before, after = _counted(old), _counted(new)
        a, p, u, al, g, q = (y - x for x, y in zip(before, after, strict=True))
        move = STATUS_MOVES[old, new] = (a, p, u, al, g, q)
    return move


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
class JobOutcome:
    errors: list[explain.JobError] = field(default_factory=list)
    failure: FailedAttempt | None = None


class Accounting:
    """The session's state (declared here, set at open) and the accounting every part of the session shares:
    a task's queue vector, podset counters, queue allocation, and per-job outcomes."""

    config: SchedulerConfig
    now: float
    now_text: str
    snapshot: Snapshot
    decisions: Decisions
    outcomes: dict[str, JobOutcome]
    simulating: bool  # inside a disruptive search's simulations (Solver.solve): attempts there are not allocate's
    last_start: dict[str, str]
    framework: Framework
    nodes: list[NodeState]
    node_by_name: dict[str, NodeState]
    min_gpu_memory: int
    queues: dict[str, QueueState]
    other_usage: list[int]
    jobs: list[Job]
    feature_jobs: list[Job]
    total: tuple[int, int, int]
    index: NodeIndex
    pod_index: PodIndex | None
    placer: Placer
    carrying: Carrying
    _unlimited_cache: dict[QueueState, bool]
    _summaries: dict[tuple[object, ...], str]
    _free_dirty: set[int]
    _pending_jobs: list[Job] | None
    _victims: list[Job]
    _touched: set[Job]

    def has_fit_summaries(self, keys: Iterable[object]) -> bool:
        """Whether every one of these pod shapes' fit summaries has been made this cycle (each is made once, on
        the state of its shape's first failure)."""
        summaries = self._summaries
        return all(k in summaries for k in keys)

    def tasks_to_allocate(self, job: Job) -> list[Task]:
        """The pods of the job's next attempt (the gang plugin's rule)."""
        return self.framework.gang.tasks_to_allocate(job)

    def task_vector(self, task: Task) -> tuple[int, int, int]:
        """(micro-GPUs, cpu millicores, memory bytes) a task counts for its queue.

        A shared pod counts its per-device portion times its devices: the portion it holds on its node once
        placed, else its gpu-fraction, else (gpu-memory, not placed) its MiB over the smallest device's MiB,
        rounded up to a micro-GPU. Callers on hot paths inline the whole-GPU / CPU-only case
        (`rec.gpu.whole * GPU, rec.cpu, rec.memory`) and call this only for shared pods."""
        rec = task.rec
        gpu = rec.gpu
        v0 = gpu.whole * GPU
        if gpu.is_shared:
            if task.node >= 0 and task.portion:
                v0 += task.portion * gpu.num_devices
            elif gpu.portion is not None:
                v0 += fraction_units(gpu.portion) * gpu.num_devices
            elif gpu.memory_mib is not None:
                v0 += gpu_memory_share(gpu.num_devices * gpu.memory_mib, self.min_gpu_memory)
        return v0, rec.cpu, rec.memory

    def job_request(self, tasks: Iterable[Task]) -> list[int]:
        """The summed task_vector() of `tasks`."""
        t0 = t1 = t2 = 0
        for t in tasks:
            rec = t.rec
            if rec.gpu.is_shared:
                v0, v1, v2 = self.task_vector(t)
            else:  # task_vector() of a whole-GPU or CPU-only task, inlined (hot path)
                v0, v1, v2 = rec.gpu.whole * GPU, rec.cpu, rec.memory
            t0 += v0
            t1 += v1
            t2 += v2
        return [t0, t1, t2]

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

    @staticmethod
    def add_up_lineage(queue: QueueState, field: str, vec: Sequence[int], sign: int) -> None:
        """Add `sign * vec` to the vector `field` (`request`, `allocated_np`, ...) of the queue and its ancestors."""
        gpu, cpu, mem = vec
        for q in queue.lineage():
            acc = getattr(q, field)
            acc[GPU_AXIS] += sign * gpu
            acc[CPU_AXIS] += sign * cpu
            acc[MEMORY_AXIS] += sign * mem

    def unlimited(self, queue: QueueState) -> bool:
        """No limit on any resource at this queue or any ancestor (limits are fixed for the session)."""
        cache = self._unlimited_cache
        hit = cache.get(queue)
        if hit is None:
            hit = cache[queue] = all(limit == UNLIMITED for q in queue.lineage() for limit in q.rec.limit)
        return hit

    def outcome(self, job: Job) -> JobOutcome:
        out = self.outcomes.get(job.key)
        if out is None:
            out = self.outcomes[job.key] = JobOutcome()
        return out
