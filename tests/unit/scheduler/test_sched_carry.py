"""The carry between cycles (decide/session/carry.py): a carried cycle decides exactly what a fresh one does."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from sched_builders import gang, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
from operators.scheduler.decide.decisions import Decisions, Unschedulable
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.session import carry as carry_module
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects

NOW = 1e9


def text(d: Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def cluster(nodes: int) -> Snapshot:
    # A gang too big for any node stays pending: explained every cycle, its text counting the nodes.
    objs = [*(node(f"n{i}", gpus=2) for i in range(nodes)), queue("q"), *gang("big", 2, gpus=3),
            *gang("fits", 1, gpus=1)]
    return snapshot_from_objects(objs)


def test_an_unchanged_job_reuses_its_explanation_and_decides_the_same() -> None:
    config = SchedulerConfig()
    snapshot = cluster(2)
    first, carry = run_carried_cycle(snapshot, config, NOW, None)
    again, carry2 = run_carried_cycle(snapshot, config, NOW, carry)
    assert carry2.reused == 1  # the pending gang's Unschedulable, taken from the first cycle
    [u] = again.unschedulable
    assert u is carry.explanations[("ns", "big")][1]
    assert text(again) == text(run_cycle(snapshot, config, NOW)) == text(first)


def test_changed_inputs_are_explained_afresh() -> None:
    config = SchedulerConfig()
    _, carry = run_carried_cycle(cluster(2), config, NOW, None)
    grown = cluster(3)  # new records, and a fit summary over three nodes
    # The same records but one pending pod re-parsed (an update): a new object, so no reuse either.
    pods = tuple(replace(p) if p.name == "big-0" else p for p in cluster(2).pods)
    for snapshot in (grown, replace(cluster(2), pods=pods)):
        carried, after = run_carried_cycle(snapshot, config, NOW, carry)
        assert after.reused == 0
        assert text(carried) == text(run_cycle(snapshot, config, NOW))


def test_another_config_starts_afresh() -> None:
    snapshot = cluster(2)
    _, carry = run_carried_cycle(snapshot, SchedulerConfig(), NOW, None)
    other = SchedulerConfig(partition="pool-a")
    carried, after = run_carried_cycle(snapshot, other, NOW, carry)
    assert after.reused == 0
    assert text(carried) == text(run_cycle(snapshot, other, NOW))


def test_a_stale_carry_would_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: a carry reused whatever its inputs gives the old text."""
    config = SchedulerConfig()
    _, carry = run_carried_cycle(cluster(2), config, NOW, None)

    def stale(self: carry_module.Carrying, key: Any, *args: Any) -> tuple[Unschedulable | None, Any]:
        old = self._old_explanations.get(key)
        return (old[1], old[0]) if old is not None else (None, (args[0], (), (), None, False))

    monkeypatch.setattr(carry_module.Carrying, "explanation", stale)
    grown = cluster(3)
    carried, _ = run_carried_cycle(grown, config, NOW, carry)
    assert text(carried) != text(run_cycle(grown, config, NOW))


# Session open's per-job derivation (Carrying.job_piece): a job whose PodGroup and members are unchanged takes its
# task order, links, podset counters and queue sums from the previous cycle; the session is then the one a fresh
# open builds.

def session_state(s: Session) -> list[Any]:
    """Everything session open derives per job and per queue, by value (names for objects)."""
    jobs = [(j.key, j.queue.name if j.queue else None, j.priority, j.preemptible, j.allocated_at_open,
             [t.name for t in j.tasks], [(t.status, t.node, t.fit_key, t.job is j, t.podset.name if t.podset else None)
                                         for t in j.tasks],
             [(p.name, p.min_available, p.active_allocated, p.pipelined, p.active_used, p.alive, p.gated,
               [t.name for t in p.tasks], [t.name for t in p.pending]) for p in j.podsets]) for j in s.jobs]
    queues = [(q.name, q.allocated, q.allocated_np, q.request) for q in s.queues.values()]
    return [jobs, queues, [j.key for j in s._victims], [j.key for j in s.feature_jobs]]


def piece_values(piece: carry_module.JobPiece) -> tuple[Any, ...]:
    """A job's carried derivation without its task order (an itemgetter, which compares by identity)."""
    return piece[1:4] + piece[5:]


def mixed_cluster(bind_pending: bool = False, small_gpu_node: bool = False) -> Snapshot:
    # Running and pending members, two podsets with a pod outside them, a task priority order, an elastic job, a
    # job sharing a GPU.
    objs: list[dict[str, Any]] = [
        node("n1", gpus=4), node("n2", gpus=4), queue("q"),
        podgroup("run", min_member=2), pod("run-b", "run", gpus=1, node_name="n1", phase="Running"),
        pod("run-a", "run", gpus=1, node_name="n2", phase="Running"), pod("run-c", "run", gpus=1),
        podgroup("sub", subgroups=[{"name": "a", "minMember": 1}, {"name": "b", "minMember": 2}]),
        pod("sub-0", "sub", gpus=1, subgroup="b"), pod("sub-1", "sub", gpus=1, subgroup="a", node_name="n1",
                                                      phase="Running"),
        pod("sub-2", "sub", gpus=1, subgroup="b"), pod("sub-x", "sub", subgroup="nope"),
        podgroup("prio", min_member=1), pod("prio-0", "prio", cpu="2", labels={"kai.scheduler/task-priority": "1"}),
        pod("prio-1", "prio", cpu="2", labels={"kai.scheduler/task-priority": "5"}),
        podgroup("frac", min_member=1), pod("frac-0", "frac", fraction="0.5", node_name="n2", phase="Running",
                                            gpu_group="g1"), pod("frac-1", "frac", fraction="0.25"),
        pod("frac-2", "frac", gpu_memory="2000"),
        *gang("big", 2, gpus=8)]
    if bind_pending:  # a live BindRequest: the pod is Binding, its record unchanged
        objs.append({"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                     "metadata": {"name": "run-c", "namespace": "ns"},
                     "spec": {"podName": "run-c", "selectedNode": "n2"}})
    if small_gpu_node:  # sorted after n1 and n2 (their indices stay), the smallest GPU memory changes
        objs.append(node("n9", gpus=1, gpu_memory=4096))
    if small_gpu_node:  # sorted after n1 and n2 (their indices stay), the smallest GPU memory changes
        objs.append(node("n9", gpus=1, gpu_memory=4096))
    return snapshot_from_objects(objs)


def test_an_unchanged_job_reuses_its_derivation_at_session_open() -> None:
    config = SchedulerConfig()
    snapshot = mixed_cluster()
    first, carry = run_carried_cycle(snapshot, config, NOW, None)
    assert set(carry.jobs) == {("ns", "run"), ("ns", "sub"), ("ns", "prio"), ("ns", "frac"), ("ns", "big")}
    carried = Session(snapshot, config, NOW, carry)
    assert carried.carrying.jobs_reused == 5
    assert session_state(carried) == session_state(Session(snapshot, config, NOW))
    again, _ = run_carried_cycle(snapshot, config, NOW, carry)
    assert text(again) == text(run_cycle(snapshot, config, NOW)) == text(first)


def test_equal_new_records_are_reused_and_kept_for_identity() -> None:
    config = SchedulerConfig()
    snapshot = mixed_cluster()
    _, carry = run_carried_cycle(snapshot, config, NOW, None)
    remade = replace(snapshot, pods=tuple(map(replace, snapshot.pods)),
                     podgroups=tuple(map(replace, snapshot.podgroups)))
    carried = Session(remade, config, NOW, carry)
    assert carried.carrying.jobs_reused == 5
    assert session_state(carried) == session_state(Session(remade, config, NOW))
    piece = carried.carrying.carry().jobs[("ns", "run")]
    assert piece[0] is next(g for g in remade.podgroups if g.name == "run")
    assert {id(r) for r in piece[1]} <= {id(p) for p in remade.pods}


def test_a_changed_status_or_member_derives_afresh() -> None:
    """A BindRequest changes a pod's status without changing its record, a member less changes the members, a node
    with less GPU memory changes a shared pod's queue vector: each job is derived again, the others reused."""
    config = SchedulerConfig()
    _, carry = run_carried_cycle(mixed_cluster(), config, NOW, None)
    binding = mixed_cluster(bind_pending=True)
    base = mixed_cluster()
    fewer = replace(base, pods=tuple(p for p in base.pods if p.name != "prio-1"))
    smaller = mixed_cluster(small_gpu_node=True)
    for snapshot, missed in ((binding, "run"), (fewer, "prio"), (smaller, "frac")):
        s = Session(snapshot, config, NOW, carry)
        assert s.carrying.jobs_reused == 4
        fresh = Session(snapshot, config, NOW)
        key = ("ns", missed)
        assert piece_values(s.carrying.jobs[key]) == piece_values(fresh.carrying.jobs[key])  # derived afresh
        assert piece_values(carry.jobs[key]) != piece_values(fresh.carrying.jobs[key])
        assert session_state(s) == session_state(Session(snapshot, config, NOW))
        carried, _ = run_carried_cycle(snapshot, config, NOW, carry)
        assert text(carried) == text(run_cycle(snapshot, config, NOW))


def test_a_stale_job_carry_would_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above can fail: a derivation reused whatever its members' statuses differs from a fresh one."""
    config = SchedulerConfig()
    _, carry = run_carried_cycle(mixed_cluster(), config, NOW, None)

    def stale(self: carry_module.Carrying, key: Any, podgroup: Any, members: Any) -> Any:
        old = self._old_jobs.get(key)
        return old if old is not None and len(old[1]) == len(members) else None

    monkeypatch.setattr(carry_module.Carrying, "job_piece", stale)
    binding = mixed_cluster(bind_pending=True)
    assert session_state(Session(binding, config, NOW, carry)) != session_state(Session(binding, config, NOW))
