"""preempt: same queue, strictly lower priority, preemptible victims only, whole gangs, commit only on fit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, T0, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.simulation import run_simulation

LATER = "2025-01-01T01:00:00Z"
PREEMPT_ONLY = SchedulerConfig(actions=("allocate", "preempt"))


def running(name: str, group: str, node_name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, group, gpus=gpus, node_name=node_name, phase="Running", **kw)


def base(gpus: int = 2, quota: float = 2) -> list[dict[str, Any]]:
    return [node("n1", gpus=gpus), queue("q", gpu=(quota, -1, 1)), *PRIORITY_CLASSES]


@pytest.mark.parametrize(("victim_class", "victim_preemptibility", "preemptor_class", "evicted"), [
    ("train", "", "inference", True),
    ("train", "", "build-preemptible", True),  # 75 > 50 and both preemptible
    ("train", "", "train", False),  # equal priority never preempts
    ("build-preemptible", "", "train", False),  # lower priority preemptor
    ("build", "", "inference", False),  # build (100) is non-preemptible
    ("train", "non-preemptible", "inference", False),  # spec.preemptibility wins over the priority
    ("build", "preemptible", "inference", True),
])
def test_priority_and_preemptibility(victim_class: str, victim_preemptibility: str, preemptor_class: str,
                                     evicted: bool) -> None:
    objs = [*base(),
            podgroup("v", "q", priority_class=victim_class, preemptibility=victim_preemptibility),
            running("v-0", "v", "n1", gpus=2),
            podgroup("p", "q", priority_class=preemptor_class, created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert [e.pod for e in d.evictions] == (["v-0"] if evicted else [])
    assert [p.pod for p in d.pipelined] == (["p-0"] if evicted else [])
    assert not d.binds
    if evicted:
        [e] = d.evictions
        assert e.action == "preempt" and e.for_pod_group == "ns/p"
        assert e.message.startswith("Pod ns/v-0 was preempted by higher priority workload ns/p. ")
        assert "Preempted within queue q" in e.message
    else:
        assert [u.pod_group for u in d.unschedulable] == ["p"]


def test_never_crosses_queues() -> None:
    objs = [node("n1", gpus=2), queue("q1", gpu=(2, -1, 1)), queue("q2", gpu=(2, -1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q1"), running("v-0", "v", "n1", gpus=2),
            podgroup("p", "q2", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert not d.evictions and not d.pipelined


def test_non_preemptible_preemptor_must_fit_its_quota() -> None:
    objs = [*base(quota=0), podgroup("v", "q"), running("v-0", "v", "n1", gpus=2),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert not d.evictions
    [u] = d.unschedulable
    assert u.message.startswith("NonPreemptibleOverQuota")


def test_whole_gang_is_evicted_and_lowest_priority_newest_first() -> None:
    objs = [*base(gpus=4),
            podgroup("old", "q", priority_class="build-preemptible"), running("old-0", "old", "n1", gpus=2),
            podgroup("gang", "q", 2, created="2025-01-01T00:10:00Z"),
            running("gang-0", "gang", "n1"), running("gang-1", "gang", "n1"),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert sorted(e.pod for e in d.evictions) == ["gang-0", "gang-1"]  # lowest priority, and whole


def test_elastic_victim_keeps_its_min_member() -> None:
    objs = [*base(gpus=3), podgroup("v", "q", 1), *[running(f"v-{i}", "v", "n1") for i in range(3)],
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]
    d = cycle(objs, replace(PREEMPT_ONLY), now=1e9)
    assert len(d.evictions) == 2 and "v-0" not in {e.pod for e in d.evictions}  # the first task stays
    assert [p.pod for p in d.pipelined] == ["p-0"]


def test_nothing_is_evicted_when_the_preemptor_would_still_not_fit() -> None:
    # 2 GPUs could be freed in total, but never 2 on one node: the simulation fails and is rolled back.
    objs = [node("n1", gpus=2), node("n2", gpus=2), queue("q", gpu=(2, -1, 1)), *PRIORITY_CLASSES]
    for n in ("n1", "n2"):
        objs += [podgroup(f"v{n}", "q"), running(f"v{n}-0", f"v{n}", n),
                 podgroup(f"b{n}", "q", priority_class="build"), running(f"b{n}-0", f"b{n}", n)]
    objs += [podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert not d.evictions and not d.pipelined and not d.binds
    [u] = d.unschedulable
    assert u.pod_group == "p"


@pytest.mark.parametrize(("cap", "evicted"), [
    ({}, 3),
    ({"max_evictions_per_job": 3}, 3),
    ({"max_evictions_per_job": 2}, 0),  # the gang must go whole: over the cap, nothing happens
    ({"max_evicted_gpus_per_job": 3.0}, 3),
    ({"max_evicted_gpus_per_job": 2.0}, 0),
])
def test_eviction_cap_per_preemptor(cap: dict[str, Any], evicted: int) -> None:
    objs = [*base(gpus=3), podgroup("v", "q", 3), *[running(f"v-{i}", "v", "n1") for i in range(3)],
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, replace(PREEMPT_ONLY, **cap))
    assert len(d.evictions) == evicted


def seed_objects() -> list[dict[str, Any]]:
    """A RayCluster gang (priority class train) fills the GPUs of queue team-a; an inference pod arrives."""
    ray = podgroup("pg-ray", "team-a", 3, priority_class="train", namespace="default",
                   subgroups=[{"name": "head", "minMember": 1}, {"name": "worker", "minMember": 2}])
    return [node("n1", gpus=4), node("n2", gpus=4), queue("dept"), queue("team-a", "dept", gpu=(1, -1, 1)),
            *PRIORITY_CLASSES, ray,
            running("ray-head", "pg-ray", "n1", gpus=0, subgroup="head", namespace="default",
                    labels={"ray.io/node-type": "head"}),
            running("ray-worker-0", "pg-ray", "n1", gpus=4, subgroup="worker", namespace="default"),
            running("ray-worker-1", "pg-ray", "n2", gpus=4, subgroup="worker", namespace="default"),
            podgroup("pg-infer", "team-a", priority_class="inference", namespace="default", created=LATER),
            pod("infer-0", "pg-infer", gpus=1, namespace="default", created=LATER)]


def test_seed_scenario_in_simulate() -> None:
    one = run_simulation(seed_objects())
    assert sorted(e["pod"] for e in one["evictions"]) == ["ray-head", "ray-worker-0", "ray-worker-1"]
    assert {e["action"] for e in one["evictions"]} == {"preempt"}
    assert {e["forPodGroup"] for e in one["evictions"]} == {"default/pg-infer"}
    assert [p["pod"] for p in one["pipelined"]] == ["infer-0"] and not one["binds"]
    three = run_simulation(seed_objects(), cycles=3)
    assert [(b["pod"], b["cycle"]) for b in three["binds"]] == [("infer-0", 2)]
    assert all(e["cycle"] == 1 for e in three["evictions"])  # evicted once, nothing more later
    placement = {p["pod"]: p["status"] for p in three["placement"]}
    assert placement == {"infer-0": "Running", "ray-head": "Pending", "ray-worker-0": "Pending",
                         "ray-worker-1": "Pending"}
    [u] = three["unschedulable"]
    assert u["podGroup"] == "pg-ray" and "Resources were found for" in u["message"]


def test_seed_created_time_matters_only_for_order() -> None:
    # The preemptor being older than the victim changes nothing: priority decides.
    objs = seed_objects()
    objs[-2]["metadata"]["creationTimestamp"] = T0
    assert len(run_simulation(objs)["evictions"]) == 3
