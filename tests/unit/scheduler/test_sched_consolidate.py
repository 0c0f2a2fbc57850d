"""consolidation: move preemptible pods so a pending job fits; every moved pod must land somewhere else."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"
CONSOLIDATE_ONLY = SchedulerConfig(actions=("allocate", "consolidation"))


def running(name: str, node_name: str, gpus: int, **kw: Any) -> list[dict[str, Any]]:
    return [podgroup(name, "q", **kw), pod(f"{name}-0", name, gpus=gpus, node_name=node_name, phase="Running")]


def pending(name: str, gpus: int, created: str = LATER, **kw: Any) -> list[dict[str, Any]]:
    return [podgroup(name, "q", created=created, **kw), pod(f"{name}-0", name, gpus=gpus, created=created)]


def example0() -> list[dict[str, Any]]:
    """Like KAI consolidation_test #0: two half-used 4-GPU nodes and a pending 3-GPU job."""
    return [node("n0", gpus=4), node("n1", gpus=4), queue("q", gpu=(0, -1, 1)), *PRIORITY_CLASSES,
            *running("a", "n0", 2), *running("b", "n1", 2), *pending("p3", 3)]


@pytest.mark.parametrize("config", [CONSOLIDATE_ONLY, SchedulerConfig()], ids=["consolidation", "defaults"])
def test_example0_moves_one_job_and_pipelines_the_pending_one(config: SchedulerConfig) -> None:
    d = cycle(example0(), config)
    [e] = d.evictions
    assert e.action == "consolidation" and e.for_pod_group == "ns/p3"
    assert e.message.startswith(f"Pod ns/{e.pod} was preempted and rescheduled due to bin packing (resource "
                                f"consolidation) procedure. Moved to node ")
    moved = {p.pod: p.node for p in d.pipelined}
    origin = "n0" if e.pod == "a-0" else "n1"
    assert e.pod in moved and moved[e.pod] != origin  # re-placed on the other node
    assert moved["p3-0"] == origin and not d.binds and not d.unschedulable
    assert f"Moved to node {moved[e.pod]} to make room for ns/p3." in e.message


def test_never_kills_a_pod_it_cannot_re_place() -> None:
    # 2 GPUs are free in total (one per node) but neither 3-GPU pod fits on the other node.
    objs = [node("n0", gpus=4), node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES,
            *running("a", "n0", 3), *running("b", "n1", 3), *pending("p", 2)]
    d = cycle(objs, CONSOLIDATE_ONLY)
    assert not d.evictions and not d.pipelined


@pytest.mark.parametrize(("placement", "moves"), [("binpack", 1), ("spread", 0)])
def test_disabled_by_spread(placement: str, moves: int) -> None:
    d = cycle(example0(), replace(SchedulerConfig(), gpu_placement=placement))
    assert len([e for e in d.evictions if e.action == "consolidation"]) == moves


def three_nodes() -> list[dict[str, Any]]:
    # p needs 4 GPUs: only n0 can hold it, after moving v1 and v2 to n1 and n2 (two victim jobs).
    return [node("n0", gpus=4), node("n1", gpus=4), node("n2", gpus=1), queue("q"), *PRIORITY_CLASSES,
            *running("v1", "n0", 1), *running("v2", "n0", 1), *running("w", "n1", 3), *pending("p", 4)]


@pytest.mark.parametrize(("limit", "moved"), [(16, 2), (2, 2), (1, 0), (0, 0)])
def test_max_consolidation_preemptees(limit: int, moved: int) -> None:
    d = cycle(three_nodes(), replace(CONSOLIDATE_ONLY, max_consolidation_preemptees=limit))
    assert sorted(e.pod for e in d.evictions) == (["v1-0", "v2-0"] if moved else [])
    if moved:
        pipelined = {p.pod: p.node for p in d.pipelined}
        assert pipelined["p-0"] == "n0" and {pipelined["v1-0"], pipelined["v2-0"]} == {"n1", "n2"}


def test_eviction_cap_also_bounds_moves() -> None:
    d = cycle(three_nodes(), replace(CONSOLIDATE_ONLY, max_evictions_per_job=1))
    assert not d.evictions


@pytest.mark.parametrize(("kw", "moved"), [
    ({}, True),
    ({"priority_class": "build"}, False),  # non-preemptible pods are never moved
    ({"preemptibility": "non-preemptible"}, False),
])
def test_only_preemptible_pods_move(kw: dict[str, Any], moved: bool) -> None:
    objs = [node("n0", gpus=4), node("n1", gpus=4), queue("q", gpu=(8, -1, 1)), *PRIORITY_CLASSES,
            *running("a", "n0", 2, **kw), *running("b", "n1", 2, **kw), *pending("p3", 3)]
    d = cycle(objs, CONSOLIDATE_ONLY)
    assert bool(d.evictions) is moved


def test_non_preemptible_job_is_not_helped() -> None:
    objs = [node("n0", gpus=4), node("n1", gpus=4), queue("q", gpu=(8, -1, 1)), *PRIORITY_CLASSES,
            *running("a", "n0", 2), *running("b", "n1", 2), *pending("p3", 3, priority_class="build")]
    d = cycle(objs, CONSOLIDATE_ONLY)
    assert not d.evictions
