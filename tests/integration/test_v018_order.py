"""KAI v0.18 on the real API server with the running components:

- a StatefulSet's pods share one PodGroup owned by the StatefulSet (KAI's default grouper: `pg-<statefulset>-<uid>`,
  minMember 1), and bind;
- with `scenarioSearchBudgets.minFailedSearchBackoff` on the SchedulingShard, a job whose preempt search failed is
  not searched again every cycle (the scheduler carries the back-off from one cycle to the next).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from operators.devcluster.nodes import NodeShape, node_manifest
from tests.conftest import Cluster, labelled
from tests.integration.test_scheduler_metrics import scrape, value
from tests.support import poll

pytestmark = pytest.mark.cluster

FREE = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def items(cluster: Cluster, kind: str, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.get_json(kind, namespace=namespace)["items"])


def test_statefulset_pods_share_one_podgroup_and_bind(cluster: Cluster, namespace: str) -> None:
    queue = f"q-{namespace}"
    labels = {"app": "db"}
    docs = [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
             "spec": {"resources": {"cpu": FREE, "gpu": FREE, "memory": FREE}}}]
    cluster.kubectl("create", "-f", "-", input=labelled(docs))
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "labels": {"kai.scheduler/queue": queue}},
           "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                                          "containers": [{"name": "main", "image": "busybox", "resources": {
                                              "requests": {"cpu": "100m", "memory": "64Mi"},
                                              "limits": {"nvidia.com/gpu": "1"}}}]}}}}
    cluster.kubectl("create", "-f", "-", input=labelled([sts]), namespace=namespace)

    def all_bound() -> list[dict[str, Any]] | None:
        pods = [p for p in items(cluster, "pods", namespace) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = poll(all_bound, "the StatefulSet's 3 pods bound", timeout=120)
    uid = cluster.get_json("statefulsets.apps", "db", namespace=namespace)["metadata"]["uid"]
    [pg] = items(cluster, "podgroups", namespace)
    assert pg["metadata"]["name"] == f"pg-db-{uid}"
    assert [(o["kind"], o["name"]) for o in pg["metadata"]["ownerReferences"]] == [("StatefulSet", "db")]
    assert pg["spec"]["minMember"] == 1 and pg["spec"]["queue"] == queue
    assert {(p["metadata"].get("annotations") or {}).get("pod-group-name") for p in pods} == {f"pg-db-{uid}"}


def gpu_pod(name: str, app: str, priority_class: str, queue: str, node: str, **spec: Any) -> dict[str, Any]:
    labels = {"app": app, "kai.scheduler/queue": queue, "priorityClassName": priority_class}
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container], **spec}}


def preempt_simulations(cluster: Cluster) -> float:
    return value(scrape(cluster), "kai_scenarios_simulation_by_action", action="preempt") or 0


def test_failed_preempt_search_is_not_repeated_during_its_backoff(cluster: Cluster, namespace: str) -> None:
    """A 2-GPU node holds a non-preemptible blocker and a preemptible victim; an inference pod that refuses to
    share a node with the blocker preempts nothing: every preempt search evicts the victim in simulation and
    still finds no node. Without a back-off it is searched every cycle; with one, not again."""
    node, queue = f"{namespace}-bo", f"q-{namespace}"
    cluster.kubectl("create", "-f", "-", input=labelled([
        node_manifest(node, NodeShape(gpus=2)),
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
         "spec": {"resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}, "cpu": FREE,
                                "memory": FREE}}}]))
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=labelled([
        gpu_pod("blocker", "blocker", "build", queue, node), gpu_pod("victim", "victim", "train", queue, node)]))

    def running() -> set[str]:
        return {p["metadata"]["name"] for p in items(cluster, "pods", namespace)
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}

    poll(lambda: running() == {"blocker", "victim"}, "blocker and victim bound", timeout=60)
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "blocker"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    start = preempt_simulations(cluster)
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=labelled([
        gpu_pod("preemptor", "preemptor", "inference", queue, node, affinity=anti)]))
    # Without a back-off: searched again cycle after cycle.
    poll(lambda: preempt_simulations(cluster) >= start + 3, "the preempt search repeated every cycle", timeout=60)

    def patch(budgets: dict[str, Any] | None) -> None:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge", "-p",
                        json.dumps({"spec": {"scenarioSearchBudgets": budgets}}))

    try:
        patch({"minFailedSearchBackoff": {"preempt": "1h"}})
        # The next search fails and starts the back-off: from then on the count stands still.
        settled = poll(lambda: _steady(cluster), "the preempt search stopped", timeout=60)
        time.sleep(5)  # several cycles
        assert preempt_simulations(cluster) == settled
        assert running() == {"blocker", "victim"}
    finally:
        patch(None)


def _steady(cluster: Cluster) -> float | None:
    """The preempt simulation count once it stayed the same over three seconds (several cycles), else None."""
    before = preempt_simulations(cluster)
    time.sleep(3)
    after = preempt_simulations(cluster)
    return after if after == before else None
