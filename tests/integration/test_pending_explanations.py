"""A backlog's pending pods are not rewritten every time the counts in their explanation move.

The pending pods' `PodScheduled=False` message counts nodes per reason ("2 node(s) didn't have enough resources:
GPUs"); in a filling or growing cluster those counts change from cycle to cycle. The scheduler writes a pod's
condition, its Warning event and its PodGroup's condition at once when the reason or the wording changes, and a
change of the numbers alone at most once per `explained.REFRESH` (5 minutes), so a backlog costs writes per change
of reason, not per cycle. Counted in the API server's audit log, the scheduler's own requests only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.devcluster.nodes import NodeShape, node_manifest
from tests.support import Cluster, apply, audit_mark, audited, labelled, poll, queue, settled

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
PENDING = 4  # single-pod jobs asking for more GPUs than any node has
GROWTH = 4  # nodes added one at a time: each moves the count in every pending pod's message


def gpu_pod(name: str, namespace: str, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": namespace}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": selector,
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "requests": {"cpu": "100m", GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}


def add_node(cluster: Cluster, namespace: str, name: str, selector: dict[str, str]) -> None:
    """A fresh 8-GPU kwok node of this test, and a 1-GPU pod bound to it: once that pod is bound, a cycle has
    decided with the node in its snapshot (and re-derived the pending pods' messages with it)."""
    node = node_manifest(name, NodeShape(gpus=8), labels={**selector, "kai.test/node": name})
    cluster.kubectl("create", "-f", "-", input=labelled([node]))
    probe = gpu_pod(f"probe-{name}", namespace, 1, {"kai.test/node": name})
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=json.dumps(probe))
    poll(lambda: cluster.get_json("pod", probe["metadata"]["name"], namespace=namespace)["spec"].get("nodeName"),
         f"the probe pod on {name} bound", timeout=60)


def scheduled(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    conditions = cluster.get_json("pod", pod, namespace=namespace)["status"].get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), {})


def test_count_changes_wait_and_new_reasons_do_not(cluster: Cluster, namespace: str) -> None:
    selector = {"kai.test/explained": namespace}
    apply(cluster, namespace, [queue(namespace)])
    add_node(cluster, namespace, f"{namespace}-0", selector)
    pending = [f"big-{i}" for i in range(PENDING)]
    for name in pending:
        cluster.kubectl("create", "-f", "-", namespace=namespace, input=json.dumps(gpu_pod(name, namespace, 9,
                                                                                          selector)))
    poll(lambda: all(scheduled(cluster, namespace, p).get("reason") == "Unschedulable" for p in pending),
         "every big pod explained", timeout=60)

    def scheduler_writes(mark: int) -> dict[str, int]:
        pods = audited(cluster, mark, namespace=namespace, agent="kai-scheduler",
                       where=lambda r: r.name in pending)
        groups = audited(cluster, mark, namespace=namespace, agent="kai-scheduler",
                         where=lambda r: r.name.startswith("pg-big-"))  # the pod-grouper's pg-<pod>-<uid>
        return {"PATCH pods/status": pods["PATCH pods/status"],
                "PATCH podgroups/status": groups["PATCH podgroups/status"],
                "POST events": audited(cluster, mark, namespace=namespace, agent="kai-scheduler")["POST events"]}

    mark = audit_mark(cluster)
    for i in range(1, GROWTH + 1):
        add_node(cluster, namespace, f"{namespace}-{i}", selector)
    grown = settled(lambda: scheduler_writes(mark), "the scheduler's writes")
    # Every growth step moved the count of nodes without enough GPUs in each message; none changed a reason.
    # Without the rule that is one condition, one pod event and one PodGroup condition and event per pending job
    # per step (GROWTH each); with it, none within REFRESH (at most one each for a write already going out).
    assert grown["PATCH pods/status"] <= PENDING, grown
    assert grown["PATCH podgroups/status"] <= PENDING, grown
    assert grown["POST events"] <= GROWTH + 2 * PENDING, grown  # the probes' Scheduled events, one each
    for p in pending:
        shown = scheduled(cluster, namespace, p)
        assert shown["status"] == "False" and shown["reason"] == "Unschedulable", shown
        assert "didn't have enough resources: GPUs" in shown["message"], shown

    # A new reason is written at once: a queue limit below their request replaces the node histogram.
    apply(cluster, namespace, [queue(namespace, gpu=(-1, 1, 1))])
    poll(lambda: all("allowable limit" in scheduled(cluster, namespace, p).get("message", "") for p in pending),
         "the new reason in every pending pod's condition", timeout=60)
    total = settled(lambda: scheduler_writes(mark), "the scheduler's writes")
    assert PENDING <= total["PATCH pods/status"] <= 2 * PENDING, total
