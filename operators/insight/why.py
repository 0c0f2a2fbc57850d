"""`kai why`: why a PodGroup is not running, and the smallest changes that would let it start. Pure.

Every suggestion is checked by running the decision core again on a copy of the snapshot with that one change;
a change the core does not confirm is never printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from operators.core import keys
from operators.core.api.queue import QueueRecord
from operators.core.resources import GpuRequest
from operators.insight.core import (
    RESOURCES,
    Outcome,
    edit_pods,
    fmt_amount,
    fmt_queue_value,
    is_pending,
    is_placed,
    one_line,
    outcome,
    pod_vector,
    pods_of,
    to_queue_units,
    without_pods,
)
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.model import Job, NodeState
from operators.scheduler.decide.plugins.subgroups.tree import DEFAULT_LEAF, SubGroupTree, build_tree
from operators.scheduler.decide.plugins.suspend import rules as suspend_rules
from operators.scheduler.decide.records import (
    NodeRecord,
    PodGroupRecord,
    PodRecord,
    Requirement,
    parse_time,
)
from operators.scheduler.decide.session import Session, rfc3339
from operators.scheduler.decide.snapshot import Snapshot
from operators.scheduler.decide.units import CPU_AXIS, GPU, MB, MEMORY_AXIS, MILLI, gpu_fraction, gpu_memory_share

# Bounds on the extra cycles one `kai why` may run (each is a full scheduling cycle on the snapshot).
MAX_FREE_TRIES = 48
MAX_ESTIMATE_EVENTS = 16


@dataclass(frozen=True, slots=True)
class Suggestion:
    kind: str  # raise-limit | lower-request | consolidate | free-pods | label-node
    text: str
    details: Mapping[str, Any] = field(default_factory=dict)
    cycle: int = 0  # the simulated cycle in which it binds after the change (0: pipelined, binds after evictions)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "verified": True, "cycle": self.cycle, **self.details}


@dataclass(slots=True)
class WhyReport:
    namespace: str
    pod_group: str
    queue: str
    state: str  # running | schedulable | pipelined | pending | waiting-for-gang | suspended
    runs_now: bool
    lines: list[str] = field(default_factory=list)  # the reason in plain words, with numbers
    reasons: list[dict[str, Any]] = field(default_factory=list)  # the core's reasons, as on the PodGroup
    queues: list[dict[str, Any]] = field(default_factory=list)
    best_node: dict[str, Any] | None = None
    suggestions: list[Suggestion] = field(default_factory=list)
    estimate: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "queue": self.queue, "state": self.state,
                "runsNow": self.runs_now, "explanation": self.lines, "reasons": self.reasons,
                "queues": self.queues, "bestNode": self.best_node,
                "suggestions": [s.to_dict() for s in self.suggestions], "estimate": self.estimate}


def format_text(report: WhyReport) -> str:
    out = [f"PodGroup {report.namespace}/{report.pod_group} (queue {report.queue or '-'}): {report.state}"]
    out += [f"  {line}" for line in report.lines]
    if report.suggestions:
        out.append("Would start if (each checked by re-running the scheduler on an edited snapshot):")
        out += [f"  - {s.text}" for s in report.suggestions]
    elif not report.runs_now:
        out.append("No single change found that the scheduler confirms would start it.")
    if report.estimate:
        out.append(f"Start estimate: {report.estimate}")
    return "\n".join(out) + "\n"


# --- analysis ------------------------------------------------------------------------------------


def explain(snapshot: Snapshot, config: SchedulerConfig, now: float, namespace: str, pod_group: str,
            deadlines: Mapping[str, float] | None = None) -> WhyReport:
    """The report for one PodGroup. `deadlines`: "namespace/pod" -> epoch when a running pod must end."""
    pg = next((g for g in snapshot.podgroups if g.namespace == namespace and g.name == pod_group), None)
    if pg is None:
        raise LookupError(f"PodGroup {namespace}/{pod_group} is not in the snapshot")
    report = WhyReport(namespace, pod_group, pg.queue, "pending", False)
    pods = pods_of(snapshot, namespace, pod_group)
    pending = [p for p in pods if is_pending(p)]
    session = Session(snapshot, config, now)
    job = next((j for j in session.jobs if j.key == pg.key), None)
    base = outcome(snapshot, config, now, namespace, pod_group, cycles=1)
    d = base.decisions
    need = gang_need(pg, pods, job)
    # What the workload asks to start: the pods its gang rule needs, or every pending pod once it runs.
    asked = list(need.pods) or pending
    report.queues = _queue_lines(session, pg.queue, asked, snapshot)
    gang = suspend_rules.decode(pg.suspended)
    if gang is not None and not pods:  # suspended by the scheduler (the suspend plugin): its resume condition
        report.state = "suspended"
        report.lines.append(suspend_rules.resume_condition(gang) + ".")
        resumed = any(r.pod_group == pod_group and r.namespace == namespace for r in d.resumes)
        report.runs_now = resumed
        report.lines.append("The next cycle resumes it." if resumed else "Not now: " + (suspend_rules.fits(
            gang, suspend_rules.free_nodes(session.nodes), job.queue if job else None) or "other work comes first")
            + ".")
        return report
    if not pending:
        report.state, report.runs_now = "running", True
        placed = [p for p in pods if is_placed(p)]
        report.lines.append(f"{len(placed)} pod(s) placed, none pending." if pods else "It has no pods.")
        return report
    waiting = next((u for u in d.unschedulable if u.namespace == namespace and u.pod_group == pod_group
                    and any(r.reason == keys.REASON_WAITING_FOR_QUOTA for r in u.reasons)), None)
    if waiting is not None:  # quotagates: its pods stay gated (never Unschedulable) until quota admits them
        report.state = "waiting-for-quota"
        report.reasons = [r.to_dict() for r in waiting.reasons]
        report.lines.append(one_line(waiting.message))
        report.lines += [_queue_sentence(q) for q in report.queues]
        report.suggestions += _raise_limits(snapshot, config, now, pg.queue, session, asked, namespace, pod_group)
        return report
    short = need.shortfall if need.tree_rule else _gang_shortfall(job)
    if short:
        report.state = "waiting-for-gang"
        report.lines += short
        report.estimate = "can't tell: it starts once its controller creates the missing pods"
        return report
    if base.bound:
        report.state, report.runs_now = "schedulable", True
        report.lines.append("The next cycle binds it: " + ", ".join(f"{p} -> {n}" for p, n in base.bound))
        return report
    if base.pipelined:
        report.state = "pipelined"
        victims = [f"{e.namespace}/{e.pod} ({e.action})" for e in d.evictions
                   if e.for_pod_group == pg.key]
        report.lines.append("Pipelined: it starts when the pods evicted for it are gone: "
                            + (", ".join(victims) or "pods already terminating"))
        report.lines.append("Pipelined to " + ", ".join(f"{p} -> {n}" for p, n in base.pipelined))
        return report
    unsched = next((u for u in d.unschedulable if u.namespace == namespace and u.pod_group == pod_group), None)
    if unsched is not None:
        report.reasons = [r.to_dict() for r in unsched.reasons]
        report.lines.append(one_line(unsched.message))
    if need.text:
        report.lines.append(need.text)
    report.lines += [_queue_sentence(q) for q in report.queues]
    best = _best_node(session, asked)
    if best is not None:
        report.best_node = best
        report.lines.append(best["text"])
    report.suggestions += _raise_limits(snapshot, config, now, pg.queue, session, asked, namespace, pod_group)
    report.suggestions += _lower_requests(snapshot, config, now, session, pending, namespace, pod_group)
    report.suggestions += _label_nodes(snapshot, config, now, session, pending, namespace, pod_group)
    report.suggestions += _free_pods(snapshot, config, now, session, pods, namespace, pod_group)
    report.estimate = _estimate(snapshot, config, now, namespace, pod_group, deadlines or {})
    return report


@dataclass(frozen=True, slots=True)
class GangNeed:
    """What a PodGroup's gang rule asks before it can start, from the pods placed now.

    At each level of its SubGroup tree `minSubGroup` of the direct children must meet their own minimum (all of
    them without it), a leaf `minMember` pods; the cheapest choice is taken at every level (the leaves already
    satisfied, then those closest to their minimum, ties in spec order), as the scheduler does.
    """

    met: bool  # the minimum holds with the pods placed: the pending ones are growth beyond it
    missing: Mapping[str, int]  # leaf -> pods it still needs to start, tree order (only leaves that lack some)
    pods: tuple[PodRecord, ...]  # the pending pods that fill `missing` (each leaf's first ones, by name)
    tree_rule: bool  # the PodGroup sets minSubGroup somewhere: readiness follows the tree, not every leaf
    text: str  # the sentence for the report ('' when the rule needs every pending pod and has no minSubGroup)
    shortfall: list[str]  # not enough pods exist to ever meet the rule (waiting for its controller)


def _leaf_of(tree: SubGroupTree, pod: PodRecord) -> str:
    return (pod.subgroup or DEFAULT_LEAF) if tree.has_subgroups else DEFAULT_LEAF


def _pods_phrase(missing: Mapping[str, int], tree: SubGroupTree) -> str:
    def count(n: int) -> str:
        return f"{n} more pod" + ("" if n == 1 else "s")

    if not tree.has_subgroups:
        return count(sum(missing.values()))
    parts = [f"{count(n)} in sub-group {leaf}" for leaf, n in missing.items() if n]
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else count(0)


def gang_need(pg: PodGroupRecord, pods: Sequence[PodRecord], job: Job | None = None) -> GangNeed:
    """The gang rule of `pg` applied to its pods: what it needs to start (`job`, when given, orders each leaf's
    pending pods as the scheduler would take them)."""
    tree = build_tree(pg.subgroups, pg.min_member, pg.min_sub_group)
    tree_rule = pg.min_sub_group is not None or any(s.min_sub_group is not None for s in pg.subgroups)
    leaves = set(tree.leaves)
    placed: dict[str, int] = {}
    waiting: dict[str, list[PodRecord]] = {}
    alive: dict[str, int] = {}
    for p in pods:
        leaf = _leaf_of(tree, p)
        if leaf not in leaves:
            continue
        if is_placed(p):
            placed[leaf] = placed.get(leaf, 0) + 1
        elif is_pending(p) and not p.gated:
            waiting.setdefault(leaf, []).append(p)
        if (is_placed(p) or is_pending(p)) and not p.gated:
            alive[leaf] = alive.get(leaf, 0) + 1
    if job is not None:  # the scheduler's order within each leaf
        order = {t.rec.key: i for ps in job.podsets for i, t in enumerate(ps.pending)}
        for group in waiting.values():
            group.sort(key=lambda p: (order.get(p.key, len(order)), p.name))
    else:
        for group in waiting.values():
            group.sort(key=lambda p: p.name)
    shortfall: list[str] = []
    if tree_rule and not tree.satisfied(alive):
        need = tree.plan(alive).missing
        shortfall.append(f"Waiting for its gang: {tree.explain(alive, what='exist')}: it needs "
                         f"{_pods_phrase({k: v for k, v in need.items() if v}, tree)} to exist.")
    if tree.satisfied(placed):
        return GangNeed(True, {}, (), tree_rule, "", shortfall)
    plan = tree.plan(placed, {leaf: len(q) for leaf, q in waiting.items()})
    missing = {leaf: n for leaf, n in plan.missing.items() if n}
    chosen = tuple(p for leaf, n in missing.items() for p in waiting.get(leaf, [])[:n])
    pending_count = sum(len(q) for q in waiting.values())
    text = ""
    if plan.feasible and (tree_rule or len(chosen) < pending_count):  # else: every pending pod, as counted
        text = (f"To start, its gang rule needs {_pods_phrase(missing, tree)} placed"
                + (f" ({len(chosen)} of its {pending_count} pending)" if len(chosen) < pending_count else "")
                + f": {tree.explain(placed, what='placed')}.")
    return GangNeed(False, missing, chosen if plan.feasible else (), tree_rule, text, shortfall)


def _gang_shortfall(job: Job | None) -> list[str]:
    if job is None:
        return []
    out = []
    for p in job.podsets:
        have = p.alive - p.gated
        if have < p.min_available:
            where = "the gang" if p.name == "default" and not job.has_subgroups else f"subgroup {p.name}"
            gated = f" ({p.gated} gated)" if p.gated else ""
            out.append(f"Waiting for its gang: {where} needs {p.min_available} pods, {have} exist{gated}: "
                       f"{p.min_available - have} short.")
    return out


def _queue_lines(session: Session, queue: str, pending: Sequence[PodRecord],
                 snapshot: Snapshot) -> list[dict[str, Any]]:
    state = session.queues.get(queue)
    if state is None:
        return []
    request = _request(pending, snapshot)
    out = []
    for q in state.lineage():
        res: dict[str, dict[str, float]] = {}
        for i, name in enumerate(RESOURCES):
            res[name] = {"quota": to_queue_units(q.rec.quota[i], i), "limit": to_queue_units(q.rec.limit[i], i),
                         "fairShare": round(to_queue_units(q.fair_share[i], i), 3),
                         "allocated": round(to_queue_units(q.allocated[i], i), 3),
                         "workloadRequest": round(to_queue_units(request[i], i), 3)}
        out.append({"name": q.name, "title": q.rec.title, "resources": res})
    return out


def _queue_sentence(q: Mapping[str, Any]) -> str:
    gpu = q["resources"]["gpu"]
    # The values are in Queue units already (GPUs).
    limit = "no limit" if gpu["limit"] == -1 else f"limit {humanize(gpu['limit'])}"
    quota = "unlimited quota" if gpu["quota"] == -1 else f"quota {humanize(gpu['quota'])}"
    return (f"Queue {q['name']}: GPUs {quota}, {limit}, fair share {humanize(gpu['fairShare'])}, "
            f"allocated {humanize(gpu['allocated'])}; this workload asks {humanize(gpu['workloadRequest'])} more.")


def _request(pods: Sequence[PodRecord], snapshot: Snapshot) -> list[int]:
    """What the pods ask of their queue in the core's queue units (micro-GPUs, millicores, bytes)."""
    memories = [n.gpu_memory_mib for n in snapshot.nodes if n.gpu_memory_mib]
    node_memory = min(memories) if memories else None
    total = [0, 0, 0]
    for p in pods:
        g = p.gpu
        total[0] += g.whole * GPU
        if g.portion is not None:
            total[0] += gpu_fraction(g.portion) * g.num_devices
        elif g.memory_mib is not None and node_memory:
            total[0] += gpu_memory_share(g.num_devices * g.memory_mib, node_memory)
        total[1] += p.cpu
        total[2] += p.memory
    return total


def _usable(n: NodeState) -> bool:
    """Ready and not cordoned: where a suggestion may send work (a cordoned node takes only tolerating pods)."""
    return n.ok and not n.rec.unschedulable


def _free(n: NodeState) -> tuple[float, float, float]:
    return n.idle_gpu + n.rel_gpu, n.idle_cpu + n.rel_cpu, n.idle_mem + n.rel_mem


def _best_node(session: Session, pending: Sequence[PodRecord]) -> dict[str, Any] | None:
    nodes = [n for n in session.nodes if _usable(n)]
    if not nodes or not pending:
        return None
    best = max(nodes, key=lambda n: (_free(n), n.best_group_free()))  # ties: the first by name
    free = _free(best)
    ask = max(pod_vector(p, best.rec.gpu_memory_mib) for p in pending)  # the largest pending pod
    text = (f"Best node {best.name}: free {fmt_amount(free[0], 0)}, {fmt_amount(free[1], 1)}, "
            f"{fmt_amount(free[2], 2)}; the largest pending pod asks {fmt_amount(ask[0], 0)}, "
            f"{fmt_amount(ask[1], 1)}, {fmt_amount(ask[2], 2)} ({len(pending)} pending pod(s)).")
    return {"name": best.name, "free": {"gpu": free[0], "cpu": free[1], "memory": free[2]},
            "podRequest": {"gpu": ask[0], "cpu": ask[1], "memory": ask[2]}, "text": text}


def _with_queue(snapshot: Snapshot, name: str, change: Any) -> Snapshot:
    queues = tuple(change(q) if q.name == name else q for q in snapshot.queues)
    return replace(snapshot, queues=queues)


def _raise_limits(snapshot: Snapshot, config: SchedulerConfig, now: float, queue: str, session: Session,
                  pending: Sequence[PodRecord], namespace: str, pod_group: str) -> list[Suggestion]:
    state = session.queues.get(queue)
    if state is None:
        return []
    request = _request(pending, snapshot)
    out: list[Suggestion] = []
    for q in state.lineage():
        for i in range(3):
            limit = q.rec.limit[i]
            if limit == -1 or q.allocated[i] + request[i] <= limit:
                continue
            # Whole units in the Queue's own terms (GPUs to 3 decimals as KAI prints them), rounded up, on integers.
            step = (GPU // MILLI, 1, MB)[i]  # a thousandth of a GPU, a millicore, a megabyte
            new_limit = -(-(q.allocated[i] + request[i]) // step) * step
            value = to_queue_units(new_limit, i)

            def raised(rec: QueueRecord, i: int = i, new_limit: int = new_limit) -> QueueRecord:
                vec = list(rec.limit)
                vec[i] = new_limit
                return replace(rec, limit=(vec[0], vec[1], vec[2]))

            result = outcome(_with_queue(snapshot, q.name, raised), config, now, namespace, pod_group)
            if result.scheduled:
                out.append(Suggestion(
                    "raise-limit",
                    f"raise queue {q.name} {RESOURCES[i]} limit from {fmt_queue_value(limit, i)} to "
                    f"{fmt_queue_value(new_limit, i)} (spec.resources.{RESOURCES[i]}.limit)" + _how(result),
                    {"queue": q.name, "resource": RESOURCES[i], "from": to_queue_units(limit, i), "to": value},
                    result.cycle))
    return out


def _how(result: Outcome) -> str:
    if result.bound:
        return "; it would then bind to " + ", ".join(sorted({n for _, n in result.bound}))
    return "; it would then be pipelined (after evictions)"


def _lower_requests(snapshot: Snapshot, config: SchedulerConfig, now: float, session: Session,
                    pending: Sequence[PodRecord], namespace: str, pod_group: str) -> list[Suggestion]:
    names = {p.name for p in pending}
    out: list[Suggestion] = []
    whole = max((p.gpu.whole for p in pending), default=0)
    if whole > 1:
        for z in range(whole - 1, 0, -1):
            def lowered(p: PodRecord, z: int = z) -> PodRecord:
                if p.namespace == namespace and p.name in names and p.gpu.whole > z:
                    return replace(p, gpu=GpuRequest(whole=z))
                return p
            result = outcome(edit_pods(snapshot, lowered), config, now, namespace, pod_group)
            if result.scheduled:
                out.append(Suggestion("lower-request", f"lower the GPU request per pod from {whole} to {z}"
                                      + _how(result), {"resource": "gpu", "from": whole, "to": z}, result.cycle))
                break
    ok = [n for n in session.nodes if _usable(n)]
    for i, attr in ((CPU_AXIS, "cpu"), (MEMORY_AXIS, "memory")):
        asked = max((getattr(p, attr) for p in pending), default=0)
        room = max((_free(n)[i] for n in ok), default=0)
        if not ok or asked <= room or room <= 0:
            continue
        step = 100 if i == CPU_AXIS else MB  # 100 millicores / 1 MB
        cut = int(room // step * step)
        if cut <= 0:
            continue

        def lowered_res(p: PodRecord, attr: str = attr, z: int = cut) -> PodRecord:
            if p.namespace == namespace and p.name in names and getattr(p, attr) > z:
                return replace(p, cpu=z) if attr == "cpu" else replace(p, memory=z)
            return p
        result = outcome(edit_pods(snapshot, lowered_res), config, now, namespace, pod_group)
        if result.scheduled:
            out.append(Suggestion("lower-request", f"lower the {attr} request per pod from {fmt_amount(asked, i)} "
                                  f"to {fmt_amount(cut, i)}" + _how(result),
                                  {"resource": attr, "from": to_queue_units(asked, i), "to": to_queue_units(cut, i)},
                                  result.cycle))
    return out


def _missing_labels(node: NodeRecord, pod: PodRecord) -> dict[str, str] | None:
    """Labels that, added to the node, satisfy the pod's node selector and required node affinity (None: can't)."""
    add = {k: v for k, v in pod.constraints.node_selector if node.labels.get(k) != v}
    terms = pod.constraints.node_affinity
    if terms is not None:
        labels = {**node.labels, **add}
        if not any(t.matches(node.name, labels) for t in terms):
            fix = None
            for term in terms:
                fix = _term_fix(term.expressions, labels)
                if fix is not None and not term.fields:
                    break
                fix = None
            if fix is None:
                return None
            add.update(fix)
    return add


def _term_fix(reqs: Sequence[Requirement], labels: Mapping[str, str]) -> dict[str, str] | None:
    fix: dict[str, str] = {}
    for r in reqs:
        if r.matches(labels):
            continue
        if r.operator == "In" and r.values and r.key not in labels:
            fix[r.key] = r.values[0]
        elif r.operator == "Exists" and r.key not in labels:
            fix[r.key] = "true"
        else:
            return None  # a label would have to change or go: not a "missing label"
    return fix


def _label_nodes(snapshot: Snapshot, config: SchedulerConfig, now: float, session: Session,
                 pending: Sequence[PodRecord], namespace: str, pod_group: str) -> list[Suggestion]:
    constrained = [p for p in pending if p.constraints.node_selector or p.constraints.node_affinity is not None]
    if not constrained:
        return []
    records = {n.name: n for n in snapshot.nodes}
    if any(any(_missing_labels(records[n.name], p) == {} for p in constrained) for n in session.nodes if _usable(n)):
        return []  # some node already carries the labels: labels are not what blocks it
    for n in sorted((n for n in session.nodes if _usable(n)), key=lambda n: (-_free(n)[0], n.name))[:5]:
        add: dict[str, str] = {}
        for p in constrained:
            fix = _missing_labels(records[n.name], p)
            if fix is None:
                break
            add.update(fix)
        else:
            labelled = replace(records[n.name], labels={**records[n.name].labels, **add})
            edited = replace(snapshot, nodes=tuple(labelled if r.name == n.name else r for r in snapshot.nodes))
            result = outcome(edited, config, now, namespace, pod_group)
            if result.scheduled and add:
                text = " ".join(f"{k}={v}" for k, v in sorted(add.items()))
                return [Suggestion("label-node", f"node {n.name} lacks the label(s) its required node affinity/"
                                   f"selector asks for: `kubectl label node {n.name} {text}`" + _how(result),
                                   {"node": n.name, "labels": add}, result.cycle)]
    return []


def _free_pods(snapshot: Snapshot, config: SchedulerConfig, now: float, session: Session,
               own: Sequence[PodRecord], namespace: str, pod_group: str) -> list[Suggestion]:
    """Running pods whose leaving would let it start; when they could run elsewhere, that is a consolidation."""
    mine = {p.key for p in own}
    free_by_node = {n.name: _free(n) for n in session.nodes if _usable(n)}
    placed = [p for p in snapshot.pods if is_placed(p) and p.key not in mine and not p.is_reservation
              and p.node_name in free_by_node]
    # Nodes nearest to fitting first; on a node, the smallest pods first.
    placed.sort(key=lambda p: (tuple(-v for v in free_by_node[p.node_name]), p.node_name,
                               pod_vector(p), p.key))
    removed: list[PodRecord] = []
    tries = 0
    found = False
    for p in placed:
        if tries >= MAX_FREE_TRIES:
            break
        removed.append(p)
        tries += 1
        if outcome(without_pods(snapshot, [r.key for r in removed]), config, now, namespace, pod_group).scheduled:
            found = True
            break
    if not found:
        return []
    for p in list(reversed(removed)):  # drop every pod that is not needed
        if len(removed) == 1 or tries >= 2 * MAX_FREE_TRIES:
            break
        trial = [r for r in removed if r is not p]
        tries += 1
        if outcome(without_pods(snapshot, [r.key for r in trial]), config, now, namespace, pod_group).scheduled:
            removed = trial
    moves = _moves(session, removed)
    if moves is not None:
        moved = {p.key: node for p, node in moves}

        def move(p: PodRecord) -> PodRecord:
            return replace(p, node_name=moved[p.key]) if p.key in moved else p
        result = outcome(edit_pods(snapshot, move), config, now, namespace, pod_group)
        if result.scheduled:
            text = "; ".join(f"{p.key} from {p.node_name} to {node}" for p, node in moves)
            return [Suggestion("consolidate", f"consolidation: move {text}" + _how(result),
                               {"moves": [{"pod": p.key, "from": p.node_name, "to": node} for p, node in moves]},
                               result.cycle)]
    result = outcome(without_pods(snapshot, [r.key for r in removed]), config, now, namespace, pod_group)
    return [Suggestion("free-pods", "it fits after these pods finish or move: "
                       + ", ".join(f"{p.key} (on {p.node_name})" for p in removed) + _how(result),
                       {"pods": [p.key for p in removed]}, result.cycle)]


def _moves(session: Session, pods: Sequence[PodRecord]) -> list[tuple[PodRecord, str]] | None:
    """First-fit new nodes for the pods, away from every node they leave; None when one does not fit."""
    leaving = {p.node_name for p in pods}
    room = {n.name: list(_free(n)) for n in session.nodes if _usable(n) and n.name not in leaving}
    records = {n.name: n.rec for n in session.nodes}
    out = []
    for p in pods:
        if p.gpu.is_shared:
            return None
        ask = pod_vector(p)
        for name in sorted(room, key=lambda n: (room[n][0], n)):  # fill the fullest node first
            fits = all(room[name][i] >= ask[i] for i in range(3))  # whole GPUs, millicores, bytes: exact
            if fits and _missing_labels(records[name], p) == {}:
                room[name] = [room[name][i] - ask[i] for i in range(3)]
                out.append((p, name))
                break
        else:
            return None
    return out


def _estimate(snapshot: Snapshot, config: SchedulerConfig, now: float, namespace: str, pod_group: str,
              deadlines: Mapping[str, float]) -> str:
    """When it starts if nothing changes except running pods ending at known deadlines or min-runtimes passing."""
    events: list[tuple[float, str, str]] = []  # (time, what, pod key to remove or "")
    placed = {p.key for p in snapshot.pods if is_placed(p)}
    for key, at in deadlines.items():
        if key in placed and at > now:
            events.append((at, f"{key} reaches its activeDeadlineSeconds", key))
    queues = {q.name: q for q in snapshot.queues}
    running_groups = {(p.namespace, p.pod_group) for p in snapshot.pods if is_placed(p)}
    for g in snapshot.podgroups:
        if (g.namespace, g.name) not in running_groups or not g.last_start:
            continue
        q = queues.get(g.queue)
        for runtime in {_inherited(q, queues, "preempt_min_runtime", config.default_preempt_min_runtime),
                        _inherited(q, queues, "reclaim_min_runtime", config.default_reclaim_min_runtime)}:
            at = parse_time(g.last_start) + runtime
            if runtime > 0 and at > now:
                events.append((at, f"{g.key} passes its min-runtime", ""))
    if not events:
        return ("can't tell: no running pod has a known end (activeDeadlineSeconds) or a min-runtime still "
                "to pass; it starts when enough running pods finish")
    events.sort()
    gone: list[str] = []
    for at, what, key in events[:MAX_ESTIMATE_EVENTS]:
        if key:
            gone.append(key)
        result = outcome(without_pods(snapshot, gone), config, at + 1, namespace, pod_group)
        if result.scheduled:
            return f"about {rfc3339(at)} (in {_duration(at - now)}), once {what}"
    return "can't tell: the known deadlines and min-runtimes do not free enough for it"


def _inherited(q: QueueRecord | None, queues: Mapping[str, QueueRecord], attr: str, default: float) -> float:
    seen: set[str] = set()
    while q is not None and q.name not in seen:
        value = getattr(q, attr)
        if value is not None:
            return float(value)
        seen.add(q.name)
        q = queues.get(q.parent)
    return default


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60}m"
