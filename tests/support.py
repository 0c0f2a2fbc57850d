"""Helpers shared by the integration and end-to-end tests (the fixtures are in the root conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
# The repository's own examples (examples/): what the README shows, and what the tests apply.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TEST_LABEL = "kai.test/owned"


@dataclass
class Cluster:
    name: str
    kubeconfig: str
    kubectl_bin: str
    state_dir: str

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                namespace: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}"]
        if namespace:
            argv.append(f"--namespace={namespace}")
        proc = subprocess.run([*argv, *args], input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def get_json(self, *args: str, namespace: str | None = None) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", namespace=namespace).stdout)


def apiserver_samples(cluster: Cluster, family: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of one metric family on the API server's own /metrics."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    return [(sample.name, sample.labels, sample.value)
            for found in text_string_to_metric_families(text) if found.name == family
            for sample in found.samples]


# The test clusters' audit policy (conftest.py): what `audited` can count.
AUDIT_POLICY = Path(__file__).resolve().parent / "audit-policy.yaml"
# The audit log's verbs as apiserver_request_total names them (an apply is a PATCH here: the log does not say).
AUDIT_VERBS = {"create": "POST", "get": "GET", "list": "LIST", "update": "PUT", "patch": "PATCH",
               "delete": "DELETE", "deletecollection": "DELETE"}


@dataclass(frozen=True)
class Request:
    """One request the API server answered, from its audit log."""

    key: str  # "VERB resource[/subresource]", as apiserver_request_total names them
    namespace: str  # "" for cluster-scoped objects
    name: str  # "" for a LIST or a collection
    agent: str  # the client's User-Agent up to its first "/": "kai-binder", "kwok", "kubectl", ...


def audit_log(cluster: Cluster) -> Path:
    path = Path(cluster.state_dir) / "logs" / "audit.log"
    assert path.exists(), (f"{path} missing: the cluster runs without the tests' audit policy (start it with "
                           f"`kai dev up --audit-policy tests/audit-policy.yaml`)")
    return path


def audit_mark(cluster: Cluster) -> int:
    """Where the audit log ends now: `audited` counts the requests answered after it."""
    return audit_log(cluster).stat().st_size


def audited(cluster: Cluster, since: int, *, namespace: str | None = None, agent: str | None = None,
            name: str | None = None, where: Callable[[Request], bool] | None = None) -> Counter[str]:
    """The requests the API server answered since the mark `since` (`audit_mark`), by "VERB resource[/sub]": only
    those on objects of `namespace` ("" for cluster-scoped ones), on objects named `name`, by the client `agent`
    (User-Agent without its version) and for which `where` holds, when given. Exact where the server's own counters
    (apiserver_request_total, without namespace or client) also count other tests' leftovers, kwok and the test's
    own polling."""
    return Counter(r.key for r in audited_requests(cluster, since)
                   if (namespace is None or r.namespace == namespace) and (agent is None or r.agent == agent)
                   and (name is None or r.name == name) and (where is None or where(r)))


def by_product(request: Request) -> bool:
    """A request of one of the KAI components (User-Agent `kai-<component>`), not kwok's, kubectl's or
    Kubernetes' own controllers'."""
    return request.agent.startswith("kai-")


def audited_requests(cluster: Cluster, since: int) -> list[Request]:
    with audit_log(cluster).open("rb") as log:
        log.seek(since)
        text = log.read()
    out = []
    for line in text[:text.rfind(b"\n") + 1].splitlines():  # a line still being written is left for later
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if event.get("stage") != "ResponseComplete" or not ref.get("resource") or event["verb"] not in AUDIT_VERBS:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.append(Request(key=f"{AUDIT_VERBS[event['verb']]} {resource}", namespace=ref.get("namespace", ""),
                           name=ref.get("name", ""), agent=event.get("userAgent", "").split("/")[0]))
    return out


def reconciles(metrics_port: int, work_queue: str) -> int:
    """How many reconciles a component's work queue ran (`kai_controller_reconcile_total`, any result), read from
    the component's /metrics on 127.0.0.1."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return int(sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                   if sample.name == "kai_controller_reconcile_total" and sample.labels.get("queue") == work_queue))


def settled(read: Callable[[], T], what: str, quiet: float = 4, timeout: float = 90) -> T:
    """The value of `read` once it stayed the same for `quiet` seconds (read every half second): counters of a
    component that finished reacting to the last change."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not settle in {timeout:.0f}s; last: {value!r}")
        time.sleep(0.5)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def own_cluster(name: str, **options: Any) -> Iterator[Cluster]:
    """A fixture's own local control plane `name` (`options` as for `kai dev up`): started afresh, or with
    KAI_TEST_REUSE=1 the running one of that name, kept afterwards; else removed when the fixture ends."""
    from operators.devcluster import cluster as dev

    reuse = os.environ.get("KAI_TEST_REUSE") == "1"
    state = dev.load_state(name)
    started = False
    if not (reuse and state is not None and dev.is_running(state)):
        if state is not None:
            dev.down(name, quiet=True)
        state = dev.up(dev.Options(name=name, **options))
        started = True
    assert state is not None
    yield Cluster(name=name, kubeconfig=state.kubeconfig, kubectl_bin=state.kubectl, state_dir=state.dir)
    if started and not reuse:
        dev.down(name, quiet=True)


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def labelled(docs: list[dict[str, Any]]) -> str:
    """The documents as YAML, cluster-scoped ones labelled so that the namespace fixture cleans them up."""
    out = []
    for doc in docs:
        if doc.get("kind") in ("Queue", "PriorityClass", "Node", "Topology"):
            doc.setdefault("metadata", {}).setdefault("labels", {})[TEST_LABEL] = "true"
        out.append(doc)
    return yaml.safe_dump_all(out)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 60, interval: float = 0.5) -> T:
    """Poll `check` until it returns something truthy; errors while polling count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
            last = exc
        else:
            if last:
                return last  # type: ignore[no-any-return]
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def poll(predicate: Callable[[], T | None], what: str, timeout: float = 60, interval: float = 0.5) -> T:
    """Poll until `predicate` returns something truthy (errors propagate); fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)


def apply(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace)


def items(cluster: Cluster, kind: str, namespace: str | None = None, *extra: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cluster.get_json(kind, *extra, namespace=namespace)["items"]
    return out


def queue(name: str, parent: str = "", gpu: tuple[float, float, float] = (-1, -1, 1)) -> dict[str, Any]:
    """A Queue; gpu = (quota, limit, overQuotaWeight); cpu and memory unlimited."""
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu[0], "limit": gpu[1], "overQuotaWeight": gpu[2]},
                                          "cpu": free, "memory": free}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def held_gpus(cluster: Cluster) -> int:
    """Whole GPUs (`nvidia.com/gpu` limits) of the pods that sit on a node and are not finished, cluster-wide."""
    total = 0
    for p in items(cluster, "pods", None, "--all-namespaces"):
        if not p["spec"].get("nodeName") or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for c in p["spec"].get("containers", []):
            total += int((c.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu", 0))
    return total


def probe_status(port: int, path: str, timeout: float = 2) -> int | None:
    """The HTTP status of a component's probe on 127.0.0.1 (None when nothing answers in time)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class Replicas:
    """KAI components run as local processes (`kai run <component>`), several replicas each, as a Deployment would.

    `probe_port(component, replica)` is the replica's health-probe port (its metrics port is the one below);
    `extra` adds arguments per component (a mapping, or a function of component and replica); components in
    `leader_elected` (default: all) get `--leader-elect`. Started
    processes are watched for /healthz 200 (`watch`) once added to `watched`; `killed` ones are exempt.
    """

    def __init__(self, cluster: Cluster, root: Path, probe_port: Callable[[str, str], int],
                 extra: Mapping[str, Sequence[str]] | Callable[[str, str], Sequence[str]] | None = None,
                 leader_elected: Sequence[str] | None = None) -> None:
        self.cluster = cluster
        self.root = root
        self.probe_port = probe_port
        self.extra = extra or {}
        self.leader_elected = leader_elected
        self.procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self.killed: set[tuple[str, str]] = set()
        self.watched: set[tuple[str, str]] = set()
        self.failures: list[str] = []
        self.checks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch_health, daemon=True)

    def start(self, component: str, replica: str) -> None:
        port = self.probe_port(component, replica)
        name = f"{component}-{replica}"
        elect = self.leader_elected is None or component in self.leader_elected
        argv = [sys.executable, "-m", "operators.cli", "run", component, *(["--leader-elect"] if elect else []),
                f"--kubeconfig={self.cluster.kubeconfig}", f"--metrics-bind-address=127.0.0.1:{port - 1}",
                f"--health-probe-bind-address=127.0.0.1:{port}", *self.args(component, replica)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update(KUBECONFIG=self.cluster.kubeconfig, PYTHONUNBUFFERED="1", POD_NAME=name)
        log = (self.root / f"{name}.log").open("ab")
        self.procs[component, replica] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                          start_new_session=True)
        log.close()

    def args(self, component: str, replica: str) -> list[str]:
        if callable(self.extra):
            return list(self.extra(component, replica))
        return list(self.extra.get(component, []))

    def log(self, component: str, replica: str, lines: int = 30) -> str:
        text = (self.root / f"{component}-{replica}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def alive(self, key: tuple[str, str]) -> bool:
        proc = self.procs[key]
        if proc.poll() is not None:
            raise AssertionError(f"{key} exited ({proc.returncode}):\n{self.log(*key)}")
        return True

    def _watch_health(self) -> None:
        # Every process not killed on purpose answers /healthz 200, standbys included, for the whole run.
        while not self._stop.wait(0.5):
            for key in list(self.watched - self.killed):
                code = probe_status(self.probe_port(*key), "/healthz")
                self.checks += 1
                if code != 200 and key not in self.killed:
                    self.failures.append(f"{key} /healthz -> {code} at {time.strftime('%H:%M:%S')}")

    def watch(self) -> None:
        self._thread.start()

    def kill(self, key: tuple[str, str]) -> None:
        self.killed.add(key)
        os.killpg(self.procs[key].pid, signal.SIGKILL)
        self.procs[key].wait(timeout=10)

    def stop_all(self) -> None:
        self._stop.set()
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


def unmanaged_raycluster(name: str, queue_name: str, workers: int,
                         requests: dict[str, str] | None = None) -> dict[str, Any]:
    """A RayCluster of one head and `workers` workers that KubeRay leaves alone (`spec.managedBy` names another
    manager), so a test makes its pods itself; `requests` per container, if any."""
    container: dict[str, Any] = {"name": "ray", "image": "rayproject/ray"}
    if requests:
        container["resources"] = {"requests": dict(requests)}
    template = {"spec": {"containers": [container]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name}},
            "spec": {"managedBy": "kueue.x-k8s.io/multikueue",
                     "headGroupSpec": {"rayStartParams": {}, "template": template},
                     "workerGroupSpecs": [{"groupName": "workers", "replicas": workers, "minReplicas": workers,
                                           "maxReplicas": workers, "rayStartParams": {}, "template": template}]}}
