"""`kai why` analysis on hand-built snapshots: every suggestion is one the core confirms."""

from __future__ import annotations

from typing import Any

from operators.insight.why import explain, format_text
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.snapshot import snapshot_from_objects
from tests.unit.scheduler.sched_builders import PRIORITY_CLASSES, gang, node, pod, podgroup, queue

NOW = 1_735_689_600.0 + 3600  # an hour after T0


def why(objects: list[dict[str, Any]], name: str, deadlines: dict[str, float] | None = None) -> Any:
    return explain(snapshot_from_objects([*PRIORITY_CLASSES, *objects]), SchedulerConfig(), NOW, "ns", name,
                   deadlines)


def kinds(report: Any) -> dict[str, Any]:
    return {s.kind: s for s in report.suggestions}


def test_queue_limit_names_the_limit_and_the_value_that_unblocks_it() -> None:
    objs = [node("n1"), queue("q", gpu=(2, 3, 1)),
            *gang("running", 1, gpus=2, node_name="n1", phase="Running"),
            *gang("big", 2, gpus=2)]
    report = why(objs, "big")
    assert report.state == "pending" and not report.runs_now
    assert any("OverLimit" in r["reason"] for r in report.reasons)
    limit = kinds(report)["raise-limit"]
    # 2 allocated + 4 requested: a limit of 6 is the smallest that lets the gang in.
    assert (limit.details["queue"], limit.details["resource"], limit.details["from"], limit.details["to"]) == \
        ("q", "gpu", 3, 6)
    assert "raise queue q gpu limit from 3 to 6" in format_text(report)
    assert any("Queue q: GPUs quota 2, limit 3" in line for line in report.lines)


def test_fragmentation_names_the_consolidation_that_would_help() -> None:
    # Two 8-GPU nodes with 4 GPUs free each; non-preemptible (build) pods cannot be moved by the scheduler itself.
    objs = [node("n1"), node("n2"), queue("q")]
    for n in ("n1", "n2"):
        for i in range(4):
            objs += [podgroup(f"{n}-p{i}", "q", priority_class="build"),
                     pod(f"{n}-p{i}", f"{n}-p{i}", gpus=1, node_name=n, phase="Running")]
    objs += gang("wide", 1, gpus=8)
    report = why(objs, "wide")
    assert report.state == "pending"
    move = kinds(report)["consolidate"]
    moved = move.details["moves"]
    assert len(moved) == 4 and len({m["from"] for m in moved}) == 1 and len({m["to"] for m in moved}) == 1
    assert moved[0]["from"] != moved[0]["to"]
    assert report.best_node is not None and report.best_node["free"]["gpu"] == 4


def test_missing_node_label_for_required_affinity() -> None:
    affinity = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["h100"]}]}]}}}}
    objs = [node("n1"), node("n2", gpus=2), queue("q"), podgroup("aff", "q"),
            pod("aff-0", "aff", gpus=4, spec_extra=affinity)]
    report = why(objs, "aff")
    label = kinds(report)["label-node"]
    assert label.details == {"node": "n1", "labels": {"gpu-type": "h100"}}  # n2 has too few GPUs


def test_lower_the_request() -> None:
    objs = [node("n1"), queue("q"), *gang("huge", 1, gpus=12)]
    report = why(objs, "huge")
    low = kinds(report)["lower-request"]
    assert (low.details["from"], low.details["to"]) == (12, 8)


def test_gang_shortfall_names_the_subgroup_and_count() -> None:
    sub = [{"name": "workers", "minMember": 3}, {"name": "head", "minMember": 1}]
    objs = [node("n1"), queue("q"), podgroup("g", "q", 4, subgroups=sub),
            pod("g-h", "g", subgroup="head"), pod("g-w0", "g", subgroup="workers"),
            pod("g-w1", "g", subgroup="workers")]
    report = why(objs, "g")
    assert report.state == "waiting-for-gang"
    assert any("subgroup workers needs 3 pods, 2 exist" in line and "1 short" in line for line in report.lines)


def test_runs_now_and_already_running() -> None:
    objs = [node("n1"), queue("q"), *gang("fits", 2, gpus=1),
            *gang("up", 1, gpus=1, node_name="n1", phase="Running")]
    assert why(objs, "fits").runs_now and why(objs, "fits").state == "schedulable"
    assert why(objs, "up").state == "running"


def test_start_estimate_from_a_deadline_or_says_it_cannot_tell() -> None:
    objs = [node("n1"), queue("q"),
            podgroup("busy", "q", priority_class="build"),
            pod("busy-0", "busy", gpus=8, node_name="n1", phase="Running"),
            *gang("next", 1, gpus=8)]
    unknown = why(objs, "next")
    assert unknown.estimate.startswith("can't tell")
    known = why(objs, "next", {"ns/busy-0": NOW + 600})
    assert known.estimate.startswith("about ") and "in 10m" in known.estimate and "ns/busy-0" in known.estimate
    assert "free-pods" in kinds(known)


def test_unknown_podgroup_is_a_lookup_error() -> None:
    import pytest

    with pytest.raises(LookupError):
        why([node("n1"), queue("q")], "nope")


def test_pipelined_names_the_pods_evicted_for_it() -> None:
    objs = [node("n1", gpus=2), queue("q"),
            *gang("low", 1, gpus=2, node_name="n1", phase="Running"),
            podgroup("urgent", "q", priority_class="inference"), pod("urgent-0", "urgent", gpus=2)]
    report = why(objs, "urgent")
    assert report.state == "pipelined" and not report.runs_now
    assert any("ns/low-0 (preempt)" in line for line in report.lines), report.lines


def tree_group(name: str, subgroups: list[dict[str, Any]], min_sub_group: int | None = None) -> dict[str, Any]:
    pg = podgroup(name, "q", subgroups=subgroups)
    del pg["spec"]["minMember"]
    if min_sub_group is not None:
        pg["spec"]["minSubGroup"] = min_sub_group
    return pg


def workers(leaf: str, n: int, gpus: int, node_name: str = "") -> list[dict[str, Any]]:
    return [pod(f"{leaf}-{i}", "job", gpus=gpus, subgroup=leaf, node_name=node_name,
                phase="Running" if node_name else "Pending") for i in range(n)]


THREE_LEAVES = [{"name": "worker-a", "minMember": 2}, {"name": "worker-b", "minMember": 2},
                {"name": "worker-c", "minMember": 2}]


def test_a_sub_group_tree_asks_only_for_the_pods_its_gang_rule_needs() -> None:
    # minSubGroup 2 of 3: worker-a runs, so one more leaf (worker-b, first in spec order) is all it needs to start:
    # 2 pods, 8 GPUs, not the 4 pending pods and their 16 GPUs.
    objs = [node("n1"), node("n2"), queue("q", gpu=(4, 6, 1)), tree_group("job", THREE_LEAVES, 2),
            *workers("worker-a", 2, 2, node_name="n1"), *workers("worker-b", 2, 4), *workers("worker-c", 2, 4)]
    report = why(objs, "job")
    assert report.state == "pending"
    line = next(line for line in report.lines if line.startswith("To start"))
    assert "needs 2 more pods in sub-group worker-b placed (2 of its 4 pending)" in line, line
    assert "worker-c" not in line.split(":")[0]
    assert "the PodGroup needs 2 of its 3 child SubGroups to meet their minimum, 1 do (worker-a)" in line
    [q] = report.queues
    assert q["resources"]["gpu"]["workloadRequest"] == 8
    assert report.best_node is not None and "(2 pending pod(s))" in report.best_node["text"]
    # 4 allocated + 8 for worker-b: a limit of 12 lets it start (every pending pod would have asked for 20).
    limit = kinds(report)["raise-limit"]
    assert (limit.details["from"], limit.details["to"]) == (6, 12)


def test_a_nested_tree_names_each_leaf_it_needs() -> None:
    subgroups = [{"name": "prefill", "minMember": 1}, {"name": "decode", "minSubGroup": 1},
                 {"name": "d0", "parent": "decode", "minMember": 2}, {"name": "d1", "parent": "decode", "minMember": 2}]
    objs = [node("n1", gpus=4), queue("q"), tree_group("job", subgroups),
            *workers("prefill", 1, 2), *workers("d0", 2, 2), *workers("d1", 2, 2)]
    report = why(objs, "job")
    assert report.state == "pending"
    line = next(line for line in report.lines if line.startswith("To start"))
    assert "needs 1 more pod in sub-group prefill and 2 more pods in sub-group d0 placed (3 of its 5 pending)" \
        in line, line
    assert "SubGroup decode needs 1 of its 2 child SubGroups to meet their minimum, 0 do" in line
    assert report.queues[0]["resources"]["gpu"]["workloadRequest"] == 6


def test_a_tree_short_of_pods_waits_for_the_leaf_its_rule_needs() -> None:
    # 2 of 3 leaves: worker-a has its 2 pods, worker-b 1 of 2, worker-c none: one more worker-b pod is enough.
    objs = [node("n1"), queue("q"), tree_group("job", THREE_LEAVES, 2),
            *workers("worker-a", 2, 1), *workers("worker-b", 1, 1)]
    report = why(objs, "job")
    assert report.state == "waiting-for-gang"
    [line] = report.lines
    assert line.endswith("it needs 1 more pod in sub-group worker-b to exist."), line
    assert "1 do (worker-a)" in line and "SubGroup worker-c" not in line


def test_an_elastic_gang_asks_for_its_minimum_not_every_pending_pod() -> None:
    objs = [node("n1", gpus=2), queue("q"), podgroup("el", "q", 2),
            *[pod(f"el-{i}", "el", gpus=2) for i in range(4)]]
    report = why(objs, "el")
    assert report.state == "pending"
    assert any("needs 2 more pods placed (2 of its 4 pending): the PodGroup needs 2 pods, 0 placed" in line
               for line in report.lines), report.lines
    assert report.queues[0]["resources"]["gpu"]["workloadRequest"] == 4
