"""The pod-grouper against the real API server: the repository's examples become the documented PodGroups.

Workloads are created the way users create them (kubectl apply of the example files) and their pods come from the
real owners' controllers: KubeRay for RayClusters, kube-controller-manager for Deployments and Jobs. Kubeflow's
training operator is not part of the dev cluster, so the PyTorchJob tests install a minimal PyTorchJob CRD and create
the pods exactly as that operator would (ownerReference to the job, replica-type/index labels).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import yaml

from tests.conftest import EXAMPLES, Cluster, labelled, load_yaml
from tests.support import poll

pytestmark = pytest.mark.cluster

T = TypeVar("T")
PG_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
QUEUE_LABEL = "kai.scheduler/queue"


# --- helpers ---------------------------------------------------------------------------------------------------

wait_for = poll


def apply(cluster: Cluster, docs: list[dict[str, Any]], namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace)


def items(cluster: Cluster, kind: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    return list(cluster.get_json(kind, *args, namespace=namespace)["items"])


def podgroups(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return items(cluster, "podgroups.scheduling.run.ai", namespace)


def n_podgroups(cluster: Cluster, namespace: str, count: int) -> Callable[[], list[dict[str, Any]] | None]:
    def check() -> list[dict[str, Any]] | None:
        found = podgroups(cluster, namespace)
        return found if len(found) == count else None
    return check


def pods(cluster: Cluster, namespace: str, *args: str) -> list[dict[str, Any]]:
    return [p for p in items(cluster, "pods", namespace, *args) if not p["metadata"].get("deletionTimestamp")]


def annotation(obj: dict[str, Any], key: str) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(key)


def label(obj: dict[str, Any], key: str) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(key)


def subgroups(pg: dict[str, Any]) -> dict[str, int]:
    return {s["name"]: s["minMember"] for s in pg["spec"].get("subGroups") or []}


def grouped_pods(cluster: Cluster, namespace: str, count: int, *args: str,
                 subgrouped: bool = False) -> Callable[[], list[dict[str, Any]] | None]:
    """A predicate: exactly `count` live pods, all pointing at a PodGroup (and labelled with a subgroup)."""
    def check() -> list[dict[str, Any]] | None:
        found = pods(cluster, namespace, *args)
        if len(found) != count:
            return None
        if not all(annotation(p, PG_ANNOTATION) for p in found):
            return None
        if subgrouped and not all(label(p, SUBGROUP_LABEL) for p in found):
            return None
        return found
    return check


def podgroup_named(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(cluster.get_json("podgroups.scheduling.run.ai", name, namespace=namespace))


def owner_of(obj: dict[str, Any]) -> dict[str, Any]:
    refs = obj["metadata"].get("ownerReferences") or []
    assert len(refs) == 1, f"{obj['metadata']['name']} should have one owner, has {refs}"
    return dict(refs[0])


def warnings_for(cluster: Cluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    return items(cluster, "events", namespace,
                 f"--field-selector=reason=PodGrouperWarning,involvedObject.name={pod}")


def without_namespace(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["metadata"].pop("namespace", None)
    return doc


# --- Ray -------------------------------------------------------------------------------------------------------

def test_raycluster_sample_is_one_gang_with_subgroups(cluster: Cluster, namespace: str) -> None:
    apply(cluster, load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml"), namespace)
    found = wait_for(grouped_pods(cluster, namespace, 3, subgrouped=True),
                     "the RayCluster's 3 pods to be grouped and subgrouped")

    groups = podgroups(cluster, namespace)
    assert len(groups) == 1, [g["metadata"]["name"] for g in groups]
    pg = groups[0]
    rc = cluster.get_json("rayclusters.ray.io", "raycluster-sample", namespace=namespace)
    assert pg["metadata"]["name"] == f"pg-raycluster-sample-{rc['metadata']['uid']}"
    assert owner_of(pg)["kind"] == "RayCluster" and owner_of(pg)["uid"] == rc["metadata"]["uid"]
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["queue"] == "team-a"
    assert pg["spec"]["priorityClassName"] == "train"
    assert subgroups(pg) == {"headgroup": 1, "worker": 2}
    for pod in found:
        assert annotation(pod, PG_ANNOTATION) == pg["metadata"]["name"]
        expected = "headgroup" if label(pod, "ray.io/node-type") == "head" else "worker"
        assert label(pod, SUBGROUP_LABEL) == expected, pod["metadata"]["name"]


def test_raycluster_gpu_sharing_subgroups(cluster: Cluster, namespace: str) -> None:
    apply(cluster, load_yaml(EXAMPLES / "ray-cluster.kai-gpu-sharing.yaml"), namespace)
    found = wait_for(grouped_pods(cluster, namespace, 3, subgrouped=True),
                     "the GPU-sharing RayCluster's 3 pods to be grouped")
    groups = podgroups(cluster, namespace)
    assert len(groups) == 1
    pg = groups[0]
    assert pg["metadata"]["name"].startswith("pg-raycluster-half-gpu-")
    assert pg["spec"]["minMember"] == 3 and pg["spec"]["queue"] == "team-a"
    assert subgroups(pg) == {"headgroup": 1, "shared-gpu": 2}
    workers = [p for p in found if label(p, "ray.io/group") == "shared-gpu"]
    assert len(workers) == 2
    for pod in workers:
        assert label(pod, SUBGROUP_LABEL) == "shared-gpu"
        # admission accepted the fraction (GPU sharing is on in the dev cluster) and kept the annotation
        assert annotation(pod, "gpu-fraction") == "0.5"


def test_rayjob_is_grouped_through_its_raycluster(cluster: Cluster, namespace: str) -> None:
    queues = [d for d in load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml") if d["kind"] == "Queue"]
    apply(cluster, queues, namespace)
    job = load_yaml(EXAMPLES / "ray-job.kai-scheduler.yaml")[0]  # SidecarMode: KubeRay creates its RayCluster
    created = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=yaml.safe_dump(job),
                                         namespace=namespace).stdout)
    job_name, job_uid = created["metadata"]["name"], created["metadata"]["uid"]

    found = wait_for(grouped_pods(cluster, namespace, 2, subgrouped=True),
                     "the RayJob's cluster pods (head + 1 worker) to be grouped")
    groups = podgroups(cluster, namespace)
    assert len(groups) == 1
    pg = groups[0]
    assert pg["metadata"]["name"] == f"pg-{job_name}-{job_uid}"
    assert owner_of(pg)["kind"] == "RayJob" and owner_of(pg)["uid"] == job_uid
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["queue"] == "team-a"
    assert subgroups(pg) == {"headgroup": 1, "small-group": 1}
    assert sorted(label(p, SUBGROUP_LABEL) or "" for p in found) == ["headgroup", "small-group"]


def test_rayjob_kuberay_refuses_gets_an_event(cluster: Cluster, namespace: str) -> None:
    """KubeRay refuses K8sJobMode under kai-scheduler and says so only in its log: the pod-grouper explains it."""
    job = load_yaml(EXAMPLES / "ray-job.kai-scheduler.yaml")[0]
    del job["spec"]["submissionMode"]  # K8sJobMode, KubeRay's default
    created = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=yaml.safe_dump(job),
                                         namespace=namespace).stdout)
    name = created["metadata"]["name"]

    def event() -> dict[str, Any] | None:
        found = items(cluster, "events", namespace, "--field-selector",
                      f"involvedObject.kind=RayJob,involvedObject.name={name}")
        return next((e for e in found if e["reason"] == "RayJobSubmissionModeUnsupported"), None)
    found = wait_for(event, "the pod-grouper's event on the refused RayJob", timeout=90)
    assert found["type"] == "Warning" and found["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert "KAI-Scheduler does not support RayJob with K8sJobMode" in found["message"]
    assert "spec.submissionMode: SidecarMode" in found["message"]
    status = cluster.get_json("rayjobs.ray.io", name, namespace=namespace).get("status") or {}
    assert status.get("jobDeploymentStatus") == "Initializing"  # KubeRay's refusal leaves it there
    assert cluster.kubectl("get", "rayclusters.ray.io", status["rayClusterName"], namespace=namespace,
                           check=False).returncode != 0


# --- apps / batch ----------------------------------------------------------------------------------------------

def test_vllm_deployments_get_one_podgroup_each(cluster: Cluster, namespace: str) -> None:
    # KAI v0.18: a new Deployment's replicas share one PodGroup, owned by the Deployment.
    apply(cluster, load_yaml(EXAMPLES / "queues-default-test.yaml"), namespace)
    deployments = [without_namespace(load_yaml(EXAMPLES / f"vllm-test-{n}.yaml")[0]) for n in ("07", "02")]
    deployments[1]["spec"]["replicas"] = 2  # two pods of one Deployment: one PodGroup
    apply(cluster, deployments, namespace)
    found = wait_for(grouped_pods(cluster, namespace, 3), "the 3 vLLM pods to be grouped")

    by_name = {g["metadata"]["name"]: g for g in wait_for(n_podgroups(cluster, namespace, 2), "2 PodGroups")}
    owners = {d["metadata"]["name"]: cluster.get_json("deployments.apps", d["metadata"]["name"], namespace=namespace)
              for d in deployments}
    for pod in found:
        deployment = owners[next(n for n in owners if pod["metadata"]["name"].startswith(f"{n}-"))]
        name, uid = deployment["metadata"]["name"], deployment["metadata"]["uid"]
        assert annotation(pod, PG_ANNOTATION) == f"pg-{name}-{uid}"
        pg = by_name[f"pg-{name}-{uid}"]
        assert owner_of(pg) == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid}
        assert pg["spec"]["minMember"] == 1
        assert pg["spec"]["priorityClassName"] == "inference"
        assert pg["spec"]["queue"] == "test"
        assert not pg["spec"].get("subGroups")


def test_batch_job_gets_one_podgroup(cluster: Cluster, namespace: str) -> None:
    # KAI v0.15+: one PodGroup per Job, minMember 1 (no batch-min-member): its pods are scheduled independently.
    apply(cluster, load_yaml(EXAMPLES / "batch" / "batch-job.yaml"), namespace)
    found = wait_for(grouped_pods(cluster, namespace, 2), "the Job's 2 pods to be grouped")
    job = cluster.get_json("jobs.batch", "batch-job", namespace=namespace)
    [pg] = wait_for(n_podgroups(cluster, namespace, 1), "1 PodGroup")
    assert pg["metadata"]["name"] == f"pg-batch-job-{job['metadata']['uid']}"
    assert {annotation(p, PG_ANNOTATION) for p in found} == {pg["metadata"]["name"]}
    assert pg["spec"]["minMember"] == 1
    assert pg["spec"]["queue"] == "default-queue"
    assert pg["spec"]["priorityClassName"] == "train"
    assert owner_of(pg)["kind"] == "Job" and owner_of(pg)["uid"] == job["metadata"]["uid"]


# --- Kubeflow PyTorchJob -----------------------------------------------------------------------------------------

PYTORCH_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {"group": "kubeflow.org", "scope": "Namespaced",
             "names": {"kind": "PyTorchJob", "plural": "pytorchjobs", "singular": "pytorchjob",
                       "listKind": "PyTorchJobList"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture
def pytorch_crd(cluster: Cluster) -> Iterator[None]:
    """A minimal PyTorchJob CRD (the training operator's schema is not needed to group); removed afterwards."""
    created = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(PYTORCH_CRD), check=False)
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    cluster.kubectl("wait", "--for=condition=Established", "crd/pytorchjobs.kubeflow.org", "--timeout=60s")
    yield
    cluster.kubectl("delete", "crd", "pytorchjobs.kubeflow.org", "--wait=false", check=False)


def create_pytorch_pods(cluster: Cluster, namespace: str, job: dict[str, Any]) -> None:
    """The pods the Kubeflow training operator creates: `<job>-<type>-<index>`, owned by the job."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    docs = []
    for replica_type, spec in job["spec"]["pytorchReplicaSpecs"].items():
        rtype = replica_type.lower()
        for index in range(spec["replicas"]):
            template = copy.deepcopy(spec["template"])
            labels = {**(template.get("metadata") or {}).get("labels", {}),
                      "training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/operator-name": "pytorchjob-controller",
                      "training.kubeflow.org/replica-type": rtype,
                      "training.kubeflow.org/replica-index": str(index)}
            if rtype == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            docs.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"{name}-{rtype}-{index}", "labels": labels,
                                      "annotations": (template.get("metadata") or {}).get("annotations", {}),
                                      "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                           "name": name, "uid": uid, "controller": True,
                                                           "blockOwnerDeletion": True}]},
                         "spec": {**template["spec"], "restartPolicy": spec.get("restartPolicy", "OnFailure")}})
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(docs), namespace=namespace)


@pytest.mark.parametrize(("example", "min_member", "expected_subgroups", "pod_subgroups"), [
    ("pytorch-job.yaml", 3, {"master": 1, "worker": 2},
     {"master-0": "master", "worker-0": "worker", "worker-1": "worker"}),
    ("pytorch-elastic.yaml", 1, {"worker": 1}, {"worker-0": "worker", "worker-1": "worker"}),
])
def test_pytorchjob_gang_and_subgroups(cluster: Cluster, namespace: str, pytorch_crd: None, example: str,
                                       min_member: int, expected_subgroups: dict[str, int],
                                       pod_subgroups: dict[str, str]) -> None:
    doc = load_yaml(EXAMPLES / "batch" / example)[0]
    job = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=yaml.safe_dump(doc),
                                     namespace=namespace).stdout)
    create_pytorch_pods(cluster, namespace, job)
    found = wait_for(grouped_pods(cluster, namespace, len(pod_subgroups), subgrouped=True),
                     f"the {example} pods to be grouped and subgrouped")
    groups = podgroups(cluster, namespace)
    assert len(groups) == 1
    pg = groups[0]
    job_name, job_uid = job["metadata"]["name"], job["metadata"]["uid"]
    assert pg["metadata"]["name"] == f"pg-{job_name}-{job_uid}"
    assert owner_of(pg)["kind"] == "PyTorchJob" and owner_of(pg)["uid"] == job_uid
    assert pg["spec"]["minMember"] == min_member
    assert pg["spec"]["queue"] == "default-queue"
    assert pg["spec"]["priorityClassName"] == "train"
    assert subgroups(pg) == expected_subgroups
    assert {p["metadata"]["name"].removeprefix(f"{job_name}-"): label(p, SUBGROUP_LABEL) for p in found} \
        == pod_subgroups


# --- defaults and problems ---------------------------------------------------------------------------------------

def bare_pod(name: str, labels: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, **metadata},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "ubuntu",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}


def test_pod_without_queue_label_goes_to_default_queue(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(bare_pod("no-queue")), namespace=namespace)
    pod = wait_for(grouped_pods(cluster, namespace, 1), "the queue-less pod to be grouped")[0]
    pg = podgroup_named(cluster, namespace, annotation(pod, PG_ANNOTATION) or "")
    assert pg["metadata"]["name"] == f"pg-no-queue-{pod['metadata']['uid']}"
    assert pg["spec"]["queue"] == "default-queue"
    assert pg["spec"]["minMember"] == 1 and pg["spec"]["priorityClassName"] == "train"
    shown = cluster.kubectl("get", "pg", pg["metadata"]["name"], "-o", "jsonpath={.spec.queue}",
                            namespace=namespace).stdout
    assert shown == "default-queue"


def test_raycluster_min_replicas_above_replicas_is_a_warning_and_retried(cluster: Cluster,
                                                                         namespace: str) -> None:
    docs = load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml")
    rc = next(d for d in docs if d["kind"] == "RayCluster")
    rc["metadata"]["name"] = "bad-replicas"
    rc["spec"]["workerGroupSpecs"][0].update({"replicas": 1, "minReplicas": 2, "maxReplicas": 3})
    apply(cluster, docs, namespace)

    head = wait_for(lambda: pods(cluster, namespace, "-l", "ray.io/node-type=head"), "the head pod")[0]
    head_name = head["metadata"]["name"]
    message = ("ray-cluster replicas for a workerGroupsSpec can't be less than minReplicas. "
               "Given 1 replicas and 2 minReplicas. Please fix the replicas field for group number 0")
    events = wait_for(lambda: warnings_for(cluster, namespace, head_name), "a PodGrouperWarning on the head")
    assert events[0]["type"] == "Warning"
    assert events[0]["message"] == message
    assert events[0]["involvedObject"]["kind"] == "Pod"
    assert not podgroups(cluster, namespace)
    assert not annotation(pods(cluster, namespace, "-l", "ray.io/node-type=head")[0], PG_ANNOTATION)

    # Fixing the owner is enough: the failed pods are retried (no pod event is needed).
    cluster.kubectl("patch", "rayclusters.ray.io", "bad-replicas", "--type=json", "-p",
                    json.dumps([{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2}]),
                    namespace=namespace)

    def head_grouped() -> dict[str, Any] | None:
        found = pods(cluster, namespace, "-l", "ray.io/node-type=head")
        return found[0] if found and annotation(found[0], PG_ANNOTATION) else None
    head = wait_for(head_grouped, "the head pod to be grouped after the fix", timeout=120)
    pg = podgroup_named(cluster, namespace, annotation(head, PG_ANNOTATION) or "")
    assert pg["spec"]["minMember"] == 3 and subgroups(pg) == {"headgroup": 1, "worker": 2}


def test_owner_with_two_owners_is_a_warning_and_retried(cluster: Cluster, namespace: str) -> None:
    def configmap(name: str, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if owners:
            meta["ownerReferences"] = owners
        made = cluster.kubectl("create", "-f", "-", "-o", "json", namespace=namespace,
                               input=yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))
        return dict(json.loads(made.stdout))

    def ref(obj: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj["metadata"]["name"],
                "uid": obj["metadata"]["uid"]}

    first, second = configmap("owner-a"), configmap("owner-b")
    shared = configmap("shared", [ref(first), ref(second)])
    pod = bare_pod("two-owners", {QUEUE_LABEL: "default-queue"}, ownerReferences=[ref(shared)])
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(pod), namespace=namespace)

    events = wait_for(lambda: warnings_for(cluster, namespace, "two-owners"), "a PodGrouperWarning on the pod")
    message = events[0]["message"]
    assert events[0]["type"] == "Warning"
    assert message.startswith(f"found ConfigMap <shared in namespace {namespace}> with multiple owners: [")
    assert first["metadata"]["uid"] in message and second["metadata"]["uid"] in message
    assert not podgroups(cluster, namespace)

    # Retried: once the owner has a single owner, the pod is grouped under the new top owner.
    cluster.kubectl("patch", "configmap", "shared", "--type=merge", "-p",
                    json.dumps({"metadata": {"ownerReferences": [ref(first)]}}), namespace=namespace)
    grouped = wait_for(grouped_pods(cluster, namespace, 1), "the pod to be grouped after the fix", timeout=120)
    assert annotation(grouped[0], PG_ANNOTATION) == f"pg-owner-a-{first['metadata']['uid']}"

