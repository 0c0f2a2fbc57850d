"""KAI v0.18 scheduler features on the real API server with the running components.

Each test places its workloads on a kwok node of its own (1 or 2 GPUs, selected by a label naming the test's
namespace), so that what is full and what frees is exactly what the test does:

- a background pod (`kai.scheduler/background: "true"`, a Deployment) yields its GPU to a queue's pod within one
  cycle, and its replacement comes back when the GPU frees;
- a semi-preemptible gang of minMember 2 with 4 pods loses only its 2 surplus pods to a reclaim;
- an in-place resize of a running pod shows in its Queue's `allocated` at once. kwok fakes the kubelet but writes
  no `containerStatuses[].resources` (without them the API server refuses a resize: "Pod running on node without
  support for resize") and never enacts a resize or sets `PodResizePending`, so the test writes what a kubelet
  would: the resources the container was given, then an Infeasible verdict.
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


@pytest.fixture
def own_node(cluster: Cluster, namespace: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A kwok node with `request.param` GPUs (default 1) only this test's pods select; removed afterwards."""
    gpus = getattr(request, "param", 1)
    name = f"v018-{namespace}"
    apply(cluster, namespace, [node_manifest(name, NodeShape(gpus=gpus), labels={NODE_LABEL: namespace})])
    poll(lambda: ready(cluster.get_json("node", name)), "the test node to be Ready", timeout=60)
    yield name
    cluster.kubectl("delete", "pods", "--all", "--grace-period=0", "--force", namespace=namespace, check=False)
    cluster.kubectl("delete", "node", name, "--wait=true", "--timeout=60s", check=False)


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
