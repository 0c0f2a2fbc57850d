"""In-place pod resize (KEP-1287, KAI v0.18): a pod counts at the larger of what its containers were given and what
their spec asks now (what they were given alone when the resize is Infeasible), and the opt-in `resizeeviction`
action evicts pods so that a Deferred resize can happen (scenarios after KAI's own)."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.core.resources import pod_container_requests
from operators.scheduler.decide.config import SchedulerConfig, parse_actions
from operators.scheduler.decide.records import pod_record

RESIZE = SchedulerConfig(actions=parse_actions("allocate,resizeeviction"))
LATER = "2025-01-01T01:00:00Z"


def resized(p: dict[str, Any], given_cpu: str, reason: str | None = "Deferred") -> dict[str, Any]:
    """`p` (spec: the resize's target) running with `given_cpu` allocated, its resize pending for `reason`."""
    p["status"]["containerStatuses"] = [{"name": "c", "resources": {"requests": {"cpu": given_cpu,
                                                                                 "memory": "1Gi"}}}]
    if reason:
        p["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": reason}]
    return p


def job(name: str, cpu: str, priority_class: str = "train", queue_name: str = "q0", *, resize_from: str = "",
        n: int = 1, created: str = "2025-01-01T00:00:00Z") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [podgroup(name, queue_name, n, priority_class=priority_class, created=created)]
    for i in range(n):
        p = pod(f"{name}-{i}", name, cpu=cpu, node_name="n0", phase="Running", created=created)
        out.append(resized(p, resize_from) if resize_from else p)
    return out


def cluster(*queues: dict[str, Any]) -> list[dict[str, Any]]:
    return [node("n0", gpus=0, cpu="4", memory="100Gi"), *(queues or [queue("q0", cpu=(8000, -1, 1))]),
            *PRIORITY_CLASSES]


# --- accounting -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("reason", "given", "cpu"), [
    ("Deferred", "1500m", 3000),  # an increase not yet enacted: the target
    ("Deferred", "3500m", 3500),  # a decrease not yet enacted: what it still holds
    ("Infeasible", "1500m", 1500),  # never enacted: what it holds
    (None, "2", 3000),  # the kubelet has not reported the new values yet: the larger
])
def test_a_resized_pod_counts_at_the_larger_of_given_and_asked(reason: str | None, given: str, cpu: int) -> None:
    p = resized(pod("p", "g", cpu="3", node_name="n0", phase="Running"), given, reason)
    rec = pod_record(p)
    assert rec.cpu == cpu
    assert (rec.resize_from is not None) == (reason == "Deferred")
    assert pod_container_requests(p["spec"], p["status"], actual=True)["cpu"] == pod_container_requests(
        {"containers": [{"resources": {"requests": {"cpu": given}}}]})["cpu"]


def test_queue_allocation_follows_the_resize() -> None:
    d = cycle([*cluster(), *job("r", "3", resize_from="1500m", priority_class="build")])
    assert {q.name: q.allocated["cpu"] for q in d.queues}["q0"] == 3000  # millicores


# --- resizeeviction -------------------------------------------------------------------------------------------

def test_deferred_resize_evicts_a_lower_priority_job_in_the_same_queue() -> None:
    d = cycle([*cluster(), *job("victim", "2"), *job("resize", "3", "build-preemptible", resize_from="1500m")],
              RESIZE)
    assert [(e.pod, e.action, e.for_pod_group) for e in d.evictions] == [("victim-0", "resizeeviction", "ns/resize")]


def test_the_action_is_off_by_default() -> None:
    d = cycle([*cluster(), *job("victim", "2"), *job("resize", "3", "build-preemptible", resize_from="1500m")])
    assert not d.evictions


@pytest.mark.parametrize("victim_class", ["build-preemptible", "inference"])
def test_same_priority_or_non_preemptible_jobs_are_not_evicted(victim_class: str) -> None:
    resizer_class = "build-preemptible" if victim_class == "build-preemptible" else "build"
    d = cycle([*cluster(), *job("victim", "2", victim_class), *job("resize", "3", resizer_class, resize_from="1500m")],
              RESIZE)
    assert not d.evictions


def test_nothing_is_evicted_when_the_victims_cannot_cover_the_shortfall() -> None:
    d = cycle([*cluster(), *job("victim", "2"), *job("protected", "1", "build"),
               *job("resize", "3500m", "build-preemptible", resize_from="500m")], RESIZE)
    assert not d.evictions


def test_no_eviction_when_the_resize_already_fits() -> None:
    d = cycle([*cluster(), *job("victim", "1"), *job("resize", "2", "build-preemptible", resize_from="1")], RESIZE)
    assert not d.evictions


def test_reclaims_from_another_queue_above_its_fair_share() -> None:
    queues = (queue("q0", cpu=(4000, -1, 1)), queue("q1", cpu=(0, -1, 1)))
    d = cycle([*cluster(*queues), *job("victim", "2", queue_name="q1"),
               *job("resize", "3", resize_from="1500m")], RESIZE)
    assert [e.pod for e in d.evictions] == ["victim-0"]


def test_no_reclaim_when_the_resizing_queue_is_above_its_fair_share() -> None:
    queues = (queue("q0", cpu=(0, -1, 0)), queue("q1", cpu=(4000, -1, 1)))
    d = cycle([*cluster(*queues), *job("victim", "2", queue_name="q1"),
               *job("resize", "3", resize_from="1500m")], RESIZE)
    assert not d.evictions


def test_a_gang_victim_is_evicted_whole() -> None:
    d = cycle([*cluster(), *job("victim", "1", n=2), *job("resize", "3", "build-preemptible", resize_from="2")],
              RESIZE)
    assert sorted(e.pod for e in d.evictions) == ["victim-0", "victim-1"]


def test_targets_of_other_deferred_resizes_are_left_out_of_the_shortfall() -> None:
    # resize0 (higher priority) fits once resize1's unenacted target is left out; resize1 then needs the victim.
    d = cycle([*cluster(), *job("victim", "1"), *job("resize0", "2", "inference", resize_from="1"),
               *job("resize1", "2", "build", resize_from="1")], RESIZE)
    assert [(e.pod, e.for_pod_group) for e in d.evictions] == [("victim-0", "ns/resize1")]
