"""Per-kind grouping of the example workloads, on the real example YAML."""

from __future__ import annotations

from typing import Any

import yaml
from pg_builders import World, child, load_kind, ok, pod_from_template, stored

from operators.core import keys
from operators.podgrouper.grouping import GroupingError, pod_patch


def ray_pods(cluster: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Head and worker pods as KubeRay creates them (queue label copied from the RayCluster)."""
    name = cluster["metadata"]["name"]
    common = {keys.RAY_CLUSTER_LABEL: name}
    queue = cluster["metadata"].get("labels", {}).get(keys.QUEUE_LABEL)
    if queue:
        common[keys.QUEUE_LABEL] = queue
    head = pod_from_template(f"{name}-head-abcde", cluster, cluster["spec"]["headGroupSpec"]["template"],
                             {**common, keys.RAY_GROUP_LABEL: "headgroup", keys.RAY_NODE_TYPE_LABEL: "head"})
    workers = []
    for group in cluster["spec"]["workerGroupSpecs"]:
        for i in range(group["replicas"]):
            workers.append(pod_from_template(
                f"{name}-{group['groupName']}-worker-{i}", cluster, group["template"],
                {**common, keys.RAY_GROUP_LABEL: group["groupName"], keys.RAY_NODE_TYPE_LABEL: "worker"}))
    return head, workers


def test_ray_cluster_kai_scheduler() -> None:
    cluster = load_kind("ray-cluster.kai-scheduler.yaml", "RayCluster")
    head, workers = ray_pods(cluster)
    world = World(cluster)
    results = [ok(world.group(pod, [cluster])) for pod in [head, *workers]]
    first = results[0]
    assert first.name == f"pg-raycluster-sample-{cluster['metadata']['uid']}"
    assert first.spec["minMember"] == 3
    assert first.spec["queue"] == "team-a"
    assert first.spec["priorityClassName"] == "train"
    assert first.spec["subGroups"] == [{"name": "headgroup", "minMember": 1},
                                       {"name": "worker", "minMember": 2}]
    assert first.podgroup["metadata"]["ownerReferences"] == [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "raycluster-sample",
         "uid": cluster["metadata"]["uid"]}]
    assert {r.name for r in results} == {first.name}
    assert [r.subgroup for r in results] == ["headgroup", "worker", "worker"]
    assert pod_patch(head, first) == {"metadata": {"annotations": {keys.POD_GROUP_NAME: first.name},
                                                   "labels": {keys.SUBGROUP_LABEL: "headgroup"}}}
    top = yaml.safe_load(first.podgroup["metadata"]["annotations"][keys.TOP_OWNER_METADATA])
    assert top == {"name": "raycluster-sample", "uid": cluster["metadata"]["uid"], "group": "ray.io",
                   "version": "v1", "kind": "RayCluster"}


def test_ray_cluster_gpu_sharing() -> None:
    cluster = load_kind("ray-cluster.kai-gpu-sharing.yaml", "RayCluster")
    _head, workers = ray_pods(cluster)
    result = ok(World(cluster).group(workers[0], [cluster]))
    assert result.name == f"pg-raycluster-half-gpu-{cluster['metadata']['uid']}"
    assert result.spec["minMember"] == 3
    assert result.spec["subGroups"] == [{"name": "headgroup", "minMember": 1},
                                        {"name": "shared-gpu", "minMember": 2}]
    assert result.subgroup == "shared-gpu"
    assert result.spec["queue"] == "team-a"


def test_ray_job_groups_through_its_cluster() -> None:
    job = load_kind("ray-job.kai-scheduler.yaml", "RayJob")
    cluster = child("ray.io/v1", "RayCluster", f"{job['metadata']['name']}-raycluster-q8z", job,
                    spec=job["spec"]["rayClusterSpec"])
    job["status"] = {"rayClusterName": cluster["metadata"]["name"], "jobDeploymentStatus": "Running"}
    _head, workers = ray_pods(cluster)
    world = World(job, cluster)
    result = ok(world.group(workers[0], [cluster, job]))
    assert result.name == f"pg-{job['metadata']['name']}-{job['metadata']['uid']}"
    assert result.podgroup["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert result.spec["minMember"] == 2
    assert result.spec["subGroups"] == [{"name": "headgroup", "minMember": 1},
                                        {"name": "small-group", "minMember": 1}]
    assert result.subgroup == "small-group"
    assert result.spec["queue"] == "team-a"  # the RayJob's label
    assert any(ref.kind == "RayCluster" for ref in world.asked)


def test_ray_job_without_cluster_yet() -> None:
    job = load_kind("ray-job.kai-scheduler.yaml", "RayJob")
    cluster = child("ray.io/v1", "RayCluster", "c", job, spec=job["spec"]["rayClusterSpec"])
    head, _ = ray_pods(cluster)
    result = World(job).group(head, [cluster, job])
    assert result == GroupingError(
        f"failed to extract rayClusterName for default/{job['metadata']['name']} of kind RayJob. Please make "
        "sure that the ray-operator is up and a rayCluster child-object has been created")


Obj = dict[str, Any]


def deployment_pods(relative: str, count: int = 2) -> tuple[Obj, Obj, list[Obj]]:
    deployment = load_kind(relative, "Deployment", namespace="ai-workloads")
    rs = child("apps/v1", "ReplicaSet", f"{deployment['metadata']['name']}-6d4cf56db6", deployment,
               labels={**deployment["spec"]["template"]["metadata"]["labels"],
                       "pod-template-hash": "6d4cf56db6"})
    pods = [pod_from_template(f"{rs['metadata']['name']}-p{i}", rs, deployment["spec"]["template"],
                              {"pod-template-hash": "6d4cf56db6"}) for i in range(count)]
    return deployment, rs, pods


def test_vllm_deployments_one_podgroup_per_deployment() -> None:
    # KAI v0.18: a new Deployment's replicas share one PodGroup, owned by the Deployment, minMember 1.
    for relative in ("vllm-test-02.yaml", "vllm-test-07.yaml"):
        deployment, rs, pods = deployment_pods(relative)
        world = World()
        results = [ok(world.group(pod, [rs, deployment])) for pod in pods]
        meta = deployment["metadata"]
        for result in results:
            assert result.name == f"pg-{meta['name']}-{meta['uid']}"
            assert result.podgroup["metadata"]["ownerReferences"] == [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"], "uid": meta["uid"]}]
            assert result.spec["minMember"] == 1
            assert result.spec["priorityClassName"] == "inference"
            assert result.spec["queue"] == "test"  # from the pod: the Deployment itself has no queue label
            assert result.podgroup["metadata"]["labels"] == deployment["metadata"]["labels"]
            assert result.namespace == "ai-workloads"


def test_batch_job_one_podgroup_per_job() -> None:
    job = load_kind("batch/batch-job.yaml", "Job")
    uid = job["metadata"]["uid"]
    pods = [pod_from_template(f"batch-job-{s}", job, job["spec"]["template"],
                              {"batch.kubernetes.io/job-name": "batch-job", "controller-uid": uid})
            for s in ("abcde", "fghij")]
    results = [ok(World().group(pod, [job])) for pod in pods]
    assert {r.name for r in results} == {f"pg-batch-job-{uid}"}
    for result in results:
        assert result.spec["minMember"] == 1  # no batch-min-member: the pods are scheduled independently
        assert result.spec["queue"] == "default-queue"
        assert result.spec["priorityClassName"] == "train"
        assert result.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Job"


def kubeflow_pods(job: dict[str, Any], spec_field: str) -> list[dict[str, Any]]:
    """Pods as the training operator creates them: replica-type lower-cased, an index per type."""
    pods = []
    for replica_type, spec in job["spec"][spec_field].items():
        for index in range(spec["replicas"]):
            labels = {keys.KUBEFLOW_JOB_NAME: job["metadata"]["name"],
                      keys.KUBEFLOW_REPLICA_TYPE: replica_type.lower(),
                      keys.KUBEFLOW_REPLICA_INDEX: str(index),
                      "training.kubeflow.org/operator-name": "pytorchjob-controller"}
            if replica_type == "Master":
                labels[keys.KUBEFLOW_JOB_ROLE] = "master"
            name = f"{job['metadata']['name']}-{replica_type.lower()}-{index}"
            pods.append(pod_from_template(name, job, spec["template"], labels))
    return pods


def test_pytorch_job_gang_with_master_and_workers() -> None:
    job = load_kind("batch/pytorch-job.yaml", "PyTorchJob")
    pods = kubeflow_pods(job, "pytorchReplicaSpecs")
    results = [ok(World().group(pod, [job])) for pod in pods]
    assert len({r.name for r in results}) == 1
    spec = results[0].spec
    assert spec["minMember"] == 3
    assert spec["queue"] == "default-queue"
    assert spec["subGroups"] == [{"name": "master", "minMember": 1}, {"name": "worker", "minMember": 2}]
    assert [r.subgroup for r in results] == ["master", "worker", "worker"]


def test_pytorch_elastic_job() -> None:
    job = load_kind("batch/pytorch-elastic.yaml", "PyTorchJob")
    pods = kubeflow_pods(job, "pytorchReplicaSpecs")
    results = [ok(World().group(pod, [job])) for pod in pods]
    assert results[0].spec["minMember"] == 1
    assert results[0].spec["subGroups"] == [{"name": "worker", "minMember": 1}]
    assert [r.subgroup for r in results] == ["worker", "worker"]


def test_quickstart_bare_pod() -> None:
    pod = stored(load_kind("quickstart/cpu-only-pod.yaml", "Pod"))
    result = ok(World().group(pod, []))
    assert result.name == f"pg-cpu-only-pod-{pod['metadata']['uid']}"
    assert result.spec == {"minMember": 1, "queue": "default-queue", "priorityClassName": "train",
                           "topologyConstraint": {}}
    assert result.podgroup["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Pod", "name": "cpu-only-pod", "uid": pod["metadata"]["uid"]}
    assert result.podgroup["metadata"]["annotations"][keys.TOP_OWNER_METADATA] == (
        f'name: cpu-only-pod\nuid: {pod["metadata"]["uid"]}\ngroup: ""\nversion: v1\nkind: Pod\n')


def test_priority_label_on_pod() -> None:
    pod = load_kind("priority/build-pod.yaml", "Pod")
    assert ok(World().group(pod, [])).spec["priorityClassName"] == "build"
