"""Session open from the previous session's objects (decide/session/persist.py): every field a carried open leaves
on nodes, jobs, podsets, tasks and queues equals a fresh open's, after churn and after each kind of committed op."""

from __future__ import annotations

import random
from dataclasses import fields, replace
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.actions import get_action
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.model import Job, NodeState, PodSet, QueueState, Task
from operators.scheduler.decide.session import Carry, Session
from operators.scheduler.decide.session import persist as persist_module
from operators.scheduler.decide.simulation import apply_decisions
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects

NOW = 1e9
CONFIG = SchedulerConfig()


def one(obj: dict[str, Any]) -> Any:
    """The record of one object, as the snapshot holds it."""
    snap = snapshot_from_objects([obj])
    return next(iter(snap.pods or snap.podgroups or snap.nodes or snap.bindrequests))


def _task(t: Task) -> tuple[object, ...]:
    return (id(t.rec), t.status, t.node, t.groups, t.portion, t.job.key if t.job else None,
            t.podset.name if t.podset else None, t.order, t.fit_key, t.claims)


def _podset(ps: PodSet) -> tuple[object, ...]:
    return (ps.name, ps.min_available, [_task(t) for t in ps.tasks], ps.active_allocated, ps.pipelined,
            ps.active_used, ps.alive, ps.gated, [t.name for t in ps.pending], ps.core)


def _job(j: Job) -> tuple[object, ...]:
    skip = {"tasks", "podsets", "queue"}
    return (tuple(getattr(j, f.name) for f in fields(Job) if f.name not in skip), j.queue.name if j.queue else None,
            [_task(t) for t in j.tasks], [_podset(p) for p in j.podsets])


def _node(n: NodeState) -> tuple[object, ...]:
    skip = {"groups", "ports", "scalars"}
    return (tuple(getattr(n, f.name) for f in fields(NodeState) if f.name not in skip),
            [(g.id, g.used, g.releasing, g.pods) for g in n.groups.values()],
            list(n.ports.items()) if n.ports is not None else None,
            {k: list(v) for k, v in n.scalars.items()} if n.scalars is not None else None)


def _queue(q: QueueState) -> tuple[object, ...]:
    skip = {"parent", "children"}
    return (tuple(getattr(q, f.name) for f in fields(QueueState) if f.name not in skip),
            q.parent.name if q.parent else None, [c.name for c in q.children])


def state(s: Session) -> dict[str, object]:
    """Everything session open derives, by value (records by identity)."""
    return {
        "nodes": [_node(n) for n in s.nodes],
        "node_by_name": all(s.node_by_name[n.name] is n for n in s.nodes) and len(s.node_by_name) == len(s.nodes),
        "jobs": [_job(j) for j in s.jobs],
        "feature_jobs": [j.key for j in s.feature_jobs],
        "victims": [j.key for j in s._victims],
        "queues": {name: _queue(q) for name, q in s.queues.items()},
        "other_usage": s.other_usage, "total": s.total, "min_gpu_memory": s.min_gpu_memory,
        "outcomes": {k: (o.errors, o.failure) for k, o in s.outcomes.items()},
        "pod_index": s.pod_index is not None,
    }


def finish(session: Session) -> tuple[Decisions, Carry]:
    """The rest of `run_carried_cycle` on an opened session: its actions, close, the hand-over."""
    for name in CONFIG.effective_actions:
        action = get_action(name)
        if action.enabled:
            action.execute(session)
    decisions = session.close()
    session.hand_over()
    carry = session.carrying.carry()
    session.release()
    return decisions, carry


def check(snapshot: Snapshot, carry: Carry, *, carried: bool = True) -> tuple[Decisions, Carry, Session]:
    """Open `snapshot` with the carry and afresh, compare every field, run the carried cycle to its end."""
    fresh = Session(snapshot, CONFIG, NOW)
    expected = state(fresh)
    fresh.release()
    session = Session(snapshot, CONFIG, NOW, carry)
    opened = session.carrying.opened
    assert opened is not None
    assert (opened.rebuilt_jobs >= 0) == carried  # opened from the previous session's objects, or in full
    assert state(session) == expected
    decisions, out = finish(session)
    return decisions, out, session


def base() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("top"), queue("q", "top"), queue("r", "top")]
    objs += [node(f"n{i}", gpus=4) for i in range(6)]
    for i in range(8):  # running jobs, some gangs, on the nodes
        objs.append(podgroup(f"run{i}", "q" if i % 2 else "r", min_member=1 + i % 2,
                             created=f"2025-01-0{1 + i}T00:00:00Z"))
        objs += [pod(f"run{i}-{k}", f"run{i}", gpus=1, node_name=f"n{(i + k) % 6}", phase="Running")
                 for k in range(1 + i % 2)]
    objs += [podgroup("frac"), pod("frac-0", "frac", fraction="0.5", node_name="n1", phase="Running",
                                   gpu_group="g1")]
    objs += [pod("other", None, gpus=1, node_name="n2", phase="Running", scheduler="default-scheduler")]
    objs.append(podgroup("sub", min_member=2, subgroups=[{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]))
    objs += [pod("sub-a", "sub", gpus=1, subgroup="a"), pod("sub-b", "sub", gpus=1, subgroup="b")]
    for i in range(4):  # pending work, some of it fitting
        objs.append(podgroup(f"wait{i}", "q" if i % 2 else "r", min_member=2, created="2025-02-01T00:00:00Z"))
        objs += [pod(f"wait{i}-{k}", f"wait{i}", gpus=1 + i) for k in range(2)]
    return objs


def test_an_untouched_cycle_rebuilds_nothing_and_a_carried_open_equals_a_fresh_one() -> None:
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    decisions, carry, _ = check(snapshot, carry)  # the same snapshot: only what the first cycle's ops touched
    assert decisions.binds  # allocate committed, so jobs were touched and rebuilt
    opened = carry.opened
    assert opened is not None
    assert 0 < opened.rebuilt_jobs < len(opened.jobs)


def test_random_churn_carried_opens_equal_fresh_ones() -> None:
    rng = random.Random(26)
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    serial = 0
    for step in range(12):
        decisions, carry, _ = check(snapshot, carry, carried=step not in (4, 9))
        snapshot = apply_decisions(snapshot, decisions)  # pods re-bound, evicted ones pending again
        pods = list(snapshot.pods)
        podgroups = list(snapshot.podgroups)
        binds = list(snapshot.bindrequests)
        for _ in range(3):
            kind = rng.randrange(5)
            if kind == 0 and pods:  # a pod gone
                pods.pop(rng.randrange(len(pods)))
            elif kind == 1:  # a new single-pod job, and a pod joining an existing group
                serial += 1
                podgroups.append(one(podgroup(f"new{serial}", rng.choice(["q", "r"]))))
                pods.append(one(pod(f"new{serial}-0", f"new{serial}", gpus=rng.randrange(3))))
                pods.append(one(pod(f"extra{serial}", rng.choice(podgroups).name, gpus=1)))
            elif kind == 2 and podgroups:  # a PodGroup changed (its minimum)
                i = rng.randrange(len(podgroups))
                podgroups[i] = replace(podgroups[i], min_member=rng.randrange(1, 3))
            elif kind == 3:  # a BindRequest for a pending pod, or one failed
                pending = [p for p in pods if p.phase == "Pending" and not p.node_name]
                if pending:
                    p = rng.choice(pending)
                    br = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                          "metadata": {"name": p.name, "namespace": p.namespace},
                          "spec": {"podName": p.name, "selectedNode": f"n{rng.randrange(6)}"},
                          "status": {"phase": "Failed"} if rng.random() < 0.3 else {}}
                    binds = [b for b in binds if b.pod_name != p.name] + [one(br)]
            elif binds:  # a BindRequest gone
                binds.pop(rng.randrange(len(binds)))
        nodes = snapshot.nodes
        if step == 3:  # a node added: the next open is a full one
            nodes = (*nodes, one(node("n9", gpus=2)))
        if step == 8:  # a node removed, likewise
            nodes = tuple(n for n in nodes if n.name != "n9")
        snapshot = replace(snapshot, pods=tuple(pods), podgroups=tuple(podgroups), bindrequests=tuple(binds),
                           nodes=nodes)


def reclaim_cluster() -> Snapshot:
    # Queue r holds every GPU beyond its share; queue q's deserved gang takes them back: evictions and pipelines.
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("q", gpu=(4, -1, 1)), queue("r", gpu=(0, -1, 1))]
    objs += [node(f"n{i}", gpus=2) for i in range(2)]
    for i in range(4):
        objs.append(podgroup(f"hog{i}", "r"))
        objs.append(pod(f"hog{i}-0", f"hog{i}", gpus=1, node_name=f"n{i % 2}", phase="Running"))
    objs.append(podgroup("due", "q", min_member=2, created="2025-02-01T00:00:00Z"))
    objs += [pod(f"due-{k}", "due", gpus=1) for k in range(2)]
    objs.append(podgroup("idle", "r"))
    objs.append(pod("idle-0", "idle", cpu="1"))
    return snapshot_from_objects(objs)


def test_each_kind_of_committed_op_is_rebuilt_exactly() -> None:
    snapshot = reclaim_cluster()
    first, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    assert first.evictions and first.pipelined  # evict and pipeline committed (reclaim)
    decisions, carry, _ = check(snapshot, carry)  # the same snapshot: the ops' jobs and nodes rebuilt
    again = apply_decisions(snapshot, first)  # the evictions landed: the pipelined gang binds (allocate)
    decisions, carry, _ = check(again, carry)
    assert decisions.binds
    check(apply_decisions(again, decisions), carry)


def test_a_committed_bind_whose_job_is_not_rebuilt_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: a hand-over that forgets the touched jobs leaves their tasks as the ops left
    them (a bound pod still Allocated on its node)."""
    original = persist_module.Persisting.hand_over

    def forgetful(self: Session) -> None:
        original(self)
        opened = self.carrying.opened
        if opened is not None:
            opened.touched_jobs = set()

    monkeypatch.setattr(persist_module.Persisting, "hand_over", forgetful)
    snapshot = snapshot_from_objects(base())
    first, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    assert first.binds
    fresh = Session(snapshot, CONFIG, NOW)
    carried = Session(snapshot, CONFIG, NOW, carry)
    assert state(carried) != state(fresh)


def test_a_carry_is_used_once() -> None:
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    check(snapshot, carry)
    check(snapshot, carry, carried=False)  # its objects belong to the first session given it: a full open


def test_a_node_an_undone_attempt_touched_is_rebuilt() -> None:
    """A gang whose second pod finds no free host port is undone: its node keeps a zero port count where a fresh open
    has none, so the node must be rebuilt though no task on it changed."""
    web = {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}],
                           "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    objs = [*PRIORITY_CLASSES, queue("q"), node("n0", gpus=0), podgroup("web", min_member=2),
            pod("web-0", "web", spec_extra=web), pod("web-1", "web", spec_extra=web)]
    snapshot = snapshot_from_objects(objs)
    first, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    assert not first.binds
    opened = carry.opened
    assert opened is not None
    assert opened.touched_nodes == {0}
    opened.touched_jobs = set()  # only the node marks the attempt (its job holds nothing the attempt left)
    check(snapshot, carry)


def test_any_pod_after_a_carried_open_sees_new_records_and_removed_ones() -> None:
    """`Session.any_pod` (the plugins' "does any pod need this"): after a carried open where no pod passed, only the
    new records are looked at; its answers equal a scan of every pod as pods that pass come and go."""
    never = one(pod("never-0", None, gpus=1, spec_extra={"preemptionPolicy": "Never"}))
    assert never.preempt_never
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    seen: list[object] = []

    def counted(p: Any) -> bool:
        seen.append(p)
        return bool(p.preempt_never)

    for step, with_never in enumerate([False, True, True, False, False]):
        pods = tuple(p for p in snapshot.pods if p.name != never.name)
        snapshot = replace(snapshot, pods=(*pods, never) if with_never else pods)
        session = Session(snapshot, CONFIG, NOW, carry)
        opened = session.carrying.opened
        assert opened is not None and opened.rebuilt_jobs >= 0  # carried
        seen.clear()
        assert session.any_pod("counted never", counted) is with_never
        # A first use, or a previous answer of yes: every pod; a previous no: the new records only.
        if step in (0, 2, 3):
            assert len(seen) == len(snapshot.pods)  # `never`, when there, is the last pod
        else:
            assert len(seen) < len(snapshot.pods)
        _, carry = finish(session)


def test_many_new_jobs_merge_into_the_sorted_job_list() -> None:
    """A carried open places new jobs among the kept ones in (namespace, name) order, as a fresh open lists them:
    100 new PodGroups, in shuffled snapshot order, with names before, between and after the existing ones."""
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    names = [f"{prefix}{i}" for i in range(25) for prefix in ("a", "m", "s", "z")]
    random.Random(7).shuffle(names)
    new = snapshot_from_objects([obj for name in names for obj in (podgroup(name, "q"), pod(f"{name}-0", name))])
    snapshot = replace(snapshot, pods=(*snapshot.pods, *new.pods), podgroups=(*snapshot.podgroups, *new.podgroups))
    _, carry, _ = check(snapshot, carry)
    assert carry.opened is not None and carry.opened.rebuilt_jobs >= 100


def _bindrequest(pod_name: str, node_name: str) -> Any:
    return one({"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                "metadata": {"name": pod_name, "namespace": "ns"},
                "spec": {"podName": pod_name, "selectedNode": node_name}})


def _status(snapshot: Snapshot, job: str) -> list[str]:
    """The statuses of a job's tasks in a fresh open."""
    session = Session(snapshot, CONFIG, NOW)
    statuses = [t.status for j in session.jobs if j.rec.name == job for t in j.tasks]
    session.release()
    return statuses


def test_a_bindrequest_reaches_the_pending_pod_of_its_name_however_its_task_came() -> None:
    # The carried open finds the task a changed BindRequest reaches by the pod's name (an index kept from open to
    # open): a pod first seen in the open that built the index, or re-made since, must be found as well as an old one.
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    big = [one(podgroup("big", "q")), one(pod("big-0", "big", gpus=64))]  # pending: fits nowhere
    snapshot = replace(snapshot, pods=(*snapshot.pods, big[1]), podgroups=(*snapshot.podgroups, big[0]),
                       bindrequests=(_bindrequest("wait3-0", "n5"),))  # BindRequests changed: the index is built
    _, carry, _ = check(snapshot, carry)
    snapshot = replace(snapshot, bindrequests=(_bindrequest("big-0", "n0"),))  # the new pod's, the old one's gone
    assert _status(snapshot, "big") == ["Binding"]  # what the carried open must see too
    _, carry, _ = check(snapshot, carry)
    remade = replace(next(p for p in snapshot.pods if p.name == "wait2-1"))  # an equal record, a new object
    snapshot = replace(snapshot, pods=tuple(remade if p.name == "wait2-1" else p for p in snapshot.pods))
    _, carry, _ = check(snapshot, carry)
    snapshot = replace(snapshot, bindrequests=(_bindrequest("wait2-1", "n4"),))
    assert "Binding" in _status(snapshot, "wait2")
    check(snapshot, carry)


def test_two_pending_pods_of_one_name_are_both_reached_by_its_bindrequest() -> None:
    # Never in a cluster, possible in a snapshot made of documents: the index by name holds one task per name, so the
    # carried open must then look at every task, as a fresh open reads the BindRequest for both.
    snapshot = snapshot_from_objects(base())
    twin = [one(podgroup("twin", "q")), one(pod("twin-0", "twin", gpus=64))]
    again = replace(twin[1], uid="uid-twin-0-again")
    snapshot = replace(snapshot, pods=(*snapshot.pods, twin[1], again), podgroups=(*snapshot.podgroups, twin[0]))
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    snapshot = replace(snapshot, bindrequests=(_bindrequest("wait3-0", "n5"),))  # the index's first build
    _, carry, _ = check(snapshot, carry)
    snapshot = replace(snapshot, bindrequests=(_bindrequest("twin-0", "n0"),))
    assert _status(snapshot, "twin") == ["Binding", "Binding"]
    check(snapshot, carry)


def test_a_new_pending_pod_of_a_name_the_index_holds_drops_the_index() -> None:
    snapshot = snapshot_from_objects([*base(), podgroup("big", "q"), pod("big-0", "big", gpus=64)])  # fits nowhere
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    snapshot = replace(snapshot, bindrequests=(_bindrequest("wait3-0", "n5"),))  # the index's first build
    _, carry, _ = check(snapshot, carry)
    first = next(p for p in snapshot.pods if p.name == "big-0")
    snapshot = replace(snapshot, pods=(*snapshot.pods, replace(first, uid="uid-big-0-again")))  # a new task
    _, carry, _ = check(snapshot, carry)
    snapshot = replace(snapshot, bindrequests=(_bindrequest("big-0", "n0"),))
    assert _status(snapshot, "big") == ["Binding", "Binding"]
    check(snapshot, carry)
