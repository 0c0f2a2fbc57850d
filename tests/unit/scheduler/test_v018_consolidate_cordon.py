"""KAI v0.18: `kai.scheduler/safe-to-consolidate: "false"` (PodGroup `safeToConsolidate: false`) keeps a workload
from being moved by consolidation; pods tolerating `node.kubernetes.io/unschedulable` may land on cordoned nodes."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"
CONSOLIDATE_ONLY = SchedulerConfig(actions=("allocate", "consolidation"))
CORDON_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


def running(name: str, node_name: str, gpus: int, safe: bool | None = None) -> list[dict[str, Any]]:
    pg = podgroup(name, "q")
    if safe is not None:
        pg["spec"]["safeToConsolidate"] = safe
    return [pg, pod(f"{name}-0", name, gpus=gpus, node_name=node_name, phase="Running")]


def two_half_used_nodes(a: bool | None, b: bool | None) -> list[dict[str, Any]]:
    """KAI's consolidation example 0: two half-used 4-GPU nodes and a pending 3-GPU job."""
    return [node("n0", gpus=4), node("n1", gpus=4), queue("q", gpu=(0, -1, 1)), *PRIORITY_CLASSES,
            *running("a", "n0", 2, a), *running("b", "n1", 2, b),
            podgroup("p3", "q", created=LATER), pod("p3-0", "p3", gpus=3, created=LATER)]


@pytest.mark.parametrize(("a", "b", "moved"), [
    (None, None, {"a-0", "b-0"}),  # either may move
    (False, None, {"b-0"}),  # a is pinned: b moves
    (None, False, {"a-0"}),
    (True, False, {"a-0"}),
    (False, False, set()),  # nothing may move: the job waits
])
def test_consolidation_moves_only_workloads_safe_to_consolidate(a: bool | None, b: bool | None,
                                                                 moved: set[str]) -> None:
    d = cycle(two_half_used_nodes(a, b), CONSOLIDATE_ONLY)
    evicted = {e.pod for e in d.evictions}
    assert evicted <= moved and bool(evicted) == bool(moved)
    assert {e.action for e in d.evictions} <= {"consolidation"}


def test_a_pinned_workload_may_still_be_reclaimed() -> None:
    # Not eviction protection: qb, below its fair share, reclaims a pinned job of qa.
    objs = [node("n0", gpus=2), queue("qa", gpu=(1, -1, 1)), queue("qb", gpu=(1, -1, 1)), *PRIORITY_CLASSES]
    for i in range(2):
        pg = podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z")
        pg["spec"]["safeToConsolidate"] = False
        objs += [pg, pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n0", phase="Running")]
    objs += [podgroup("b", "qb", created=LATER), pod("b-0", "b", gpus=1, created=LATER)]
    d = cycle(objs)
    assert [(e.pod, e.action) for e in d.evictions] == [("a1-0", "reclaim")]


# --- cordoned nodes -------------------------------------------------------------------------------------------

def cordoned_cluster(tolerations: list[dict[str, str]] | None) -> list[dict[str, Any]]:
    return [node("cordoned", gpus=8, unschedulable=True), queue("q"), *PRIORITY_CLASSES,
            podgroup("j", "q"), pod("j-0", "j", gpus=1, spec_extra={"tolerations": tolerations} if tolerations
                                    else None)]


@pytest.mark.parametrize("toleration", [
    CORDON_TOLERATION,
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},  # any effect
    {"operator": "Exists"},  # tolerates everything
])
def test_a_pod_tolerating_the_cordon_lands_on_a_cordoned_node(toleration: dict[str, str]) -> None:
    d = cycle(cordoned_cluster([toleration]))
    assert [(b.pod, b.node) for b in d.binds] == [("j-0", "cordoned")]


@pytest.mark.parametrize("tolerations", [None, [{**CORDON_TOLERATION, "effect": "NoExecute"}],
                                         [{"key": "other", "operator": "Exists"}]])
def test_other_pods_stay_off_cordoned_nodes(tolerations: list[dict[str, str]] | None) -> None:
    d = cycle(cordoned_cluster(tolerations))
    assert not d.binds
    [u] = d.unschedulable
    assert "node(s) were unschedulable" in u.message


def test_a_tolerating_pod_with_a_node_selector_or_other_taints() -> None:
    objs = [node("cordoned", gpus=8, unschedulable=True, labels={"zone": "a"},
                 taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
            node("open", gpus=8, labels={"zone": "b"}), queue("q"), *PRIORITY_CLASSES,
            podgroup("j", "q"), pod("j-0", "j", gpus=1, spec_extra={
                "tolerations": [CORDON_TOLERATION], "nodeSelector": {"zone": "a"}}),
            podgroup("k", "q"), pod("k-0", "k", gpus=1, spec_extra={
                "tolerations": [CORDON_TOLERATION, {"key": "dedicated", "operator": "Exists"}],
                "nodeSelector": {"zone": "a"}})]
    d = cycle(objs)
    assert [(b.pod, b.node) for b in d.binds] == [("k-0", "cordoned")]  # j does not tolerate `dedicated`


def test_the_annotation_key() -> None:
    assert keys.SAFE_TO_CONSOLIDATE == "kai.scheduler/safe-to-consolidate"
