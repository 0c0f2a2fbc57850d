"""Gangs and the cluster autoscaler, live: `kai dev up --autoscaler` (ProvisioningRequest CRD + test provisioner).

Each test submits the repo's example RayJob (examples/rayjob-provisioning.yaml), created suspended and opted into
provisioning, with a GPU gang larger than every GPU the cluster has, so that it only fits on nodes the test
provisioner adds. The provisioner is steered through the request's parameters (the workload's
`provisioning.kai.scheduler/<name>` annotations): delay, failing attempts, partial provisioning. Nodes it added
are deleted after each test.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import TEST_LABEL, Cluster, load_yaml, poll, wait_for

pytestmark = pytest.mark.cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rayjob-provisioning.yaml"
GPU = "nvidia.com/gpu"
PROVREQ = "provisioningrequests.autoscaling.x-k8s.io"
PROVISIONER_NODES = "kai.dev/provisioned-by=test-provisioner"
PERIOD = 1.0  # the scheduler's default schedule period


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def autoscaled(cluster: Cluster) -> Iterator[Cluster]:
    crd = cluster.kubectl("get", "crd", PROVREQ, check=False)
    assert crd.returncode == 0, "the cluster must run with the autoscaler: `kai dev up --autoscaler`"
    yield cluster
    cluster.kubectl("delete", "nodes", "-l", PROVISIONER_NODES, "--wait=false", check=False)


def cluster_gpus(cluster: Cluster) -> int:
    nodes = cluster.get_json("nodes")["items"]
    return sum(int((n["status"].get("allocatable") or {}).get(GPU, 0)) for n in nodes)


def submit(cluster: Cluster, namespace: str, parameters: dict[str, str], missing: int = 1) -> tuple[str, str, int]:
    """The example RayJob in a queue of this test, `missing` workers past the cluster's GPUs; (name, uid, pods)."""
    docs = load_yaml(EXAMPLE)
    queues = [d for d in docs if d["kind"] == "Queue"]
    job = next(d for d in docs if d["kind"] == "RayJob")
    names = {q["metadata"]["name"]: f"{namespace}-{q['metadata']['name']}" for q in queues}
    for q in queues:
        q["metadata"]["name"] = names[q["metadata"]["name"]]
        q["metadata"].setdefault("labels", {})[TEST_LABEL] = "true"
        if q["spec"].get("parentQueue"):
            q["spec"]["parentQueue"] = names[q["spec"]["parentQueue"]]
    job["metadata"]["labels"]["kai.scheduler/queue"] = names["team-a"]
    for key, value in parameters.items():
        job["metadata"]["annotations"][f"provisioning.kai.scheduler/{key}"] = value
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    per_worker = int(worker["template"]["spec"]["containers"][0]["resources"]["requests"][GPU])
    workers = math.ceil(cluster_gpus(cluster) / per_worker) + missing  # more GPUs than exist
    worker["replicas"] = worker["minReplicas"] = worker["maxReplicas"] = workers
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(queues))
    created = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=yaml.safe_dump(job),
                                         namespace=namespace).stdout)
    return created["metadata"]["name"], created["metadata"]["uid"], workers + 1


def requests(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cluster.get_json(PROVREQ, namespace=namespace)["items"]
    return out


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind and c["status"] == "True"), None)


def pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cluster.get_json("pods", namespace=namespace)["items"]
    return out


def bound(cluster: Cluster, namespace: str) -> list[str]:
    return [p["metadata"]["name"] for p in pods(cluster, namespace) if p["spec"].get("nodeName")]


def rayjob_events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cluster.get_json(
        "events", "--field-selector", f"involvedObject.kind=RayJob,involvedObject.name={name}",
        namespace=namespace)["items"]
    return out


def admitted(cluster: Cluster, namespace: str, job: str, pods_wanted: int) -> None:
    """The RayJob was un-suspended by KAI with an event, and all its gang's pods exist (none bound yet)."""
    spec = wait_for("the RayJob to be admitted", lambda: (
        not cluster.get_json("rayjobs.ray.io", job, namespace=namespace)["spec"].get("suspend")))
    assert spec
    events = [e for e in rayjob_events(cluster, namespace, job) if e["reason"] == "Admitted"]
    assert events and f"the gang of {pods_wanted} pods" in events[0]["message"], events
    poll(lambda: len(pods(cluster, namespace)) >= pods_wanted, f"{pods_wanted} pods of the gang", timeout=90)


def no_pod_bound_until(cluster: Cluster, namespace: str, what: str, done: Any, timeout: float = 90) -> Any:
    """Poll `done` until truthy, asserting that no pod was bound before it held.

    Pods are read first: a bind seen before `done` holds would still be seen when `done` turns true just after.
    """
    deadline = time.monotonic() + timeout
    while True:
        seen_bound = bound(cluster, namespace)
        result = done()
        if result:
            return result
        assert seen_bound == [], f"pods bound while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def podgroup(cluster: Cluster, namespace: str) -> dict[str, Any]:
    (pg,) = cluster.get_json("podgroups.scheduling.run.ai", namespace=namespace)["items"]
    return pg  # type: ignore[no-any-return]


def test_rayjob_gang_gets_one_request_and_binds_once_provisioned(autoscaled: Cluster, namespace: str) -> None:
    cluster = autoscaled
    job, uid, n = submit(cluster, namespace, {"delay-seconds": "8"})
    admitted(cluster, namespace, job, n)
    # Exactly one request for the whole gang, owned by its PodGroup; no pod binds before the nodes arrive.
    (req,) = no_pod_bound_until(cluster, namespace, "the ProvisioningRequest", lambda: requests(cluster, namespace))
    pg = podgroup(cluster, namespace)
    assert pg["metadata"]["name"] == f"pg-{job}-{uid}"
    assert req["metadata"]["name"] == f"{pg['metadata']['name']}-provisioning-1"
    assert req["metadata"]["ownerReferences"][0]["uid"] == pg["metadata"]["uid"]
    assert req["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert req["spec"]["parameters"]["ValidUntilSeconds"] == "3600"
    assert sorted(p["count"] for p in req["spec"]["podSets"]) == [1, n - 1]  # head and workers: two shapes

    # No pod binds before the request reports Provisioned (the provisioner's event outlives the request,
    # which goes as soon as the gang runs).
    def outcomes() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = cluster.get_json(
            "events", "--field-selector", "involvedObject.kind=ProvisioningRequest", namespace=namespace)["items"]
        return out

    no_pod_bound_until(cluster, namespace, "Provisioned=True", lambda: outcomes() or any(
        condition(r, "Provisioned") for r in requests(cluster, namespace)))
    wait_for("every pod of the gang to be bound", lambda: len(bound(cluster, namespace)) == n, timeout=90)
    events = outcomes()
    assert [(e["involvedObject"]["name"], e["reason"]) for e in events] == [
        (req["metadata"]["name"], "Provisioned")], "one request, provisioned once"
    since = ts(events[0]["firstTimestamp"])
    binds = cluster.get_json("bindrequests.scheduling.run.ai", namespace=namespace)["items"]
    assert len(binds) == n
    created = [ts(b["metadata"]["creationTimestamp"]) for b in binds]
    # All bound within two cycles of Provisioned (timestamps have whole seconds) ...
    assert since <= min(created) and max(created) - since <= 2 * PERIOD + 1, (created, since)
    # ... every pod on a node the provisioner added for it, but for as many pods as other workloads' pods took
    # those nodes before the gang was placed: the new nodes are preferred, not reserved, and the suite's cluster
    # is shared (a pod pending elsewhere may take a new node the moment it is Ready).
    nodes = {x["metadata"]["name"] for x in cluster.get_json("nodes", "-l", PROVISIONER_NODES)["items"]}
    placed = {b["spec"]["podName"]: b["spec"]["selectedNode"] for b in binds}
    elsewhere = sorted(pod for pod, node in placed.items() if node not in nodes)
    taken = sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}@{p['spec']['nodeName']}"
                   for p in cluster.get_json("pods", "--all-namespaces")["items"]
                   if p["spec"].get("nodeName") in nodes and p["metadata"]["namespace"] != namespace)
    assert len(elsewhere) <= len(taken), {"not on a new node": elsewhere, "new nodes taken": taken, "binds": placed}
    wait_for("the request to be deleted once the gang runs", lambda: requests(cluster, namespace) == [])
    wait_for("its PodTemplates to be deleted", lambda: cluster.get_json(
        "podtemplates", namespace=namespace)["items"] == [])


def test_failed_request_keeps_the_gang_pending_with_the_reason_and_is_retried(autoscaled: Cluster,
                                                                               namespace: str) -> None:
    cluster = autoscaled
    job, _, n = submit(cluster, namespace, {"delay-seconds": "4", "fail-attempts": "1"})
    admitted(cluster, namespace, job, n)

    def failed_and_explained() -> dict[str, Any] | None:
        conditions = (podgroup(cluster, namespace).get("status") or {}).get("schedulingConditions") or []
        for c in conditions:
            for r in c.get("reasons") or []:
                if r["reason"] == "ProvisioningRequestFailed":
                    return r  # type: ignore[no-any-return]
        return None
    reason = no_pod_bound_until(cluster, namespace, "the failure on the PodGroup", failed_and_explained)
    assert "-provisioning-1 Failed: OutOfCapacity: test provisioner: told to fail attempt 1" in reason["message"]
    # Retried after the backoff with a new attempt, which provisions; the gang then runs whole.
    retried = no_pod_bound_until(cluster, namespace, "attempt 2", lambda: [
        r for r in requests(cluster, namespace) if r["metadata"]["name"].endswith("-provisioning-2")], timeout=60)
    assert retried[0]["metadata"]["annotations"]["kai.scheduler/provisioning-attempt"] == "2"
    assert not [r for r in requests(cluster, namespace) if r["metadata"]["name"].endswith("-provisioning-1")]
    wait_for("every pod of the gang to be bound", lambda: len(bound(cluster, namespace)) == n, timeout=90)


def test_partial_provisioning_binds_nothing_and_deleting_the_rayjob_deletes_the_request(
        autoscaled: Cluster, namespace: str) -> None:
    cluster = autoscaled
    # Three workers' nodes are missing; the provisioner adds two nodes (the head's and one worker's).
    job, _, n = submit(cluster, namespace, {"delay-seconds": "1", "partial": "2"}, missing=3)
    admitted(cluster, namespace, job, n)

    def partial() -> dict[str, Any] | None:
        for r in requests(cluster, namespace):
            for c in (r.get("status") or {}).get("conditions") or []:
                if c["type"] == "Provisioned" and c["reason"] == "PartiallyProvisioned":
                    return r
        return None
    req = no_pod_bound_until(cluster, namespace, "partial provisioning", partial)
    tag = req["metadata"]["uid"]
    assert tag
    # The two new nodes are Ready and schedulable; still no pod of the gang binds for several cycles.
    added = wait_for("the 2 partial nodes to be Ready", lambda: [
        x for x in cluster.get_json("nodes", "-l", PROVISIONER_NODES)["items"]
        if condition(x, "Ready")] if len(cluster.get_json("nodes", "-l", PROVISIONER_NODES)["items"]) == 2 else None)
    assert len(added) == 2
    settle = time.monotonic() + 8 * PERIOD
    no_pod_bound_until(cluster, namespace, "8 cycles", lambda: time.monotonic() > settle)
    assert len(requests(cluster, namespace)) == 1
    # Deleting the RayJob deletes the request (and its PodTemplates).
    cluster.kubectl("delete", "rayjobs.ray.io", job, "--wait=false", namespace=namespace)
    wait_for("the request to be deleted with the RayJob", lambda: requests(cluster, namespace) == [], timeout=90)
    wait_for("its PodTemplates to be deleted", lambda: cluster.get_json(
        "podtemplates", namespace=namespace)["items"] == [], timeout=60)


def test_rayjob_stays_suspended_until_its_gang_fits_its_queue(autoscaled: Cluster, namespace: str) -> None:
    cluster = autoscaled
    docs = load_yaml(EXAMPLE)
    job = next(d for d in docs if d["kind"] == "RayJob")
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
             "metadata": {"name": f"{namespace}-small", "labels": {TEST_LABEL: "true"}},
             "spec": {"resources": {"cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                    "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                    "gpu": {"quota": 8, "limit": 8, "overQuotaWeight": 1}}}}
    job["metadata"]["labels"]["kai.scheduler/queue"] = queue["metadata"]["name"]
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker["replicas"] = worker["minReplicas"] = worker["maxReplicas"] = 2  # 16 GPUs over a limit of 8
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(queue))
    name = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=yaml.safe_dump(job),
                                      namespace=namespace).stdout)["metadata"]["name"]

    def reasons() -> list[str]:
        return [e["reason"] for e in rayjob_events(cluster, namespace, name)]
    wait_for("the waiting decision on the RayJob", lambda: "WaitingForQuota" in reasons())
    (waiting,) = [e for e in rayjob_events(cluster, namespace, name) if e["reason"] == "WaitingForQuota"]
    assert waiting["message"] == (f"RayJob stays suspended: its gang of 3 pods needs 16 GPUs; queue "
                                  f"'{queue['metadata']['name']}' has 0 allocated of a limit of 8")
    time.sleep(3)
    assert cluster.get_json("rayjobs.ray.io", name, namespace=namespace)["spec"]["suspend"] is True
    assert pods(cluster, namespace) == [], "no head pod while the workers cannot start"
    # Room in the queue: admitted, with the event saying why.
    queue["spec"]["resources"]["gpu"]["limit"] = 16
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(queue))
    admitted(cluster, namespace, name, 3)
