"""One scheduling cycle's session: state derived from the snapshot, accounting, statements, decisions.

Opening the session derives task statuses, node usage, jobs and queue accounting, then computes fair shares
(`opening`); given the previous session's objects it rebuilds only what changed (`persist`). Actions change state
only through a `Statement` (`operations`), whose operations fire the same accounting updates (node free resources
and index, GPU groups, podset counters, queue allocation) and can be rolled back in reverse order; `commit()` turns
the surviving operations into decisions. The plugins are called through `plugincalls`; `closing` explains what stays
pending; `candidates` lists the jobs actions try and the jobs that may lose pods; `clusterfree` keeps the cluster's
free resources as running integer sums.
"""

from __future__ import annotations

from operators.core.times import rfc3339
from operators.scheduler.decide.config import SPREAD, SchedulerConfig
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.framework import Framework
from operators.scheduler.decide.model import Job, QueueState
from operators.scheduler.decide.placement.scoring import NodeIndex
from operators.scheduler.decide.placement.search import Placer
from operators.scheduler.decide.session.accounting import DEFAULT_SUBGROUP, FailedAttempt, JobOutcome
from operators.scheduler.decide.session.candidates import Candidates
from operators.scheduler.decide.session.carry import Carry, Carrying
from operators.scheduler.decide.session.closing import Closing
from operators.scheduler.decide.session.clusterfree import ClusterFree
from operators.scheduler.decide.session.operations import Op, Operations, Statement
from operators.scheduler.decide.session.persist import Persisting
from operators.scheduler.decide.session.plugincalls import PluginCalls
from operators.scheduler.decide.snapshot import Snapshot

__all__ = ["DEFAULT_SUBGROUP", "Carry", "FailedAttempt", "JobOutcome", "Op", "Session", "Statement", "rfc3339"]


class Session(Persisting, Operations, ClusterFree, PluginCalls, Closing, Candidates):
    def __init__(self, snapshot: Snapshot, config: SchedulerConfig, now: float, carry: Carry | None = None,
                 persist: bool = True) -> None:
        # persist: keep what the next session's open takes over (`persist.py`); a cycle whose carry is dropped
        # (`run_cycle`) does not.
        self.config = config
        self.carrying = Carrying(config, carry)  # the previous cycle's derived state in, the next one's out
        self.now = now
        self.now_text = rfc3339(now)
        self.snapshot = snapshot
        self.decisions = Decisions()
        self.outcomes: dict[str, JobOutcome] = {}
        self.simulating = False
        self.last_start: dict[str, str] = {}
        self._summaries: dict[tuple[object, ...], str] = {}
        self._unlimited_cache: dict[QueueState, bool] = {}
        # cluster_free(): per-node terms, and the nodes changed since they were last read.
        self._free_terms: tuple[list[int], list[int], list[int]] | None = None
        self._free_dirty: set[int] = set()
        self._free_totals: list[int] = [0, 0, 0]
        self._pending_jobs: list[Job] | None = None  # schedulable_jobs(): jobs with pending pods at its last call
        self._victims: list[Job] = []  # victim_candidates(), as of its last call (or session open)
        self._touched: set[Job] = set()  # jobs whose tasks changed status or node since then
        self.victim_orders: object = None  # one action's victim orders for the next (actions/victims.py OrderHandover)
        # The enabled plugins' hooks, resolved once into plain callables and lists. Keep the session's instance
        # attributes at 30 or fewer: beyond, CPython stops sharing the instance dict's keys and every attribute
        # access of the hot loops gets slower (hooks live on `framework`, not as attributes here).
        fw = self.framework = Framework.build(config.plugins)
        inherited, self.carrying.inherited = self.carrying.inherited, None
        self._open(inherited, persist)  # nodes, queues, tasks and jobs: from the previous session's objects if it can
        self._open_total()
        self.index = NodeIndex(self.nodes, config.gpu_placement, config.cpu_placement)
        self.pod_index = self._open_pod_index()
        self.placer = Placer(self.nodes, self.index, snapshot.configmaps, self.pod_index, config.group_id,
                             config.gpu_placement == SPREAD, fw.node_fit)
        if fw.prefilters or fw.node_filters or fw.scorers:
            self.placer.extend(self, fw.prefilters, fw.node_filters, fw.scorers)
        for hook in fw.session_open:
            hook(self)
        # Plugins with nothing to do this session (no workload uses their feature) leave every hook list.
        if fw.settle(self):
            self.placer.extend(self, fw.prefilters, fw.node_filters, fw.scorers)

    def statement(self) -> Statement:
        return Statement(self)

    def release(self) -> None:
        """Break the session's reference cycles once its decisions and its carry are taken; the session is unusable
        after. A cycle runs with the cyclic collector off (`cycle.py`) and its objects are linked both ways (a job and
        its podsets to their tasks and back, a queue to its children and back, the session to its placer, plugins and
        statements and back), so reference counting freed none of them: the first young collection after the cycle
        traversed all of them (~320,000 objects, 0.18-0.26 s of CPU at 5,000 nodes) only to find them unreachable.
        With these links cut, each object is freed when its last reference goes. Nothing a cycle returns refers to
        them: the decisions and the carry hold records, strings and numbers, and the objects handed to the next
        session's open (`persist.py`), which keep their links."""
        for job in self.jobs if not self.carrying.handed else ():
            job.tasks.clear()  # a task still names its job and podset: one way, no longer a cycle
            for ps in job.podsets:
                ps.tasks.clear()
                ps.pending.clear()
        for q in self.queues.values():
            q.children.clear()
        self.__dict__.clear()
