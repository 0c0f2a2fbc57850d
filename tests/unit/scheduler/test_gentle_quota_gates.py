"""Quota gates (quotagates plugin): pods carrying the quota gate are the queue's demand, are never placed, and are
lifted (one Ungate per pod) once their queue's limit admits their gang; a job left gated says it waits for quota."""

from __future__ import annotations

from typing import Any

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.core import keys
from operators.insight.why import explain
from operators.scheduler.decide import provisioning
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.simulation import apply_decisions
from operators.scheduler.decide.snapshot import snapshot_from_objects

GATE = {"schedulingGates": [{"name": keys.QUOTA_GATE}]}


def gated_jobs(limit: float, jobs: int = 3, size: int = 2, *, gpus: int = 1) -> list[dict[str, Any]]:
    """`jobs` gangs of `size` one-GPU pods, all gated, in a queue limited to `limit` GPUs; plenty of nodes."""
    objs: list[dict[str, Any]] = [node("n1", gpus=8), queue("q", gpu=(0, limit, 1)), *PRIORITY_CLASSES]
    for j in range(jobs):
        created = f"2025-01-01T00:0{j}:00Z"
        objs.append(podgroup(f"j{j}", min_member=size, created=created))
        objs += [pod(f"j{j}-{i}", f"j{j}", gpus=gpus, created=created, spec_extra=GATE) for i in range(size)]
    return objs


def test_gangs_the_limit_admits_are_lifted_whole_the_rest_wait_for_quota() -> None:
    d = cycle(gated_jobs(limit=4))
    assert not d.binds  # gated pods are never placed
    assert sorted(u.pod for u in d.ungates) == ["j0-0", "j0-1", "j1-0", "j1-1"]  # oldest first, whole gangs
    [u] = d.unschedulable
    assert u.pod_group == "j2" and not u.pod_messages  # no pod is marked Unschedulable
    [reason] = u.reasons
    assert reason.reason == keys.REASON_WAITING_FOR_QUOTA and reason.message == (
        "2 pod(s) gated until queue q admits them under its limit (OverLimit)") and not reason.details
    assert not d.not_ready  # the lifted ones are gated only until their writes land: no NotReady event


def test_gated_pods_count_as_the_queues_demand() -> None:
    [q] = [q for q in cycle(gated_jobs(limit=4)).queues if q.name == "q"]
    assert q.requested["gpu"] == 6


def test_pending_pods_hold_the_quota_before_gated_ones() -> None:
    objs = gated_jobs(limit=4, jobs=1)
    objs += [podgroup("free", created="2024-12-31T00:00:00Z"),
             pod("free-0", "free", gpus=3, created="2024-12-31T00:00:00Z")]
    objs = [o for o in objs if o["metadata"]["name"] != "n1"]  # no node: free-0 stays pending
    d = cycle(objs)
    assert not d.ungates and [u.pod_group for u in d.unschedulable] == ["free", "j0"]


def test_nothing_is_lifted_past_the_limit_and_a_raise_lifts_then_binds() -> None:
    objs = gated_jobs(limit=1)
    d = cycle(objs)
    assert not d.ungates and len(d.unschedulable) == 3
    raised = [queue("q", gpu=(0, 6, 1)) if o["kind"] == "Queue" else o for o in objs]
    d = cycle(raised)
    assert len(d.ungates) == 6 and not d.binds
    snapshot = apply_decisions(snapshot_from_objects(raised), d)
    assert not any(p.gated for p in snapshot.pods)
    assert len(run_cycle(snapshot, SchedulerConfig(), 1e9).binds) == 6


def test_an_elastic_job_is_lifted_to_its_minimum_then_pod_by_pod() -> None:
    objs = gated_jobs(limit=3, jobs=1, size=5)
    objs = [podgroup("j0", min_member=2, created="2025-01-01T00:00:00Z") if o["kind"] == "PodGroup" else o
            for o in objs]
    assert sorted(u.pod for u in cycle(objs).ungates) == ["j0-0", "j0-1", "j0-2"]


def test_pods_with_another_gate_too_are_left_to_its_owner() -> None:
    objs = [{**o, "spec": {**o["spec"], "schedulingGates": [{"name": keys.QUOTA_GATE}, {"name": "other"}]}}
            if o["kind"] == "Pod" else o for o in gated_jobs(limit=4)]
    d = cycle(objs)
    assert not d.ungates and not d.unschedulable


def test_kai_why_says_it_waits_for_quota() -> None:
    snapshot = snapshot_from_objects(gated_jobs(limit=4))
    report = explain(snapshot, SchedulerConfig(), 1e9, "ns", "j2")
    assert report.state == "waiting-for-quota"
    assert [r["reason"] for r in report.reasons] == [keys.REASON_WAITING_FOR_QUOTA]


def test_a_gated_gang_gets_its_one_provisioning_request_only_once_quota_allows_it() -> None:
    # A 2x4-GPU gang on a 2-GPU cluster: it needs new nodes; its queue's limit (0, then 8) decides when it may ask.
    annotations = {"kai.scheduler/provisioning-class": "check-capacity.autoscaling.x-k8s.io"}
    objs: list[dict[str, Any]] = [node("n1", gpus=2), queue("q", gpu=(0, 0, 1)), *PRIORITY_CLASSES,
                                  podgroup("big", min_member=2, annotations=annotations)]
    objs += [pod(f"big-{i}", "big", gpus=4, spec_extra=GATE) for i in range(2)]
    snapshot = snapshot_from_objects(objs)
    d = run_cycle(snapshot, SchedulerConfig(), 1e9)
    assert not d.ungates and not provisioning.plan(snapshot, d, [], 1e9).create
    raised = snapshot_from_objects([queue("q", gpu=(0, 8, 1)) if o["kind"] == "Queue" else o for o in objs])
    d = run_cycle(raised, SchedulerConfig(), 1e9)
    assert len(d.ungates) == 2 and not provisioning.plan(raised, d, [], 1e9).create  # lifted, not yet pending
    lifted = apply_decisions(raised, d)
    d = run_cycle(lifted, SchedulerConfig(), 1e9)
    [new] = provisioning.plan(lifted, d, [], 1e9).create
    assert [p.count for p in new.pod_sets] == [2]


def test_kai_why_suggests_the_limit_that_lifts_and_binds_it() -> None:
    report = explain(snapshot_from_objects(gated_jobs(limit=1, jobs=1)), SchedulerConfig(), 1e9, "ns", "j0")
    [s] = report.suggestions
    assert s.kind == "raise-limit" and s.details["to"] == 2.0 and s.cycle == 2  # lifted, then bound
