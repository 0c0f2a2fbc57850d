"""topology: a gang (or a sub-group) with a topology constraint is placed inside one domain of a Topology.

The PodGroup's `spec.topologyConstraint` (and each SubGroup's) names a Topology and a required and/or preferred
level. Through the node-subset hook every attempt of `allocate_job` (allocate, and the simulations of reclaim,
preempt and consolidation, so a preemptor's victims free one domain) is tried in the candidate domains of
`topology_domains.plan`, best first:
- required level: each domain of that level whose free resources cover the attempt, fullest first; none fits:
  the job stays pending with `Not enough resources for the workload: no domain of level <L> can hold the job
  (...); best <L> <value> lacks ...`;
- preferred level: the fitting domains of that level, then of each coarser level up to the required one, or the
  whole cluster;
- a job with pods already placed (and a required level) stays in the domain holding them;
- sub-group constraints: each constrained sub-group's pods go to one domain of its own level (inside the job's
  domain and its parent sub-group's), the combinations of the best few domains per sub-group tried in order.
A Topology or level that does not exist leaves the job pending with `PodSchedulingErrors: Requested topology ...`.
A job whose required-level domains all had the resources in total but could not hold its pods on their nodes is
told which domains were tried (at session close). A pod placed on its own (a victim moved by consolidation or by
reclaim/preempt) stays in the domain of its job's placed pods at the required level (`filter_node`).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import ACTIVE_ALLOCATED, Job, NodeState, Task
from operators.scheduler.decide.plugins.topology.domains import (
    NONE,
    Candidate,
    ConstraintError,
    Domain,
    Ordered,
    Plan,
    Resolved,
    Resources,
    domains_of,
    level_label,
    plan_domains,
    plan_levels,
    resolve,
    with_free,
)
from operators.scheduler.decide.records import SubGroupSpec, TopologyConstraintSpec
from operators.scheduler.decide.units import GPU

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

UNSCHEDULABLE_WORKLOAD = "Not enough resources for the workload"  # KAI's reason for topology shortfalls
OUTSIDE = "node is outside the topology domain chosen for the pod's sub-group"
# Domain combinations tried per attempt when sub-groups carry their own constraints (best few of each).
MAX_COMBINATIONS = 32
PER_GROUP = 4


class _Group:
    """A constrained sub-group: its resolved constraint and the podsets (leaf sub-groups) under it."""

    __slots__ = ("leaves", "name", "resolved")

    def __init__(self, name: str, resolved: Resolved, leaves: frozenset[str]) -> None:
        self.name, self.resolved, self.leaves = name, resolved, leaves


class _Rules:
    """What a job asks: the job-level constraint and the constrained sub-groups (parents before children)."""

    __slots__ = ("groups", "job")

    def __init__(self, job: Resolved | None, groups: list[_Group]) -> None:
        self.job, self.groups = job, groups


class _Choice:
    """One node subset of an attempt, with the nodes each constrained podset may use inside it.

    The placer iterates a subset once, right before the attempt on it (`Placer.restrict`): that is when the
    podsets' nodes become the ones `filter_node` enforces.
    """

    __slots__ = ("job", "nodes", "plugin", "podsets")

    def __init__(self, plugin: Topology, job: str, nodes: Sequence[int], podsets: dict[str, frozenset[int]]) -> None:
        self.plugin, self.job, self.nodes, self.podsets = plugin, job, nodes, podsets

    def __iter__(self) -> Iterator[int]:
        self.plugin._current = (self.job, self.podsets) if self.podsets else None
        return iter(self.nodes)


class Topology(Plugin):
    name = "topology"
    default_priority = 500  # KAI's

    def __init__(self, arguments: Mapping[str, object] | None = None) -> None:
        super().__init__(arguments)
        self._rules: dict[str, _Rules | ConstraintError | None] = {}
        self._structure: dict[tuple[str, int], tuple[Domain, ...]] = {}
        self._labels: dict[str, Mapping[str, str]] | None = None
        # `_structure`, `_labels` and `_indexes` are kept from session to session (`_bind`), at their first use.
        self._bound = False
        self._kept: dict[str, object] = {}
        self._current: tuple[str, dict[str, frozenset[int]]] | None = None
        # Jobs whose last allocate attempt (not a simulation) had candidate domains of a required level: (the
        # constraint, the domains tried).
        self._tried: dict[str, tuple[Resolved, tuple[Candidate, ...]]] = {}
        # A domain's nodes -> their indexes, sorted; a tuple, so the placer knows it again by identity.
        self._indexes: dict[frozenset[str], tuple[int, ...]] = {}
        # Free resources per node, refreshed for the nodes statements touched since (None: recompute all).
        self._free: dict[str, Resources] | None = None
        self._dirty: set[int] = set()
        # The node a statement last placed each task on (what a rolled-back placement left).
        self._at: dict[Task, int] = {}
        # Domains with their free totals per (topology, level), and how far into `_changes` (per node whose free
        # resources changed, in order: its name, what it had, what it has; None where it counts nothing) each is
        # up to date: a domain holding a changed node moves by the differences. The amounts are integers, so the
        # total is the one a sum over its nodes gives, without walking a zone's thousands of nodes per change.
        # Each level's domains are also kept sorted fullest first (`Ordered`), so a plan visits only the domains
        # with enough free GPUs.
        self._domain_free: dict[tuple[str, int], tuple[list[Domain], dict[str, int], int,
                                                       list[tuple[Resources, tuple[str, ...], Domain]]]] = {}
        self._changes: list[tuple[str, Resources | None, Resources | None]] = []
        self._binding: frozenset[tuple[str, str]] | None = None
        # Each level's domain totals get a new generation when one of them changes value (or all are summed anew);
        # a plan is a function of its constraint, request, placed nodes and the totals of the levels it reads, so
        # one made on the same generations is the same plan (most attempts fail and change no total).
        self._generation = 0
        self._generations: dict[tuple[str, int], int] = {}
        self._plans: dict[tuple[object, ...], tuple[tuple[int, ...], Plan]] = {}

    # --- what a job asks ------------------------------------------------------------------------

    def _rules_of(self, session: Session, job: Job) -> _Rules | ConstraintError | None:
        key = job.key
        rules = self._rules
        if key in rules:
            return rules[key]
        rec = job.rec
        out: _Rules | ConstraintError | None = None
        if rec.topology is None and not rec.subgroups:  # most jobs: nothing to resolve
            rules[key] = out
            return out
        try:
            constrained = [s for s in rec.subgroups if s.topology is not None and s.topology.active]
            whole = _resolve(rec.topology, session)
            if whole is not None or constrained:
                out = _Rules(whole, _groups(rec.subgroups, constrained, session))
        except ConstraintError as exc:
            out = exc
        self._rules[key] = out
        return out

    def _domains(self, session: Session, resolved: Resolved, level: int) -> tuple[Domain, ...]:
        key = (resolved.topology.name, level)
        hit = self._structure.get(key)
        if hit is None:
            if not self._bound:
                self._bind(session)
                hit = self._structure.get(key)
                if hit is not None:
                    return hit
            if self._labels is None:
                self._labels = {n.name: n.rec.labels for n in session.nodes if n.ok}
                self._kept["labels"] = self._labels
            hit = self._structure[key] = domains_of(resolved.topology, level, self._labels)
        return hit

    def _bind(self, session: Session) -> None:
        """Take the domains, the node labels and the domains' node indexes from the previous session's plugin: a
        function of the schedulable nodes' labels, their order and the Topology records, so kept while the session
        opened from the previous one's nodes (`Persisting.kept`) and the Topologies are equal."""
        self._bound = True
        kept = session.kept(self.name)
        topologies = session.snapshot.topologies
        if kept.get("topologies") != topologies:
            kept.clear()
            kept.update(topologies=topologies, structure={}, indexes={}, labels=None)
        self._kept = kept
        self._structure = cast(dict[tuple[str, int], tuple[Domain, ...]], kept["structure"])
        self._indexes = cast(dict[frozenset[str], tuple[int, ...]], kept["indexes"])
        self._labels = cast("dict[str, Mapping[str, str]] | None", kept["labels"])

    # --- hooks ----------------------------------------------------------------------------------

    def hooks(self) -> Hooks:
        return Hooks(scope=self, node_subsets=self, node_filter=self, allocate_event=self, deallocate_event=self,
                     session_close=self)

    def in_use(self, session: Session) -> bool:
        """Some PodGroup of the session names a topology constraint (its own, or one of its SubGroups')."""
        for job in session.feature_jobs:
            rec = job.rec
            if rec.topology is not None:
                return True
            if rec.subgroups and any(s.topology is not None and s.topology.active for s in rec.subgroups):
                return True
        return False

    def node_subsets(self, session: Session, job: Job) -> Iterable[Iterable[int]] | None:
        self._current = None
        rules = self._rules_of(session, job)
        if rules is None:
            return None
        if isinstance(rules, ConstraintError):
            _explain(session, job, keys.REASON_POD_SCHEDULING_ERRORS, rules.message)
            return []
        tasks = session.tasks_to_allocate(job)
        free = self._free_now(session)
        names = session.node_by_name
        universes: list[tuple[Domain | None, frozenset[str] | None]]
        if rules.job is not None:
            placed = _placed(session, job.tasks) if rules.job.required is not None else ()
            job_plan = self._plan(session, rules.job, None, free, _request(session, tasks), placed)
            if not job_plan.candidates:
                _explain(session, job, UNSCHEDULABLE_WORKLOAD, job_plan.explanation)
                return []
            # What allocate tried, as the job's explanation says why allocate failed: a disruptive search's
            # simulations try domains on states with victims evicted, which no one will see. Kept as the plan's
            # candidates (immutable), described at session close, where only the last attempt's are read.
            if rules.job.required is not None and rules.job.preferred is None and not session.simulating:
                self._tried[job.key] = (rules.job, job_plan.candidates)
            universes = [(c.domain, c.nodes) for c in job_plan.candidates]
        else:
            universes = [(None, None)]
        if not rules.groups:
            return [self._node_indexes(session, nodes) for _, nodes in universes]
        out: list[_Choice] = []
        first_failure = ""
        for _, nodes in universes:
            combos, failure = self._combinations(session, job, rules.groups, tasks, free, nodes)
            first_failure = first_failure or failure
            subset = self._node_indexes(session, nodes)
            for combo in combos:
                podsets = {leaf: frozenset(names[n].idx for n in group_nodes)
                           for group, group_nodes in combo for leaf in group.leaves}
                out.append(_Choice(self, job.key, subset, podsets))
                if len(out) >= MAX_COMBINATIONS:
                    return out
        if not out and first_failure:
            _explain(session, job, UNSCHEDULABLE_WORKLOAD, first_failure)
        return out

    def _node_indexes(self, session: Session, nodes: frozenset[str] | None) -> Sequence[int]:
        """A domain's node indexes, sorted (every node for None): one tuple per domain, so the placer knows it again
        by identity."""
        if nodes is None:
            return range(len(session.nodes))
        if not self._bound:
            self._bind(session)
        hit = self._indexes.get(nodes)
        if hit is None:
            names = session.node_by_name
            hit = self._indexes[nodes] = tuple(sorted(names[n].idx for n in nodes))
        return hit

    def on_allocate(self, session: Session, task: Task, kind: str) -> None:
        if self._free is None:
            return
        if kind == "pipeline":  # a pipelined pod may have left a node: the one a statement placed it on, or its own
            origin = self._at.get(task)
            if origin is None:
                origin = self._open_node(session, task)
                if origin is None:
                    self._free = None
                    return
            if origin >= 0:
                self._dirty.add(origin)
        if task.node < 0:
            self._free = None
            return
        self._dirty.add(task.node)
        if kind != "rollback":  # allocate or pipeline: remembered for the placement's rollback
            self._at[task] = task.node

    def on_deallocate(self, session: Session, task: Task, kind: str) -> None:
        if self._free is None:
            return
        if kind == "rollback":  # a placement undone: it left the node it was placed on (back at its origin, if any)
            placed = self._at.pop(task, None)
            if placed is None:
                self._free = None
                return
            self._dirty.add(placed)
        if task.node >= 0:
            self._dirty.add(task.node)
        elif kind != "rollback":
            self._free = None

    def _open_node(self, session: Session, task: Task) -> int | None:
        """The node a task not placed by this session's statements was on at session open (-1: none), or None
        when that is not known here (a pod binding through a BindRequest)."""
        rec = task.rec
        if rec.node_name:
            node = session.node_by_name.get(rec.node_name)
            return node.idx if node is not None else None
        if self._binding is None:
            self._binding = frozenset((b.namespace, b.pod_name) for b in session.snapshot.bindrequests)
        return None if (rec.namespace, rec.name) in self._binding else -1

    def _free_now(self, session: Session) -> dict[str, Resources]:
        if self._free is None:
            self._free = _free(session.nodes)
            self._domain_free.clear()
            self._changes.clear()
        elif self._dirty:
            nodes = session.nodes
            free = self._free
            fresh = _free([nodes[i] for i in self._dirty])
            changes = self._changes
            for i in sorted(self._dirty):
                name = nodes[i].name
                old, new = free.get(name), fresh.get(name)  # new is None for a node that is not schedulable
                if new is None:
                    free.pop(name, None)
                else:
                    free[name] = new
                if old != new:
                    changes.append((name, old, new))
        self._dirty.clear()
        return self._free

    def _domains_free(self, session: Session, resolved: Resolved, level: int,
                      free: Mapping[str, Resources]) -> Sequence[Domain]:
        """The domains of the level with their free totals, summed again only where a node changed."""
        key = (resolved.topology.name, level)
        hit = self._domain_free.get(key)
        if hit is None:
            domains = list(with_free(self._domains(session, resolved, level), free))
            where = {n: i for i, d in enumerate(domains) for n in d.nodes}
            ordered = sorted([(d.free, d.values, d) for d in domains])
            self._domain_free[key] = (domains, where, len(self._changes), ordered)
            self._generation += 1
            self._generations[key] = self._generation
            return domains
        domains, where, seen, ordered = hit
        if seen < len(self._changes):
            delta: dict[int, list[int]] = {}
            for name, old, new in self._changes[seen:]:
                i = where.get(name)
                if i is None:
                    continue
                d = delta.get(i)
                if d is None:
                    d = delta[i] = [0, 0, 0]
                if new is not None:
                    d[0] += new[0]
                    d[1] += new[1]
                    d[2] += new[2]
                if old is not None:
                    d[0] -= old[0]
                    d[1] -= old[1]
                    d[2] -= old[2]
            changed = False
            for i, (gpu, cpu, memory) in delta.items():
                if gpu or cpu or memory:
                    was = domains[i]
                    f = was.free
                    now = domains[i] = Domain(was.level, was.level_name, was.values, was.nodes,
                                              Resources(f[0] + gpu, f[1] + cpu, f[2] + memory), was.order)
                    # The sorted copy moves the domain too (found by its unique (free, values) prefix).
                    del ordered[bisect_left(ordered, (f, was.values))]
                    insort(ordered, (now.free, now.values, now))
                    changed = True
            self._domain_free[key] = (domains, where, len(self._changes), ordered)
            if changed:
                self._generation += 1
                self._generations[key] = self._generation
        return domains

    def _ordered(self, session: Session, resolved: Resolved, level: int,
                 free: Mapping[str, Resources]) -> Ordered:
        """The level's domains sorted fullest first, up to date."""
        self._domains_free(session, resolved, level, free)
        return self._domain_free[(resolved.topology.name, level)][3]

    def filter_node(self, session: Session, task: Task, node: NodeState) -> str | None:
        job = task.job
        if job is None:
            return None
        if session.placer.subset is not None:
            # An attempt of allocate_job on one of the subsets above: sub-groups keep to their chosen domains.
            current = self._current
            if current is None or job.key != current[0] or task.podset is None:
                return None
            allowed = current[1].get(task.podset.name)
            return OUTSIDE if allowed is not None and node.idx not in allowed else None
        # A pod placed on its own (a victim moved by consolidation or reclaim/preempt): it stays in the domain of
        # its job's (or sub-group's) placed pods at the required level.
        rules = self._rules_of(session, job)
        if rules is None or isinstance(rules, ConstraintError):
            return None
        pins: list[tuple[Resolved, frozenset[str] | None]] = [(g.resolved, g.leaves) for g in rules.groups]
        if rules.job is not None:
            pins.append((rules.job, None))
        for resolved, leaves in pins:
            if resolved.required is None or (leaves is not None and (task.podset is None
                                                                     or task.podset.name not in leaves)):
                continue
            anchor = next((t for t in job.tasks if t is not task and t.node >= 0 and t.status in ACTIVE_ALLOCATED
                           and (leaves is None or (t.podset is not None and t.podset.name in leaves))), None)
            if anchor is None:
                continue
            there, here = session.nodes[anchor.node].rec.labels, node.rec.labels
            for label, _ in resolved.topology.levels[:resolved.required + 1]:
                if label not in here or here[label] != there.get(label):
                    level = level_label(resolved.topology, resolved.required)
                    return f"node is outside the {level} of the pods already placed for the workload"
        return None

    def on_session_close(self, session: Session) -> None:
        """A job that had domains to try at its required level and still failed: say which were tried."""
        for job in session.feature_jobs:
            tried = self._tried.get(job.key)
            out = session.outcomes.get(job.key)
            if tried is None or out is None or out.failure is None or not any(p.pending for p in job.podsets):
                continue
            resolved, candidates = tried
            assert resolved.required is not None
            level = level_label(resolved.topology, resolved.required)
            shown = ", ".join([c.describe() for c in candidates[:3]]) + (
                f" and {len(candidates) - 3} more" if len(candidates) > 3 else "")
            _explain(session, job, UNSCHEDULABLE_WORKLOAD,
                     f"no domain of level {level} could hold the job's pods on its nodes (tried {shown})")

    # --- planning -------------------------------------------------------------------------------

    def _plan(self, session: Session, resolved: Resolved, within: frozenset[str] | None,
              free: Mapping[str, Resources], request: Resources, placed: Iterable[str]) -> Plan:
        if within is None:  # a job-level plan: the same as one made on the same generations of its levels
            name = resolved.topology.name
            generations = []
            for level in plan_levels(resolved):
                self._domains_free(session, resolved, level, free)  # brings the level's totals up to date
                generations.append(self._generations[(name, level)])
            seen = tuple(generations)
            key = (name, resolved.required, resolved.preferred, request, tuple(placed))
            hit = self._plans.get(key)
            if hit is not None and hit[0] == seen:
                return hit[1]
            made = plan_domains(resolved, lambda level: self._domains_free(session, resolved, level, free), request,
                                key[4], lambda level: self._ordered(session, resolved, level, free))
            self._plans[key] = (seen, made)
            return made

        def domains_at(level: int) -> Sequence[Domain]:  # a sub-group's plan inside its parent's domain
            domains = tuple(Domain(d.level, d.level_name, d.values, d.nodes & within,
                                   order=tuple(n for n in d.order if n in within))
                            for d in self._domains(session, resolved, level) if d.nodes & within)
            return with_free(domains, free)
        return plan_domains(resolved, domains_at, request, placed)

    def _combinations(self, session: Session, job: Job, groups: list[_Group], tasks: Sequence[Task],
                      free: Mapping[str, Resources], universe: frozenset[str] | None,
                      ) -> tuple[list[list[tuple[_Group, frozenset[str]]]], str]:
        """Domain choices per constrained sub-group (parents first) inside `universe`, best first."""
        by_leaf: dict[str, list[Task]] = {}
        for t in tasks:
            if t.podset is not None:
                by_leaf.setdefault(t.podset.name, []).append(t)
        active = [g for g in groups if any(leaf in by_leaf for leaf in g.leaves)]
        failure = ""

        def options(group: _Group, within: frozenset[str] | None) -> list[frozenset[str]]:
            nonlocal failure
            mine = [t for leaf in group.leaves for t in by_leaf.get(leaf, ())]
            placed = _placed(session, [t for t in job.tasks if t.podset is not None
                                       and t.podset.name in group.leaves]) if group.resolved.required is not None \
                else ()
            p = self._plan(session, group.resolved, within, free, _request(session, mine), placed)
            if not p.candidates:
                failure = failure or f"sub-group {group.name}: {p.explanation}"
            return [c.nodes if c.nodes is not None else (within or frozenset(self._labels or {}))
                    for c in p.candidates[:PER_GROUP]]

        out: list[list[tuple[_Group, frozenset[str]]]] = []

        # `walk` is handed itself: a nested function calling itself by name holds itself in its closure cell, a
        # reference cycle left to the collector (its closure here holds the whole attempt's state).
        def walk(i: int, chosen: list[tuple[_Group, frozenset[str]]], again: Any) -> None:
            if len(out) >= MAX_COMBINATIONS:
                return
            if i == len(active):
                out.append(list(chosen))
                return
            group = active[i]
            within = universe
            for other, nodes in chosen:  # a constrained ancestor's domain (chosen earlier) bounds this one
                if group.leaves <= other.leaves:
                    within = nodes if within is None else within & nodes
            for nodes in options(group, within):
                chosen.append((group, nodes))
                again(i + 1, chosen, again)
                chosen.pop()

        walk(0, [], walk)
        return out, failure


def _resolve(constraint: TopologyConstraintSpec | None, session: Session) -> Resolved | None:
    if constraint is None:
        return None
    return resolve(constraint, session.snapshot.topologies)


def _groups(specs: Sequence[SubGroupSpec], constrained: Sequence[SubGroupSpec], session: Session) -> list[_Group]:
    children: dict[str, list[str]] = {}
    for s in specs:
        children.setdefault(s.parent, []).append(s.name)
    depth: dict[str, int] = {}
    parents = {s.name: s.parent for s in specs}
    for s in specs:
        d, p, seen = 0, s.parent, {s.name}
        while p and p not in seen:
            seen.add(p)
            d, p = d + 1, parents.get(p, "")
        depth[s.name] = d
    out = []
    for s in sorted(constrained, key=lambda s: (depth[s.name], s.name)):
        assert s.topology is not None
        resolved = _resolve(s.topology, session)
        if resolved is not None:
            out.append(_Group(s.name, resolved, _leaves(children, s.name)))
    return out


def _leaves(children: Mapping[str, list[str]], name: str) -> frozenset[str]:
    """The sub-groups without children under `name` (itself when it has none). A module function: a nested one
    that calls itself is a reference cycle (the function and its closure cell), left to the collector per job."""
    kids = children.get(name)
    if not kids:
        return frozenset({name})
    return frozenset(itertools.chain.from_iterable(_leaves(children, k) for k in kids))


def _explain(session: Session, job: Job, reason: str, message: str) -> None:
    errors = session.outcome(job).errors
    error = explain.JobError(reason, (message,))
    if error not in errors:
        errors.append(error)


def _free(nodes: Iterable[NodeState]) -> dict[str, Resources]:
    """Idle plus releasing resources of the schedulable nodes (shared GPUs count by their free portions)."""
    return {n.rec.name: Resources((n.idle_gpu + n.rel_gpu) * GPU + (sum(g.free for g in n.groups.values()
                                                                         if not g.fully_releasing)
                                                                     if n.groups else 0),
                                  n.idle_cpu + n.rel_cpu, n.idle_mem + n.rel_mem)
            for n in nodes if n.ok}


def _request(session: Session, tasks: Iterable[Task]) -> Resources:
    gpu, cpu, memory = session.job_request(tasks)
    return Resources(gpu, cpu, memory) if (gpu or cpu or memory) else NONE


def _placed(session: Session, tasks: Iterable[Task]) -> list[str]:
    return sorted({session.nodes[t.node].name for t in tasks if t.node >= 0 and t.status in ACTIVE_ALLOCATED})


PLUGIN = Topology
