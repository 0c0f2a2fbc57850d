"""`kai queues`, `kai top`, `kai what-if` and workload lookup on hand-built snapshots."""

from __future__ import annotations

from typing import Any

import pytest

from operators.insight import queues, targets, top, whatif
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.snapshot import snapshot_from_objects
from tests.unit.scheduler.sched_builders import PRIORITY_CLASSES, gang, node, pod, podgroup, queue

NOW = 1_735_689_600.0 + 3600


def snap(objects: list[dict[str, Any]]) -> Any:
    return snapshot_from_objects([*PRIORITY_CLASSES, *objects])


def test_queue_tree_is_depth_first_with_the_cores_numbers() -> None:
    objs = [node("n1"), queue("root", gpu=(8, -1, 1)), queue("b", "root", gpu=(2, 4, 1)),
            queue("a", "root", gpu=(6, -1, 2)),
            *gang("ra", 1, queue_name="a", gpus=3, node_name="n1", phase="Running"),
            *gang("wa", 1, queue_name="a", gpus=8)]
    tree = queues.queue_tree(snap(objs), SchedulerConfig(), NOW)
    assert [(q["name"], q["depth"]) for q in tree] == [("root", 0), ("a", 1), ("b", 1)]
    a = tree[1]
    assert a["resources"]["gpu"]["quota"] == 6 and a["resources"]["gpu"]["overQuotaWeight"] == 2
    assert a["resources"]["gpu"]["allocated"] == 3 and a["resources"]["gpu"]["requested"] == 11
    assert a["pendingPodGroups"] == ["ns/wa"]
    assert tree[0]["resources"]["gpu"]["allocated"] == 3  # parents sum their children
    assert tree[2]["resources"]["gpu"]["limit"] == 4 and tree[2]["resources"]["cpu"]["limit"] == -1
    text = queues.format_text(tree)
    assert text.splitlines()[2].startswith("  a ") and "ns/wa" in text
    assert "CPU-QUOTA" in queues.format_text(tree, wide=True)


def test_top_shows_whole_shared_and_idle_gpus() -> None:
    objs = [node("n1"), queue("q"),
            *gang("w", 1, gpus=3, node_name="n1", phase="Running"),
            podgroup("h1", "q"), pod("h1", "h1", fraction="0.5", node_name="n1", phase="Running", gpu_group="g1"),
            podgroup("h2", "q"), pod("h2", "h2", fraction="0.25", node_name="n1", phase="Running", gpu_group="g1"),
            podgroup("h3", "q"), pod("h3", "h3", fraction="0.5", node_name="n1", phase="Running", gpu_group="g2")]
    view = top.gpu_view(snap(objs))
    n1 = view[0]
    assert (n1["gpus"], n1["wholeUsed"], len(n1["shared"]), n1["idle"]) == (8, 3, 2, 3)
    g1 = next(g for g in n1["shared"] if g["id"] == "g1")
    assert g1["used"] == 0.75 and [p["pod"] for p in g1["pods"]] == ["ns/h1", "ns/h2"]
    text = top.format_text(view)
    assert "gpu-group g1: 0.75 used (ns/h1 0.5, ns/h2 0.25)" in text


def _filled_cluster() -> list[dict[str, Any]]:
    objs = [node("n1", gpus=4), node("n2", gpus=4), queue("q")]
    for n in ("n1", "n2"):
        for i in range(4):
            objs += [podgroup(f"{n}-t{i}", "q"), pod(f"{n}-t{i}", f"{n}-t{i}", gpus=1, node_name=n, phase="Running")]
    return [*PRIORITY_CLASSES, *objs]


def test_what_if_a_high_priority_deployment_lists_its_victims() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "serve"},
                  "spec": {"replicas": 1, "template": {
                      "metadata": {"labels": {"kai.scheduler/queue": "q"}},
                      "spec": {"schedulerName": "kai-scheduler", "containers": [
                          {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}
    added = whatif.expand([deployment], "ns", NOW)
    pods = [o for o in added if o["kind"] == "Pod"]
    pgs = [o for o in added if o["kind"] == "PodGroup"]
    assert len(pods) == 1 and len(pgs) == 1
    assert pgs[0]["spec"]["priorityClassName"] == "inference"  # the pod-grouper's default for Deployments
    result = whatif.what_if(_filled_cluster(), added, SchedulerConfig(), NOW, cycles=2)
    victims = sorted(e["pod"] for e in result["evictions"])
    assert len(victims) == 2 and len({v[:2] for v in victims}) == 1  # two pods of one node
    assert {e["action"] for e in result["evictions"]} == {"preempt"}
    assert result["placements"][0]["node"] == victims[0][:2]
    assert "evict" in whatif.format_text(result)


def test_what_if_rejects_kinds_it_cannot_expand() -> None:
    with pytest.raises(ValueError, match="not supported"):
        whatif.expand([{"kind": "CronJob", "metadata": {"name": "x"}}], "ns", NOW)


def test_what_if_job_pods_share_nothing_and_nothing_is_evicted_when_there_is_room() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 2, "template": {"metadata": {"labels": {"kai.scheduler/queue": "q"}},
                                                    "spec": {"schedulerName": "kai-scheduler",
                                                             "containers": [{"name": "c"}]}}}}
    added = whatif.expand([job], "ns", NOW)
    result = whatif.what_if([*PRIORITY_CLASSES, node("n1"), queue("q")], added, SchedulerConfig(), NOW)
    assert [p["status"] for p in result["placements"]] == ["Bound", "Bound"]
    assert result["evictions"] == []


def test_podgroups_of_a_deployment_ray_cluster_and_pod() -> None:
    def owned(kind: str, name: str) -> list[dict[str, Any]]:
        return [{"kind": kind, "name": name}]
    objs: list[dict[str, Any]] = [
        {"kind": "PodGroup", "metadata": {"name": "pg-a", "namespace": "ns"}},
        {"kind": "PodGroup", "metadata": {"name": "pg-ray", "namespace": "ns",
                                          "ownerReferences": owned("RayCluster", "rc")}},
        {"kind": "ReplicaSet", "metadata": {"name": "web-123", "namespace": "ns",
                                            "ownerReferences": owned("Deployment", "web")}},
        {"kind": "Pod", "metadata": {"name": "web-123-x", "namespace": "ns", "annotations": {
            "pod-group-name": "pg-a"}, "ownerReferences": owned("ReplicaSet", "web-123")}},
    ]
    assert targets.podgroups_for(objs, "Deployment", "web", "ns") == ["pg-a"]
    assert targets.podgroups_for(objs, "RayCluster", "rc", "ns") == ["pg-ray"]
    assert targets.podgroups_for(objs, "Pod", "web-123-x", "ns") == ["pg-a"]
    assert targets.podgroups_for(objs, "Deployment", "web", "other") == []


def test_top_does_not_count_a_reservation_pod_as_a_whole_gpu() -> None:
    reservation = pod("runai-reservation-gpu-n1-x", None, gpus=1, namespace="kai-resource-reservation",
                      node_name="n1", phase="Running", labels={"app": "kai-resource-reservation"}, gpu_group="g1")
    objs = [node("n1"), queue("q"), reservation,
            podgroup("h1", "q"), pod("h1", "h1", fraction="0.5", node_name="n1", phase="Running", gpu_group="g1")]
    n1 = top.gpu_view(snap(objs))[0]
    assert (n1["wholeUsed"], len(n1["shared"]), n1["idle"]) == (0, 1, 7)
    assert n1["shared"][0]["pods"] == [{"pod": "ns/h1", "fraction": 0.5}]
