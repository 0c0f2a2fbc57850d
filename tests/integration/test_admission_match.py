"""The pod webhooks' narrower matchConditions, live (issue 26): a pod reaches a webhook only when that webhook can
change or deny it, and every pod is admitted, denied or mutated exactly as when every kai-scheduler pod was reviewed.

Pods are created with server-side dry run: the API server runs the whole admission chain (webhooks with
`sideEffects: None` are called) and answers with the object it would store, and nothing is stored, so no later
UPDATE of a scheduled pod disturbs the review counters. The expected outcome of each pod is what the handlers
themselves (`mutate_pod`, `validate_pod`) decide for it, the behaviour of a configuration without the conditions.

The suite's admission runs with GPU sharing on and neither a GPU-pod runtime class nor quota gates, so a CREATE that
the validating condition proves valid (`podwebhooks.PROVEN_VALID_CREATE`) is reviewed once, by the mutating webhook;
every other sharing pod still reaches the validation, on CREATE and UPDATE, and is refused with KAI's message. A
webhook of another vendor that changes a pod after ours is staged with a small HTTPS server. Two more
admission processes (`--gpu-pod-runtime-class-name`, `--quota-gates`) are registered, mutating webhook only, for the
test's namespace, with the configuration `kai dev up` builds from their flags.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from operators.admission.mutate import mutate_pod
from operators.admission.validate import INVALID_GPU_FRACTION, NUM_DEVICES_WITHOUT_PORTION, validate_pod
from operators.core import keys, podwebhooks
from operators.devcluster import cluster as dev
from operators.devcluster import webhooks
from tests.support import Cluster, labelled, poll, probe_status

pytestmark = pytest.mark.cluster

PORT_OFFSET = 993  # after test_quota_gates' 990-992, above every component's ports (base + 800 + 10 per component)
LATER_WEBHOOK_OFFSET = 999  # the staged later webhook, after wider_admissions' 993-998
DENIED = 'admission webhook "admission.kai-scheduler.svc" denied the request: '

RUNTIME_CLASS = "kai-test-gpu"


def pod(name: str, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        gpus: int = 0, scheduler: str = keys.SCHEDULER_NAME) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {keys.GPU_RESOURCE: str(gpus)}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"schedulerName": scheduler, "containers": [container]}}


PLAIN = pod("plain")
WHOLE_GPU = pod("whole-gpu", gpus=1)
FRACTION = pod("fraction", annotations={keys.GPU_FRACTION: "0.5"})
GPU_MEMORY = pod("gpu-memory", annotations={keys.GPU_MEMORY: "1024"})
NUM_DEVICES_ONLY = pod("num-devices", annotations={keys.GPU_FRACTION_NUM_DEVICES: "2"})
BAD_DELAY = pod("bad-delay", labels={keys.PREEMPTION_DELAY: "soon"})
GOOD_DELAY = pod("good-delay", annotations={keys.PREEMPTION_DELAY: "5m"})
MPS_ONLY = pod("mps-only", annotations={keys.MPS: "true"})
FOREIGN_FRACTION = pod("foreign", annotations={keys.GPU_FRACTION: "0.5"}, scheduler="other-scheduler")


def reviews(metrics_port: int) -> dict[str, float]:
    """Pod reviews answered so far by one admission process, by webhook (mutate, validate)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {"mutate": 0.0, "validate": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kai_admission_requests_total" and sample.labels.get("webhook") in out:
                out[sample.labels["webhook"]] += sample.value
    return out


def dry_run(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The pod the API server would store (None when refused) and the refusal's text."""
    proc = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", namespace=namespace,
                           input=json.dumps(obj), check=False)
    return (json.loads(proc.stdout), "") if proc.returncode == 0 else (None, proc.stderr)


def _contains(actual: Any, expected: Any) -> bool:
    """`expected` is in `actual`: objects compared on expected's keys, lists by each expected item having a match (the
    API server adds defaults, its own admission plugins add items, later operations append)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(_contains(actual.get(k), v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and all(any(_contains(a, e) for a in actual) for e in expected)
    return bool(actual == expected)


def _at(doc: Any, pointer: str) -> Any:
    for token in pointer.lstrip("/").split("/")[:-1]:
        token = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc


def applied(stored: dict[str, Any], original: dict[str, Any], namespace: str, **flags: Any) -> bool:
    """Every operation the mutation handler makes for `original` shows in `stored` (the random ConfigMap suffix
    taken from `stored`), and the handler makes at least one."""
    prefix = ((stored.get("metadata") or {}).get("annotations") or {}).get(keys.SHARED_GPU_CONFIGMAP, "")
    suffix = prefix.removesuffix("-shared-gpu").rsplit("-", 1)[-1]
    ops = [op for op in mutate_pod(original, namespace, random_suffix=lambda: suffix, **flags)
           if op["path"] != "/metadata/namespace"]
    for op in ops:
        parent, last = _at(stored, op["path"]), op["path"].rsplit("/", 1)[-1].replace("~1", "/")
        if last == "-":
            if not any(_contains(item, op["value"]) for item in parent):
                return False
        elif not _contains(parent[int(last)] if isinstance(parent, list) else parent.get(last), op["value"]):
            return False
    return bool(ops)


def untouched(stored: dict[str, Any], original: dict[str, Any]) -> bool:
    return ((stored["metadata"].get("annotations") or {}) == original["metadata"]["annotations"]
            and stored["spec"]["containers"][0].get("env") is None and not stored["spec"].get("runtimeClassName")
            and not stored["spec"].get("schedulingGates")
            and not any("configMap" in v for v in stored["spec"].get("volumes") or []))


def test_only_pods_a_webhook_can_change_or_deny_reach_it(cluster: Cluster, namespace: str) -> None:
    state = dev.load_state(cluster.name)
    assert state is not None
    metrics = dev.component_ports(state.ports["apiserver"] - 443)["admission"]["metrics"]
    flags: dict[str, Any] = {"runtime_class_name": None}  # the suite's admission: sharing on, no runtime class

    # Plain, whole-GPU, well-delayed and foreign pods: the handlers leave them as they are (but the namespace,
    # which the API server sets before admission); admitted untouched, and reviewed only for the delay.
    before = reviews(metrics)
    for obj in (PLAIN, WHOLE_GPU, GOOD_DELAY, FOREIGN_FRACTION):
        assert [op["path"] for op in mutate_pod(obj, namespace, **flags)] in ([], ["/metadata/namespace"])
        assert validate_pod(obj, gpu_sharing_enabled=True) is None
        stored, refusal = dry_run(cluster, namespace, obj)
        assert stored is not None, refusal
        assert stored["metadata"]["namespace"] == namespace
        assert untouched(stored, obj), (obj["metadata"]["name"], stored)
    skipped = {k: v - before[k] for k, v in reviews(metrics).items()}
    assert skipped == {"mutate": 0, "validate": 1}, skipped  # the delay is validated (and admitted), nothing else

    # Sharing pods are wired (every operation the handler makes shows in the stored pod), reviewed once each: the
    # validating condition proves them valid.
    before = reviews(metrics)
    for obj in (FRACTION, GPU_MEMORY):
        stored, refusal = dry_run(cluster, namespace, obj)
        assert stored is not None, refusal
        assert applied(stored, obj, namespace, **flags), (obj["metadata"]["name"], stored)
    called = {k: v - before[k] for k, v in reviews(metrics).items()}
    assert called == {"mutate": 2, "validate": 0}, called

    # Pods the validation refuses are refused with the handler's message.
    for obj in (NUM_DEVICES_ONLY, BAD_DELAY, MPS_ONLY):
        expected = validate_pod({**obj, "metadata": {**obj["metadata"], "namespace": namespace}},
                                gpu_sharing_enabled=True)
        assert expected is not None
        stored, refusal = dry_run(cluster, namespace, obj)
        assert stored is None and expected in refusal, (obj["metadata"]["name"], refusal)
    assert NUM_DEVICES_WITHOUT_PORTION in dry_run(cluster, namespace, NUM_DEVICES_ONLY)[1]


@pytest.fixture
def wider_admissions(cluster: Cluster, namespace: str) -> Iterator[dict[str, int]]:
    """Two more admission processes, one with a GPU-pod runtime class and one with quota gates, each with the
    mutating configuration `kai dev up` builds from its flags, for `namespace` only. Their metrics ports by name."""
    state = dev.load_state(cluster.name)
    assert state is not None
    base = state.ports["apiserver"] - 443 + PORT_OFFSET
    pki = Path(state.dir) / "pki"
    variants = {"gpu": [f"--gpu-pod-runtime-class-name={RUNTIME_CLASS}"], "quota": ["--quota-gates=true"]}
    procs, names, ports = [], [], {}
    # The API server refuses a pod naming a RuntimeClass it does not know.
    cluster.kubectl("apply", "-f", "-", input=labelled([{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                          "metadata": {"name": RUNTIME_CLASS}, "handler": "runc"}]))
    try:
        for i, (variant, args) in enumerate(variants.items()):
            port = base + 3 * i
            ports[variant] = port
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "operators.cli", "run", "admission", "--gpu-sharing-enabled=true", *args,
                 f"--metrics-bind-address=127.0.0.1:{port}", f"--health-probe-bind-address=127.0.0.1:{port + 1}",
                 f"--webhook-addr=127.0.0.1:{port + 2}", f"--cert-dir={pki / 'webhook'}"],
                env={**os.environ, "KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for variant, port in ports.items():
            poll(lambda p=port: probe_status(p + 1, "/readyz") == 200, f"the {variant} admission to be ready",
                 timeout=60)
            config = webhooks.configurations(ca_pem=(pki / "ca.crt").read_bytes(), admission_port=port + 2,
                                             queue_port=None, podgroup_port=None,
                                             admission_args=variants[variant])[0]
            assert config["kind"] == "MutatingWebhookConfiguration"
            config["metadata"] = {"name": f"kai-test-{variant}-{namespace}"}
            config["webhooks"][0]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}
            names.append(config["metadata"]["name"])
            cluster.kubectl("apply", "-f", "-", input=labelled([config]))
        # Registered once the API server calls both (a dry-run sharing pod reaches every mutating webhook).
        def both_called() -> bool:
            dry_run(cluster, namespace, WHOLE_GPU)  # a GPU pod: both mutating webhooks are for it
            return all(reviews(p)["mutate"] > 0 for p in ports.values())

        poll(both_called, "the API server to call both webhooks", timeout=30)
        yield ports
    finally:
        for name in names:
            cluster.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "runtimeclass", RUNTIME_CLASS, "--ignore-not-found", check=False)
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_the_mutating_condition_widens_with_the_runtime_class_and_quota_gates(
        cluster: Cluster, namespace: str, wider_admissions: dict[str, int]) -> None:
    gpu, quota = wider_admissions["gpu"], wider_admissions["quota"]
    before = {name: reviews(port)["mutate"] for name, port in wider_admissions.items()}
    stored, refusal = dry_run(cluster, namespace, PLAIN)
    assert stored is not None, refusal
    # A plain pod: only the quota gates mutate it (gated); the runtime-class webhook is not called.
    assert stored["spec"].get("schedulingGates") == [{"name": keys.QUOTA_GATE}]
    assert not stored["spec"].get("runtimeClassName")
    assert reviews(gpu)["mutate"] == before["gpu"] and reviews(quota)["mutate"] > before["quota"]
    # A whole-GPU pod: both are called; it gets the GPU-pod runtime class and the gate.
    before = {name: reviews(port)["mutate"] for name, port in wider_admissions.items()}
    stored, refusal = dry_run(cluster, namespace, WHOLE_GPU)
    assert stored is not None, refusal
    assert stored["spec"].get("runtimeClassName") == RUNTIME_CLASS
    assert stored["spec"].get("schedulingGates") == [{"name": keys.QUOTA_GATE}]
    assert reviews(gpu)["mutate"] > before["gpu"] and reviews(quota)["mutate"] > before["quota"]
    assert podwebhooks.mutates(quota_gates=False, args=[f"--gpu-pod-runtime-class-name={RUNTIME_CLASS}"]) \
        is podwebhooks.Mutates.GPU


def sharing_pod(name: str, annotations: dict[str, str], *, labels: dict[str, str] | None = None,
                whole_gpu: str = "", init: bool = False, side: bool = False) -> dict[str, Any]:
    """A GPU-sharing pod; `whole_gpu`: the kind of container ("containers"/"initContainers") given a GPU limit;
    `init`/`side`: an init container `setup` / a second container `side`."""
    obj = pod(name, annotations=annotations, labels=labels)
    spec = obj["spec"]
    if side:
        spec["containers"].append({"name": "side", "image": "busybox"})
    if init or whole_gpu == "initContainers":
        spec["initContainers"] = [{"name": "setup", "image": "busybox"}]
    if whole_gpu:
        spec[whole_gpu][0]["resources"] = {"limits": {keys.GPU_RESOURCE: "1"}}
    return obj


F, M, N, C = keys.GPU_FRACTION, keys.GPU_MEMORY, keys.GPU_FRACTION_NUM_DEVICES, keys.GPU_FRACTION_CONTAINER_NAME
# (pod, validating calls on CREATE): 0 where the condition proves the pod valid, 1 where the validation decides.
SHARING_CASES = [
    (sharing_pod("fraction", {F: "0.5"}), 0),
    (sharing_pod("fraction-short", {F: ".25"}), 0),
    (sharing_pod("fraction-fifteen-decimals", {F: "0.000000000000001"}), 0),
    (sharing_pod("fraction-devices", {F: "0.5", N: "2"}), 0),
    (sharing_pod("fraction-mps", {F: "0.5", keys.MPS: "true"}), 0),
    (sharing_pod("fraction-side-container", {F: "0.5", C: "side"}, side=True), 0),
    (sharing_pod("fraction-init-container", {F: "0.5", C: "setup"}, init=True), 0),
    (sharing_pod("memory", {M: "1024"}), 0),
    (sharing_pod("memory-devices", {M: "1024", N: "3"}), 0),
    # Valid, but beyond what the condition proves: the validation admits them.
    (sharing_pod("fraction-exponent", {F: "5e-1"}), 1),
    (sharing_pod("memory-leading-zero", {M: "01024"}), 1),
    (sharing_pod("fraction-good-delay", {F: "0.5", keys.PREEMPTION_DELAY: "5m"}), 1),
    # Refused by the validation, with KAI's message.
    (sharing_pod("fraction-one", {F: "1"}), 1),
    (sharing_pod("fraction-zero", {F: "0.0"}), 1),
    (sharing_pod("fraction-rounds-to-one", {F: "0.99999999999999999999"}), 1),
    (sharing_pod("fraction-and-memory", {F: "0.5", M: "1024"}), 1),
    (sharing_pod("memory-zero", {M: "0"}), 1),
    (sharing_pod("devices-zero", {F: "0.5", N: "0"}), 1),
    (sharing_pod("fraction-whole-gpu", {F: "0.5"}, whole_gpu="containers"), 1),
    (sharing_pod("fraction-init-whole-gpu", {F: "0.5"}, whole_gpu="initContainers"), 1),
    (sharing_pod("fraction-bad-delay", {F: "0.5"}, labels={keys.PREEMPTION_DELAY: "soon"}), 1),
    # Refused by the mutating webhook first (the same message the validation gives), never validated.
    (sharing_pod("fraction-unknown-container", {F: "0.5", C: "nope"}), 0),
]


def test_a_sharing_pod_costs_one_call_when_proven_valid_and_is_judged_by_kai_otherwise(
        cluster: Cluster, namespace: str) -> None:
    state = dev.load_state(cluster.name)
    assert state is not None
    metrics = dev.component_ports(state.ports["apiserver"] - 443)["admission"]["metrics"]
    for obj, validations in SHARING_CASES:
        name = obj["metadata"]["name"]
        expected = validate_pod({**obj, "metadata": {**obj["metadata"], "namespace": namespace}},
                                gpu_sharing_enabled=True)
        before = reviews(metrics)
        stored, refusal = dry_run(cluster, namespace, obj)
        called = {k: v - before[k] for k, v in reviews(metrics).items()}
        assert called == {"mutate": 1, "validate": validations}, (name, called)
        if expected is None:
            assert stored is not None, (name, refusal)
        else:
            assert stored is None and DENIED + expected in refusal, (name, expected, refusal)


def test_an_update_of_a_sharing_pod_is_still_validated(cluster: Cluster, namespace: str) -> None:
    obj = sharing_pod("updated", {F: "0.5"})
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=json.dumps(obj))
    stored = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    for change, updated in (
        ([f"{F}=1.5", "--overwrite"], {F: "1.5"}),
        ([f"{M}=1024"], {F: "0.5", M: "1024"}),
    ):
        expected = validate_pod({**stored, "metadata": {**stored["metadata"], "annotations": updated}},
                                gpu_sharing_enabled=True, old=stored)
        assert expected is not None
        proc = cluster.kubectl("annotate", "--dry-run=server", "pod", "updated", *change, namespace=namespace,
                               check=False)
        assert proc.returncode != 0 and DENIED + expected in proc.stderr, (change, proc.stderr)
    proc = cluster.kubectl("label", "--dry-run=server", "pod", "updated", f"{keys.PREEMPTION_DELAY}=soon",
                           namespace=namespace, check=False)
    assert proc.returncode != 0 and DENIED in proc.stderr and keys.PREEMPTION_DELAY in proc.stderr, proc.stderr
    proc = cluster.kubectl("annotate", "--dry-run=server", "pod", "updated", "example.com/note=ok",
                           namespace=namespace, check=False)
    assert proc.returncode == 0, proc.stderr


class _LaterWebhook(BaseHTTPRequestHandler):
    """Another vendor's mutating webhook, called after ours: it turns the pod's fraction into 1.5."""

    calls: list[str] = []  # the uids reviewed

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(review["request"]["uid"])
        patch = [{"op": "add", "path": "/metadata/annotations/" + F, "value": "1.5"}]
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def later_webhook(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A mutating webhook ordered after ours (configurations are called by name), for pods labelled with the key
    yielded, in `namespace` only."""
    state = dev.load_state(cluster.name)
    assert state is not None
    pki = Path(state.dir) / "pki"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "webhook" / "tls.crt", pki / "webhook" / "tls.key")
    server = ThreadingHTTPServer(("127.0.0.1", state.ports["apiserver"] - 443 + LATER_WEBHOOK_OFFSET), _LaterWebhook)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    label, name = "kai-test/later-webhook", f"zz-kai-test-later-{namespace}"
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": name}, "webhooks": [{
                  "name": "later.kai-test.example.com",
                  "clientConfig": {"url": f"https://127.0.0.1:{server.server_port}/mutate",
                                   "caBundle": base64.b64encode((pki / "ca.crt").read_bytes()).decode()},
                  "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                             "resources": ["pods"], "scope": "Namespaced"}],
                  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                  "objectSelector": {"matchLabels": {label: "true"}},
                  "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                  "timeoutSeconds": 5}]}
    try:
        cluster.kubectl("apply", "-f", "-", input=labelled([config]))
        yield label
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found", check=False)
        server.shutdown()
        server.server_close()


def test_a_pod_changed_after_our_mutating_webhook_is_still_validated(
        cluster: Cluster, namespace: str, later_webhook: str) -> None:
    obj = sharing_pod("changed-later", {F: "0.5"}, labels={later_webhook: "true"})
    assert validate_pod(obj, gpu_sharing_enabled=True) is None  # valid as created
    # The configuration takes effect once the API server has seen it: retry until the later webhook is called.
    def changed_later() -> tuple[str] | None:
        called = len(_LaterWebhook.calls)
        refusal = dry_run(cluster, namespace, obj)[1]
        return (refusal,) if len(_LaterWebhook.calls) > called else None

    (refusal,) = poll(changed_later, "the later webhook to be called", timeout=30)
    assert DENIED + INVALID_GPU_FRACTION in refusal, refusal
    # Without the label the same pod is admitted, unvalidated (the condition proves it valid).
    del obj["metadata"]["labels"][later_webhook]
    stored, refusal = dry_run(cluster, namespace, obj)
    assert stored is not None and stored["metadata"]["annotations"][F] == "0.5", refusal
