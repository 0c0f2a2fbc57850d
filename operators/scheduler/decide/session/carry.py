"""What one cycle derived that the next reuses: per-job results keyed by the identity of the records they came from.

Records are frozen and the shell shares them between cycles while their object is unchanged (an update, a relist
or a re-parse gives a new object). So a result computed from some records, under the same config, is the same
result next cycle when every one of those records is the same object again; anything else is recomputed. The
carry is an immutable value (`decide` takes the previous one and returns the next, the shell only keeps it) but for
one part: `opened`, the session's tasks, jobs and nodes, which the next cycle's session takes over and mutates
(`session/persist.py`), so a carry is consumed by the cycle given it (given again, that cycle opens in full).

Reused, provably identical to a recomputation: a job's Unschedulable explanation (session close), when its
PodGroup record and its pending pods' records are the same objects and its errors, its failing task's summary and
its has-allocated flag are equal (the text is a function of those, the config's node pool and the PodGroup's
backoff). Session open's objects themselves are carried (`opened`, above); per-job pieces rebuilt from a carry on
every hit were measured and not kept (bench/README.md).
Replayed, provably identical to running them: allocate's failed attempts made before the cycle's first commit, and
disruptive actions that committed nothing, when the snapshot and config are equal to the previous cycle's and nothing
else they read changed (`session/repeats.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, is_
from types import MappingProxyType

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Unschedulable
from operators.scheduler.decide.explain import JobError
from operators.scheduler.decide.model import Job, NodeState, Task
from operators.scheduler.decide.records import PodGroupRecord, PodRecord
from operators.scheduler.decide.session.repeats import Repeating, Repeats
from operators.scheduler.decide.snapshot import Snapshot

GroupKey = tuple[str, str]  # (namespace, PodGroup name)
_rec = attrgetter("rec")


# What one job's explanation is computed from: its PodGroup record, its pending pods' records, its errors, its failing
# task and that task's fit summary (or None), and whether it has allocated pods. A plain tuple: one is built for every
# job explained afresh, each cycle, and a frozen dataclass costs several times more to construct.
Explained = tuple[PodGroupRecord, tuple[PodRecord, ...], tuple[JobError, ...], "tuple[str, str] | None", bool]


@dataclass(slots=True, eq=False)
class Opened:
    """What one session hands to the next session's open (`session/persist.py`): mutable, owned by one session at
    a time (the one given it takes it: `taken`)."""

    config: SchedulerConfig
    snapshot: Snapshot | None = None
    tasks_in_order: list[Task] = field(default_factory=list)  # parallel to snapshot.pods (after a full open)
    by_rec: dict[int, Task] | None = None  # id(pod record) -> its task, every pod of snapshot (after a carried open)
    # (namespace, name) -> the task of each Pending pod of snapshot, for the tasks a changed BindRequest reaches
    # (built by the first carried open whose BindRequests changed, kept up from then on; None: not built).
    pending_by_name: dict[tuple[str, str], Task] | None = None
    pgs: dict[int, tuple[PodGroupRecord, Job | None]] = field(default_factory=dict)  # id(record) -> (it, its job)
    by_key: dict[GroupKey, tuple[PodGroupRecord, Job | None]] = field(default_factory=dict)  # the same by key
    loose: dict[GroupKey, list[Task]] = field(default_factory=dict)  # tasks of a PodGroup that are in no job
    features: list[Job] = field(default_factory=list)  # the session's feature_jobs
    others: dict[int, list[int]] = field(default_factory=dict)  # node index -> other schedulers' [gpu, cpu, memory]
    nodes: list[NodeState] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    queue_sums: dict[str, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)
    binds: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    min_gpu_memory: int = 0
    affinity: bool | None = None  # some pod needs the inter-pod affinity index (None: not known)
    # Name of a test of a pod record -> whether some pod of `snapshot` passes it (`Persisting.any_pod`).
    pod_flags: dict[str, bool] = field(default_factory=dict)
    touched_jobs: set[Job] = field(default_factory=set)
    touched_nodes: set[int] = field(default_factory=set)
    taken: bool = False
    # What plugins keep from session to session, by plugin name: handed on by a carried open only, so only while
    # the nodes are the same records (or equal ones) in the same order and the node pool is the same; a plugin checks
    # anything else its store depends on (`Persisting.kept`).
    kept: dict[str, dict[str, object]] = field(default_factory=dict)
    # For proofs and benchmarks: how the open went (jobs and nodes rebuilt, or -1 when it opened in full).
    rebuilt_jobs: int = -1
    rebuilt_nodes: int = -1
    diffed: bool = False  # the carried open diffed the snapshots in full (not told, or not fully, what left)

    def discard(self) -> None:
        """Cut the links between the jobs, podsets and tasks of objects no session will take over, so reference
        counting frees them (as `Session.release` does), not the next collection."""
        if self.taken:
            return  # another session's now
        self.taken = True
        for job in self.jobs:
            job.tasks.clear()
            for ps in job.podsets:
                ps.tasks.clear()
                ps.pending.clear()


@dataclass(frozen=True, slots=True)
class Carry:
    """The derived state a cycle hands to the next (see the module doc); `reused` counts the explanations it took
    from its predecessor (for benchmarks and proofs)."""

    config: SchedulerConfig
    explanations: Mapping[GroupKey, tuple[Explained, Unschedulable]]
    reused: int = 0
    repeats: Repeats | None = None  # allocate's failed attempts, replayed while nothing they read changed
    replayed: int = 0  # the attempts this cycle replayed (for benchmarks and proofs)
    replayed_actions: int = 0  # the disruptive actions this cycle replayed whole (likewise)
    # The session's objects for the next open: not an immutable value, the next session consumes it.
    opened: Opened | None = None


@dataclass(slots=True)
class Carrying:
    """A session's side of the carry: reads the previous cycle's, collects the next."""

    config: SchedulerConfig
    previous: Carry | None = None
    explanations: dict[GroupKey, tuple[Explained, Unschedulable]] = field(default_factory=dict)
    reused: int = 0
    repeating: Repeating = field(default_factory=Repeating)
    _old_explanations: Mapping[GroupKey, tuple[Explained, Unschedulable]] = field(default_factory=dict)
    inherited: Opened | None = None  # the previous session's objects, for this one's open
    opened: Opened | None = None  # this session's, for the next one
    handed: bool = False  # the objects are handed to the next session (`Persisting.hand_over`)
    # A carried open: the pod records not in the previous snapshot (and some that are), and the previous session's
    # `pod_flags` (`Persisting.any_pod`); None after a full open.
    fresh_pods: tuple[list[PodRecord], dict[str, bool]] | None = None
    # Jobs and nodes the operations touched, gathered as the session's own sets are reset between actions.
    touched_jobs: set[Job] = field(default_factory=set)
    touched_nodes: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        prev = self.previous
        # Results depend on the config (the plugins' messages, the node pool): another config starts afresh.
        if prev is not None and (prev.config is self.config or prev.config == self.config):
            self._old_explanations = prev.explanations
            self.repeating.previous = self.repeating.runs_from = prev.repeats
            self.inherited = prev.opened
        elif prev is not None and prev.opened is not None:
            prev.opened.discard()
        self.previous = None  # the old carry is not kept alive past this session

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
        rep = self.repeating
        repeats = (Repeats(rep.snapshot, tuple(rep.attempts), rep.jobs, tuple(rep.runs.items()))
                   if rep.snapshot is not None else None)
        return Carry(self.config, MappingProxyType(self.explanations), self.reused, repeats, rep.replayed,
                     rep.replayed_actions, self.opened if self.handed else None)
