"""Disruptive actions on the local control plane where queue limits, moves and victim sets matter.

Limits are checked on a scenario's state once its victims left (a victim under the limited queue makes room),
victims of elastic jobs are their surplus pods first, reclaim respects min-runtime and converges to the
over-quota weights, and consolidation moves pods (whole GPUs between nodes, fractions between GPUs of a node).
Every test runs on its own kwok nodes (labelled for the namespace fixture's cleanup) that its pods select.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.test_disruption import apply, events, isolated_nodes, pods, running, wait_for
from tests.support import Cluster

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
LAST_START = "kai.scheduler/last-start-timestamp"


def queue(name: str, parent: str = "", *, gpu: tuple[float, float, float] = (-1, -1, 1),
          cpu: tuple[float, float, float] = (-1, -1, 1), priority: int | None = None,
          reclaim_min_runtime: str | None = None) -> dict[str, Any]:
    """Resource tuples are (quota, limit, overQuotaWeight); CPU in millicores."""
    def res(t: tuple[float, float, float]) -> dict[str, float]:
        return {"quota": t[0], "limit": t[1], "overQuotaWeight": t[2]}
    spec: dict[str, Any] = {"resources": {"gpu": res(gpu), "cpu": res(cpu), "memory": res((-1, -1, 1))}}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    if reclaim_min_runtime is not None:
        spec["reclaimMinRuntime"] = reclaim_min_runtime
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def spec(selector: dict[str, str], *, gpus: int = 0, cpu: str = "10m", node: str = "") -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "16Mi"}}
    if gpus:
        res["limits"] = {GPU: str(gpus)}
    out: dict[str, Any] = {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                           "containers": [{"name": "main", "image": "busybox", "resources": res}],
                           "nodeSelector": {**selector, **({"kubernetes.io/hostname": node} if node else {})}}
    return out


def gang_pods(name: str, queue_name: str, members: int, min_member: int, priority_class: str,
              pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """An explicit PodGroup (elastic when members > minMember) and its bare pods."""
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
             "spec": {"minMember": min_member, "queue": queue_name, "priorityClassName": priority_class}}
    return [group, *[{"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"{name}-{i}", "annotations": {"pod-group-name": name},
                                   "labels": {"kai.scheduler/queue": queue_name, "group": name}},
                      "spec": pod_spec} for i in range(members)]]


def deployment(name: str, queue_name: str, replicas: int, priority_class: str, pod_spec: dict[str, Any]
               ) -> dict[str, Any]:
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": priority_class}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}


def job(name: str, queue_name: str, pod_spec: dict[str, Any], annotations: dict[str, str] | None = None
        ) -> dict[str, Any]:
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": "train"}
    template = {"metadata": {"labels": labels, "annotations": annotations or {}},
                "spec": {**pod_spec, "restartPolicy": "Never"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"backoffLimit": 10, "template": template}}


def pod_evictions(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return [e for e in events(cluster, namespace, "Evict") if e["involvedObject"]["kind"] == "Pod"]


def all_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """Pods including those being deleted (Releasing)."""
    items: list[dict[str, Any]] = cluster.get_json("pods", namespace=namespace)["items"]
    return items


# --- limits counted after the victims leave -----------------------------------------------------------------


def test_preempt_at_the_queue_limit_evicts_the_low_priority_peer(cluster: Cluster, namespace: str) -> None:
    q = f"cpu-limit-{uuid.uuid4().hex[:6]}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=1)
    apply(cluster, namespace, [queue(q, cpu=(500, 500, 1))])
    apply(cluster, namespace, gang_pods("low", q, 1, 1, "train", spec(selector, cpu="500m")))
    wait_for("the low-priority pod to run", lambda: running(pods(cluster, namespace, "group=low")) or None)
    apply(cluster, namespace, gang_pods("high", q, 1, 1, "inference", spec(selector, cpu="500m")))
    wait_for("the high-priority pod to run", lambda: running(pods(cluster, namespace, "group=high")) or None,
             timeout=90)
    wait_for("the low-priority pod to be gone (nothing left Releasing)",
             lambda: [p["metadata"]["name"] for p in all_pods(cluster, namespace)] == ["high-0"] or None)
    [e] = pod_evictions(cluster, namespace)
    assert e["involvedObject"]["name"] == "low-0"
    assert e["message"].startswith(f"Pod {namespace}/low-0 was preempted by higher priority workload "
                                   f"{namespace}/high."), e


def test_preempt_at_the_limit_takes_exactly_the_elastic_surplus(cluster: Cluster, namespace: str) -> None:
    q = f"elastic-limit-{uuid.uuid4().hex[:6]}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=1)
    apply(cluster, namespace, [queue(q, cpu=(1500, 1500, 1))])
    # minMember 1, three 500m pods: two are surplus.
    apply(cluster, namespace, gang_pods("v", q, 3, 1, "train", spec(selector, cpu="500m")))
    wait_for("the elastic job's 3 pods to run", lambda: len(running(pods(cluster, namespace, "group=v"))) == 3 or None)
    apply(cluster, namespace, gang_pods("p", q, 1, 1, "inference", spec(selector, cpu="1")))
    wait_for("the preemptor to run", lambda: running(pods(cluster, namespace, "group=p")) or None, timeout=90)
    evicted = {e["involvedObject"]["name"] for e in pod_evictions(cluster, namespace)}
    assert len(evicted) == 2 and evicted <= {"v-0", "v-1", "v-2"}, evicted
    left = running(pods(cluster, namespace, "group=v"))
    assert len(left) == 1 and left[0]["metadata"]["name"] not in evicted  # the job keeps its minimum


def parent_at_limit(cluster: Cluster, namespace: str, min_runtime: str | None = None, workloads: int = 1
                    ) -> tuple[dict[str, str], str, str]:
    """Parent GPU quota = limit = 4; child A (quota 1) runs 4 one-GPU pods on an 8-GPU node: one Deployment of 4
    replicas (one elastic PodGroup), or with `workloads=4` four Deployments of one (four PodGroups)."""
    suffix = uuid.uuid4().hex[:6]
    dept, qa, qb = f"dept-{suffix}", f"qa-{suffix}", f"qb-{suffix}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=8)
    apply(cluster, namespace, [queue(dept, gpu=(4, 4, 1)),
                               queue(qa, dept, gpu=(1, -1, 1), reclaim_min_runtime=min_runtime),
                               queue(qb, dept, gpu=(0, -1, 1), priority=101)])
    names = ["a"] if workloads == 1 else [f"a-{i}" for i in range(workloads)]
    apply(cluster, namespace, [deployment(name, qa, 4 // workloads, "train", spec(selector, gpus=1))
                               for name in names])
    wait_for("A's 4 pods to run", lambda: len(running(pods(cluster, namespace, f"kai.scheduler/queue={qa}"))) == 4
             or None, timeout=120)
    return selector, qa, qb


def test_child_reclaims_from_its_sibling_under_a_parent_at_its_limit(cluster: Cluster, namespace: str) -> None:
    selector, qa, qb = parent_at_limit(cluster, namespace)
    apply(cluster, namespace, [deployment("b", qb, 1, "train", spec(selector, gpus=1))])
    wait_for("B's pod to run", lambda: running(pods(cluster, namespace, "app=b")) or None, timeout=90)
    [e] = pod_evictions(cluster, namespace)
    assert "was preempted by workload" in e["message"] and f"(queue {qb}): queue {qa} uses" in e["message"], e
    # A's re-created pod waits: the parent is at its limit again.
    time.sleep(5)
    assert len(running(pods(cluster, namespace, "app=a"))) == 3
    assert len(pods(cluster, namespace, "app=a")) == 4
    assert len(pod_evictions(cluster, namespace)) == 1


def test_reclaim_waits_for_min_runtime_then_happens(cluster: Cluster, namespace: str) -> None:
    # Four workloads, each protected whole (the pods of one elastic PodGroup above its minMember are not: KAI's
    # minruntime keeps only minMember of them).
    selector, qa, qb = parent_at_limit(cluster, namespace, min_runtime="45s", workloads=4)
    starts = []
    for item in cluster.get_json("podgroups", namespace=namespace)["items"]:
        stamp = (item["metadata"].get("annotations") or {}).get(LAST_START)
        if stamp and item["spec"].get("queue") == qa:
            starts.append(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    assert len(starts) == 4, starts
    apply(cluster, namespace, [deployment("b", qb, 1, "train", spec(selector, gpus=1))])
    protected_until = max(starts).timestamp() + 45
    # Well inside the protection nothing is reclaimed.
    while time.time() < protected_until - 10:
        assert not pod_evictions(cluster, namespace)
        assert not running(pods(cluster, namespace, "app=b"))
        time.sleep(2)
    wait_for("B's pod to run once A's jobs are no longer protected",
             lambda: running(pods(cluster, namespace, "app=b")) or None, timeout=120)
    [e] = pod_evictions(cluster, namespace)
    stamp = e.get("eventTime") or e.get("lastTimestamp") or e["metadata"]["creationTimestamp"]
    when = datetime.fromisoformat(stamp.split(".")[0].rstrip("Z")).replace(tzinfo=UTC)
    assert when.timestamp() >= protected_until - 1, (stamp, max(starts))


def test_two_queues_converge_to_their_over_quota_weights(cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    dept, qa, qb = f"dept-{suffix}", f"qa-{suffix}", f"qb-{suffix}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=8)
    apply(cluster, namespace, [queue(dept, gpu=(4, 4, 1)), queue(qa, dept, gpu=(0, -1, 1)),
                               queue(qb, dept, gpu=(0, -1, 3))])
    apply(cluster, namespace, [deployment("a", qa, 4, "train", spec(selector, gpus=1))])
    wait_for("A's 4 pods to run", lambda: len(running(pods(cluster, namespace, "app=a"))) == 4 or None, timeout=120)
    apply(cluster, namespace, [deployment("b", qb, 4, "train", spec(selector, gpus=1))])

    def split() -> tuple[int, int] | None:
        a, b = len(running(pods(cluster, namespace, "app=a"))), len(running(pods(cluster, namespace, "app=b")))
        return (a, b) if (a, b) == (1, 3) else None
    wait_for("the 1:3 split of the parent's 4 GPUs", split, timeout=150)
    time.sleep(8)  # and it stays there
    assert split() == (1, 3)
    assert len({e["involvedObject"]["name"] for e in pod_evictions(cluster, namespace)}) == 3


# --- consolidation ---------------------------------------------------------------------------------------


def test_node_level_consolidation_moves_one_filler(cluster: Cluster, namespace: str) -> None:
    q = f"fill-{uuid.uuid4().hex[:6]}"
    selector = isolated_nodes(cluster, namespace, count=2, gpus=2)
    apply(cluster, namespace, [queue(q)])
    apply(cluster, namespace, [job(f"filler-{i}", q, spec(selector, gpus=1)) for i in range(4)])
    fillers = wait_for("a 1-GPU filler on every GPU", lambda: (
        lambda r: r if len(r) == 4 else None)(running(pods(cluster, namespace, "kai.scheduler/queue=" + q))),
        timeout=120)
    by_node: dict[str, list[str]] = {}
    for p in fillers:
        by_node.setdefault(p["spec"]["nodeName"], []).append(p["metadata"]["labels"]["app"])
    assert sorted(len(v) for v in by_node.values()) == [2, 2], by_node
    for names in by_node.values():  # one free GPU on each node
        cluster.kubectl("delete", "job", names[0], "--wait=true", namespace=namespace)
    wait_for("two fillers left", lambda: len(all_pods(cluster, namespace)) == 2 or None)

    apply(cluster, namespace, gang_pods("big", q, 1, 1, "train", spec(selector, gpus=2)))
    [big] = wait_for("the 2-GPU pod to run", lambda: running(pods(cluster, namespace, "group=big")) or None,
                     timeout=120)
    [e] = pod_evictions(cluster, namespace)
    assert "was preempted and rescheduled due to bin packing (resource consolidation) procedure" in e["message"], e
    assert f"to make room for {namespace}/big." in e["message"], e
    target = e["message"].split("Moved to node ")[1].split(" ")[0]
    assert target != big["spec"]["nodeName"]

    def settled() -> list[dict[str, Any]] | None:
        items = all_pods(cluster, namespace)
        if any(p["metadata"].get("deletionTimestamp") for p in items):
            return None  # something still Releasing
        fill = running([p for p in items if p["metadata"]["labels"].get("app", "").startswith("filler-")])
        return fill if len(fill) == 2 else None
    fill = wait_for("the moved filler's Job to run its new pod, nothing left Releasing", settled, timeout=120)
    assert {p["spec"]["nodeName"] for p in fill} == {target}


def test_device_level_consolidation_packs_fractions(cluster: Cluster, namespace: str) -> None:
    q = f"frac-{uuid.uuid4().hex[:6]}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=2)
    node = f"{namespace}-gpu-0"
    apply(cluster, namespace, [queue(q)])
    half = {"gpu-fraction": "0.5"}
    apply(cluster, namespace, [job(f"half-{i}", q, spec(selector), annotations=half) for i in range(4)])
    halves = wait_for("four 0.5-GPU fillers on the node's 2 GPUs", lambda: (
        lambda r: r if len(r) == 4 else None)(running(pods(cluster, namespace, "kai.scheduler/queue=" + q))),
        timeout=120)
    by_group: dict[str, list[str]] = {}
    for p in halves:
        by_group.setdefault(p["metadata"]["labels"]["runai-gpu-group"], []).append(p["metadata"]["labels"]["app"])
    assert sorted(len(v) for v in by_group.values()) == [2, 2], by_group
    for names in by_group.values():  # half of each GPU free
        cluster.kubectl("delete", "job", names[0], "--wait=true", namespace=namespace)
    wait_for("two fillers left", lambda: len([p for p in all_pods(cluster, namespace)
                                              if p["metadata"]["labels"].get("app", "").startswith("half-")]) == 2
             or None)

    apply(cluster, namespace, gang_pods("whole", q, 1, 1, "train", spec(selector, gpus=1, node=node)))
    wait_for("the whole-GPU pod to run", lambda: running(pods(cluster, namespace, "group=whole")) or None,
             timeout=120)
    # Usually one fraction moves. A second move can follow when the next cycle runs before the GPU the first
    # one left is given back (its reservation pod still holds it): then the other fraction moves onto it.
    evicts = pod_evictions(cluster, namespace)
    assert 1 <= len(evicts) <= 2, [e["message"] for e in evicts]
    for e in evicts:
        assert e["message"].startswith(f"Pod {namespace}/half-"), e
        assert "rescheduled due to bin packing (resource consolidation) procedure" in e["message"], e
        assert f"Moved to node {node} to make room for {namespace}/whole." in e["message"], e

    def settled() -> list[dict[str, Any]] | None:
        items = all_pods(cluster, namespace)
        if any(p["metadata"].get("deletionTimestamp") for p in items):
            return None
        fill = running([p for p in items if p["metadata"]["labels"].get("app", "").startswith("half-")])
        return fill if len(fill) == 2 else None
    fill = wait_for("the moved fraction to run again, sharing a GPU, nothing Releasing", settled, timeout=120)
    assert len({p["metadata"]["labels"]["runai-gpu-group"] for p in fill}) == 1
