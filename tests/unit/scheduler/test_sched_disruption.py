"""Disruptive actions through `kai simulate`: limits are checked after a scenario's victims left, victim sets are
minimal, victims that fit elsewhere move instead of dying, and consolidation re-packs devices.

Each case runs the default actions for two cycles (evictions applied in between, as the cluster would) and
checks the final placement.
"""

from __future__ import annotations

from typing import Any

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.session import rfc3339
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.shell.simulate import format_text, run_simulation

LATER = "2025-01-01T01:00:00Z"
NOW = 1_800_000_000.0
LAST_START = "kai.scheduler/last-start-timestamp"


def running(name: str, group: str, node_name: str, **kw: Any) -> dict[str, Any]:
    return pod(name, group, node_name=node_name, phase="Running", **kw)


def placement(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {p["pod"]: (p["status"], p["node"]) for p in result["placement"]}


def evicted(result: dict[str, Any]) -> list[str]:
    return sorted(e["pod"] for e in result["evictions"])


def simulate(objs: list[dict[str, Any]], cycles: int = 2, now: float | None = None,
             config: SchedulerConfig | None = None) -> dict[str, Any]:
    return run_simulation(objs, config, now=now, cycles=cycles)


# --- limits are checked on the scenario's state --------------------------------------------------------------


def cpu_limit_preempt() -> list[dict[str, Any]]:
    """Queue CPU quota = limit = 500m, a low-priority 500m pod runs, a higher-priority 500m pod arrives."""
    return [node("n1", gpus=0, cpu="8"), queue("q", cpu=(500, 500, 1)), *PRIORITY_CLASSES,
            podgroup("low", "q"), running("low-0", "low", "n1", cpu="500m"),
            podgroup("high", "q", priority_class="inference", created=LATER),
            pod("high-0", "high", cpu="500m", created=LATER)]


def test_preempt_at_the_queue_limit_evicts_the_low_priority_peer() -> None:
    one = run_simulation(cpu_limit_preempt())
    [e] = one["evictions"]
    assert e["pod"] == "low-0" and e["action"] == "preempt" and e["forPodGroup"] == "ns/high"
    assert [p["pod"] for p in one["pipelined"]] == ["high-0"] and not one["binds"]
    two = simulate(cpu_limit_preempt())
    assert placement(two) == {"high-0": ("Running", "n1"), "low-0": ("Pending", "")}
    [u] = two["unschedulable"]
    # The victim is refused on the state the check saw: the high-priority pod now holds the 500m.
    assert u["podGroup"] == "low" and u["message"].startswith("OverLimit")
    assert "Limit is 0.5 cores, currently 0.5 cores allocated and workload requested 0.5 cores" in u["message"]


def test_preempt_at_the_limit_with_elastic_victims_takes_exactly_the_surplus() -> None:
    # Limit 1500m: the elastic victim runs 3 x 500m (minMember 1); the preemptor needs 1000m.
    objs = [node("n1", gpus=0, cpu="8"), queue("q", cpu=(1500, 1500, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q", 1), *[running(f"v-{i}", "v", "n1", cpu="500m") for i in range(3)],
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", cpu="1", created=LATER)]
    two = simulate(objs)
    assert evicted(two) == ["v-1", "v-2"]
    assert placement(two) == {"p-0": ("Running", "n1"), "v-0": ("Running", "n1"), "v-1": ("Pending", ""),
                              "v-2": ("Pending", "")}


def parent_limit_reclaim(a_jobs: int = 4, annotations: dict[str, str] | None = None,
                         reclaim_min_runtime: str | None = None) -> list[dict[str, Any]]:
    """Parent GPU quota = limit = 4; child A (quota 1) holds all 4; child B (quota 0, priority 101) asks for 1.
    The node has 8 GPUs: only the parent's limit keeps B out."""
    qa = queue("qa", "dept", gpu=(1, -1, 1))
    if reclaim_min_runtime is not None:
        qa["spec"]["reclaimMinRuntime"] = reclaim_min_runtime
    objs = [node("n1", gpus=8), queue("dept", gpu=(4, 4, 1)), qa, queue("qb", "dept", gpu=(0, -1, 1), priority=101),
            *PRIORITY_CLASSES]
    for i in range(a_jobs):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z", annotations=annotations),
                 running(f"a{i}-0", f"a{i}", "n1", gpus=1)]
    objs += [podgroup("b", "qb", created=LATER), pod("b-0", "b", gpus=1, created=LATER)]
    return objs


def test_reclaim_from_a_sibling_under_a_parent_at_its_limit() -> None:
    one = run_simulation(parent_limit_reclaim())
    [e] = one["evictions"]
    assert e["pod"] == "a3-0" and e["action"] == "reclaim" and e["forPodGroup"] == "ns/b"
    assert "It is moved" not in e["message"]  # A may not grow back past the parent's limit
    two = simulate(parent_limit_reclaim())
    final = placement(two)
    assert final["b-0"] == ("Running", "n1") and final["a3-0"] == ("Pending", "")
    assert all(final[f"a{i}-0"] == ("Running", "n1") for i in range(3))
    queues = {q["name"]: q for q in two["queues"]}
    assert queues["qa"]["allocated"]["gpu"] == 3 and queues["qb"]["allocated"]["gpu"] == 1


def test_reclaim_under_the_limit_waits_for_min_runtime() -> None:
    fresh = {LAST_START: rfc3339(NOW - 60)}
    protected = simulate(parent_limit_reclaim(annotations=fresh, reclaim_min_runtime="10m"), now=NOW)
    assert not protected["evictions"]
    assert placement(protected)["b-0"] == ("Pending", "")
    expired = {LAST_START: rfc3339(NOW - 601)}
    after = simulate(parent_limit_reclaim(annotations=expired, reclaim_min_runtime="10m"), now=NOW)
    assert evicted(after) == ["a3-0"] and placement(after)["b-0"] == ("Running", "n1")


def test_over_quota_weights_converge_under_a_parent_limit() -> None:
    # dept: limit 8 on a 16-GPU node; qa (weight 1) holds all 8; qb (weight 3) asks for 8: 2 / 6.
    objs = [node("n1", gpus=16), queue("dept", gpu=(0, 8, 1)), queue("qa", "dept", gpu=(0, -1, 1)),
            queue("qb", "dept", gpu=(0, -1, 3)), *PRIORITY_CLASSES]
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"), running(f"a{i}-0", f"a{i}", "n1", gpus=1),
                 podgroup(f"b{i}", "qb", created=LATER), pod(f"b{i}-0", f"b{i}", gpus=1, created=LATER)]
    result = simulate(objs, cycles=3)
    running_now = [p for p, (status, _) in placement(result).items() if status == "Running"]
    assert sum(p.startswith("a") for p in running_now) == 2
    assert sum(p.startswith("b") for p in running_now) == 6
    assert all(e["cycle"] == 1 for e in result["evictions"])  # converged in one cycle, stable after


# --- minimal victim sets --------------------------------------------------------------------------------------


def three_train_one_build() -> list[dict[str, Any]]:
    """n1 (3 GPUs): t1 (2 GPUs, oldest) and t3 (1 GPU, newest); n2 (1 GPU): t2. A 2-GPU build job arrives.
    The newest victims come first, so n1's scenario holds t3 and t1; t1 alone is enough."""
    return [node("n1", gpus=3), node("n2", gpus=1), queue("q", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            podgroup("t1", "q", created="2025-01-01T00:01:00Z"), running("t1-0", "t1", "n1", gpus=2),
            podgroup("t2", "q", created="2025-01-01T00:02:00Z"), running("t2-0", "t2", "n2", gpus=1),
            podgroup("t3", "q", created="2025-01-01T00:03:00Z"), running("t3-0", "t3", "n1", gpus=1),
            podgroup("b", "q", priority_class="build", created=LATER), pod("b-0", "b", gpus=2, created=LATER)]


def test_preempt_leaves_the_unneeded_victim_running() -> None:
    two = simulate(three_train_one_build())
    assert evicted(two) == ["t1-0"]
    assert placement(two) == {"b-0": ("Running", "n1"), "t1-0": ("Pending", ""), "t2-0": ("Running", "n2"),
                              "t3-0": ("Running", "n1")}


# --- consolidating reclaim -------------------------------------------------------------------------------------


def test_reclaim_moves_the_over_quota_victim_instead_of_killing_it() -> None:
    # B's non-preemptible job may only run on n1, where A (quota 0) runs; n2 has room for A's pod.
    pinned = {"nodeSelector": {"kubernetes.io/hostname": "n1"}}
    objs = [node("n1", gpus=1), node("n2", gpus=1), queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(1, -1, 1)),
            *PRIORITY_CLASSES, podgroup("a", "qa"), running("a-0", "a", "n1", gpus=1),
            podgroup("b", "qb", priority_class="build", created=LATER),
            pod("b-0", "b", gpus=1, created=LATER, spec_extra=pinned)]
    one = run_simulation(objs)
    [e] = one["evictions"]
    assert e["action"] == "reclaim" and e["pod"] == "a-0"
    assert e["message"].endswith("It is moved to node n2.")
    assert {p["pod"]: p["node"] for p in one["pipelined"]} == {"a-0": "n2", "b-0": "n1"}
    two = simulate(objs)
    assert placement(two) == {"a-0": ("Running", "n2"), "b-0": ("Running", "n1")}
    text = format_text(simulate(objs, cycles=1))
    assert "pipeline    ns/a-0 -> n2" in text and "placement   ns/a-0 Pipelined n2" in text


# --- device-level consolidation ---------------------------------------------------------------------------------


def test_two_half_gpu_pods_on_two_gpus_make_room_for_a_whole_gpu() -> None:
    objs = [node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES,
            podgroup("h1", "q"), running("h1-0", "h1", "n1", fraction="0.5", gpu_group="g1"),
            podgroup("h2", "q", created="2025-01-01T00:01:00Z"),
            running("h2-0", "h2", "n1", fraction="0.5", gpu_group="g2"),
            podgroup("p", "q", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    one = run_simulation(objs)
    [e] = one["evictions"]
    assert e["action"] == "consolidation" and e["pod"] == "h2-0"
    assert "Moved to node n1 to make room for ns/p." in e["message"]
    moved = {p["pod"]: p for p in one["pipelined"]}
    assert moved["h2-0"]["node"] == "n1" and moved["p-0"]["node"] == "n1"
    two = simulate(objs)
    assert placement(two) == {"h1-0": ("Running", "n1"), "h2-0": ("Running", "n1"), "p-0": ("Running", "n1")}
    assert not two["unschedulable"]


def test_gpu_memory_pods_are_re_packed() -> None:
    # 40960 MiB GPUs: two 20000 MiB pods on different GPUs block a whole-GPU pod.
    objs = [node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES,
            podgroup("m1", "q"), running("m1-0", "m1", "n1", gpu_memory="20000", gpu_group="g1"),
            podgroup("m2", "q", created="2025-01-01T00:01:00Z"),
            running("m2-0", "m2", "n1", gpu_memory="20000", gpu_group="g2"),
            podgroup("p", "q", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    two = simulate(objs)
    assert evicted(two) == ["m2-0"]
    assert placement(two) == {"m1-0": ("Running", "n1"), "m2-0": ("Running", "n1"), "p-0": ("Running", "n1")}


def test_elastic_surplus_pod_moves_for_a_three_gpu_job() -> None:
    # The elastic job (minMember 1) runs e-0, e-1 on n1 and e-2 on n2 next to a non-preemptible 2-GPU job:
    # free are 2 GPUs on n1 and 1 on n2. Moving only the surplus pod e-1 to n2 frees 3 GPUs on n1.
    objs = [node("n1", gpus=4), node("n2", gpus=4), queue("q"), *PRIORITY_CLASSES,
            podgroup("e", "q", 1), running("e-0", "e", "n1", gpus=1), running("e-1", "e", "n1", gpus=1),
            running("e-2", "e", "n2", gpus=1),
            podgroup("y", "q", priority_class="build"), running("y-0", "y", "n2", gpus=2),
            podgroup("p", "q", created=LATER), pod("p-0", "p", gpus=3, created=LATER)]
    one = run_simulation(objs)
    assert evicted(one) == ["e-1"] and {e["action"] for e in one["evictions"]} == {"consolidation"}
    two = simulate(objs)
    assert placement(two) == {"e-0": ("Running", "n1"), "e-1": ("Running", "n2"), "e-2": ("Running", "n2"),
                              "p-0": ("Running", "n1"), "y-0": ("Running", "n2")}


def test_three_running_jobs_where_moving_one_suffices() -> None:
    # One 1-GPU job per 2-GPU node; a 2-GPU job needs one node emptied: exactly one job moves.
    objs = [node("n1", gpus=2), node("n2", gpus=2), node("n3", gpus=2), queue("q"), *PRIORITY_CLASSES]
    for i, n in enumerate(("n1", "n2", "n3")):
        objs += [podgroup(f"j{i}", "q", created=f"2025-01-01T00:0{i}:00Z"), running(f"j{i}-0", f"j{i}", n, gpus=1)]
    objs += [podgroup("p", "q", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]
    two = simulate(objs)
    [moved] = evicted(two)
    final = placement(two)
    assert final["p-0"][0] == "Running" and all(status == "Running" for status, _ in final.values())
    assert final[moved] != final["p-0"]  # p has a node of its own, the moved job shares another
    assert sorted([n for _, n in final.values()].count(n) for n in ("n1", "n2", "n3")) == [1, 1, 2]


# --- bounded search: duplicate victim sets ------------------------------------------------------------------


def test_equivalent_victim_sets_are_not_simulated_twice() -> None:
    # p (2 pods x 1 GPU) may only run on n1, where two identical 1-GPU train jobs run; n2 has a GPU free.
    # {a} is simulated and fails (the second pod has nowhere to go), {a, c} works; making it minimal would
    # try {a} and then {c}: the first is the set that failed, the second an equivalent one (same shape freed on
    # the same node, same queue), so neither is simulated again.
    pinned = {"nodeSelector": {"kubernetes.io/hostname": "n1"}}
    objs = [node("n1", gpus=2), node("n2", gpus=1), queue("q", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            podgroup("c", "q", created="2025-01-01T00:01:00Z"), running("c-0", "c", "n1", gpus=1),
            podgroup("a", "q", created="2025-01-01T00:02:00Z"), running("a-0", "a", "n1", gpus=1),
            podgroup("p", "q", 2, priority_class="inference", created=LATER),
            *[pod(f"p-{i}", "p", gpus=1, created=LATER, spec_extra=pinned) for i in range(2)]]
    d = run_cycle(snapshot_from_objects(objs), SchedulerConfig(actions=("allocate", "preempt")), 1e9)
    assert sorted(e.pod for e in d.evictions) == ["a-0", "c-0"]
    # n2's free GPU takes one victim back: the older, c (KAI re-places victims in job order), instead of being
    # evicted for good.
    assert {p.pod: p.node for p in d.pipelined} == {"p-0": "n1", "p-1": "n1", "c-0": "n2"}
    assert d.counters == {"scenarios_simulation/preempt": 2, "scenarios_duplicate/preempt": 2}


def test_reclaim_victim_set_is_minimal_and_explained_on_the_state_before_the_scenario() -> None:
    # As the preempt case, across queues: B (quota 2) reclaims 2 GPUs from A (quota 0), which holds all 4.
    objs = three_train_one_build()
    objs[2:3] = [queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(2, -1, 1))]
    for o in objs:
        if o["kind"] == "PodGroup":
            o["spec"]["queue"] = "qb" if o["metadata"]["name"] == "b" else "qa"
            o["spec"]["priorityClassName"] = "train"
    one = run_simulation(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    [e] = one["evictions"]
    assert e["pod"] == "t1-0" and e["action"] == "reclaim"
    # The reason quotes A's allocation before anything was taken from it (4 GPUs, fair share 2).
    assert "queue qa uses 4 GPUs, above its fair share of 2 GPUs" in e["message"], e["message"]
    two = simulate(objs)
    assert placement(two)["b-0"] == ("Running", "n1") and placement(two)["t3-0"] == ("Running", "n1")
