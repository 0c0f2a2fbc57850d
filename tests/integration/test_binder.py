"""The binder against the real API server: BindRequests become bound pods, fractional pods share
one GPU reservation, failures are reported, and a binder killed mid-burst loses and repeats nothing.

The tests play the scheduler: they create kai-scheduler pods and their BindRequests themselves. The pods carry a
queue label naming no queue, so a scheduler running in the same cluster leaves them alone. The module runs its own
binder process (the cluster's own, if `kai dev up` started one, is paused meanwhile), which the restart test kills
and starts again.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.conftest import TEST_LABEL, Cluster
from tests.support import audit_mark, audited, reconciles, settled

pytestmark = pytest.mark.cluster

T = TypeVar("T")
NO_QUEUE = "binder-test-no-such-queue"
RESERVATION_NS = "kai-resource-reservation"
GROUP_LABEL = "runai-gpu-group"
RESERVE_ANNOTATION = "run.ai/reserve_for_gpu_index"
REPO = Path(__file__).resolve().parents[2]


def _wait(predicate: Callable[[], T], timeout: float = 60, interval: float = 0.3) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BinderProcess:
    """A binder subprocess this module controls (start, SIGKILL, stop)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = self.probe_port = 0
        self.log = Path(tempfile.mkdtemp(prefix="kai-binder-test-")) / "binder.log"

    def start(self, *extra: str) -> None:
        assert self.proc is None or self.proc.poll() is not None, "a binder is running already"
        self.metrics_port, self.probe_port = _free_port(), _free_port()
        argv = [sys.executable, "-m", "operators.cli", "run", "binder", f"--kubeconfig={self.kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}", *extra]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = _wait(lambda: self._get(f"http://127.0.0.1:{self.probe_port}/readyz") == "ok", timeout=60)
        assert ready, f"binder did not become ready:\n{self.tail()}"

    def _get(self, url: str) -> str | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"binder exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    def metrics(self) -> str:
        return self._get(f"http://127.0.0.1:{self.metrics_port}/metrics") or ""

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def _cluster_runs_binder(cluster: Cluster) -> bool:
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    pid = (state.pids if state else {}).get("binder")
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def binder(cluster: Cluster) -> Iterator[BinderProcess]:
    """A binder process this module controls; the cluster's own binder (if any) is paused meanwhile."""
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    paused: list[str] = []
    if state is not None and _cluster_runs_binder(cluster):
        paused = dev.stop_component(state, "binder")
    proc = BinderProcess(cluster.kubeconfig)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        if state is not None and paused:
            dev.start_component(state, "binder", paused)


# --- objects as the scheduler and the admission webhook would write them ---------------------------------
def pod_manifest(name: str, *, fraction: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}
    metadata: dict[str, Any] = {"name": name, "labels": {"kai.scheduler/queue": NO_QUEUE}}
    if fraction is not None:
        prefix = f"{name}-abcdefg-shared-gpu"
        metadata["annotations"] = {"gpu-fraction": fraction, "runai/shared-gpu-configmap": prefix}
        # What the admission webhook injects (it keeps an existing prefix, so running it changes nothing).
        container["env"] = [{"name": var, "valueFrom": {"configMapKeyRef": {"name": f"{prefix}-0", "key": var}}}
                            for var in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")]
        container["envFrom"] = [{"configMapRef": {"name": f"{prefix}-0-evar", "optional": False}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [container]}}


def bindrequest(pod: dict[str, Any], node: str, *, groups: list[str] | None = None,
                portion: str = "0.00", resource_type: str | None = None) -> dict[str, Any]:
    meta = pod["metadata"]
    rtype = resource_type or ("Fraction" if groups else "Regular")
    return {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": {"selected-node": node},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta["uid"]}]},
            "spec": {"podName": meta["name"], "selectedNode": node, "receivedResourceType": rtype,
                     "receivedGPU": {"count": 1 if groups else 0, "portion": portion},
                     "selectedGPUGroups": groups or []}}


def create(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = cluster.kubectl("create", "-f", "-", "-o", "json", input=yaml.safe_dump_all(docs), namespace=namespace)
    # Several documents come back as concatenated JSON objects.
    decoder, text, objects, at = json.JSONDecoder(), out.stdout, [], 0
    while text[at:].strip():
        obj, end = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        objects.extend(obj["items"] if obj.get("kind") == "List" else [obj])
        at = end
    return objects


def create_pods(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in create(cluster, namespace, docs)}


def fake_nodes(cluster: Cluster) -> list[str]:
    nodes = cluster.get_json("nodes", "-l", f"kai.dev/fake-node=true,run.ai/fake.gpu=true,!{TEST_LABEL}")["items"]
    names = sorted(n["metadata"]["name"] for n in nodes)
    assert names, "the cluster has no fake GPU nodes"
    return names


def bindrequests(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    return {br["metadata"]["name"]: br for br in cluster.get_json("bindrequests", namespace=namespace)["items"]}


def pods(cluster: Cluster, namespace: str, *selector: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.get_json("pods", *selector, namespace=namespace)["items"]}


def events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.get_json("events", namespace=namespace)["items"])


def reservation_pods(cluster: Cluster, group: str | None = None) -> list[dict[str, Any]]:
    selector = f"{GROUP_LABEL}={group}" if group else GROUP_LABEL
    items = cluster.get_json("pods", "-l", selector, namespace=RESERVATION_NS)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def all_succeeded(cluster: Cluster, namespace: str, names: list[str]) -> bool:
    brs = bindrequests(cluster, namespace)
    return all((brs.get(n, {}).get("status") or {}).get("phase") == "Succeeded" for n in names)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def configmap(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(cluster.get_json("configmap", name, namespace=namespace))


# --- tests -------------------------------------------------------------------------------------------------
def test_regular_pod_is_bound_with_status_condition_and_event(cluster: Cluster, namespace: str,
                                                             binder: BinderProcess) -> None:
    node = fake_nodes(cluster)[0]
    pod = create_pods(cluster, namespace, [pod_manifest("plain")])["plain"]
    create(cluster, namespace, [bindrequest(pod, node)])

    assert _wait(lambda: all_succeeded(cluster, namespace, ["plain"])), bindrequests(cluster, namespace)
    bound = pods(cluster, namespace)["plain"]
    assert bound["spec"]["nodeName"] == node
    assert bound["metadata"]["annotations"]["received-resource-type"] == "Regular"
    podbound = condition(bound, "PodBound")
    assert podbound is not None and (podbound["status"], podbound["reason"]) == ("True", "Bound")
    bound_events = _wait(lambda: [e for e in events(cluster, namespace)
                                  if e["involvedObject"]["name"] == "plain" and e["reason"] == "Bound"])
    assert len(bound_events) == 1
    assert bound_events[0]["type"] == "Normal"
    assert bound_events[0]["message"] == f"Pod bound successfully to node {node}"
    assert bound_events[0]["source"]["component"] == "binder"
    assert "reason" not in bindrequests(cluster, namespace)["plain"]["status"]
    assert 'kai_binder_binds_total{result="success"}' in binder.metrics()
    assert "kai_binder_bind_latency_milliseconds_bucket" in binder.metrics()


# What a plain bind costs the API server: the reads and writes the binder makes for one BindRequest.
PLAIN_BIND_REQUESTS = ("GET pods", "GET nodes", "GET bindrequests", "PATCH pods/status", "POST pods/binding",
                       "PATCH bindrequests/status", "POST events", "PATCH events")


def test_a_plain_bind_reads_nothing_and_makes_each_write_once(cluster: Cluster, namespace: str,
                                                              binder: BinderProcess) -> None:
    node = bare_node(cluster, namespace)
    pod = create_pods(cluster, namespace, [pod_manifest("once")])["once"]

    start = audit_mark(cluster)

    def counts() -> dict[str, int]:  # the binder's own requests (the cluster's binder is paused), kwok's left out
        spent = audited(cluster, start, agent="kai-binder")
        return {"reconciles": reconciles(binder.metrics_port, "bindrequests"),
                **{key: spent[key] for key in PLAIN_BIND_REQUESTS}}

    before = settled(counts, "the binder's reconciles and requests")
    create(cluster, namespace, [bindrequest(pod, node)])
    assert _wait(lambda: all_succeeded(cluster, namespace, ["once"])), bindrequests(cluster, namespace)
    after = settled(counts, "the binder after the bind")
    # The pod, its node and the BindRequest come from the informers: nothing is read. One reconcile writes the
    # PodBound condition, the binding, one status (Succeeded) and one `Bound` event; the echo of its own status
    # write reconciles nothing.
    spent = {key: after[key] - before[key] for key in after}
    assert spent == {"reconciles": 1, "GET pods": 0, "GET nodes": 0, "GET bindrequests": 0,
                     "PATCH pods/status": 1, "POST pods/binding": 1, "PATCH bindrequests/status": 1,
                     "POST events": 1, "PATCH events": 0}, spent
    bound = pods(cluster, namespace)["once"]
    podbound = condition(bound, "PodBound")
    assert podbound is not None and (podbound["status"], podbound["reason"]) == ("True", "Bound")
    assert len([e for e in events(cluster, namespace) if e["reason"] == "Bound"]) == 1


def bare_node(cluster: Cluster, namespace: str) -> str:
    """A node no node agent manages (kwok handles annotated nodes only): nobody but the binder writes the status
    of a pod bound there. Labelled for the namespace fixture to delete it."""
    name = f"binder-bare-{namespace}"
    create(cluster, namespace, [{"apiVersion": "v1", "kind": "Node",
                                 "metadata": {"name": name, "labels": {TEST_LABEL: "true"}}}])
    return name


def refuse_status_writes(cluster: Cluster, namespace: str, name: str) -> None:
    """An admission policy refusing every BindRequest status write in `namespace` (and the create of a BindRequest
    named `policy-probe`, which shows, with a server-side dry run, that the policy is in force)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                     "resourceRules": [{"apiGroups": ["scheduling.run.ai"], "apiVersions": ["*"],
                                        "operations": ["UPDATE"], "resources": ["bindrequests/status"]},
                                       {"apiGroups": ["scheduling.run.ai"], "apiVersions": ["*"],
                                        "operations": ["CREATE"], "resources": ["bindrequests"]}]},
                 "validations": [{"expression": "request.operation == 'CREATE' && "
                                                "object.metadata.name != 'policy-probe'",
                                  "message": "BindRequest status writes are refused by the test"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all([policy, binding]))
    probe = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
             "metadata": {"name": "policy-probe", "namespace": namespace},
             "spec": {"podName": "policy-probe", "selectedNode": "none", "receivedResourceType": "Regular"}}

    def in_force() -> bool:
        proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe),
                               namespace=namespace, check=False)
        return proc.returncode != 0 and "refused by the test" in proc.stderr

    assert _wait(in_force, timeout=30), "the admission policy did not come into force"


def test_a_refused_status_write_is_redone_without_binding_again(cluster: Cluster, namespace: str,
                                                                binder: BinderProcess) -> None:
    node = bare_node(cluster, namespace)
    pod = create_pods(cluster, namespace, [pod_manifest("redo")])["redo"]
    policy = f"binder-test-refuse-status-{namespace}"

    start = audit_mark(cluster)

    def counts() -> dict[str, int]:
        spent = audited(cluster, start, agent="kai-binder")
        return {key: spent[key] for key in ("POST pods/binding", "PATCH pods/status", "PATCH bindrequests/status",
                                            "POST events", "PATCH events")}

    try:
        refuse_status_writes(cluster, namespace, policy)
        before = settled(counts, "the binder's requests")
        create(cluster, namespace, [bindrequest(pod, node)])
        # The pod is bound, and the binder tries to write the status (and is refused) at least once.
        assert _wait(lambda: pods(cluster, namespace)["redo"]["spec"].get("nodeName") == node)
        assert _wait(lambda: counts()["PATCH bindrequests/status"] > before["PATCH bindrequests/status"])
        assert (bindrequests(cluster, namespace)["redo"].get("status") or {}).get("phase") != "Succeeded"
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy,
                        "--ignore-not-found", check=False)
    # Nothing changes the BindRequest or the pod from here: only the binder's own retry writes the status.
    assert _wait(lambda: all_succeeded(cluster, namespace, ["redo"]), timeout=90), bindrequests(cluster, namespace)
    after = settled(counts, "the binder after the retry")
    spent = {key: after[key] - before[key] for key in after}
    # The retry finds the pod bound and only writes the status: one binding, one PodBound condition, one event.
    assert spent["PATCH bindrequests/status"] >= 2, spent
    assert {key: n for key, n in spent.items() if key != "PATCH bindrequests/status"} == {
        "POST pods/binding": 1, "PATCH pods/status": 1, "POST events": 1, "PATCH events": 0}, spent
    assert pods(cluster, namespace)["redo"]["spec"]["nodeName"] == node
    assert len([e for e in events(cluster, namespace) if e["reason"] == "Bound"]) == 1


def test_fractional_pair_shares_one_reservation_and_releases_it(cluster: Cluster, namespace: str,
                                                                binder: BinderProcess) -> None:
    node = fake_nodes(cluster)[-1]
    group = str(uuid.uuid4())
    created = create_pods(cluster, namespace, [pod_manifest(n, fraction="0.5") for n in ("half-a", "half-b")])
    mark = audit_mark(cluster)
    create(cluster, namespace, [bindrequest(p, node, groups=[group], portion="0.50") for p in created.values()])

    assert _wait(lambda: all_succeeded(cluster, namespace, ["half-a", "half-b"])), bindrequests(cluster, namespace)
    # The group's reservation pod is found (and its users seen) in the binder's informers: the pair's binds LIST
    # no pods (a LIST per fraction bind, served at quorum over every pod, is what the binder cost at 1,000 nodes).
    assert audited(cluster, mark, agent="kai-binder")["LIST pods"] == 0
    reservations = reservation_pods(cluster, group)
    assert len(reservations) == 1, reservations
    reservation = reservations[0]
    assert reservation["metadata"]["name"].startswith(f"gpu-reservation-{node}-")
    assert reservation["metadata"]["labels"]["app"] == "kai-resource-reservation"
    assert reservation["spec"]["nodeName"] == node
    resources = reservation["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == "1" and resources["limits"]["nvidia.com/gpu"] == "1"
    device = reservation["metadata"]["annotations"][RESERVE_ANNOTATION]
    assert device.startswith("GPU-")

    bound = pods(cluster, namespace)
    for name in ("half-a", "half-b"):
        pod = bound[name]
        assert pod["spec"]["nodeName"] == node
        assert pod["metadata"]["labels"][GROUP_LABEL] == group
        assert pod["metadata"]["annotations"]["received-resource-type"] == "Fraction"
        prefix = pod["metadata"]["annotations"]["runai/shared-gpu-configmap"]
        capabilities = configmap(cluster, namespace, f"{prefix}-0")
        assert capabilities["data"]["NVIDIA_VISIBLE_DEVICES"] == device
        assert capabilities["data"]["GPU_PORTION"] == "0.50"
        assert capabilities["data"]["RUNAI_NUM_OF_GPUS"] == "0.50"
        assert capabilities["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"]}]
        direct_env = configmap(cluster, namespace, f"{prefix}-0-evar")
        assert direct_env["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]

    # One user leaving keeps the GPU reserved; the last one leaving releases it.
    cluster.kubectl("delete", "pod", "half-a", "--wait=true", namespace=namespace)
    time.sleep(2)
    assert [p["metadata"]["name"] for p in reservation_pods(cluster, group)] == [reservation["metadata"]["name"]]
    cluster.kubectl("delete", "pod", "half-b", "--wait=true", namespace=namespace)
    assert _wait(lambda: not reservation_pods(cluster, group), timeout=30), "reservation pod not released"


def test_bind_to_missing_node_fails_with_the_reason(cluster: Cluster, namespace: str,
                                                   binder: BinderProcess) -> None:
    missing = f"no-such-node-{uuid.uuid4().hex[:6]}"
    pod = create_pods(cluster, namespace, [pod_manifest("lost")])["lost"]
    create(cluster, namespace, [bindrequest(pod, missing)])
    message = f'Failed to bind pod {namespace}/lost to node {missing}: nodes "{missing}" not found'

    failed = _wait(lambda: [e for e in events(cluster, namespace) if e["reason"] == "BindingError"])
    assert failed and failed[0]["type"] == "Warning" and failed[0]["message"] == message
    assert failed[0]["source"]["component"] == "binder"
    # A running scheduler deletes failed BindRequests (and ones naming vanished nodes); check it if it is there.
    br = bindrequests(cluster, namespace).get("lost")
    if br is not None:
        assert br["status"] == {"phase": "Failed", "reason": f'nodes "{missing}" not found'}
    unbound = pods(cluster, namespace)["lost"]
    assert not unbound["spec"].get("nodeName")
    podbound = condition(unbound, "PodBound")
    assert podbound is not None and (podbound["status"], podbound["reason"]) == ("False", "BindingError")
    assert podbound["message"] == message


def test_fraction_request_without_groups_is_deleted(cluster: Cluster, namespace: str,
                                                   binder: BinderProcess) -> None:
    node = fake_nodes(cluster)[0]
    pod = create_pods(cluster, namespace, [pod_manifest("nogroup", fraction="0.5")])["nogroup"]
    create(cluster, namespace, [bindrequest(pod, node, resource_type="Fraction", portion="0.50")])

    assert _wait(lambda: "nogroup" not in bindrequests(cluster, namespace)), "invalid BindRequest not deleted"
    failed = [e for e in events(cluster, namespace) if e["reason"] == "BindingError"]
    assert failed and "invalid binding request" in failed[0]["message"]
    assert not pods(cluster, namespace)["nogroup"]["spec"].get("nodeName")


def test_real_gpu_node_waits_for_the_reservation_pod_to_report_its_gpu(cluster: Cluster, namespace: str,
                                                                     binder: BinderProcess) -> None:
    """On a node that is not a fake GPU node the device id comes from the reservation pod itself."""
    from operators.devcluster.nodes import NodeShape, node_manifest

    node = f"real-gpu-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "-f", "-", input=json.dumps(node_manifest(
        node, NodeShape(gpus=2), labels={"run.ai/fake.gpu": "false", TEST_LABEL: "true"})))
    group = str(uuid.uuid4())
    pod = create_pods(cluster, namespace, [pod_manifest("real", fraction="0.5")])["real"]
    create(cluster, namespace, [bindrequest(pod, node, groups=[group], portion="0.50")])

    reservation = _wait(lambda: reservation_pods(cluster, group), timeout=20)
    assert len(reservation) == 1
    assert RESERVE_ANNOTATION not in (reservation[0]["metadata"].get("annotations") or {})
    time.sleep(1)
    assert not pods(cluster, namespace)["real"]["spec"].get("nodeName"), "bound before the GPU was known"
    device = f"GPU-{uuid.uuid4()}"
    cluster.kubectl("annotate", "pod", reservation[0]["metadata"]["name"], f"{RESERVE_ANNOTATION}={device}",
                    namespace=RESERVATION_NS)

    assert _wait(lambda: all_succeeded(cluster, namespace, ["real"]), timeout=20), bindrequests(cluster, namespace)
    prefix = pod["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert configmap(cluster, namespace, f"{prefix}-0")["data"]["NVIDIA_VISIBLE_DEVICES"] == device
    assert pods(cluster, namespace)["real"]["spec"]["nodeName"] == node
    cluster.kubectl("delete", "pod", "real", "--wait=true", namespace=namespace)
    assert _wait(lambda: not reservation_pods(cluster, group), timeout=30), "reservation pod not released"


def test_reservation_that_never_reports_its_gpu_times_out_and_rolls_back(
        cluster: Cluster, namespace: str, binder: BinderProcess) -> None:
    from operators.devcluster.nodes import NodeShape, node_manifest

    node = f"silent-gpu-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "-f", "-", input=json.dumps(node_manifest(
        node, NodeShape(gpus=2), labels={"run.ai/fake.gpu": "false", TEST_LABEL: "true"})))
    binder.stop()
    binder.start("--resource-reservation-allocation-timeout=3")
    try:
        group = str(uuid.uuid4())
        pod = create_pods(cluster, namespace, [pod_manifest("silent", fraction="0.5")])["silent"]
        create(cluster, namespace, [bindrequest(pod, node, groups=[group], portion="0.50")])

        failed = _wait(lambda: [e for e in events(cluster, namespace) if e["reason"] == "BindingError"], timeout=30)
        assert failed, binder.tail()
        assert "failed waiting for GPU reservation pod to allocate: kai-resource-reservation/gpu-reservation-" \
            f"{node}-" in failed[0]["message"]
        br = bindrequests(cluster, namespace).get("silent")
        if br is not None:  # a running scheduler deletes failed requests at once (KAI's retry path)
            assert br["status"]["phase"] == "Failed"
            assert br["status"]["reason"].startswith("failed waiting for GPU reservation pod to allocate")
            # The binder retries while the request exists; the scheduler would now delete it, and so do we.
            cluster.kubectl("delete", "bindrequest", "silent", namespace=namespace, check=False)

        def rolled_back() -> bool:
            unbound = pods(cluster, namespace)["silent"]
            return (not unbound["spec"].get("nodeName") and not reservation_pods(cluster, group)
                    and GROUP_LABEL not in (unbound["metadata"].get("labels") or {}))

        assert _wait(rolled_back, timeout=20), "reservation pod or group label outlived the failed bind"
        prefix = pod["metadata"]["annotations"]["runai/shared-gpu-configmap"]
        assert cluster.kubectl("get", "configmap", f"{prefix}-0", namespace=namespace, check=False).returncode != 0
    finally:
        binder.stop()
        binder.start()


def test_binder_killed_mid_burst_binds_everything_exactly_once(cluster: Cluster, namespace: str,
                                                               binder: BinderProcess) -> None:
    nodes = fake_nodes(cluster)
    pairs, regular = 20, 160  # 200 pods: 20 GPU groups shared by two half-GPU pods each, 160 whole pods
    docs = [pod_manifest(f"r-{i:03d}") for i in range(regular)]
    docs += [pod_manifest(f"f-{i:02d}-{side}", fraction="0.5") for i in range(pairs) for side in "ab"]
    groups = {i: str(uuid.uuid4()) for i in range(pairs)}
    binder.kill()  # the requests pile up while no binder runs, as after a crash
    created = create_pods(cluster, namespace, docs)
    requests = [bindrequest(created[f"r-{i:03d}"], nodes[i % len(nodes)]) for i in range(regular)]
    requests += [bindrequest(created[f"f-{i:02d}-{side}"], nodes[i % len(nodes)], groups=[groups[i]],
                             portion="0.50") for i in range(pairs) for side in "ab"]
    create(cluster, namespace, requests)
    selected = {r["metadata"]["name"]: r["spec"]["selectedNode"] for r in requests}

    def succeeded() -> int:
        return sum((br.get("status") or {}).get("phase") == "Succeeded"
                   for br in bindrequests(cluster, namespace).values())

    def binds_so_far() -> float:
        lines = [line for line in binder.metrics().splitlines()
                 if line.startswith('kai_binder_binds_total{result="success"}')]
        return float(lines[0].split()[-1]) if lines else 0.0

    binder.start("--max-concurrent-reconciles=4")  # slower, so the kill lands mid-burst
    assert _wait(lambda: binds_so_far() >= 40, timeout=60, interval=0.01)
    binder.kill()
    done = succeeded()
    assert 0 < done < len(requests), f"the kill missed the burst ({done} of {len(requests)} done)"
    binder.start()
    assert _wait(lambda: succeeded() == len(requests), timeout=180), \
        f"{succeeded()} of {len(requests)} bound\n{binder.tail()}"

    final = pods(cluster, namespace)
    assert {n: p["spec"].get("nodeName") for n, p in final.items()} == selected
    for name, pod in final.items():
        podbound = condition(pod, "PodBound")
        assert podbound is not None and podbound["status"] == "True", name
    all_events = events(cluster, namespace)
    assert not [e for e in all_events if e["reason"] == "BindingError"]
    bound_events = [e for e in all_events if e["reason"] == "Bound"]
    per_pod = Counter(e["involvedObject"]["name"] for e in bound_events)
    assert max(per_pod.values()) == 1 and all((e.get("count") or 1) == 1 for e in bound_events)

    # No reservation without users, no user without its reservation, one reservation per GPU group.
    users = {g: [n for n, p in final.items() if p["metadata"].get("labels", {}).get(GROUP_LABEL) == g]
             for g in groups.values()}
    reservations = [p for p in reservation_pods(cluster) if p["metadata"]["labels"][GROUP_LABEL] in users]
    by_group = Counter(p["metadata"]["labels"][GROUP_LABEL] for p in reservations)
    assert by_group == dict.fromkeys(groups.values(), 1)
    configmaps = {c["metadata"]["name"]: c for c in cluster.get_json("configmaps", namespace=namespace)["items"]}
    for i, group in groups.items():
        assert sorted(users[group]) == [f"f-{i:02d}-a", f"f-{i:02d}-b"]
        reservation = next(p for p in reservations if p["metadata"]["labels"][GROUP_LABEL] == group)
        assert reservation["spec"]["nodeName"] == nodes[i % len(nodes)]
        device = reservation["metadata"]["annotations"][RESERVE_ANNOTATION]
        for name in users[group]:
            prefix = final[name]["metadata"]["annotations"]["runai/shared-gpu-configmap"]
            assert configmaps[f"{prefix}-0"]["data"]["NVIDIA_VISIBLE_DEVICES"] == device
    assert not [n for n, p in final.items() if n.startswith("r-") and GROUP_LABEL in p["metadata"].get("labels", {})]

    # The fractional pods leaving releases every reservation of this test.
    cluster.kubectl("delete", "pods", *[n for n in final if n.startswith("f-")], "--wait=false", namespace=namespace)
    assert _wait(lambda: not [p for p in reservation_pods(cluster)
                              if p["metadata"]["labels"][GROUP_LABEL] in users], timeout=60)
