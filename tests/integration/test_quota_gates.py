"""Quota gates, live (beyond KAI, issue 27): with admission `--quota-gates`, pods beyond their queue's limit wait
behind the scheduling gate `kai.scheduler/quota` and are never `Unschedulable` (the autoscaler adds no node for
them); raising the limit lets the scheduler lift the gates (one pod PATCH each) and bind them.

The suite's admission runs without the flag, so this test starts a second admission process with it and registers
it for its own namespace only.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.core import keys
from operators.devcluster import cluster as dev
from tests.integration.test_disruption import apply, isolated_nodes, pod_spec
from tests.support import Cluster, audit_mark, audited, labelled, poll, probe_status, settled

pytestmark = pytest.mark.cluster

COUNT = 100
PORT_OFFSET = 990  # above every component's ports (base + 800 + 10 per component)


def cpu_queue(name: str, cpu_limit: int) -> dict[str, Any]:
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": free, "memory": free,
                                   "cpu": {"quota": -1, "limit": cpu_limit, "overQuotaWeight": 1}}}}


def gated_pod(name: str, queue_name: str, selector: dict[str, str]) -> dict[str, Any]:
    spec = pod_spec(0, selector)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name}}, "spec": spec}


@pytest.fixture
def quota_gating_admission(cluster: Cluster, namespace: str) -> Iterator[None]:
    """A second admission process with --quota-gates, the mutating webhook for `namespace` only."""
    state = dev.load_state(cluster.name)
    assert state is not None
    base = state.ports["apiserver"] - 443 + PORT_OFFSET
    pki = Path(state.dir) / "pki"
    proc = subprocess.Popen(
        [sys.executable, "-m", "operators.cli", "run", "admission", "--quota-gates=true",
         f"--metrics-bind-address=127.0.0.1:{base}", f"--health-probe-bind-address=127.0.0.1:{base + 1}",
         f"--webhook-addr=127.0.0.1:{base + 2}", f"--cert-dir={pki / 'webhook'}"],
        env={**os.environ, "KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    name = f"kai-test-quota-gates-{namespace}"
    try:
        poll(lambda: probe_status(base + 1, "/readyz") == 200, "the quota-gating admission to be ready", timeout=60)
        webhook = {
            "name": "quota-gates.kai.test",
            "clientConfig": {"url": f"https://127.0.0.1:{base + 2}/mutate--v1-pod",
                             "caBundle": base64.b64encode((pki / "ca.crt").read_bytes()).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "matchConditions": [{"name": "scheduler-name-match",
                                 "expression": f"object.spec.schedulerName == '{keys.SCHEDULER_NAME}'"}]}
        cluster.kubectl("apply", "-f", "-", input=labelled([{
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": [webhook]}]))

        def gates_a_dry_run() -> bool:
            probe = gated_pod("probe", "none", {})
            out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", namespace=namespace,
                                  input=json.dumps(probe))
            gates = json.loads(out.stdout)["spec"].get("schedulingGates") or []
            return {"name": keys.QUOTA_GATE} in gates

        poll(gates_a_dry_run, "the API server to call the quota-gating webhook", timeout=30)
        yield
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found", check=False)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.get_json("pods", namespace=namespace)["items"])


def unschedulable(p: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in p["status"].get("conditions") or ())


def test_pods_beyond_the_limit_stay_gated_until_the_limit_rises(
        cluster: Cluster, namespace: str, quota_gating_admission: None) -> None:
    selector = isolated_nodes(cluster, namespace, 1, 0)  # 64 CPUs: room for every pod once quota allows
    apply(cluster, namespace, [cpu_queue(namespace, 0)])
    mark = audit_mark(cluster)
    cluster.kubectl("create", "-f", "-", namespace=namespace,
                    input=labelled([gated_pod(f"p-{i:03d}", namespace, selector) for i in range(COUNT)]))

    # Every pod waits behind the gate, with a PodGroup that says why (WaitingForQuota), and none is Unschedulable.
    def explained() -> bool:
        groups = cluster.get_json("podgroups", namespace=namespace)["items"]
        return len(groups) == COUNT and all(
            any(r.get("reason") == keys.REASON_WAITING_FOR_QUOTA
                for c in (g.get("status") or {}).get("schedulingConditions") or () for r in c.get("reasons") or ())
            for g in groups)

    poll(explained, "every PodGroup to say it waits for quota", timeout=90)
    now = pods(cluster, namespace)
    assert all({"name": keys.QUOTA_GATE} in (p["spec"].get("schedulingGates") or []) for p in now)
    assert not any(unschedulable(p) or p["spec"].get("nodeName") for p in now)

    apply(cluster, namespace, [cpu_queue(namespace, -1)])  # the limit rises: no limit
    poll(lambda: sum(p["status"].get("phase") == "Running" for p in pods(cluster, namespace)) == COUNT,
         f"{COUNT} pods Running", timeout=90)
    assert not any(p["spec"].get("schedulingGates") for p in pods(cluster, namespace))
    # The namespace's writes, by component (the audit log; kwok's Running, once or twice per pod as its watch races
    # the binder's patch, and other tests' leftovers are not the product's).
    def writes(agent: str) -> dict[str, int]:
        return {k: n for k, n in audited(cluster, mark, namespace=namespace, agent=agent).items()
                if k.split()[0] not in ("GET", "LIST")}

    spent = settled(lambda: {agent: writes(agent) for agent in ("kai-pod-grouper", "kai-scheduler", "kai-binder")},
                    "the components' writes")
    print("writes:", spent)
    # The pod-grouper's patch and the scheduler's lift: the gate costs one extra pod write per pod. No pod is marked
    # unschedulable (the scheduler writes no pod status); the binder writes PodBound once per pod. The wait is
    # explained once per PodGroup, not rewritten every cycle.
    assert spent["kai-pod-grouper"]["PATCH pods"] == COUNT, spent
    assert spent["kai-scheduler"]["PATCH pods"] == COUNT, spent
    assert spent["kai-scheduler"].get("PATCH pods/status", 0) == 0, spent
    assert spent["kai-binder"]["PATCH pods/status"] == COUNT, spent
    assert spent["kai-scheduler"]["PATCH podgroups/status"] == COUNT, spent
