"""The scheduler against a real control plane (kwok GPU nodes, the real KubeRay operator, every KAI component).

Needs the dev cluster's default shape: 4 nodes x 8 GPUs. Every test waits until no GPU is held by a pod first, so
the tests do not depend on each other's leftovers; queues are named after the test namespace and labelled, so the
namespace fixture removes them.

Snapshot/simulate: a snapshot cannot be taken "before" a live decision while the scheduler runs, so the replay
test snapshots the cluster *after* the live loop settled and checks that `kai simulate` on it decides nothing new
(no bind, no eviction) and explains exactly the PodGroups the live loop explained, with the same messages.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support import EXAMPLES, Cluster, apply, held_gpus, items, load_yaml, queue

pytestmark = pytest.mark.cluster

T = TypeVar("T")
GPU = "nvidia.com/gpu"
CLUSTER_GPUS = 32  # kai dev up default: 4 nodes x 8 GPUs


def wait_for(check: Callable[[], T | None], timeout: float = 60.0, what: str = "condition") -> T:
    """Poll `check` until it returns something truthy (AssertionErrors count as 'not yet')."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last}")
        time.sleep(0.5)





def pod(name: str, queue_name: str, gpus: int = 1) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "resources": resources}]}}


def wait_cluster_idle(cluster: Cluster) -> None:
    wait_for(lambda: held_gpus(cluster) == 0, 120, "no GPU held by any pod (previous tests cleaned up)")


def podgroup_of(cluster: Cluster, namespace: str, pod_name: str) -> dict[str, Any]:
    p = cluster.get_json("pod", pod_name, namespace=namespace)
    name = (p["metadata"].get("annotations") or {}).get("pod-group-name")
    assert name, f"pod {pod_name} has no PodGroup yet"
    out: dict[str, Any] = cluster.get_json("podgroup", name, namespace=namespace)
    return out


def last_condition(pg: dict[str, Any]) -> dict[str, Any] | None:
    conditions = (pg.get("status") or {}).get("schedulingConditions") or []
    return conditions[-1] if conditions else None


def events(cluster: Cluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in items(cluster, "events", namespace)
            if e["involvedObject"]["name"] == name and e["reason"] == reason]


def pod_scheduled_condition(p: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


# --- Ray -----------------------------------------------------------------------------------------


def ray_example(namespace: str) -> list[dict[str, Any]]:
    """The shared KubeRay example, its two queues renamed after the namespace."""
    docs = load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml")
    names = {d["metadata"]["name"]: f"{d['metadata']['name']}-{namespace}" for d in docs if d["kind"] == "Queue"}
    for d in docs:
        if d["kind"] == "Queue":
            d["metadata"]["name"] = names[d["metadata"]["name"]]
            if d["spec"].get("parentQueue"):
                d["spec"]["parentQueue"] = names[d["spec"]["parentQueue"]]
        else:
            labels = d["metadata"]["labels"]
            labels["kai.scheduler/queue"] = names[labels["kai.scheduler/queue"]]
    return docs


def test_ray_cluster_example_is_bound_as_one_gang(cluster: Cluster, namespace: str) -> None:
    docs = ray_example(namespace)
    apply(cluster, namespace, docs)

    def all_running() -> list[dict[str, Any]] | None:
        pods = items(cluster, "pods", namespace, "-l", "ray.io/cluster=raycluster-sample")
        ok = len(pods) == 3 and all(p["status"].get("phase") == "Running"
                                    and p["spec"].get("nodeName", "").startswith("kwok-") for p in pods)
        return pods if ok else None

    pods = wait_for(all_running, 120, "the head and both workers Running on kwok nodes")
    assert {p["spec"]["schedulerName"] for p in pods} == {"kai-scheduler"}
    pg = podgroup_of(cluster, namespace, pods[0]["metadata"]["name"])
    assert pg["spec"]["minMember"] == 3  # the whole RayCluster is one gang
    assert {podgroup_of(cluster, namespace, p["metadata"]["name"])["metadata"]["name"] for p in pods} == \
        {pg["metadata"]["name"]}
    brs = {b["metadata"]["name"]: b for b in items(cluster, "bindrequests", namespace)}
    assert set(brs) == {p["metadata"]["name"] for p in pods}
    for p in pods:
        assert brs[p["metadata"]["name"]]["spec"]["selectedNode"] == p["spec"]["nodeName"]
    # One cycle wrote all three (cycles are >= 1 s apart and each writes its binds in one burst).
    created = sorted(ts(b["metadata"]["creationTimestamp"]) for b in brs.values())
    assert created[-1] - created[0] <= 1.0, created
    scheduled = [e for p in pods for e in events(cluster, namespace, p["metadata"]["name"], "Scheduled")
                 if e["source"].get("component") == "kai-scheduler" or "node-pool" in e["message"]]
    assert len({e["involvedObject"]["name"] for e in scheduled}) == 3


def test_ray_cluster_larger_than_the_cluster_is_explained(cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    docs = ray_example(namespace)
    ray = next(d for d in docs if d["kind"] == "RayCluster")
    ray["metadata"]["name"] = "too-big"
    worker = ray["spec"]["workerGroupSpecs"][0]
    worker["replicas"] = worker["minReplicas"] = 5  # 5 x 8 GPUs > 32
    worker["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi", GPU: "8"}, "limits": {GPU: "8"}}
    apply(cluster, namespace, docs)

    def explained() -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        pods = items(cluster, "pods", namespace, "-l", "ray.io/cluster=too-big")
        if len(pods) != 6:
            return None
        pg = podgroup_of(cluster, namespace, pods[0]["metadata"]["name"])
        cond = last_condition(pg)
        if not cond or not all(pod_scheduled_condition(p) for p in pods):
            return None
        return pods, pg

    pods, pg = wait_for(explained, 120, "an UnschedulableOnNodePool condition and PodScheduled=False on every pod")
    cond = last_condition(pg)
    assert cond is not None
    assert cond["type"] == "UnschedulableOnNodePool" and cond["status"] == "True"
    assert cond["nodePool"] == "default" and cond["reason"] == "Unschedulable"
    assert [r["reason"] for r in cond["reasons"]] == ["PodSchedulingErrors"]
    message = cond["reasons"][0]["message"]
    # Head + 4 workers fit (one 8-GPU worker per node); the 5th worker does not.
    assert message == ("Resources were found for 5 pods from all sub-groups while sub-group worker requires 5 pods "
                       "for gang scheduling. Additional pods cannot be scheduled in this sub-group due to: no nodes "
                       "with enough resources were found: 4 node(s) didn't have enough resources: GPUs."), message
    assert cond["message"] == f"PodSchedulingErrors: {message}."
    pg_events = events(cluster, namespace, pg["metadata"]["name"], "Unschedulable")
    assert pg_events and pg_events[0]["type"] == "Normal" and pg_events[0]["message"] == cond["message"]
    for p in pods:
        name = p["metadata"]["name"]
        c = pod_scheduled_condition(p)
        assert c is not None and c["status"] == "False" and c["reason"] == "Unschedulable", c
        warnings = wait_for(lambda: events(cluster, namespace, name, "Unschedulable"), 30,  # noqa: B023
                            f"Unschedulable event on {name}")
        assert warnings[0]["type"] == "Warning" and warnings[0]["message"] == c["message"]
    # Nothing of the gang was bound, and stays so over further cycles.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert items(cluster, "bindrequests", namespace) == []
        assert not any(p["spec"].get("nodeName") for p in items(cluster, "pods", namespace))
        time.sleep(0.5)


# --- queues ----------------------------------------------------------------------------------------


def test_two_queues_divide_a_full_cluster_by_quota_and_weight(cluster: Cluster, namespace: str,
                                                              tmp_path: Path) -> None:
    """32 GPUs, qa (quota 4, weight 1) and qb (quota 8, weight 3) both asking for 40.

    Fair share: deserved 4 + 8, the remaining 20 split 1:3 -> qa 9, qb 23. The parent's GPU limit starts at 0 so
    nothing is placed until every PodGroup exists; lifting it lets one cycle see both queues' demand at once.
    """
    wait_cluster_idle(cluster)
    parent, qa, qb = f"fs-{namespace}", f"fs-a-{namespace}", f"fs-b-{namespace}"
    docs = [queue(parent, gpu=(0, 0, 1)), queue(qa, parent, gpu=(4, -1, 1)), queue(qb, parent, gpu=(8, -1, 3))]
    docs += [pod(f"a-{i}", qa) for i in range(40)] + [pod(f"b-{i}", qb) for i in range(40)]
    apply(cluster, namespace, docs)

    def all_over_limit() -> bool:
        pgs = items(cluster, "podgroups", namespace)
        return len(pgs) == 80 and all((c := last_condition(pg)) is not None and c["reasons"][0]["reason"] ==
                                      "OverLimit" for pg in pgs)

    wait_for(all_over_limit, 120, "80 PodGroups, all OverLimit under the parent's GPU limit 0")
    assert items(cluster, "bindrequests", namespace) == []
    cluster.kubectl("patch", "queue", parent, "--type=merge", "-p",
                    json.dumps({"spec": {"resources": {"gpu": {"limit": -1}}}}))

    def allocated(name: str) -> float:
        q = cluster.get_json("queue", name)
        return float(((q.get("status") or {}).get("allocated") or {}).get(GPU, 0))

    def settled() -> tuple[float, float] | None:
        bound = [p for p in items(cluster, "pods", namespace) if p["spec"].get("nodeName")]
        shares = allocated(qa), allocated(qb)
        return shares if len(bound) == CLUSTER_GPUS and shares == (9.0, 23.0) else None

    try:
        wait_for(settled, 120, "qa 9 and qb 23 GPUs allocated (Queue status)")
    except AssertionError:
        counts = {q: sum(1 for p in items(cluster, "pods", namespace) if p["spec"].get("nodeName")
                         and p["metadata"]["labels"]["kai.scheduler/queue"] == q) for q in (qa, qb)}
        raise AssertionError(f"bound per queue {counts}, Queue status {allocated(qa)} / {allocated(qb)}") from None
    # The parent's status is its own write, coalesced like its children's: it follows within seconds.
    wait_for(lambda: allocated(parent) == CLUSTER_GPUS, 30, f"the parent queue's status to show {CLUSTER_GPUS} GPUs")

    # Replay: a snapshot of the settled cluster, fed to `kai simulate`, decides nothing new and explains the same
    # PodGroups as the live loop, with the same messages.
    def live_explained() -> dict[str, str] | None:
        pgs = items(cluster, "podgroups", namespace)
        out = {pg["metadata"]["name"]: c["message"] for pg in pgs
               if (c := last_condition(pg)) is not None and "OverLimit" not in c["message"]}
        return out if len(out) == 80 - CLUSTER_GPUS else None

    live = wait_for(live_explained, 60, "48 pending PodGroups re-explained after the limit was lifted")
    snap = tmp_path / "snapshot.yaml"
    kai = [sys.executable, "-m", "operators.cli"]
    subprocess.run([*kai, "snapshot", "-o", str(snap), "--kubeconfig", cluster.kubeconfig], check=True,
                   capture_output=True, text=True, timeout=120)
    out = subprocess.run([*kai, "simulate", "-f", str(snap), "-o", "json"], check=True, capture_output=True,
                         text=True, timeout=300)
    cycle = json.loads(out.stdout)
    mine = [b for b in cycle["binds"] if b["namespace"] == namespace]
    assert mine == [] and [e for e in cycle["evictions"] if e["namespace"] == namespace] == []
    simulated = {u["podGroup"]: u["message"] for u in cycle["unschedulable"] if u["namespace"] == namespace}
    assert simulated == live


def test_missing_queue_is_explained(cluster: Cluster, namespace: str) -> None:
    missing = f"nope-{namespace}"
    apply(cluster, namespace, [pod("lost", missing)])
    expected = f"QueueDoesNotExist: Queue '{missing}' does not exist."

    def explained() -> dict[str, Any] | None:
        p = cluster.get_json("pod", "lost", namespace=namespace)
        c = pod_scheduled_condition(p)
        return p if c and c["message"] == expected else None

    p = wait_for(explained, 60, "PodScheduled=False with the QueueDoesNotExist message")
    c = pod_scheduled_condition(p)
    assert c is not None and c["status"] == "False" and c["reason"] == "Unschedulable"
    warnings = wait_for(lambda: events(cluster, namespace, "lost", "Unschedulable"), 30, "pod event")
    assert warnings[0]["type"] == "Warning" and warnings[0]["message"] == expected
    pg = podgroup_of(cluster, namespace, "lost")
    cond = last_condition(pg)
    assert cond is not None and cond["reasons"] == [{"reason": "QueueDoesNotExist",
                                                     "message": f"Queue '{missing}' does not exist"}]
    assert not p["spec"].get("nodeName")


def test_queue_gpu_limit_is_explained_with_the_numbers(cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    parent, leaf = f"lim-p-{namespace}", f"lim-{namespace}"
    apply(cluster, namespace, [queue(parent), queue(leaf, parent, gpu=(0, 1, 1)), pod("first", leaf)])
    wait_for(lambda: cluster.get_json("pod", "first", namespace=namespace)["spec"].get("nodeName"), 60,
             "the first 1-GPU pod bound within the limit")
    apply(cluster, namespace, [pod("second", leaf)])

    def over_limit() -> dict[str, Any] | None:
        cond = last_condition(podgroup_of(cluster, namespace, "second"))
        return cond if cond and cond["reasons"][0]["reason"] == "OverLimit" else None

    cond = wait_for(over_limit, 60, "an OverLimit condition on the second pod's PodGroup")
    reason = cond["reasons"][0]
    assert reason["message"] == (f"{leaf} quota has reached the allowable limit of GPUs. Limit is 1 GPUs, "
                                 f"currently 1 GPUs allocated and workload requested 1 GPUs")
    details = reason["details"]["queueDetails"]
    assert details["name"] == leaf
    assert details["queueResourceLimits"][GPU] == "1" and details["queueAllocatedResources"][GPU] == "1"
    assert details["podGroupRequestedResources"][GPU] == "1"
    def marked() -> dict[str, Any] | None:
        second: dict[str, Any] = cluster.get_json("pod", "second", namespace=namespace)
        return second if pod_scheduled_condition(second) else None

    p = wait_for(marked, 30, "PodScheduled=False on the second pod")
    c = pod_scheduled_condition(p)
    assert c is not None and c["message"] == f"OverLimit: {reason['message']}."
    assert not p["spec"].get("nodeName")
