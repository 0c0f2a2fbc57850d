"""Preferred inter-pod anti-affinity on the live scheduler (kwok nodes of the dev cluster, CPU pods).

CPU binpack sends a CPU pod to the node with the least free CPU: the node where the anchor pod runs. A pod with
preferred anti-affinity (weight 10, hostname topology) toward the anchor lands on another node instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Cluster, apply, items, queue, wait_for

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"


def _pod(name: str, queue_name: str, cpu: str, labels: dict[str, str] | None = None,
         spec_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
    spec.update(spec_extra or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name, **(labels or {})}},
            "spec": spec}


def _node_of(cluster: Cluster, namespace: str, name: str) -> str:
    def bound() -> str:
        node: str = cluster.get_json("pod", name, namespace=namespace)["spec"].get("nodeName") or ""
        return node
    return wait_for(f"pod {name} bound", bound, timeout=90)


def test_preferred_anti_affinity_lands_away_from_the_anchor(cluster: Cluster, namespace: str) -> None:
    nodes = sorted(n["metadata"]["name"] for n in items(cluster, "nodes", None, "-l", "type=kwok"))
    assert len(nodes) >= 2, nodes
    anchor_node = nodes[len(nodes) // 2]  # not the first by name, so name order alone cannot pick it
    q = f"aff-{namespace}"
    apply(cluster, namespace, [queue(q)])
    apply(cluster, namespace, [_pod("anchor", q, "8", labels={"app": "anchor"},
                                    spec_extra={"nodeSelector": {HOSTNAME: anchor_node}})])
    assert _node_of(cluster, namespace, "anchor") == anchor_node

    # Control: without a preference, binpack puts a CPU pod next to the anchor.
    apply(cluster, namespace, [_pod("plain", q, "1")])
    assert _node_of(cluster, namespace, "plain") == anchor_node

    away = {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "anchor"}},
                                           "topologyKey": HOSTNAME}}]}}}
    apply(cluster, namespace, [_pod("shy", q, "1", spec_extra=away)])
    shy_node = _node_of(cluster, namespace, "shy")
    assert shy_node != anchor_node and shy_node in nodes
