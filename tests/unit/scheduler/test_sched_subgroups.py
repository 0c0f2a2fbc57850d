"""Elastic SubGroup trees (minSubGroup) through `kai simulate`'s code path: partial start, growth, every level
gated, explanations, staleness and victims."""

from __future__ import annotations

from typing import Any

import yaml
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.simulation import run_simulation
from tests.support import EXAMPLES


def tree_pg(name: str, subgroups: list[dict[str, Any]], min_sub_group: int | None = None,
            **kwargs: Any) -> dict[str, Any]:
    pg = podgroup(name, subgroups=subgroups, **kwargs)
    del pg["spec"]["minMember"]
    if min_sub_group is not None:
        pg["spec"]["minSubGroup"] = min_sub_group
    return pg


def leaves(n: int, size: int = 2, parent: str | None = None, prefix: str = "w") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        leaf: dict[str, Any] = {"name": f"{prefix}{i}", "minMember": size}
        if parent:
            leaf["parent"] = parent
        out.append(leaf)
    return out


def members(group: str, leaf: str, n: int = 2, gpus: int = 1, running_on: str = "") -> list[dict[str, Any]]:
    return [pod(f"{leaf}-{i}", group, gpus=gpus, subgroup=leaf, node_name=running_on,
                phase="Running" if running_on else "Pending") for i in range(n)]


def four_leaves(min_sub_group: int = 3) -> list[dict[str, Any]]:
    objs = [tree_pg("job", leaves(4), min_sub_group)]
    for i in range(4):
        objs += members("job", f"w{i}")
    return objs


def bound_pods(result: dict[str, Any]) -> list[str]:
    return sorted(b["pod"] for b in result["binds"])


def test_three_of_four_leaves_start_when_only_six_pods_fit() -> None:
    result = run_simulation([node("n1", gpus=6), queue("q"), *four_leaves(3)])
    assert bound_pods(result) == ["w0-0", "w0-1", "w1-0", "w1-1", "w2-0", "w2-1"]
    [u] = result["unschedulable"]
    assert sorted(u["podMessages"]) == ["w3-0", "w3-1"]
    assert u["message"].startswith("PodSchedulingErrors: Resources were not found for pod ns/w3-0 due to: ")
    assert ("The PodGroup's minimum is met (3 of its 4 child SubGroups, 3 required); its other pods start when "
            "resources free up") in u["message"]


def test_all_four_leaves_start_when_eight_fit() -> None:
    result = run_simulation([node("n1", gpus=8), queue("q"), *four_leaves(3)])
    assert len(result["binds"]) == 8 and result["unschedulable"] == []


def test_below_the_minimum_nothing_starts_and_the_short_level_is_named() -> None:
    result = run_simulation([node("n1", gpus=5), queue("q"), *four_leaves(3)])
    assert result["binds"] == []
    [u] = result["unschedulable"]
    assert u["message"].startswith("PodSchedulingErrors: Resources were found for 5 pods from all sub-groups "
                                   "while sub-group w2 requires 2 pods")
    assert ("Not yet started: the PodGroup needs 3 of its 4 child SubGroups to meet their minimum, 0 do; "
            "SubGroup w0 needs 2 pods, 0 allocated; SubGroup w1 needs 2 pods, 0 allocated; SubGroup w2 needs 2 "
            "pods, 0 allocated") in u["message"]


def test_a_running_job_grows_by_whole_leaves_as_resources_free_up() -> None:
    running = [tree_pg("job", leaves(4), 3)]
    for i in range(3):
        running += members("job", f"w{i}", running_on="n1")
    running += members("job", "w3")
    # One GPU free: a leaf of two pods does not start half.
    one = run_simulation([node("n1", gpus=7), queue("q"), *running])
    assert one["binds"] == []
    [u] = one["unschedulable"]
    assert "The PodGroup's minimum is met (3 of its 4 child SubGroups, 3 required)" in u["message"]
    # Two free: the fourth leaf starts whole.
    two = run_simulation([node("n1", gpus=8), queue("q"), *running])
    assert bound_pods(two) == ["w3-0", "w3-1"]


def test_beyond_its_minimum_a_leaf_grows_one_pod_at_a_time() -> None:
    objs = [tree_pg("job", [{"name": "w0", "minMember": 1}, {"name": "w1", "minMember": 1}], 1),
            *members("job", "w0", n=3), *members("job", "w1", n=1)]
    result = run_simulation([node("n1", gpus=3), queue("q"), *objs])
    assert len(result["binds"]) == 3  # every pod is elastic beyond each leaf's minimum of one


def test_two_levels_are_gated_at_every_level() -> None:
    # The PodGroup needs one of two racks; rack-a needs both its leaves (4 GPUs each: too big), rack-b one of its
    # two leaves (1 GPU pods).
    subgroups = [{"name": "rack-a", "minSubGroup": 2}, {"name": "rack-b", "minSubGroup": 1},
                 *leaves(2, parent="rack-a", prefix="a"), *leaves(2, parent="rack-b", prefix="b")]
    objs = [tree_pg("job", subgroups, 1), *members("job", "a0", gpus=4), *members("job", "a1", gpus=4),
            *members("job", "b0"), *members("job", "b1")]
    result = run_simulation([node("n1", gpus=3), queue("q"), *objs])
    assert bound_pods(result) == ["b0-0", "b0-1"]
    # With room for nothing but one pod, the explanation walks down the levels.
    short = run_simulation([node("n1", gpus=1), queue("q"), *objs])
    assert short["binds"] == []
    [u] = short["unschedulable"]
    assert ("Not yet started: the PodGroup needs 1 of its 2 child SubGroups to meet their minimum, 0 do; "
            "SubGroup rack-b needs 1 of its 2 child SubGroups to meet their minimum, 0 do; SubGroup b0 needs 2 pods,"
            " 0 allocated") in u["message"]


def test_not_ready_until_enough_pods_exist_and_an_impossible_minimum_says_so() -> None:
    objs = [tree_pg("job", leaves(3), 2), *members("job", "w0"), *members("job", "w1", n=1)]
    result = run_simulation([node("n1", gpus=8), queue("q"), *objs])
    assert result["binds"] == []
    [nr] = result["notReady"]
    assert nr["message"] == (
        "Job is not ready for scheduling: the PodGroup needs 2 of its 3 child SubGroups to meet their minimum, 1 do "
        "(w0); SubGroup w1 needs 2 pods, 1 exist.")
    impossible = [tree_pg("job", leaves(2), 3), *members("job", "w0"), *members("job", "w1")]
    [nr] = run_simulation([node("n1", gpus=8), queue("q"), *impossible])["notReady"]
    assert nr["message"] == (
        "Job is not ready for scheduling: the PodGroup needs 3 child SubGroups to meet their minimum but has only 2 "
        "(minSubGroup 3 can never be met).")


def test_a_fully_elastic_tree_starts_with_any_whole_leaf() -> None:
    result = run_simulation([node("n1", gpus=3), queue("q"), *four_leaves(0)])
    assert bound_pods(result) == ["w0-0", "w0-1"]  # one whole leaf; no leaf half started


def test_stale_by_the_tree_rule() -> None:
    def running(min_sub_group: int) -> list[dict[str, Any]]:
        return [tree_pg("job", leaves(3), min_sub_group, annotations={
                    "kai.scheduler/stale-podgroup-timestamp": "2024-12-31T00:00:00Z"}),
                *members("job", "w0", running_on="n1"), *members("job", "w1", n=1, running_on="n1")]
    config = SchedulerConfig(stale_grace_period=60)
    stale = run_simulation([node("n1"), queue("q"), *running(2)], config, ["stalegangeviction"])
    assert sorted(e["pod"] for e in stale["evictions"]) == ["w0-0", "w0-1", "w1-0"]
    assert stale["stale"][0]["message"] == (
        "Job is stale. 3 pods are active: the PodGroup needs 2 of its 3 child SubGroups to meet their minimum, 1 do "
        "(w0); SubGroup w1 needs 2 pods, 1 active")
    fine = run_simulation([node("n1"), queue("q"), *running(1)], config, ["stalegangeviction"])
    assert fine["evictions"] == [] and not fine.get("stale")
    # No longer stale by the tree rule: the stale timestamp goes.
    assert {"namespace": "ns", "podGroup": "job", "key": "kai.scheduler/stale-podgroup-timestamp",
            "value": None} in fine["annotations"]


def test_a_preemptor_takes_the_leaf_the_tree_does_not_need() -> None:
    objs = [node("n1", gpus=8), queue("q"), *PRIORITY_CLASSES]
    job = tree_pg("job", leaves(4), 3)
    objs.append(job)
    for i in range(4):
        objs += members("job", f"w{i}", running_on="n1")
    objs += [podgroup("urgent", priority_class="build"), pod("urgent-0", "urgent", gpus=2)]
    result = run_simulation(objs, None, ["preempt"])
    victims = sorted(e["pod"] for e in result["evictions"])
    assert len(victims) == 2 and {v.split("-")[0] for v in victims} == {"w3"}, victims


def test_with_the_plugin_disabled_every_leaf_is_required() -> None:
    from operators.scheduler.decide.framework import PluginSetting

    config = SchedulerConfig(plugins=(PluginSetting("subgroups", enabled=False),))
    result = run_simulation([node("n1", gpus=6), queue("q"), *four_leaves(3)], config)
    assert result["binds"] == []


def test_a_leaf_that_fits_no_node_is_left_out_when_others_can_start() -> None:
    # w0's pods select a node label no node has: the PodGroup starts with w1, w2 and w3.
    unfit = members("job", "w0")
    for p in unfit:
        p["spec"]["nodeSelector"] = {"pool": "none"}
    objs = [tree_pg("job", leaves(4), 3), *unfit]
    for i in range(1, 4):
        objs += members("job", f"w{i}")
    result = run_simulation([node("n1", gpus=8), queue("q"), *objs])
    assert bound_pods(result) == ["w1-0", "w1-1", "w2-0", "w2-1", "w3-0", "w3-1"]


def test_the_example_starts_three_leaves_on_six_gpus() -> None:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "elastic" / "min-subgroup.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = "ns"
    result = run_simulation([node("n1", gpus=6), queue("default-queue"), *PRIORITY_CLASSES, *docs])
    assert len(result["binds"]) == 6
    assert {b["pod"].rsplit("-", 1)[0] for b in result["binds"]} == {
        "elastic-train-w0", "elastic-train-w1", "elastic-train-w2"}
    [u] = result["unschedulable"]
    assert sorted(u["podMessages"]) == ["elastic-train-w3-0", "elastic-train-w3-1"]


def test_a_leaf_the_tree_does_not_need_loses_all_its_pods_or_none() -> None:
    # The preemptor needs one GPU. w3 is not needed by the tree (3 of 4 leaves suffice), but a leaf is either at
    # its minMember or empty: the victim is the whole of w3, never one of its two pods.
    objs = [node("n1", gpus=8), queue("q"), *PRIORITY_CLASSES, tree_pg("job", leaves(4), 3)]
    for i in range(4):
        objs += members("job", f"w{i}", running_on="n1")
    objs += [podgroup("urgent", priority_class="build"), pod("urgent-0", "urgent", gpus=1)]
    result = run_simulation(objs, None, ["preempt"])
    assert sorted(e["pod"] for e in result["evictions"]) == ["w3-0", "w3-1"]
    # With a third pod, w3 gives up the one above its own minimum and keeps its minimum.
    objs = [node("n1", gpus=9), *objs[1:]]
    objs.insert(-2, pod("w3-2", "job", gpus=1, subgroup="w3", node_name="n1", phase="Running"))
    result = run_simulation(objs, None, ["preempt"])
    assert sorted(e["pod"] for e in result["evictions"]) == ["w3-2"]


def test_when_the_first_choice_of_leaves_fails_another_is_placed_in_the_same_cycle() -> None:
    # One of two leaves is needed. a (two 1-GPU pods) and b (one 3-GPU pod) cost the same, so a is chosen first;
    # each pod of a fits the node alone, but both need 80 of its 64 CPUs: the job starts with b instead.
    objs = [node("n1", gpus=4, cpu="64"), queue("q"),
            tree_pg("job", [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 1}], 1),
            *[pod(f"a-{i}", "job", gpus=1, cpu="40", subgroup="a") for i in range(2)],
            pod("b-0", "job", gpus=3, subgroup="b")]
    result = run_simulation(objs)
    assert bound_pods(result) == ["b-0"]
    [u] = result["unschedulable"]  # a stays pending: the PodGroup's minimum is met without it
    assert sorted(u["podMessages"]) == ["a-0", "a-1"]
