"""Gentle with running work, live: PodDisruptionBudgets under reclaim, an eviction the API server refuses, and a
preemptor whose PriorityClass says `preemptionPolicy: Never`.

The reclaim test borrows every idle GPU of the cluster (as `test_disruption`'s reclaim test does: reclaim is about
fair shares of the whole cluster); the other two use an isolated kwok node and preempt within one queue.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from tests.integration.test_disruption import (
    apply,
    deployment,
    events,
    free_gpus,
    isolated_nodes,
    pod_spec,
    pods,
    queue,
    running,
    wait_for,
)
from tests.integration.test_kai_cli import _env
from tests.support import Cluster, audit_mark, audited

pytestmark = pytest.mark.cluster


def pdb(name: str, app: str, *, min_available: int | None = None, max_unavailable: int | None = None
        ) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": app}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec}


def bare_pod(name: str, queue_name: str, gpus: int, priority_class: str, selector: dict[str, str],
             spec_class: bool = False) -> dict[str, Any]:
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": priority_class}
    spec = pod_spec(gpus, selector)
    if spec_class:  # admission copies the class's preemptionPolicy into the pod
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def budget_settled(cluster: Cluster, namespace: str, name: str, pods_expected: int, allowed: int) -> bool | None:
    status = cluster.get_json("pdb", name, namespace=namespace).get("status") or {}
    return (status.get("expectedPods") == pods_expected and status.get("disruptionsAllowed") == allowed
            and status.get("observedGeneration") == 1) or None


def pod_evictions(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return [e for e in events(cluster, namespace, "Evict") if e["involvedObject"]["kind"] == "Pod"]


def podgroup_message(cluster: Cluster, namespace: str, pod: str) -> str:
    """The scheduler's explanation on the pod's PodGroup (every job-level reason; the pod's own condition names
    only its fit)."""
    group = cluster.get_json("pod", pod, namespace=namespace)["metadata"]["annotations"]["pod-group-name"]
    status = cluster.get_json("podgroups.scheduling.run.ai", group, namespace=namespace).get("status") or {}
    return " ".join(str(c.get("message") or "") for c in status.get("schedulingConditions") or ())


def test_reclaim_takes_at_most_the_budget_of_replicas_and_the_rest_from_unprotected_pods(
        cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    qa, qb = f"qa-{suffix}", f"qb-{suffix}"
    apply(cluster, namespace, [queue(f"org-{suffix}"), queue(qa, f"org-{suffix}", 0), queue(qb, f"org-{suffix}", 2)])
    idle = free_gpus(cluster)
    assert idle >= 8, f"the cluster needs idle GPUs for this test, has {idle}"
    # A borrows the whole idle cluster: training pods, then an inference Deployment of 4 (the newest, so without
    # a budget reclaim would take its replicas first) that a PDB of minAvailable 3 protects.
    apply(cluster, namespace, [deployment("train", qa, idle - 4, 1, "train")])
    wait_for("the training pods to run",
             lambda: len(running(pods(cluster, namespace, "app=train"))) == idle - 4 or None, timeout=180)
    apply(cluster, namespace, [deployment("serve", qa, 4, 1, "train"), pdb("serve", "serve", min_available=3)])
    wait_for("4 replicas to run", lambda: len(running(pods(cluster, namespace, "app=serve"))) == 4 or None,
             timeout=120)
    wait_for("the budget to allow 1 disruption", lambda: budget_settled(cluster, namespace, "serve", 4, 1))
    mark = audit_mark(cluster)

    # B submits 2 GPUs (two one-GPU pods), within its quota: reclaim takes 2 GPUs from A.
    apply(cluster, namespace, [deployment("owner", qb, 2, 1, "train")])
    fewest = 4
    deadline = time.monotonic() + 120
    while len(running(pods(cluster, namespace, "app=owner"))) < 2:
        assert time.monotonic() < deadline, "the owner pods did not run"
        fewest = min(fewest, len(running(pods(cluster, namespace, "app=serve"))))
        time.sleep(0.3)
    evicted = {e["involvedObject"]["name"]: e["message"] for e in pod_evictions(cluster, namespace)}
    assert len(evicted) == 2, evicted
    replicas = [name for name in evicted if name.startswith("serve-")]
    assert len(replicas) <= 1, evicted  # the budget allowed one; the other GPU came from a training pod
    assert fewest >= 3, f"{fewest} replicas running at some point"
    for name in replicas:
        assert f"PodDisruptionBudget {namespace}/serve (1 disruption allowed) covers it" in evicted[name]
    # Each victim cost one eviction request (no delete by the scheduler).
    assert audited(cluster, mark, namespace=namespace)["POST pods/eviction"] == 2


def test_a_refused_eviction_leaves_the_preemptor_pending_and_evicts_nothing_else_for_it(
        cluster: Cluster, namespace: str) -> None:
    q = f"refuse-{uuid.uuid4().hex[:6]}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=4)
    apply(cluster, namespace, [queue(q)])
    # The node: 3 replicas a PDB allows no disruption of, and one unprotected training pod.
    serve = deployment("serve", q, 3, 1, "train", selector)
    apply(cluster, namespace, [serve, pdb("serve", "serve", max_unavailable=0),
                               bare_pod("batch", q, 1, "train", selector)])
    wait_for("the node to be full", lambda: len(running(pods(cluster, namespace))) == 4 or None, timeout=120)
    wait_for("the budget to allow nothing", lambda: budget_settled(cluster, namespace, "serve", 3, 0))
    first = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, namespace)}

    # A higher-priority 2-GPU pod: the only plan is the training pod plus a replica, whose eviction is refused.
    apply(cluster, namespace, [bare_pod("urgent", q, 2, "build-preemptible", selector)])
    wait_for("a refused eviction on the preemptor", lambda: [
        e for e in events(cluster, namespace, "EvictionRefused") if e["involvedObject"]["kind"] == "PodGroup"])
    message = wait_for("the preemptor to say why it waits", lambda: (
        text if "refused by the API server" in (text := podgroup_message(cluster, namespace, "urgent")) else None))
    assert "disruption budget" in message, message
    time.sleep(3)
    # Nothing left: not the refused replica, and not the training pod planned with it (it was never evicted).
    assert pod_evictions(cluster, namespace) == []
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in running(pods(cluster, namespace))}
    assert {k: v for k, v in now.items() if k != "urgent"} == first
    assert "urgent" not in now


def test_a_preemptor_whose_priority_class_never_preempts_evicts_nothing_and_says_so(
        cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    q, polite = f"never-{suffix}", f"polite-{suffix}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=2)
    never = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": polite},
             "value": 90, "preemptionPolicy": "Never"}
    apply(cluster, namespace, [queue(q), never, bare_pod("low", q, 2, "train", selector)])
    wait_for("the low-priority pod to run", lambda: running(pods(cluster, namespace, "app=low")) or None,
             timeout=120)
    apply(cluster, namespace, [bare_pod("polite", q, 2, polite, selector, spec_class=True)])
    assert cluster.get_json("pod", "polite", namespace=namespace)["spec"].get("preemptionPolicy") == "Never"
    message = wait_for("the preemptor to say why it waits", lambda: (
        text if "preemptionPolicy Never" in (text := podgroup_message(cluster, namespace, "polite")) else None))
    assert f"its PriorityClass {polite} has preemptionPolicy Never" in message and "evicts no other" in message
    assert pod_evictions(cluster, namespace) == [] and running(pods(cluster, namespace, "app=low"))
    why = subprocess.run([sys.executable, "-m", "operators.cli", "why", "pod", "polite", "-n", namespace,
                          "-o", "json"], capture_output=True, text=True, env=_env(cluster), timeout=300)
    report = json.loads(why.stdout)
    assert "PreemptionPolicyNever" in [r["reason"] for r in report["reasons"]], report
