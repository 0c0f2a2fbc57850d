"""KAI v0.18 scheduler features on the real API server with the running components.

Each test places its workloads on a kwok node of its own (1 or 2 GPUs, selected by a label naming the test's
namespace), so that what is full and what frees is exactly what the test does:

- a background pod (`kai.scheduler/background: "true"`, a Deployment) yields its GPU to a queue's pod within one
  cycle, and its replacement comes back when the GPU frees;
- a semi-preemptible gang of minMember 2 with 4 pods loses only its 2 surplus pods to a reclaim;
- an in-place resize of a running pod shows in its Queue's `allocated` at once. kwok fakes the kubelet but writes
  no `containerStatuses[].resources` (without them the API server refuses a resize: "Pod running on node without
  support for resize") and never enacts a resize or sets `PodResizePending`, so the test writes what a kubelet
  would: the resources the container was given, then an Infeasible verdict;
- `kai.scheduler/safe-to-consolidate: "false"` keeps a pod from being moved: the one consolidation move that would
  make room is not made, and the pending job is explained instead;
- a pod tolerating `node.kubernetes.io/unschedulable` lands on a cordoned node, and one that does not stays off it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from operators.devcluster.nodes import NodeShape, node_manifest
from tests.support import Cluster, apply, items, poll, queue

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
NODE_LABEL = "kai.test/v018"


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or ())


def make_nodes(cluster: Cluster, namespace: str, names: list[str], gpus: int,
               spec: dict[str, Any] | None = None) -> Iterator[list[str]]:
    docs = [node_manifest(name, NodeShape(gpus=gpus), labels={NODE_LABEL: namespace}) for name in names]
    for doc in docs:
        doc["spec"] = dict(spec or {})
    apply(cluster, namespace, docs)
    poll(lambda: all(ready(cluster.get_json("node", name)) for name in names), "the test nodes to be Ready",
         timeout=60)
    yield names
    cluster.kubectl("delete", "pods", "--all", "--grace-period=0", "--force", namespace=namespace, check=False)
    cluster.kubectl("delete", "nodes", *names, "--wait=true", "--timeout=60s", check=False)


@pytest.fixture
def own_node(cluster: Cluster, namespace: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A kwok node with `request.param` GPUs (default 1) only this test's pods select; removed afterwards."""
    for names in make_nodes(cluster, namespace, [f"v018-{namespace}"], getattr(request, "param", 1)):
        yield names[0]


@pytest.fixture
def two_nodes(cluster: Cluster, namespace: str) -> Iterator[list[str]]:
    """Two such nodes of 4 GPUs."""
    yield from make_nodes(cluster, namespace, [f"v018-{namespace}-0", f"v018-{namespace}-1"], 4)


@pytest.fixture
def cordoned_node(cluster: Cluster, namespace: str) -> Iterator[str]:
    """Such a node of 1 GPU, cordoned (spec.unschedulable)."""
    for names in make_nodes(cluster, namespace, [f"v018-{namespace}"], 1, {"unschedulable": True}):
        yield names[0]


def pod_spec(namespace: str, gpus: int) -> dict[str, Any]:
    return {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
            "nodeSelector": {NODE_LABEL: namespace},
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {GPU: str(gpus)}}}]}


def gpu_pod(name: str, namespace: str, queue_name: str, gpus: int = 1,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name, **(labels or {})}},
            "spec": pod_spec(namespace, gpus)}


def live(cluster: Cluster, namespace: str, *selector: str) -> list[dict[str, Any]]:
    return [p for p in items(cluster, "pods", namespace, *selector) if not p["metadata"].get("deletionTimestamp")]


def running_on(cluster: Cluster, namespace: str, node: str, *selector: str) -> list[dict[str, Any]] | None:
    pods = [p for p in live(cluster, namespace, *selector)
            if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running"]
    return pods or None


def events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in items(cluster, "events", namespace) if e.get("reason") == reason]


# --- background pods --------------------------------------------------------------------------------------------


def test_background_pod_yields_its_gpu_and_comes_back_when_it_frees(cluster: Cluster, namespace: str,
                                                                     own_node: str) -> None:
    maint, team = f"maint-{namespace}", f"team-{namespace}"
    apply(cluster, namespace, [queue(maint, gpu=(0, -1, 0)), queue(team, gpu=(1, -1, 1))])
    bg_labels = {"app": "bg", "kai.scheduler/background": "true", "kai.scheduler/queue": maint}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bg"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bg"}},
                           "template": {"metadata": {"labels": bg_labels},
                                        "spec": {**pod_spec(namespace, 1), "priorityClassName": "train"}}}}
    apply(cluster, namespace, [deployment])
    first = poll(lambda: running_on(cluster, namespace, own_node, "-l", "app=bg"), "the background pod to run",
                 timeout=90)[0]["metadata"]["name"]

    apply(cluster, namespace, [gpu_pod("work", namespace, team)])
    poll(lambda: running_on(cluster, namespace, own_node, "-l", "app!=bg"), "the queue's pod to take the GPU",
         timeout=60)
    evicts = [e for e in events(cluster, namespace, "Evict") if e["involvedObject"].get("name") == first]
    assert evicts and evicts[0]["message"] == "Evicted to make room for a workload on this node", evicts
    # Evicted once, by the background pods plugin at the first cycle's close (not by reclaim).
    pg_evicts = [e for e in events(cluster, namespace, "Evict") if e["involvedObject"]["kind"] == "PodGroup"]
    assert pg_evicts and {e["metadata"]["annotations"].get("evictor-action-type") for e in pg_evicts} \
        == {"backgroundpods"}, pg_evicts
    replacement = live(cluster, namespace, "-l", "app=bg")
    assert [p["metadata"]["name"] for p in replacement] != [first] and not any(
        p["spec"].get("nodeName") for p in replacement), replacement

    cluster.kubectl("delete", "pod", "work", "--grace-period=0", "--force", namespace=namespace)
    back = poll(lambda: running_on(cluster, namespace, own_node, "-l", "app=bg"),
                "the background replacement to come back on the freed GPU", timeout=60)
    assert back[0]["metadata"]["name"] != first


# --- semi-preemptible -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("own_node", [4], indirect=True)
def test_semi_preemptible_gang_loses_only_its_surplus_to_reclaim(cluster: Cluster, namespace: str,
                                                                 own_node: str) -> None:
    # qa's fair share is its quota (over-quota weight 0), so its pods above 2 GPUs are reclaimable; the gang is
    # `inference` (non-preemptible were it not semi-preemptible), created by hand and joined by its pods.
    qa, qb = f"qa-{namespace}", f"qb-{namespace}"
    apply(cluster, namespace, [queue(qa, gpu=(2, -1, 0)), queue(qb, gpu=(2, -1, 1))])
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "semi"},
             "spec": {"minMember": 2, "queue": qa, "priorityClassName": "inference",
                      "preemptibility": "semi-preemptible"}}
    members = [{"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"semi-{i}", "labels": {"kai.scheduler/queue": qa, "app": "semi"},
                             "annotations": {"pod-group-name": "semi", "kai.scheduler/skip-podgrouper": "true"}},
                "spec": pod_spec(namespace, 1)} for i in range(4)]
    apply(cluster, namespace, [group, *members])
    poll(lambda: (pods := running_on(cluster, namespace, own_node, "-l", "app=semi")) and len(pods) == 4,
         "the semi-preemptible gang's 4 pods to run", timeout=90)

    apply(cluster, namespace, [gpu_pod(f"claim-{i}", namespace, qb, labels={"app": "claim"}) for i in range(2)])
    poll(lambda: (pods := running_on(cluster, namespace, own_node, "-l", "app=claim")) and len(pods) == 2,
         "qb's 2 pods to run on the reclaimed GPUs", timeout=90)
    left = live(cluster, namespace, "-l", "app=semi")
    assert len(left) == 2 and all(p["status"].get("phase") == "Running" for p in left), left
    evicted = sorted(e["involvedObject"]["name"] for e in events(cluster, namespace, "Evict")
                     if e["involvedObject"]["kind"] == "Pod")
    assert len(evicted) == 2 and set(evicted).isdisjoint(p["metadata"]["name"] for p in left), evicted


# --- in-place resize --------------------------------------------------------------------------------------------


def queue_cpu(cluster: Cluster, name: str) -> str | None:
    status = cluster.get_json("queues.scheduling.run.ai", name).get("status") or {}
    return (status.get("allocated") or {}).get("cpu")


def kubelet_status(cluster: Cluster, namespace: str, pod: str, cpu: str, resize: str = "") -> None:
    """Write what a kubelet would: the container's given resources, and a PodResizePending verdict."""
    current = cluster.get_json("pod", pod, namespace=namespace)
    statuses = current["status"]["containerStatuses"]
    given = {"cpu": cpu, "memory": "64Mi"}
    statuses[0]["resources"] = {"requests": given, "limits": given}
    status: dict[str, Any] = {"containerStatuses": statuses}
    if resize:
        status["conditions"] = [*current["status"]["conditions"],
                                {"type": "PodResizePending", "status": "True", "reason": resize,
                                 "message": "Node didn't have enough capacity"}]
    cluster.kubectl("patch", "pod", pod, "--subresource", "status", "--type", "merge", "-p",
                    json.dumps({"status": status}), namespace=namespace)


def test_in_place_resize_shows_in_the_queue_allocation(cluster: Cluster, namespace: str, own_node: str) -> None:
    name = f"rz-{namespace}"
    apply(cluster, namespace, [queue(name)])
    given = {"cpu": "1", "memory": "64Mi"}
    resizable = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"kai.scheduler/queue": name}},
                 "spec": {**pod_spec(namespace, 0), "containers": [
                     {"name": "main", "image": "busybox", "resources": {"requests": given, "limits": given}}]}}
    apply(cluster, namespace, [resizable])
    poll(lambda: running_on(cluster, namespace, own_node), "the pod to run", timeout=60)
    poll(lambda: queue_cpu(cluster, name) == "1", "the queue to hold 1 CPU", timeout=60)
    kubelet_status(cluster, namespace, "p", "1")

    grown = {"cpu": "2", "memory": "64Mi"}
    cluster.kubectl("patch", "pod", "p", "--subresource", "resize", "-p", json.dumps(
        {"spec": {"containers": [{"name": "main", "resources": {"requests": grown, "limits": grown}}]}}),
        namespace=namespace)
    # Asked, not yet given: the pod counts at the larger of the two.
    poll(lambda: queue_cpu(cluster, name) == "2", "the queue to hold the resized 2 CPUs", timeout=30)
    # The kubelet says the resize can never happen: the pod counts at what it holds.
    kubelet_status(cluster, namespace, "p", "1", resize="Infeasible")
    poll(lambda: queue_cpu(cluster, name) == "1", "the queue back at the 1 CPU the pod holds", timeout=30)


# --- safe-to-consolidate ----------------------------------------------------------------------------------------


def unschedulable_explained(cluster: Cluster, namespace: str, pod: str) -> str | None:
    conditions = (cluster.get_json("pod", pod, namespace=namespace).get("status") or {}).get("conditions") or []
    return next((c.get("message") for c in conditions
                 if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"), None)


def test_safe_to_consolidate_false_keeps_a_pod_from_being_moved(cluster: Cluster, namespace: str,
                                                               two_nodes: list[str]) -> None:
    # `fixed` (2 GPUs, inference: never moved) on node 1, `pinned` (2 GPUs, train) on node 0 (a blocker on node 1
    # keeps it there, then goes): a 3-GPU job fits only if `pinned` moves to node 1, which consolidation would do
    # without the annotation.
    name = f"q-{namespace}"
    apply(cluster, namespace, [queue(name)])

    def placed(pod: str, gpus: int, priority: str, node: str = "",
               annotations: dict[str, str] | None = None) -> dict[str, Any]:
        doc = gpu_pod(pod, namespace, name, gpus)
        doc["metadata"]["annotations"] = annotations or {}
        doc["spec"] = {**doc["spec"], "priorityClassName": priority}
        if node:
            doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        return doc

    apply(cluster, namespace, [placed("fixed", 2, "inference", two_nodes[1]),
                               placed("blocker", 2, "inference", two_nodes[1])])
    poll(lambda: (pods := running_on(cluster, namespace, two_nodes[1])) and len(pods) == 2,
         "node 1 to be full", timeout=60)
    apply(cluster, namespace, [placed("pinned", 2, "train",
                                      annotations={"kai.scheduler/safe-to-consolidate": "false"})])
    poll(lambda: running_on(cluster, namespace, two_nodes[0]), "the pinned pod to run on node 0", timeout=60)
    cluster.kubectl("delete", "pod", "blocker", "--grace-period=0", "--force", "--wait=true", namespace=namespace)
    pinned_group = next(g for g in items(cluster, "podgroups", namespace)
                        if g["metadata"]["name"].startswith("pg-pinned"))
    assert pinned_group["spec"]["safeToConsolidate"] is False

    apply(cluster, namespace, [{**gpu_pod("big", namespace, name, 3),
                                "spec": {**pod_spec(namespace, 3), "priorityClassName": "train"}}])
    message = poll(lambda: unschedulable_explained(cluster, namespace, "big"),
                   "the 3-GPU pod to be explained as unschedulable", timeout=60)
    assert "GPU" in message, message
    pinned = cluster.get_json("pod", "pinned", namespace=namespace)
    assert pinned["status"].get("phase") == "Running" and not pinned["metadata"].get("deletionTimestamp")
    assert not events(cluster, namespace, "Evict")


# --- cordoned nodes ---------------------------------------------------------------------------------------------


def test_a_pod_tolerating_the_cordon_lands_on_a_cordoned_node(cluster: Cluster, namespace: str,
                                                              cordoned_node: str) -> None:
    name = f"q-{namespace}"
    apply(cluster, namespace, [queue(name)])
    tolerating = gpu_pod("tolerating", namespace, name)
    tolerating["spec"] = {**tolerating["spec"], "tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}
    apply(cluster, namespace, [gpu_pod("plain", namespace, name)])
    message = poll(lambda: unschedulable_explained(cluster, namespace, "plain"),
                   "the plain pod to be explained as unschedulable", timeout=60)
    assert "node(s) were unschedulable" in message, message
    apply(cluster, namespace, [tolerating])
    poll(lambda: running_on(cluster, namespace, cordoned_node, "-l", f"kai.scheduler/queue={name}"),
         "the tolerating pod to run on the cordoned node", timeout=60)
    assert [p["metadata"]["name"] for p in running_on(cluster, namespace, cordoned_node) or []] == ["tolerating"]
    assert not cluster.get_json("pod", "plain", namespace=namespace)["spec"].get("nodeName")
