"""Session open proportional to what changed: tasks, jobs and nodes handed from one cycle's session to the next.

The previous session hands over (`Opened`, in its carry) its `Task`s, `Job`s (with their `PodSet`s) and
`NodeState`s as the cycle left them, which of its jobs and nodes the cycle's operations touched, and what open
derived from them (each job's queue usage, victim and feature flags; each node's pods of other schedulers; the
queues' sums at open). Records are frozen and shared while unchanged, so the new snapshot is diffed against the old
by record identity, and only what a change reaches is rebuilt, by the rules of a full open (`opening.py`):
- a task is rebuilt when its pod record is new, its BindRequest changed (a task's status reads it), or its job was
  touched by an operation (every operation, committed or rolled back, goes through `_set_status` and marks the job);
- a job is rebuilt when its PodGroup record is new, one of its tasks is rebuilt, added or removed, it was touched,
  or it asks for an optional feature (those plugins set podset fields outside statements: `feature_jobs`);
- a node is rebuilt (from its record, then every task on it occupied again in snapshot order, so its GPU groups and
  ports are keyed in the same order) when an operation touched it or a task on it was rebuilt, added or removed.
Anything else open reads (the config, the node pool, the queues, the priority classes, the nodes' records beyond
equal ones, the smallest GPU memory) unchanged, else a full open. Plugins that change nodes outside statements
(`_UNCARRIED`) end the hand-over.

The hand-over is linear: the objects belong to the session given them, which mutates them; `Opened.taken` makes a
second use of the same carry open in full. Everything else a session builds is per cycle.
"""

from __future__ import annotations

from bisect import insort
from operator import attrgetter

from operators.scheduler.decide import explain
from operators.scheduler.decide.model import ON_NODE, RELEASING, Job, QueueState, Task
from operators.scheduler.decide.records import PodGroupRecord
from operators.scheduler.decide.session.carry import Opened
from operators.scheduler.decide.session.opening import Opening

# Plugins that change node accounting outside statements while in use: their sessions hand nothing over.
_UNCARRIED = frozenset({"dynamicresources", "backgroundpods"})
_job_key = attrgetter("rec.namespace", "rec.name")


class Persisting(Opening):
    """Session open from the previous session's objects (`_open_carried`) and their hand-over (`hand_over`)."""

    def _open(self, previous: Opened | None) -> None:
        opened = self.carrying.opened = Opened(self.config, self.snapshot)
        if previous is not None and not previous.taken and self._open_carried(previous, opened):
            return
        self._open_nodes()
        self._open_queues()
        self._open_pods_and_jobs()
        opened.nodes = self.nodes
        opened.jobs = self.jobs
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
            for n, rec in zip(nodes, node_recs, strict=True):
                if n.rec is not rec and n.rec != rec:
                    return False  # an equal record (a write the parser drops) changes nothing
        prev.taken = True
        self.nodes = nodes
        self.node_by_name = {n.name: n for n in nodes}
        self.min_gpu_memory = prev.min_gpu_memory
        self._open_queues()
        binds = self._binds()
        old_binds = prev.binds
        changed_binds = {k for k in binds.keys() | old_binds.keys() if binds.get(k) != old_binds.get(k)} \
            if binds != old_binds else set()
        touched = prev.touched_jobs
        dirty_nodes = set(prev.touched_nodes)
        dirty_keys: set[tuple[str, str]] = set()  # PodGroups one of whose pods changed
        by_id = dict(zip(map(id, old.pods), prev.tasks_in_order, strict=True))
        node_by_name = self.node_by_name
        # Pass 1: which tasks are kept, and which nodes and PodGroups the others reach.
        kept: list[Task | None] = []
        kept_append = kept.append
        task_status = self._task_status
        for pod in snap.pods:
            t = by_id.pop(id(pod), None)
            if t is not None and t.rec is pod and t.job not in touched and not (
                    changed_binds and (pod.namespace, pod.name) in changed_binds):
                kept_append(t)
                continue
            kept_append(None)
            if t is not None:
                by_id[id(pod)] = t  # replaced: its old node and PodGroup below
            status, node_name, _ = task_status(pod, binds)
            if node_name and status in ON_NODE:
                node = node_by_name.get(node_name)
                if node is not None:
                    dirty_nodes.add(node.idx)
            if pod.pod_group:
                dirty_keys.add((pod.namespace, pod.pod_group))
        for t in by_id.values():  # removed or replaced
            if t.node >= 0:
                dirty_nodes.add(t.node)
            if t.rec.pod_group:
                dirty_keys.add((t.rec.namespace, t.rec.pod_group))
        # PodGroups: kept jobs, jobs to rebuild (by key), jobs gone.
        old_pgs = prev.pgs
        pgs = opened.pgs
        rebuild: dict[tuple[str, str], PodGroupRecord] = {}
        rebuilt_jobs: set[Job] = set()  # old jobs replaced or gone
        for pg in snap.podgroups:
            entry = old_pgs.pop(id(pg), None)
            if entry is not None and entry[0] is pg:
                job = entry[1]
                key = (pg.namespace, pg.name)
                if job is None:
                    if key not in dirty_keys:
                        pgs[id(pg)] = entry  # sits out this node pool, as before
                        continue
                elif not (job in touched or job.feature or key in dirty_keys):
                    pgs[id(pg)] = entry
                    continue
                else:
                    rebuilt_jobs.add(job)
                rebuild[key] = pg
            else:
                if entry is not None and entry[1] is not None:
                    rebuilt_jobs.add(entry[1])
                rebuild[(pg.namespace, pg.name)] = pg
        for _, job in old_pgs.values():  # PodGroups gone
            if job is not None:
                rebuilt_jobs.add(job)
        # The dirty nodes start again from their records; the other schedulers' pods on them are counted again.
        others = opened.others = prev.others
        for i in dirty_nodes:
            nodes[i] = self._fresh_node(i, nodes[i].rec if node_recs is None else node_recs[i])
            others.pop(i, None)
        if node_recs is not None:
            for n, rec in zip(nodes, node_recs, strict=True):
                n.rec = rec
        self.node_by_name = node_by_name = {n.name: n for n in nodes}
        # Pass 2, in snapshot order: new tasks, tasks on dirty nodes occupied again, members of jobs to rebuild.
        by_group: dict[tuple[str, str], list[Task]] = {}
        name = self.config.scheduler_name
        occupy = self._occupy
        tasks = opened.tasks_in_order
        tasks_append = tasks.append
        for pod, t in zip(snap.pods, kept, strict=True):
            if t is None:
                status, node_name, groups = task_status(pod, binds)
                t = Task(pod, status)
                node = node_by_name.get(node_name) if node_name and status in ON_NODE else None
            elif t.node >= 0 and t.node in dirty_nodes:
                status, node_name, groups = task_status(pod, binds)
                node = nodes[t.node]
            else:
                node = None
            tasks_append(t)
            if node is not None:
                occupy(t, node, groups)
                if pod.scheduler_name != name and not pod.is_reservation and t.status != RELEASING:
                    self._other_at_open(others, node.idx, pod)
            if pod.pod_group and (t.job is None or t.job in rebuilt_jobs):
                t.job = t.podset = None  # linked again if its job is rebuilt, as a full open links it
                key = (pod.namespace, pod.pod_group)
                if key in rebuild:
                    members = by_group.get(key)
                    if members is None:
                        by_group[key] = [t]
                    else:
                        members.append(t)
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
        replaced: dict[Job, Job | None] = dict.fromkeys(rebuilt_jobs)
        added: list[Job] = []
        for key, pg in rebuild.items():
            job = self._open_job(pg, by_group.get(key, []), rules)
            pgs[id(pg)] = (pg, job)
            if job is not None:
                added.append(job)
        jobs = [j for j in prev.jobs if j not in replaced]
        for old_job in rebuilt_jobs:  # cut the old objects' cycles: freed now, not by the next collection
            old_job.tasks.clear()
            for ps in old_job.podsets:
                ps.tasks.clear()
                ps.pending.clear()
        for job in added:
            insort(jobs, job, key=_job_key)
        self.jobs = opened.jobs = jobs
        self.feature_jobs = []
        victims = self._victims
        queue_parents = rules.queue_parents
        for job in jobs:
            job.queue = queues.get(job.rec.queue)
            if job.open_victim:
                victims.append(job)
            if job.feature:
                self.feature_jobs.append(job)
            if job.queue is None:
                self.outcome(job).errors.append(explain.unusable_queue(job.rec.queue, queue_parents))
        opened.nodes = nodes
        opened.min_gpu_memory = self.min_gpu_memory
        opened.rebuilt_jobs = len(rebuild)
        opened.rebuilt_nodes = len(dirty_nodes)
        self._keep_queue_sums(opened)
        return True

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
        if snap.resource_claims or snap.resource_slices or _UNCARRIED & {p.name for p, _ in self.framework._registered}:
            self.carrying.opened = None
            return
        opened.binds = self._binds()
        opened.touched_jobs = self._touched | self.carrying.touched_jobs
        opened.touched_nodes = self._free_dirty | self.carrying.touched_nodes

