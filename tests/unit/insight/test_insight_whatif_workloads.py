"""`kai what-if` on RayCluster, RayJob and PyTorchJob manifests: expanded into the pods their operators would create,
grouped as the pod-grouper groups them, so the answer is for the whole gang."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.insight import whatif
from operators.scheduler.decide.config import SchedulerConfig
from tests.unit.scheduler.sched_builders import PRIORITY_CLASSES, node, queue

NOW = 1_735_689_600.0 + 3600
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def pods(added: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in added if o["kind"] == "Pod"}


def podgroups(added: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in added if o["kind"] == "PodGroup"]


def subgroup(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get("kai.scheduler/subgroup-name", ""))


def ray_cluster(workers: list[dict[str, Any]], gpus: int = 1) -> dict[str, Any]:
    container = {"name": "ray", "image": "rayproject/ray",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "labels": {"kai.scheduler/queue": "q"}},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray", "resources": {"requests": {"cpu": "1"}}}]}}},
                "workerGroupSpecs": [{**w, "template": {"spec": {"containers": [container]}}} for w in workers]}}


def test_a_ray_cluster_is_its_head_and_each_groups_bounded_replicas() -> None:
    cluster = ray_cluster([{"groupName": "small", "replicas": 2, "minReplicas": 2, "maxReplicas": 5},  # -> 2
                           {"groupName": "capped", "replicas": 9, "minReplicas": 1, "maxReplicas": 3},  # -> 3
                           {"groupName": "multi", "replicas": 1, "numOfHosts": 2},  # -> 2 (hosts)
                           {"groupName": "off", "replicas": 4, "suspend": True}])  # -> none
    added = whatif.expand([cluster], "ns", NOW)
    made = pods(added)
    by_group: dict[str, int] = {}
    for pod in made.values():
        group = pod["metadata"]["labels"]["ray.io/group"]
        by_group[group] = by_group.get(group, 0) + 1
        assert pod["spec"]["schedulerName"] == "kai-scheduler"  # KubeRay with --batch-scheduler=kai-scheduler
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "q"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
    assert by_group == {"headgroup": 1, "small": 2, "capped": 3, "multi": 2}
    [pg] = podgroups(added)
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in made.values()} == {pg["metadata"]["name"]}
    assert {subgroup(p) for p in made.values()} == {"headgroup", "small", "capped", "multi"}
    # The pod-grouper's gang: head + each group's minimum (else replicas) x hosts.
    [pg] = podgroups(whatif.expand([ray_cluster(cluster["spec"]["workerGroupSpecs"][:3])], "ns", NOW))
    assert pg["spec"]["minMember"] == 1 + 2 + 1 + 2


def test_the_ray_cluster_example_starts_as_one_gang_or_not_at_all() -> None:
    docs = load("ray-cluster.kai-scheduler.yaml")
    added = whatif.expand(docs, "demo", NOW)
    assert sorted(pods(added)) == ["raycluster-sample-whatif-head", "raycluster-sample-whatif-worker-worker-0",
                                   "raycluster-sample-whatif-worker-worker-1"]
    [pg] = podgroups(added)
    assert pg["spec"]["minMember"] == 3 and pg["spec"]["queue"] == "team-a"
    assert [(s["name"], s["minMember"]) for s in pg["spec"]["subGroups"]] == [("headgroup", 1), ("worker", 2)]
    roomy = whatif.what_if([*PRIORITY_CLASSES, node("n1")], added, SchedulerConfig(), NOW)
    assert [p["status"] for p in roomy["placements"]] == ["Bound"] * 3
    # Room for two of the three pods: none binds (the head alone would hold resources while the workers wait).
    small = whatif.what_if([*PRIORITY_CLASSES, node("n1", cpu="2.5")], added, SchedulerConfig(), NOW)
    assert [p["status"] for p in small["placements"]] == ["Pending"] * 3
    assert [u["podGroup"] for u in small["unschedulable"]] == [pg["metadata"]["name"]]


def test_a_ray_job_in_sidecar_mode_is_its_clusters_pods_with_the_submitter_in_the_head() -> None:
    [job] = load("ray-job.kai-scheduler.yaml")  # generateName, SidecarMode
    added = whatif.expand([job], "demo", NOW)
    made = pods(added)
    assert sorted(made) == ["rayjob-sample-whatif-head", "rayjob-sample-whatif-small-group-worker-0"]
    head = made["rayjob-sample-whatif-head"]
    assert [c["name"] for c in head["spec"]["containers"]] == ["ray-head", "ray-job-submitter"]
    assert head["spec"]["containers"][1]["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    [pg] = podgroups(added)
    # Grouped by the RayJob rule: the RayJob is the top owner, its RayCluster holds the gang.
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["queue"] == "team-a"


def test_a_ray_job_in_k8s_job_mode_is_refused_as_kuberay_refuses_it() -> None:
    [job] = load("ray-job.kai-scheduler.yaml")
    job = copy.deepcopy(job)
    del job["spec"]["submissionMode"]  # K8sJobMode, KubeRay's default
    with pytest.raises(ValueError, match=r"refuses submissionMode K8sJobMode .* spec\.submissionMode: SidecarMode"):
        whatif.expand([job], "demo", NOW)
    job["spec"]["submissionMode"] = "HTTPMode"  # no submitter pod: just the cluster's
    made = pods(whatif.expand([job], "demo", NOW))
    assert len(made) == 2 and all(len(p["spec"]["containers"]) == 1 for p in made.values())


def test_a_ray_job_on_an_existing_cluster_is_a_clear_error() -> None:
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"},
           "spec": {"submissionMode": "SidecarMode", "clusterSelector": {"ray.io/cluster": "shared"},
                    "entrypoint": "python x.py"}}
    with pytest.raises(ValueError, match=r"spec\.clusterSelector"):
        whatif.expand([job], "ns", NOW)


def test_bad_worker_counts_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"workerGroupSpecs\[0\].replicas must be a non-negative integer"):
        whatif.expand([ray_cluster([{"groupName": "w", "replicas": "two"}])], "ns", NOW)


def test_a_pytorch_job_is_its_master_and_workers_in_one_gang() -> None:
    docs = load("batch/pytorch-job.yaml")
    added = whatif.expand(docs, "ns", NOW)
    made = pods(added)
    assert sorted(made) == ["pytorch-dist-mnist-nccl-master-whatif-0", "pytorch-dist-mnist-nccl-worker-whatif-0",
                            "pytorch-dist-mnist-nccl-worker-whatif-1"]
    worker = made["pytorch-dist-mnist-nccl-worker-whatif-1"]["metadata"]["labels"]
    assert worker["training.kubeflow.org/replica-type"] == "worker"
    assert worker["training.kubeflow.org/replica-index"] == "1"
    [pg] = podgroups(added)
    assert pg["spec"]["minMember"] == 3
    assert [(s["name"], s["minMember"]) for s in pg["spec"]["subGroups"]] == [("master", 1), ("worker", 2)]
    assert {subgroup(p) for p in made.values()} == {"master", "worker"}
    cluster = [*PRIORITY_CLASSES, queue("default-queue")]
    two = whatif.what_if([*cluster, node("n1", gpus=2)], added, SchedulerConfig(), NOW)
    assert [p["status"] for p in two["placements"]] == ["Pending"] * 3  # 3 GPUs or nothing
    three = whatif.what_if([*cluster, node("n1", gpus=3)], added, SchedulerConfig(), NOW)
    assert [p["status"] for p in three["placements"]] == ["Bound"] * 3


def test_an_elastic_pytorch_job_starts_with_its_minimum() -> None:
    added = whatif.expand(load("batch/pytorch-elastic.yaml"), "ns", NOW)
    assert len(pods(added)) == 2
    [pg] = podgroups(added)
    assert pg["spec"]["minMember"] == 1  # elasticPolicy.minReplicas
    # Room for one 4-CPU worker: the gang's minimum starts, the other worker waits.
    result = whatif.what_if([*PRIORITY_CLASSES, queue("default-queue"), node("n1", cpu="6")], added,
                            SchedulerConfig(), NOW)
    assert sorted(p["status"] for p in result["placements"]) == ["Bound", "Pending"]


@pytest.mark.parametrize("on", ["template", "owner"])
def test_skip_podgrouper_leaves_the_pods_to_the_podgroup_their_creator_made(on: str) -> None:
    # The pod-grouper leaves such pods alone (KAI v0.17): they keep the PodGroup named on them, none is derived.
    skip = {"kai.scheduler/skip-podgrouper": "true"}
    annotations = {"pod-group-name": "mine", **(skip if on == "template" else {})}
    template: dict[str, Any] = {"metadata": {"annotations": annotations, "labels": {"kai.scheduler/queue": "q"}},
                                "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "annotations": skip if on == "owner" else {}},
                  "spec": {"replicas": 2, "template": template}}
    added = whatif.expand([deployment], "default", NOW)
    assert podgroups(added) == []
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in pods(added).values()} == {"mine"}
