"""What the scheduler writes, and how often, counted by the API server itself (`apiserver_request_total`).

The scheduler decides every scheduling period (1 s on the dev cluster) on a snapshot of its caches; what it writes
must follow what changed, not the cycles: one BindRequest per pod it places, one last-start annotation per job it
starts, an unschedulable pod's `PodScheduled=False` and its PodGroup's scheduling condition once (and none for a
pod it binds), a SchedulingShard's status once per change of the shard.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import AnnotationUpdate, Decisions
from operators.scheduler.shell.loop import SchedulerLoop
from tests.support import Cluster, audit_mark, audited, by_product, labelled, poll, settled, unmanaged_raycluster

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
PERIODS = 8.0  # seconds of quiet measured: eight scheduling periods of the dev cluster
WATCHED = ("POST bindrequests", "PATCH podgroups", "PATCH podgroups/status", "PATCH pods/status",
           "PATCH schedulingshards/status")


def writes(cluster: Cluster, since: int, namespace: str) -> dict[str, int]:
    """The KAI components' WATCHED writes since the audit mark `since`, to the objects of `namespace` and to
    cluster-scoped ones (kwok's pod status writes and other tests' objects left out)."""
    spent = audited(cluster, since, where=lambda r: by_product(r) and r.namespace in (namespace, ""))
    return {k: spent[k] for k in WATCHED}


def queue(name: str) -> dict[str, Any]:
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": free, "cpu": free, "memory": free}}}


def gang(cluster: Cluster, namespace: str, name: str, size: int, gpus: int) -> list[dict[str, Any]]:
    """The RayCluster `name` (one gang of `size` pods, `gpus` GPUs each) and its pods, ready to create."""
    cluster.kubectl("create", "-f", "-", namespace=namespace,
                    input=labelled([unmanaged_raycluster(name, namespace, size - 1)]))
    owner = cluster.get_json("rayclusters.ray.io", name, namespace=namespace)
    ref = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name, "uid": owner["metadata"]["uid"],
           "controller": True}
    members = []
    for i in range(size):
        head = i == 0
        members.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{i}", "ownerReferences": [ref],
                         "labels": {"kai.scheduler/queue": namespace, "ray.io/cluster": name,
                                    "ray.io/node-type": "head" if head else "worker",
                                    "ray.io/group": "headgroup" if head else "workers"}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {GPU: str(gpus)}}}]}})
    return members


def pods(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.get_json("pods", namespace=namespace)["items"]}


def pod_scheduled(p: dict[str, Any]) -> str | None:
    return next((c["status"] for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)


def test_writes_follow_changes_not_cycles(cluster: Cluster, namespace: str) -> None:
    fits, too_big = 3, 2
    cluster.kubectl("apply", "-f", "-", input=labelled([queue(namespace)]))
    time.sleep(2)  # the scheduler sees the queue before its pods
    members = gang(cluster, namespace, "fits", fits, gpus=1) + gang(cluster, namespace, "big", too_big, gpus=9)
    mark = audit_mark(cluster)
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=labelled(members))

    def done() -> bool:
        now = pods(cluster, namespace)
        return (sum(p["status"].get("phase") == "Running" for n, p in now.items() if n.startswith("fits-")) == fits
                and all(pod_scheduled(p) == "False" for n, p in now.items() if n.startswith("big-")))

    poll(done, "the fitting gang Running, the other one's pods marked unschedulable", timeout=120)
    used = settled(lambda: writes(cluster, mark, namespace), "the scheduler's and binder's writes")
    # One BindRequest per pod placed, however many cycles ran while they were created and bound; none for the
    # gang that does not fit.
    assert used["POST bindrequests"] == fits, used
    # The last-start annotation once, for the one job that started.
    assert used["PATCH podgroups"] == 1, used
    # The pods bound: the binder's PodBound each (kwok's Running is not counted), never a PodScheduled=False from a
    # cycle that had already placed them; the pods that cannot be placed: PodScheduled=False once each.
    assert used["PATCH pods/status"] == fits + too_big, used
    now = pods(cluster, namespace)
    assert all(pod_scheduled(now[f"fits-{i}"]) == "True" for i in range(fits))

    # Nothing changes any more: the cycles that follow re-derive the same decisions and explanations and write
    # nothing (no condition, no annotation, no BindRequest).
    mark = audit_mark(cluster)
    time.sleep(PERIODS)
    idle = writes(cluster, mark, namespace)
    assert idle == dict.fromkeys(WATCHED, 0), idle
    big = next(n for n in now if n.startswith("big-"))
    group = now[big]["metadata"]["annotations"]["pod-group-name"]
    conditions = cluster.get_json("podgroup", group, namespace=namespace)["status"]["schedulingConditions"]
    assert [c["transitionID"] for c in conditions] == ["1"], conditions  # written once, at the first cycle


def shard_conditions(cluster: Cluster) -> tuple[int, dict[str, dict[str, Any]]]:
    shard = cluster.get_json("schedulingshard", "default")
    return shard["metadata"]["generation"], {c["type"]: c for c in shard["status"].get("conditions") or []}


def test_the_shard_status_is_written_once_per_change_of_the_shard(cluster: Cluster) -> None:
    original = cluster.get_json("schedulingshard", "default")["spec"]

    def patch(spec: dict[str, Any]) -> None:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge", "-p", json.dumps({"spec": spec}))

    def reported(status: str) -> dict[str, Any] | None:
        generation, conditions = shard_conditions(cluster)
        available = conditions.get("Available")
        return available if available and available["observedGeneration"] == generation and \
            available["status"] == status else None

    # An earlier test may have left the shard's status to be rewritten (e.g. an operator's conditions removed):
    # count from a status that has stopped changing.
    settled(lambda: shard_conditions(cluster), "the shard's status before the changes", quiet=PERIODS)
    try:
        for spec, status in (({"placementStrategy": {"gpu": "spread"}}, "True"),
                             ({"queueDepthPerAction": {"backfill": 1}}, "False")):
            mark = audit_mark(cluster)
            patch(spec)
            available = poll(lambda want=status: reported(want),
                             f"the shard's Available={status} for its new generation", timeout=60)
            time.sleep(PERIODS)  # cycles keep running on the shard's settings: none rewrites its status
            used = audited(cluster, mark, namespace="", name="default")
            assert used["PATCH schedulingshards/status"] == 1, (spec, used)
            if status == "False":
                assert "backfill isn't one of them" in available["message"]
    finally:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=json", "-p",
                        json.dumps([{"op": "replace", "path": "/spec", "value": original}]))
        poll(lambda: reported("True"), "the shard back to its settings", timeout=60)


async def test_an_annotation_the_server_refuses_is_no_longer_assumed(cluster: Cluster, namespace: str,
                                                                     api: Any) -> None:
    """A loop of the test's own, on a real API client, whose cache holds a PodGroup the server does not have."""
    stamp = "2026-01-02T03:04:05Z"
    loop = SchedulerLoop(api, SchedulerConfig())

    def watched(version: str) -> None:
        obj = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
               "metadata": {"name": "pg", "namespace": namespace, "uid": "uid-pg", "resourceVersion": version,
                            "annotations": {}}, "spec": {"minMember": 1, "queue": "q"}}
        loop.podgroups._put(f"{namespace}/pg", loop.podgroups.parse(obj), "MODIFIED")

    watched("1")
    mark = audit_mark(cluster)
    await loop.commit(Decisions(annotations=[AnnotationUpdate(namespace, "pg", keys.LAST_START_TIMESTAMP, stamp)]))
    assert loop.podgroups.store[f"{namespace}/pg"].last_start == stamp  # assumed at once, written in the background
    while loop._writing:
        await asyncio.gather(*loop._writing, return_exceptions=True)
    assert audited(cluster, mark, namespace=namespace)["PATCH podgroups"] == 1  # sent, and refused (404)
    assert loop._assumed_annotations == {}
    watched("2")  # the next copy is taken as it is
    assert loop.podgroups.store[f"{namespace}/pg"].last_start is None
