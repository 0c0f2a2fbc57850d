"""What one cycle derived that the next reuses: per-job results keyed by the identity of the records they came from.

Records are frozen and the shell shares them between cycles while their object is unchanged (an update, a relist
or a re-parse gives a new object). So a result computed from some records, under the same config, is the same
result next cycle when every one of those records is the same object again; anything else is recomputed. The
carry is an immutable value: `decide` takes the previous one and returns the next, the shell only keeps it.

Reused, provably identical to a recomputation:
- at session open, a job's derivation from its PodGroup and its members (`JobPiece`): the task order, which podset
  each task is in, the podset counters, the pending tasks, the queue sums and whether a member may be a victim,
  when the PodGroup record and the members' records are the same objects (else equal ones) in the same snapshot
  order and their statuses and node indices are equal; the session still makes a fresh `Task` per pod (the actions
  mutate them) and links it, without the rules (a shared-GPU member's portion on its node and the smallest GPU
  memory are inputs too: its queue vector depends on them);
- at close, a job's Unschedulable explanation, when its PodGroup record and its pending pods' records are the same
  objects and its errors, its failing task's summary and its has-allocated flag are equal (the text is a function
  of those, the config's node pool and the PodGroup's backoff).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, eq, is_, itemgetter
from types import MappingProxyType
from typing import Any

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Unschedulable
from operators.scheduler.decide.explain import JobError
from operators.scheduler.decide.model import Task
from operators.scheduler.decide.records import PodGroupRecord, PodRecord

GroupKey = tuple[str, str]  # (namespace, PodGroup name)
_rec = attrgetter("rec")
_status = attrgetter("status")
_node = attrgetter("node")
_portion = attrgetter("portion")


# What one job's explanation is computed from: its PodGroup record, its pending pods' records, its errors, its failing
# task and that task's fit summary (or None), and whether it has allocated pods. A plain tuple: one is built for every
# job explained afresh, each cycle, and a frozen dataclass costs several times more to construct.
Explained = tuple[PodGroupRecord, tuple[PodRecord, ...], tuple[JobError, ...], "tuple[str, str] | None", bool]


# One podset's derivation at session open: its counters (active_allocated, pipelined, active_used, alive, gated),
# the positions of its tasks in the job's sorted task list (None: all of them) and of its pending tasks.
PodSetPiece = tuple[int, int, int, int, int, "tuple[int, ...] | None", tuple[int, ...]]
# One job's derivation from its PodGroup record and its members (session open): the PodGroup record, the members'
# records, statuses and node indices in snapshot order (its inputs), then the task order (an itemgetter of the
# sorted positions; None: one member), its podsets, the positions of the job's tasks (None: all members), the
# queue sums (allocated gpu/cpu/mem, requested gpu/cpu/mem), whether a member may be a victim, and for a job with
# shared-GPU members the rest of its inputs (the session's smallest GPU memory, the members' portions), else None.
JobPiece = tuple[PodGroupRecord, tuple[PodRecord, ...], tuple[str, ...], tuple[int, ...],
                 "itemgetter[Any] | None", tuple[PodSetPiece, ...], "tuple[int, ...] | None",
                 tuple[int, int, int, int, int, int], bool, "tuple[int, tuple[int, ...]] | None"]


@dataclass(frozen=True, slots=True)
class Carry:
    """The derived state a cycle hands to the next (see the module doc); `reused` counts the explanations it took
    from its predecessor (for benchmarks and proofs)."""

    config: SchedulerConfig
    explanations: Mapping[GroupKey, tuple[Explained, Unschedulable]]
    reused: int = 0
    jobs: Mapping[GroupKey, JobPiece] = field(default_factory=dict)  # session open's per-job derivations
    jobs_reused: int = 0


@dataclass(slots=True)
class Carrying:
    """A session's side of the carry: reads the previous cycle's, collects the next."""

    config: SchedulerConfig
    previous: Carry | None = None
    explanations: dict[GroupKey, tuple[Explained, Unschedulable]] = field(default_factory=dict)
    reused: int = 0
    jobs: dict[GroupKey, JobPiece] = field(default_factory=dict)
    jobs_reused: int = 0
    _old_explanations: Mapping[GroupKey, tuple[Explained, Unschedulable]] = field(default_factory=dict)
    _old_jobs: Mapping[GroupKey, JobPiece] = field(default_factory=dict)
    min_gpu_memory: int = 0  # the session's, set once its nodes are open (a shared pod's queue vector uses it)

    def __post_init__(self) -> None:
        prev = self.previous
        # Results depend on the config (the plugins' messages and task order, the node pool): another config
        # starts afresh.
        if prev is not None and (prev.config is self.config or prev.config == self.config):
            self._old_explanations = prev.explanations
            self._old_jobs = prev.jobs
        self.previous = None  # the old carry is not kept alive past this session

    def job_piece(self, key: GroupKey, podgroup: PodGroupRecord, members: Sequence[Task]) -> JobPiece | None:
        """Last cycle's derivation of this job if it came from the same inputs, else None; kept for the next cycle.

        The same inputs: the PodGroup record and the members' records (the same objects, else equal ones, as a
        re-made record is), in the same snapshot order, with equal statuses and node indices, and for a job with
        shared-GPU members equal portions on their nodes and the same smallest GPU memory (a shared pod's queue
        vector depends on those). The derivation is a function of these and of the config (checked once for the
        carry)."""
        old = self._old_jobs.get(key)
        if old is None or len(old[1]) != len(members):
            return None
        was = old[1]
        same = all(map(is_, was, map(_rec, members)))
        recs = was if same else tuple(map(_rec, members))
        if not same and was != recs:
            return None
        if not (all(map(eq, old[2], map(_status, members))) and all(map(eq, old[3], map(_node, members)))):
            return None
        shared = old[9]
        if shared is not None and (shared[0] != self.min_gpu_memory
                                   or not all(map(eq, shared[1], map(_portion, members)))):
            return None
        if old[0] is not podgroup:
            if old[0] != podgroup:
                return None
            same = False
        if not same:  # equal new records: keep them, so the next cycle's check is by identity
            old = (podgroup, recs, *old[2:])
        self.jobs_reused += 1
        self.jobs[key] = old
        return old

    def keep_job(self, key: GroupKey, piece: JobPiece) -> None:
        self.jobs[key] = piece

    def explanation(self, key: GroupKey, podgroup: PodGroupRecord, pending: Sequence[Task], errors: list[JobError],
                    failed: tuple[str, str] | None, has_allocated: bool) -> tuple[Unschedulable | None, Explained]:
        """Last cycle's Unschedulable if computed from the same inputs (else None), and this cycle's inputs."""
        recs = tuple(map(_rec, pending))
        old = self._old_explanations.get(key)
        if old is not None:
            was = old[0]
            if (was[0] is podgroup and was[4] == has_allocated and was[3] == failed and len(was[1]) == len(recs)
                    and all(map(is_, was[1], recs)) and was[2] == tuple(errors)):
                self.reused += 1
                self.explanations[key] = old
                return old[1], was
        return None, (podgroup, recs, tuple(errors), failed, has_allocated)

    def explained(self, key: GroupKey, inputs: Explained, result: Unschedulable) -> None:
        self.explanations[key] = (inputs, result)

    def carry(self) -> Carry:
        return Carry(self.config, MappingProxyType(self.explanations), self.reused, MappingProxyType(self.jobs),
                     self.jobs_reused)
