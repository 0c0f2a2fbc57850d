"""Mutable per-session state: nodes, GPU groups, tasks, podsets, jobs and queues.

Built from the immutable snapshot at session open; statements mutate it and undo their mutations. Tasks, jobs
and nodes a cycle did not touch are handed to the next cycle's session (`session/persist.py`).
Amounts are integers in the core units of `units`: millicores, bytes, whole devices on a node, micro-GPUs for
shared-device portions and for queue and job vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from operators.core.api.queue import QueueRecord
from operators.scheduler.decide.records import NodeRecord, PodGroupRecord, PodRecord
from operators.scheduler.decide.units import GPU, as_vector

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

# Task statuses (KAI pod_status).
PENDING = "Pending"
GATED = "Gated"
ALLOCATED = "Allocated"
PIPELINED = "Pipelined"
BINDING = "Binding"
BOUND = "Bound"
RUNNING = "Running"
RELEASING = "Releasing"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
UNKNOWN = "Unknown"

ACTIVE_ALLOCATED = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING})
ACTIVE_USED = ACTIVE_ALLOCATED | {RELEASING}
ALIVE = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, PENDING, GATED})
# Statuses counted as a queue's allocation (no Pipelined, no Releasing).
QUEUE_ALLOCATED = frozenset({ALLOCATED, BOUND, BINDING, RUNNING})
# Statuses that occupy node capacity.
ON_NODE = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING, UNKNOWN})
# Statuses of pods that may be evicted (their placement already exists in the cluster).
VICTIM_STATUSES = frozenset({RUNNING, BOUND, BINDING})



# The entries of a NodeState's per-scalar-resource list [capacity, idle, releasing].
SCALAR_CAPACITY, SCALAR_IDLE, SCALAR_RELEASING = 0, 1, 2

@dataclass(slots=True, eq=False)
class GpuGroup:
    """One physical GPU shared by fractional pods; portions (micro-GPUs) are fractions of the device's memory."""

    id: str
    used: int = 0  # portions of non-releasing pods
    releasing: int = 0
    pods: int = 0

    @property
    def free(self) -> int:
        return GPU - self.used - self.releasing

    @property
    def fully_releasing(self) -> bool:
        return self.used <= 0 and self.releasing > 0


@dataclass(slots=True, eq=False)  # identity semantics: hashable, cheap `in` / `remove`
class NodeState:
    idx: int
    rec: NodeRecord
    ok: bool  # Ready (a cordoned node too: its predicates admit only pods tolerating the cordon)
    cap_cpu: int
    cap_mem: int
    cap_gpu: int
    max_pods: int
    idle_cpu: int
    idle_mem: int
    idle_gpu: int  # whole devices not used by anyone (shared devices excluded)
    rel_cpu: int = 0
    rel_mem: int = 0
    rel_gpu: int = 0  # whole devices
    n_pods: int = 0
    scalars: dict[str, list[int]] | None = None  # name -> [capacity, idle, releasing]: SCALAR_* index it
    groups: dict[str, GpuGroup] = field(default_factory=dict)
    ports: dict[tuple[str, int, str], int] | None = None
    gpu_total: int = 0  # for spread: the GPU count label if present

    @property
    def name(self) -> str:
        return self.rec.name

    @property
    def free_gpu(self) -> int:
        """Whole devices idle or releasing."""
        return self.idle_gpu + self.rel_gpu

    @property
    def free_cpu(self) -> int:
        return self.idle_cpu + self.rel_cpu

    def best_group_free(self) -> int:
        return max((g.free for g in self.groups.values() if not g.fully_releasing), default=0)


@dataclass(slots=True, eq=False)  # identity semantics: hashable, cheap `in` / `remove`
class Task:
    rec: PodRecord
    status: str
    node: int = -1
    groups: tuple[str, ...] = ()
    portion: int = 0  # per-device portion on the node (micro-GPUs), for fractional pods
    job: Job | None = None
    podset: PodSet | None = None
    order: tuple[object, ...] = ()
    fit_key: tuple[object, ...] = ()
    # DRA: (pod claim name, status.allocation JSON) of each claim, set by the dynamicresources plugin when placed.
    claims: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.rec.name

    @property
    def namespace(self) -> str:
        return self.rec.namespace

    @property
    def fractional(self) -> bool:
        return self.rec.gpu.is_shared

    @property
    def devices(self) -> int:
        return self.rec.gpu.num_devices if self.rec.gpu.is_shared else 0


@dataclass(slots=True, eq=False)  # identity semantics: hashable, cheap `in` / `remove`
class PodSet:
    """A leaf subgroup (or the implicit `default` one) with its gang minimum."""

    name: str
    min_available: int
    tasks: list[Task] = field(default_factory=list)
    active_allocated: int = 0
    pipelined: int = 0
    active_used: int = 0
    alive: int = 0
    gated: int = 0
    pending: list[Task] = field(default_factory=list)  # task order; consumed from the front
    # Semi-preemptible jobs: allocated pods kept from victims beyond min_available (minNonPreemptible).
    core: int = 0

    @property
    def below_min(self) -> bool:
        return self.active_allocated < self.min_available


@dataclass(slots=True, eq=False)  # identity semantics: hashable, cheap `in` / `remove`
class Job:
    rec: PodGroupRecord
    queue: QueueState | None
    priority: int
    preemptible: bool
    podsets: list[PodSet]
    has_subgroups: bool
    key: str  # "namespace/name": the PodGroup record's key, passed in (no __post_init__ per job)
    tasks: list[Task] = field(default_factory=list)
    allocated_at_open: int = 0  # active-allocated pods (non-pipelined) when the session opened
    pipelined_in_session: bool = False
    bound_in_session: bool = False
    # Derived at session open with the rest (kept so a job carried to the next session is not visited again):
    # what it adds to its queue lineage (allocated gpu, cpu, memory, then requested), whether it is a victim
    # candidate, whether it asks for an optional feature.
    usage: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)
    open_victim: bool = False
    feature: bool = False

    @property
    def namespace(self) -> str:
        return self.rec.namespace

    @property
    def name(self) -> str:
        return self.rec.name

    @property
    def min_total(self) -> int:
        return sum(p.min_available for p in self.podsets)

    def pending_count(self) -> int:
        return sum(len(p.pending) for p in self.podsets)

    def elastic_state(self) -> int:
        """0: some podset below minimum, 1: all exactly at minimum, 2: above minimum (elastic plugin)."""
        if any(p.active_allocated < p.min_available for p in self.podsets):
            return 0
        if all(p.active_allocated == p.min_available for p in self.podsets):
            return 1
        return 2

    def ready(self) -> bool:
        return all(p.alive - p.gated >= p.min_available for p in self.podsets)


@dataclass(slots=True, eq=False)  # identity semantics: hashable, cheap `in` / `remove`
class QueueState:
    rec: QueueRecord
    parent: QueueState | None = None
    children: list[QueueState] = field(default_factory=list)
    # (micro-GPUs, millicores, bytes)
    allocated: list[int] = field(default_factory=lambda: [0, 0, 0])
    allocated_np: list[int] = field(default_factory=lambda: [0, 0, 0])
    request: list[int] = field(default_factory=lambda: [0, 0, 0])
    fair_share: tuple[int, int, int] = (0, 0, 0)
    alloc_share: tuple[int, int, int] = (0, 0, 0)
    # steadyFairShareReclaim (micro-GPUs): the GPU share if every weighted queue asked for the whole cluster, and
    # what the queue may keep on that reclaim path (max(quota, steady), capped by the limit); -1: not computed.
    steady_share: int = -1
    steady_keep: int = -1
    depth: int = 0

    @property
    def name(self) -> str:
        return self.rec.name

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def lineage(self) -> list[QueueState]:
        """This queue and its ancestors, leaf first."""
        out: list[QueueState] = []
        q: QueueState | None = self
        while q is not None:
            out.append(q)
            q = q.parent
        return out


@dataclass(slots=True, eq=False)
class Chunk:
    """Pods of one victim job that are evicted together."""

    job: Job
    tasks: list[Task]
    core: bool  # the job's remaining pods (False: one elastic pod above minMember)
    _vector: tuple[int, int, int] | None = None

    def vector(self, session: Session) -> tuple[int, int, int]:
        """(micro-GPUs, millicores, bytes) the chunk counts for its queue (fixed while the chunk is a candidate)."""
        if self._vector is None:
            self._vector = as_vector(session.job_request(self.tasks))
        return self._vector
