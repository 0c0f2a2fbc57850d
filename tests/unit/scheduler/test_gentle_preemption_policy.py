"""preemptionPolicy: Never on the preemptor's PriorityClass (or its pods): no preempt, reclaim or consolidation
evicts anything for it, it still takes free resources, and its PodGroup says why it waits."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, bound, cycle, node, pod, podgroup, queue

from operators.insight.why import explain
from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.snapshot import snapshot_from_objects

LATER = "2025-01-01T01:00:00Z"
NEVER = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "polite"},
         "value": 125, "preemptionPolicy": "Never"}


def preemption(preemptor_class: str, *, pod_policy: str | None = None) -> list[dict[str, Any]]:
    """One 2-GPU node held by a low-priority job; a higher-priority job in the same queue needs it."""
    extra = {"preemptionPolicy": pod_policy} if pod_policy else None
    return [node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES, NEVER,
            podgroup("low", created="2024-12-31T00:00:00Z"),
            pod("low-0", "low", gpus=2, node_name="n1", phase="Running"),
            podgroup("urgent", priority_class=preemptor_class, created=LATER),
            pod("urgent-0", "urgent", gpus=2, created=LATER, spec_extra=extra)]


def reclaim(reclaimer_class: str) -> list[dict[str, Any]]:
    """Queue qa (quota 0) holds the node; qb (quota 2) wants its deserved share back."""
    return [node("n1", gpus=2), queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(2, -1, 1)), *PRIORITY_CLASSES, NEVER,
            podgroup("a", "qa", created="2024-12-31T00:00:00Z"),
            pod("a-0", "a", gpus=2, node_name="n1", phase="Running"),
            podgroup("b", "qb", priority_class=reclaimer_class, created=LATER),
            pod("b-0", "b", gpus=2, created=LATER)]


def consolidation(preemptor_class: str) -> list[dict[str, Any]]:
    """Two half-used 4-GPU nodes; a 3-GPU job fits only if one 2-GPU job moves."""
    objs: list[dict[str, Any]] = [node("n0", gpus=4), node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES, NEVER]
    for name, node_name in (("a", "n0"), ("b", "n1")):
        objs += [podgroup(name), pod(f"{name}-0", name, gpus=2, node_name=node_name, phase="Running")]
    return [*objs, podgroup("p", priority_class=preemptor_class, created=LATER),
            pod("p-0", "p", gpus=3, created=LATER)]


@pytest.mark.parametrize("build", [preemption, reclaim, consolidation], ids=["preempt", "reclaim", "consolidation"])
def test_a_never_preemptor_evicts_nothing_and_says_so(build: Any) -> None:
    assert cycle(build("inference")).evictions  # the same job with a preempting class does evict
    d = cycle(build("polite"))
    assert not d.evictions and not d.pipelined and not d.binds
    [u] = d.unschedulable
    [reason] = [r for r in u.reasons if r.reason == "PreemptionPolicyNever"]
    assert reason.message.startswith("its PriorityClass polite has preemptionPolicy Never: ns/")
    assert "evicts no other workload" in u.message


def test_the_pods_own_policy_holds_it_too() -> None:
    d = cycle(preemption("inference", pod_policy="Never"))
    assert not d.evictions
    assert "its pods has preemptionPolicy Never" in d.unschedulable[0].message


def test_it_still_takes_free_resources() -> None:
    objs = [o for o in preemption("polite") if o["metadata"]["name"] not in ("low", "low-0")]
    assert bound(cycle(objs)) == {"urgent-0": "n1"}


def test_a_never_job_can_still_be_a_victim() -> None:
    # The running job's class `train` says Never: that limits what it may evict, not whether it may be evicted.
    objs = [{**o, "preemptionPolicy": "Never"} if o["metadata"]["name"] == "train" else o
            for o in preemption("inference")]
    assert [e.pod for e in cycle(objs).evictions] == ["low-0"]


def test_disabling_the_plugin_ignores_the_policy_as_kai_does() -> None:
    config = config_from_mapping({"plugins": {"preemptionpolicy": {"enabled": False}}})
    assert isinstance(config, SchedulerConfig)
    assert [e.pod for e in cycle(preemption("polite"), config).evictions] == ["low-0"]


def test_kai_why_says_it_evicts_no_one() -> None:
    report = explain(snapshot_from_objects(preemption("polite")), SchedulerConfig(), 1e9, "ns", "urgent")
    assert report.state == "pending" and not report.runs_now
    assert any("preemptionPolicy Never" in line and "evicts no other workload" in line for line in report.lines)
    assert "PreemptionPolicyNever" in [r["reason"] for r in report.reasons]
