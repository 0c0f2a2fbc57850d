"""Disruptive actions on the local control plane: preempt (KubeRay + Deployment), reclaim, stale-gang eviction.

Each test creates its own queues and, where placement must be isolated from the rest of the cluster, its own
kwok GPU nodes (labelled for the namespace fixture's cleanup) that its pods select. The stale-gang test does
not wait out the scheduler's 60 s grace period and does not restart the scheduler with a shorter one (that
would change it for every other test): once the scheduler has stamped `kai.scheduler/stale-podgroup-timestamp`
on the broken gang, the test back-dates the stamp by more than the grace period, which is exactly what the
grace period is measured from.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import pytest

from operators.devcluster.nodes import NodeShape, node_manifest
from tests.support import Cluster, labelled
from tests.support import wait_for as support_wait_for

pytestmark = pytest.mark.cluster

T = TypeVar("T")
GPU = "nvidia.com/gpu"
STALE = "kai.scheduler/stale-podgroup-timestamp"


wait_for = partial(support_wait_for, timeout=90, interval=1.0)


def apply(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace)


def queue(name: str, parent: str = "", gpu_quota: float = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {
        "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def container(gpus: int) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    if gpus:
        res["limits"] = {GPU: str(gpus)}
    return {"name": "main", "image": "busybox", "resources": res}


def pod_spec(gpus: int, selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [container(gpus)],
                            "terminationGracePeriodSeconds": 0}
    if selector:
        spec["nodeSelector"] = selector
    return spec


def deployment(name: str, queue_name: str, replicas: int, gpus: int, priority_class: str,
               selector: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": priority_class}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec(gpus, selector)}}}


def pods(cluster: Cluster, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["pods"] + (["-l", selector] if selector else [])
    items: list[dict[str, Any]] = cluster.get_json(*args, namespace=namespace)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def running(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in items if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]


def events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("events", namespace=namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


def isolated_nodes(cluster: Cluster, namespace: str, count: int, gpus: int) -> dict[str, str]:
    """Fresh kwok GPU nodes only this test's pods select; returns the node selector."""
    selector = {"kai.test/disruption": namespace}
    docs = [node_manifest(f"{namespace}-gpu-{i}", NodeShape(gpus=gpus), labels=selector) for i in range(count)]
    apply(cluster, namespace, docs)
    wait_for("the test nodes to be Ready", lambda: all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or ())
        for n in cluster.get_json("nodes", "-l", f"kai.test/disruption={namespace}")["items"]) or None)
    return selector


def raycluster(name: str, queue_name: str, workers: int, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    labels = {"kai.scheduler/queue": queue_name, "priorityClassName": "train"}
    head = {"metadata": {"labels": labels}, "spec": {**pod_spec(0, selector)}}
    worker = {"metadata": {"labels": labels}, "spec": {**pod_spec(gpus, selector)}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": {**labels, "ray.io/priority-class-name": "train"}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": head},
                     "workerGroupSpecs": [{"groupName": "worker", "replicas": workers, "minReplicas": workers,
                                           "maxReplicas": workers, "rayStartParams": {}, "template": worker}]}}


def test_inference_preempts_the_training_raycluster_of_its_queue(cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    team = f"team-a-{suffix}"
    selector = isolated_nodes(cluster, namespace, count=2, gpus=4)
    # A non-preemptible pod must fit the quota at every level: both get 1 GPU.
    apply(cluster, namespace, [queue(f"dept-{suffix}", gpu_quota=1), queue(team, f"dept-{suffix}", gpu_quota=1)])
    apply(cluster, namespace, [raycluster("train", team, workers=2, gpus=4, selector=selector)])
    ray = "ray.io/cluster=train"
    wait_for("the training RayCluster (head + 2 workers of 4 GPUs) to run",
             lambda: len(running(pods(cluster, namespace, ray))) == 3 or None, timeout=120)
    first = {p["metadata"]["name"] for p in pods(cluster, namespace, ray)}

    apply(cluster, namespace, [deployment("inference", team, 1, 1, "inference", selector)])
    def gang_evicted() -> list[dict[str, Any]] | None:
        got = events(cluster, namespace, "Evict")
        return got if len({e["involvedObject"]["name"] for e in got if e["involvedObject"]["kind"] == "Pod"}) == 3 \
            else None
    evicts = wait_for("Evict events for the whole training gang", gang_evicted, timeout=90)
    for e in evicts:
        assert "was preempted by higher priority workload" in e["message"], e
        assert f"Preempted within queue {team}:" in e["message"] and "125 (inference)" in e["message"], e
    on_pg = [e for e in evicts if e["involvedObject"]["kind"] == "PodGroup"]
    assert on_pg and all(e["involvedObject"]["name"].startswith("pg-train-") for e in on_pg)
    assert {e["involvedObject"]["name"] for e in evicts if e["involvedObject"]["kind"] == "Pod"} == first

    [infer] = wait_for("the inference pod to run", lambda: running(pods(cluster, namespace, "app=inference")) or None,
                       timeout=90)
    assert infer["spec"]["nodeName"].startswith(f"{namespace}-gpu-")
    pipelined = [e for e in events(cluster, namespace, "Pipelined") if e["involvedObject"]["name"] ==
                 infer["metadata"]["name"]]
    assert pipelined, "the inference pod was pipelined onto the GPUs being released first"

    # KubeRay recreates the training pods; they wait, and say why.
    def waiting() -> list[dict[str, Any]] | None:
        again = [p for p in pods(cluster, namespace, ray) if p["metadata"]["name"] not in first]
        conds = [c for p in again for c in p["status"].get("conditions") or ()
                 if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"]
        return conds if again and conds else None
    conds = wait_for("the resubmitted training pods to wait with an explanation", waiting, timeout=90)
    assert any("GPUs" in c["message"] for c in conds), conds
    assert len(running(pods(cluster, namespace, "app=inference"))) == 1


def free_gpus(cluster: Cluster) -> int:
    nodes = [n for n in cluster.get_json("nodes")["items"]
             if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or ())
             and not n["spec"].get("unschedulable") and not n["metadata"].get("deletionTimestamp")
             and "kai.test/disruption" not in (n["metadata"].get("labels") or {})]  # other tests' nodes may go
    total = sum(int(n["status"].get("allocatable", {}).get(GPU, "0")) for n in nodes)
    names = {n["metadata"]["name"] for n in nodes}
    used = 0
    for p in cluster.get_json("pods", "-A")["items"]:
        if p["status"].get("phase") in ("Succeeded", "Failed") or p["spec"].get("nodeName") not in names:
            continue
        for c in p["spec"].get("containers") or ():
            used += int(((c.get("resources") or {}).get("limits") or {}).get(GPU, "0"))
    return total - used


def test_reclaim_takes_a_borrowing_queue_back_to_its_fair_share(cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    qa, qb = f"qa-{suffix}", f"qb-{suffix}"
    apply(cluster, namespace, [queue(f"org-{suffix}"), queue(qa, f"org-{suffix}", 0), queue(qb, f"org-{suffix}", 2)])
    idle = free_gpus(cluster)
    assert idle >= 4, f"the cluster needs idle GPUs for this test, has {idle}"
    # A borrows the whole idle cluster with preemptible one-GPU pods (each its own PodGroup).
    apply(cluster, namespace, [deployment("borrower", qa, idle, 1, "train")])
    wait_for(f"{idle} borrower pods to run",
             lambda: len(running(pods(cluster, namespace, "app=borrower"))) == idle or None, timeout=180)

    # B submits 2 GPUs, within its quota of 2: A is reclaimed by exactly that much and B runs.
    apply(cluster, namespace, [deployment("owner", qb, 2, 1, "train")])
    wait_for("both owner pods to run", lambda: len(running(pods(cluster, namespace, "app=owner"))) == 2 or None,
             timeout=120)
    reclaims = [e for e in events(cluster, namespace, "Evict") if e["involvedObject"]["kind"] == "Pod"]
    assert len({e["involvedObject"]["name"] for e in reclaims}) == 2, reclaims
    for e in reclaims:
        assert "was preempted by workload" in e["message"], e
        assert f"(queue {qb}): queue {qa} uses" in e["message"] and "above its fair share of" in e["message"], e
    # The recreated borrower pods stay pending: A is at its fair share and cannot take anything back.
    time.sleep(5)
    assert len(running(pods(cluster, namespace, "app=borrower"))) == idle - 2
    assert len(running(pods(cluster, namespace, "app=owner"))) == 2
    assert len({e["involvedObject"]["name"] for e in events(cluster, namespace, "Evict")
                if e["involvedObject"]["kind"] == "Pod"}) == 2


def test_stale_gang_is_evicted_after_the_grace_period(cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    q = f"stale-{suffix}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=4)
    apply(cluster, namespace, [queue(q)])
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "gang"},
             "spec": {"minMember": 3, "queue": q, "priorityClassName": "train"}}
    members = [{"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"gang-{i}", "annotations": {"pod-group-name": "gang"},
                             "labels": {"kai.scheduler/queue": q}},
                "spec": pod_spec(1, selector)} for i in range(3)]
    apply(cluster, namespace, [group, *members])
    wait_for("the 3-member gang to run", lambda: len(running(pods(cluster, namespace))) == 3 or None, timeout=90)

    cluster.kubectl("delete", "pod", "gang-2", "--wait=true", namespace=namespace)

    def stamp() -> str | None:
        pg = cluster.get_json("podgroup", "gang", namespace=namespace)
        value: str | None = (pg["metadata"].get("annotations") or {}).get(STALE)
        return value
    stamped = wait_for("the scheduler to stamp the gang as stale", stamp, timeout=30)
    time.sleep(5)  # well inside the 60 s grace period: nothing is evicted
    assert len(running(pods(cluster, namespace))) == 2
    assert not events(cluster, namespace, "Evict") and not events(cluster, namespace, "StaleJob")

    since = datetime.fromisoformat(stamped.replace("Z", "+00:00"))
    old = (since - timedelta(seconds=61)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.kubectl("annotate", "podgroup", "gang", f"{STALE}={old}", "--overwrite", namespace=namespace)
    wait_for("the remaining members to be evicted", lambda: not pods(cluster, namespace) or None, timeout=60)
    [stale] = wait_for("a StaleJob event", lambda: events(cluster, namespace, "StaleJob") or None, timeout=30)[:1]
    assert stale["message"] == "Job is stale. 2 pods are active, minMember is 3", stale
    evicts = wait_for("Evict events", lambda: [e for e in events(cluster, namespace, "Evict")
                                               if e["involvedObject"]["kind"] == "Pod"] or None, timeout=30)
    assert {e["involvedObject"]["name"] for e in evicts} == {"gang-0", "gang-1"}
    for e in evicts:
        assert e["message"].startswith("Workload doesn't meet the minimum required number of pods (3), evicting "
                                       f"remaining pod: {namespace}/gang-"), e
        assert "longer than the 60s grace period" in e["message"], e
    print(json.dumps([e["message"] for e in evicts], indent=1))
