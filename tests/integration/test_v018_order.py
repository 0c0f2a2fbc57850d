"""KAI v0.18 grouping of a StatefulSet, on the real API server with the running components: its pods share one
PodGroup owned by the StatefulSet (KAI's default grouper: `pg-<statefulset>-<uid>`, minMember 1), and bind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Cluster, labelled
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
