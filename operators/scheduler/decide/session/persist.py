"""Session open proportional to what changed: tasks, jobs and nodes handed from one cycle's session to the next.

The previous session hands over (`Opened`, in its carry) its `Task`s, `Job`s (with their `PodSet`s) and
`NodeState`s as the cycle left them, which of its jobs and nodes the cycle's operations touched, and what open
derived from them (each job's queue usage, victim and feature flags; each node's pods of other schedulers; the
queues' sums at open). Records are frozen and shared while unchanged, so the new snapshot is diffed against the old
by record identity, and only what a change reaches is rebuilt, by the rules of a full open (`opening.py`):
- a task is rebuilt when its pod record is new, its BindRequest changed (a task's status reads it), or its job was
  touched by an operation (every operation, committed or rolled back, goes through `_set_status` and marks the job);
- a job is rebuilt when its PodGroup record is new, one of its tasks is rebuilt, added or removed, it was touched,
  or a plugin sets its podsets' fields outside statements at every session open (the subgroups plugin their
  minimums, reading the value it set last session; the semipreemptible plugin their core): a plugin that starts
  changing a job, podset, task or node outside a statement must be listed here or in `_UNCARRIED`;
- a node is rebuilt (from its record, then every task on it occupied again in snapshot order, so its GPU groups and
  ports are keyed in the same order) when an operation touched it or a task on it was rebuilt, added or removed.
Anything else open reads (the config, the node pool, the queues, the priority classes, the nodes' records beyond
equal ones, the smallest GPU memory) unchanged, else a full open. Plugins that change nodes outside statements
(`_UNCARRIED`) end the hand-over.

The hand-over is linear: the objects belong to the session given them, which mutates them; `Opened.taken` makes a
second use of the same carry open in full. Everything else a session builds is per cycle.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import cast

from operators.core.keys import SEMI_PREEMPTIBLE
from operators.scheduler.decide import explain
from operators.scheduler.decide.model import ON_NODE, PENDING, RELEASING, Job, QueueState, Task
from operators.scheduler.decide.records import PodGroupRecord, PodRecord
from operators.scheduler.decide.session.carry import Opened
from operators.scheduler.decide.session.opening import Opening, _constraints, _needs_pod_index

# Plugins that change node accounting outside statements while in use: their sessions hand nothing over.
_UNCARRIED = frozenset({"dynamicresources", "backgroundpods"})
_job_key = attrgetter("rec.namespace", "rec.name")
_node = attrgetter("node")


class Persisting(Opening):
    """Session open from the previous session's objects (`_open_carried`) and their hand-over (`hand_over`)."""

    def _open(self, previous: Opened | None, persist: bool) -> None:
        """Open from `previous` where it can, else in full; `persist`: keep what the next open needs."""
        if not persist:
            self._open_nodes()
            self._open_queues()
            self._open_pods_and_jobs()
            return
        opened = self.carrying.opened = Opened(self.config, self.snapshot)
        if previous is not None and not previous.taken:
            if self._open_carried(previous, opened):
                return
            previous.discard()
        self._open_nodes()
        self._open_queues()
        self._open_pods_and_jobs()
        opened.nodes = self.nodes
        opened.jobs = self.jobs
        opened.features = self.feature_jobs
        opened.min_gpu_memory = self.min_gpu_memory
        self._keep_queue_sums(opened)

    def _keep_queue_sums(self, opened: Opened) -> None:
        opened.queue_sums = {name: (q.allocated[:], q.allocated_np[:], q.request[:]) for name, q in self.queues.items()}

    def _open_carried(self, prev: Opened, opened: Opened) -> bool:
        """Open from `prev` (consumed); False, with nothing changed, when something it does not follow changed."""
        snap, old = self.snapshot, prev.snapshot
        assert old is not None
        if not (prev.config is self.config or prev.config == self.config) or snap.node_pool != old.node_pool \
                or snap.queues != old.queues or snap.priority_classes != old.priority_classes:
            return False
        node_recs = sorted(snap.nodes, key=lambda n: n.name) if snap.nodes is not old.nodes else None
        nodes = prev.nodes
        if node_recs is not None:
            if len(node_recs) != len(nodes):
                return False
            for n, node_rec in zip(nodes, node_recs, strict=True):
                if n.rec is not node_rec and n.rec != node_rec:
                    return False  # an equal record (a write the parser drops) changes nothing
                n.rec = node_rec
        prev.taken = True
        self.nodes = nodes
        self.node_by_name = node_by_name = {n.name: n for n in nodes}
        self.min_gpu_memory = prev.min_gpu_memory
        self._open_queues()
        binds = self._binds()
        # The previous session's tasks by their record's identity: kept from open to open (built once after a
        # full open); holds exactly the tasks of the previous snapshot's pods.
        by_id = prev.by_rec
        if by_id is None:
            by_id = dict(zip(map(id, old.pods), prev.tasks_in_order, strict=True))
        prev.by_rec = None
        # Old tasks not kept: removed pods', those of jobs an operation touched, those whose BindRequest changed.
        gone: list[Task] = []
        # The records the producer says left since the previous snapshot (a hint: checked below).
        hint = snap.removed if snap.removed is not None and snap.removed.pods_from is old.pods else None
        if hint is not None:
            for rec in hint.pods:
                if (t := by_id.pop(id(rec), None)) is not None:
                    gone.append(t)
        touched = prev.touched_jobs
        for job in touched:
            for t in job.tasks:
                if by_id.pop(id(t.rec), None) is not None:
                    gone.append(t)
        # A BindRequest that changed reaches the task of its pod if that pod is Pending (only a Pending pod's status
        # reads it), found by name: every cycle's binds create BindRequests and the binder deletes them, so this is
        # every cycle in a live cluster, and proportional to the BindRequests that changed, not to the tasks.
        old_binds = prev.binds
        pending = prev.pending_by_name
        prev.pending_by_name = None
        if binds != old_binds:
            changed = {k for k in binds.keys() | old_binds.keys() if binds.get(k) != old_binds.get(k)}
            if pending is None:
                held = [t for t in by_id.values() if t.rec.phase == PENDING]
                pending = {(t.rec.namespace, t.rec.name): t for t in held}
                if len(pending) != len(held):
                    pending = None  # two pods of one name: no index, every task looked at (as it always was)
            if pending is not None:
                for bind_key in changed:
                    if (t := pending.get(bind_key)) is not None and by_id.pop(id(t.rec), None) is not None:
                        gone.append(t)
            else:
                for t in list(by_id.values()):
                    rec = t.rec
                    if rec.phase == PENDING and (rec.namespace, rec.name) in changed \
                            and by_id.pop(id(rec), None) is not None:
                        gone.append(t)
        pods = snap.pods
        tasks: list[Task | None] = list(map(by_id.get, map(id, pods)))
        fresh_at = list(compress(range(len(pods)), map(is_, tasks, repeat(None))))
        # Every old task still held must be found in the snapshot (its pods are distinct objects): when fewer are
        # (no hint, or one that missed a record), the old records not in the snapshot are found by the full diff.
        if len(pods) - len(fresh_at) != len(by_id):
            opened.diffed = True
            for k in by_id.keys() - set(map(id, pods)):
                gone.append(by_id.pop(k))
        dirty_nodes = set(prev.touched_nodes)
        dirty_keys: set[tuple[str, str]] = set()  # PodGroups a task change reaches
        for t in gone:
            if t.node >= 0:
                dirty_nodes.add(t.node)
            rec = t.rec
            if rec.pod_group:
                dirty_keys.add((rec.namespace, rec.pod_group))
            if pending is not None and rec.phase == PENDING and pending.get(name_key := (rec.namespace, rec.name)) is t:
                del pending[name_key]
        task_status = self._task_status
        fresh_on_node: list[int] = []  # positions of new tasks on a node
        fresh_by_key: dict[tuple[str, str], list[Task]] = {}
        for i in fresh_at:
            pod = pods[i]
            status, node_name, _ = task_status(pod, binds)
            t = tasks[i] = by_id[id(pod)] = Task(pod, status)
            if pending is not None and pod.phase == PENDING:
                if (pod.namespace, pod.name) in pending:
                    pending = None  # two pods of one name (see above)
                else:
                    pending[(pod.namespace, pod.name)] = t
            node = node_by_name.get(node_name) if node_name and status in ON_NODE else None
            if node is not None:
                dirty_nodes.add(node.idx)
                fresh_on_node.append(i)
            if pod.pod_group:
                key = (pod.namespace, pod.pod_group)
                dirty_keys.add(key)
                fresh_by_key.setdefault(key, []).append(t)
        all_tasks = cast(list[Task], tasks)
        # Inter-pod affinity index: needed if it was (then looked at again in full) or a new pod needs it.
        opened.affinity = None if prev.affinity is not False else any(
            map(_needs_pod_index, {id(c): c for c in map(_constraints, map(pods.__getitem__, fresh_at))}.values()))
        # PodGroups: the changed, new and removed ones, and the jobs to rebuild (by key).
        pgs, by_key = opened.pgs, opened.by_key = prev.pgs, prev.by_key
        pg_ids = list(map(id, snap.podgroups))
        rebuild: dict[tuple[str, str], PodGroupRecord | None] = dict.fromkeys(dirty_keys)
        removed_pgs = hint.podgroups if hint is not None and hint.podgroups_from is old.podgroups else ()
        for left in removed_pgs:
            if pgs.pop(id(left), None) is not None:
                rebuild[(left.namespace, left.name)] = None
        found = list(map(pgs.get, pg_ids))
        if len(pg_ids) - found.count(None) != len(pgs):  # as for the pods: some old record left unsaid
            for gone_id in set(pgs).difference(pg_ids):
                pg, _ = pgs.pop(gone_id)
                rebuild[(pg.namespace, pg.name)] = None
        for pg in compress(snap.podgroups, map(is_, found, repeat(None))):
            rebuild[(pg.namespace, pg.name)] = pg
        for job in touched:
            rebuild.setdefault((job.rec.namespace, job.rec.name), None)
        for job in prev.features:
            pg_rec = job.rec
            if pg_rec.subgroups or pg_rec.min_sub_group is not None or pg_rec.preemptibility == SEMI_PREEMPTIBLE:
                rebuild.setdefault((pg_rec.namespace, pg_rec.name), None)
        # Every key to rebuild: its PodGroup now (None: gone), its old job, its members.
        plan: list[tuple[tuple[str, str], PodGroupRecord | None, list[Task], Job | None]] = []
        rebuilt_jobs: set[Job] = set()  # old jobs replaced or gone
        gone_set = set(gone)
        loose = opened.loose = prev.loose
        for key, new_pg in rebuild.items():
            entry = by_key.pop(key, None)
            members: list[Task] = []
            old_job = None
            if entry is not None:
                old_pg, old_job = entry
                if new_pg is None and id(old_pg) in pgs:
                    new_pg = old_pg  # unchanged record: rebuilt for its tasks
                if id(old_pg) in pgs and old_pg is not new_pg:
                    del pgs[id(old_pg)]
                if old_job is not None:
                    rebuilt_jobs.add(old_job)
                    members.extend(t for t in old_job.tasks if t not in gone_set)
            members.extend(t for t in loose.pop(key, ()) if t not in gone_set)
            members.extend(fresh_by_key.get(key, ()))
            for t in members:
                t.job = t.podset = None
            plan.append((key, new_pg, members, old_job))
        # The dirty nodes start again from their records; every task on them is occupied again in snapshot order.
        others = opened.others = prev.others
        for i in dirty_nodes:
            nodes[i] = node_by_name[nodes[i].name] = self._fresh_node(i, nodes[i].rec)
            others.pop(i, None)
        on_dirty = list(compress(range(len(pods)), map(dirty_nodes.__contains__, map(_node, all_tasks))))
        if fresh_on_node:
            on_dirty = sorted(on_dirty + fresh_on_node)
        name = self.config.scheduler_name
        occupy = self._occupy
        for i in on_dirty:
            pod, t = pods[i], all_tasks[i]
            _, node_name, groups = task_status(pod, binds)
            node = nodes[t.node] if t.node >= 0 else node_by_name[node_name]  # a new task has none yet
            occupy(t, node, groups)
            if pod.scheduler_name != name and not pod.is_reservation and t.status != RELEASING:
                self._other_at_open(others, node.idx, pod)
        for i in dirty_nodes:  # whole devices of fully releasing shared GPUs count as releasing
            n = nodes[i]
            for g in n.groups.values():
                if g.fully_releasing:
                    n.rel_gpu += 1
        other = self.other_usage = [0, 0, 0]
        for o in others.values():
            other[0] += o[0]
            other[1] += o[1]
            other[2] += o[2]
        # The queues' sums at open: last session's, less the jobs rebuilt or gone, plus the rebuilt ones.
        queues = self.queues
        for qname, (alloc, alloc_np, req) in prev.queue_sums.items():
            q = queues[qname]
            q.allocated[:], q.allocated_np[:], q.request[:] = alloc, alloc_np, req
        for job in rebuilt_jobs:
            self._unadd_job(job)
        rules = self._job_rules()
        mapped: dict[Job, Job | None] = dict.fromkeys(rebuilt_jobs)  # old job -> its rebuilt self (None: none)
        added: list[Job] = []  # jobs of PodGroups that had none
        self.jobs, self.feature_jobs = [], []  # set below from the whole job list (`listed` False)
        built = iter(self._open_jobs([pg for _, pg, _, _ in plan if pg is not None],
                                     {key: members for key, pg, members, _ in plan if pg is not None}, rules,
                                     False, opened))
        for key, rebuilt_pg, members, old_job in plan:
            new_job = next(built) if rebuilt_pg is not None else None
            if old_job is not None:
                mapped[old_job] = new_job  # the same key: the same place in the sorted list
            elif new_job is not None:
                added.append(new_job)
            if new_job is not None:
                if len(new_job.tasks) != len(members):
                    loose[key] = [t for t in members if t.job is None]
            elif members:
                loose[key] = members
        for old_job in rebuilt_jobs:  # cut the old objects' cycles: freed now, not by the next collection
            old_job.tasks.clear()
            for ps in old_job.podsets:
                ps.tasks.clear()
                ps.pending.clear()
        jobs = [m for j in prev.jobs if (m := mapped.get(j, j)) is not None] if mapped else prev.jobs
        if added:  # merged into the sorted list at their places (keys are unique): no sort of every job's key
            added.sort(key=_job_key)
            merged: list[Job] = []
            start = 0
            for job in added:
                at = bisect_right(jobs, _job_key(job), start, key=_job_key)
                merged += jobs[start:at]
                merged.append(job)
                start = at
            merged += jobs[start:]
            jobs = merged
        self.jobs = opened.jobs = jobs
        features: list[Job] = []
        self.feature_jobs = opened.features = features
        victims = self._victims
        queue_parents = rules.queue_parents
        for job in jobs:
            job.queue = queues.get(job.rec.queue)
            if job.open_victim:
                victims.append(job)
            if job.feature:
                features.append(job)
            if job.queue is None:
                self.outcome(job).errors.append(explain.unusable_queue(job.rec.queue, queue_parents))
        opened.by_rec = by_id
        opened.pending_by_name = pending
        opened.kept = prev.kept
        self.carrying.fresh_pods = (list(map(pods.__getitem__, fresh_at)), prev.pod_flags)
        opened.nodes = nodes
        opened.min_gpu_memory = self.min_gpu_memory
        opened.rebuilt_jobs = len(plan)
        opened.rebuilt_nodes = len(dirty_nodes)
        self._keep_queue_sums(opened)
        return True

    def any_pod(self, name: str, test: Callable[[PodRecord], object]) -> bool:
        """Whether some pod of the snapshot passes `test`, a function of the pod record alone that `name` names
        (the same name: the same test). A carried open that kept every pod it did not rebuild from the previous
        snapshot, where no pod passed, looks at the new records only: the kept ones are the same frozen records."""
        pods: Sequence[PodRecord] = self.snapshot.pods
        fresh = self.carrying.fresh_pods
        if fresh is not None and fresh[1].get(name) is False:
            pods = fresh[0]
        found = any(map(test, pods))
        if (opened := self.carrying.opened) is not None:
            opened.pod_flags[name] = found
        return found

    def kept(self, plugin: str) -> dict[str, object]:
        """The store `plugin` keeps from session to session: handed on by a carried open (the same nodes, equal
        records in the same order), empty after a full open; a fresh one per call when nothing is handed on."""
        opened = self.carrying.opened
        return opened.kept.setdefault(plugin, {}) if opened is not None else {}

    def _unadd_job(self, job: Job) -> None:
        """Take a job's usage at open out of its queue lineage (the new session's queues, by name)."""
        if job.queue is None:
            return
        q: QueueState | None = self.queues.get(job.queue.name)
        ag, ac, am, rg, rc, rm = job.usage
        while q is not None:
            alloc = q.allocated
            alloc[0] -= ag
            alloc[1] -= ac
            alloc[2] -= am
            if not job.preemptible:
                anp = q.allocated_np
                anp[0] -= ag
                anp[1] -= ac
                anp[2] -= am
            req = q.request
            req[0] -= rg
            req[1] -= rc
            req[2] -= rm
            q = q.parent

    def hand_over(self) -> None:
        """At the cycle's end: what the operations touched, for the next session to rebuild; nothing when a plugin
        that changes nodes outside statements was in use."""
        opened = self.carrying.opened
        if opened is None:
            return
        snap = self.snapshot
        if snap.resource_claims or snap.resource_slices or _UNCARRIED & self.framework.active_names():
            self.carrying.opened = None
            return
        self.carrying.handed = True
        opened.binds = self._binds()
        opened.touched_jobs = self._touched | self.carrying.touched_jobs
        opened.touched_nodes = self._free_dirty | self.carrying.touched_nodes

