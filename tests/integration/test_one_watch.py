"""Every component process opens one watch per resource, counted by the API server itself.

Each component is started as its own process (`kai run <component>`), with `--leader-elect` on a Lease of its
own (admission runs active-active, without one), so it leads at once and runs everything it runs in production:
informers, work queues, webhook, side loops. The API server's gauge `apiserver_longrunning_requests{verb="WATCH"}`
(open watches per group, resource and scope) is read before the process starts and once it is ready; the
difference is the process's own watches. It must be exactly the resources the component reads, one watch each:
a second watch of a resource (an informer next to a Kopf handler, a per-object watch) shows up as a 2, a
forgotten informer as a missing key. A second replica on the same Lease, a standby, then adds exactly its warm
informers' watches, one per resource, while not ready.

The dev components keep running meanwhile; their watches are part of the baseline, which is read once all of them
(KubeRay's operator and the garbage collector's watches of custom resources included) are open. The scheduler under test
serves another scheduler name, so that it opens the same watches without scheduling the cluster's pods twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import Cluster, apiserver_samples

pytestmark = pytest.mark.cluster

Key = tuple[str, str, str]  # (API group, resource, scope): scope is cluster, namespace or resource (one object)
NS = "kai-scheduler"
ROOT = Path(__file__).resolve().parents[2]

CORE = {
    "pod-grouper": {("", "pods", "cluster"), ("scheduling.k8s.io", "priorityclasses", "cluster"),
                    ("scheduling.run.ai", "podgroups", "cluster")},
    "podgroup-controller": {("", "pods", "cluster"), ("", "nodes", "cluster"),
                            ("scheduling.k8s.io", "priorityclasses", "cluster"),
                            ("scheduling.run.ai", "podgroups", "cluster")},
    "queue-controller": {("scheduling.run.ai", "queues", "cluster"), ("scheduling.run.ai", "podgroups", "cluster")},
    # Two pod watches on disjoint sets: kai-scheduler's pods, and the reservation namespace (whose pods name no
    # scheduler, so no single selector covers both short of watching every pod of the cluster).
    "binder": {("", "pods", "cluster"), ("", "pods", "namespace"), ("", "nodes", "cluster"),
               ("scheduling.run.ai", "bindrequests", "cluster")},
    "scheduler": {("", "nodes", "cluster"), ("", "pods", "cluster"), ("", "configmaps", "cluster"),
                  ("scheduling.k8s.io", "priorityclasses", "cluster"), ("scheduling.run.ai", "podgroups", "cluster"),
                  ("scheduling.run.ai", "queues", "cluster"), ("scheduling.run.ai", "bindrequests", "cluster"),
                  ("kai.scheduler", "schedulingshards", "cluster"), ("kai.scheduler", "configs", "resource"),
                  ("policy", "poddisruptionbudgets", "cluster")},
    "admission": set(),
}

# Watches of side loops that run only on the lease holder (RayJob admission starts once it leads).
LEADER_ONLY = {"pod-grouper": {("ray.io", "rayjobs", "cluster"), ("scheduling.run.ai", "queues", "cluster")}}


def served(cluster: Cluster, group_version: str, plural: str) -> bool:
    found = cluster.kubectl("get", "--raw", f"/apis/{group_version}", check=False)
    return found.returncode == 0 and f'"name":"{plural}"' in found.stdout.replace(" ", "")


def expected(cluster: Cluster, component: str) -> Counter[Key]:
    keys = set(CORE[component])
    if component == "pod-grouper" and served(cluster, "ray.io/v1", "rayjobs"):
        # RayJob admission: suspended RayJobs with a queue label, and the Queues whose limits admit them.
        keys |= {("ray.io", "rayjobs", "cluster"), ("scheduling.run.ai", "queues", "cluster")}
    if component == "scheduler" and served(cluster, "autoscaling.x-k8s.io/v1", "provisioningrequests"):
        keys.add(("autoscaling.x-k8s.io", "provisioningrequests", "cluster"))
    if component == "scheduler" and served(cluster, "kai.scheduler/v1alpha1", "topologies"):
        keys.add(("kai.scheduler", "topologies", "cluster"))  # watched once the Topology CRD is served
    if component == "podgroup-controller" and served(cluster, "resource.k8s.io/v1", "resourceclaims"):
        keys.add(("resource.k8s.io", "resourceclaims", "cluster"))  # a pod's DRA GPUs in its PodGroup's status
    if component == "scheduler" and served(cluster, "resource.k8s.io/v1", "resourceclaims"):
        # DRA: watched once the API server serves resource.k8s.io/v1 (GA since Kubernetes 1.34).
        keys |= {("resource.k8s.io", plural, "cluster") for plural in ("deviceclasses", "resourceslices",
                                                                       "resourceclaims")}
    return Counter(dict.fromkeys(keys, 1))


# The dev cluster's KubeRay operator (controller-runtime): one watch per kind it reconciles or owns.
KUBERAY = {("ray.io", "rayclusters", "cluster"), ("ray.io", "rayjobs", "cluster"), ("ray.io", "rayservices", "cluster"),
           ("", "pods", "cluster"), ("", "services", "cluster"), ("", "secrets", "cluster"),
           ("batch", "jobs", "cluster")}


def dev_watches(cluster: Cluster) -> Counter[Key]:
    """The watches the dev cluster's own processes hold once all of them run: each KAI component it runs (without
    leader election, so with its leader-only side loops), KubeRay's operator and the controller-manager's garbage
    collector."""
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    running = set(state.pids) if state is not None else set()
    want: Counter[Key] = Counter()
    for component in CORE:
        if component in running:
            want += expected(cluster, component)
    if "ray-operator" in running:
        want += Counter(dict.fromkeys(KUBERAY, 1))
    if "kube-controller-manager" in running:
        # Its garbage collector watches every custom resource, from the next discovery after the CRD is served.
        for crd in cluster.get_json("customresourcedefinitions")["items"]:
            want[crd["spec"]["group"], crd["spec"]["names"]["plural"], "cluster"] += 1
    return want


def wait_for_dev_watches(cluster: Cluster, timeout: float = 120) -> None:
    """Until the dev cluster's components have opened their watches (KubeRay, the side loops and the garbage
    collector open theirs a while after the cluster reports ready): before that, a late one would count as the
    tested process's."""
    want = dev_watches(cluster)
    deadline = time.monotonic() + timeout
    while True:
        seen = open_watches(cluster)
        missing = {key: f"{seen.get(key, 0)} of {n}" for key, n in want.items() if seen.get(key, 0) < n}
        if not missing:
            return
        assert time.monotonic() < deadline, (
            f"the dev cluster's components did not open their watches in {timeout:.0f}s; open of expected by "
            f"(group, resource, scope): {missing}")
        time.sleep(1)


def open_watches(cluster: Cluster) -> Counter[Key]:
    out: Counter[Key] = Counter()
    for _, labels, value in apiserver_samples(cluster, "apiserver_longrunning_requests"):
        if labels.get("verb") == "WATCH" and not labels.get("subresource"):
            out[labels.get("group", ""), labels["resource"], labels.get("scope", "")] += int(value)
    return out


def steady_watches(cluster: Cluster, samples: int = 5) -> Counter[Key]:
    """The most common count per key over a few readings: another client's watch that is being renewed at the
    moment of one reading does not count."""
    readings = []
    for _ in range(samples):
        readings.append(open_watches(cluster))
        time.sleep(0.2)
    keys = {k for r in readings for k in r}
    return Counter({k: Counter(r.get(k, 0) for r in readings).most_common(1)[0][0] for k in keys})


def difference(after: Counter[Key], before: Counter[Key]) -> Counter[Key]:
    return Counter({k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)
                    if after.get(k, 0) != before.get(k, 0)})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


Started = tuple[subprocess.Popen[bytes], int, Path]  # the process, its probe port, its log


@pytest.fixture
def component_process(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[[str, str], Started]]:
    from operators.devcluster.pki import CertificateAuthority

    procs: list[subprocess.Popen[bytes]] = []
    leases: list[str] = []
    # A serving certificate of the test's own: the webhook servers need one, and nothing calls them.
    pair = CertificateAuthority(tmp_path / "ca").issue("webhook", "localhost", ips=["127.0.0.1"], server=True)
    cert_dir = tmp_path / "webhook"
    cert_dir.mkdir()
    shutil.copyfile(pair.cert, cert_dir / "tls.crt")
    shutil.copyfile(pair.key, cert_dir / "tls.key")

    def start(component: str, lease: str) -> Started:
        leases.append(lease)
        metrics, probe = free_port(), free_port()
        argv = [sys.executable, "-m", "operators.cli", "run", component, f"--kubeconfig={cluster.kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{metrics}", f"--health-probe-bind-address=127.0.0.1:{probe}"]
        if component != "admission":  # active-active: it holds no lease
            argv += ["--leader-elect", f"--lease-name={lease}", f"--namespace={NS}"]
        if component in ("admission", "queue-controller", "podgroup-controller"):
            argv += [f"--webhook-addr=127.0.0.1:{free_port()}", f"--cert-dir={cert_dir}"]
        if component == "scheduler":
            argv += ["--scheduler-name=kai-one-watch-test"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update(KUBECONFIG=cluster.kubeconfig, PYTHONUNBUFFERED="1")
        log = tmp_path / f"{component}-{len(procs)}.log"
        proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
        procs.append(proc)
        return proc, probe, log

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    for lease in set(leases):
        cluster.kubectl("delete", "lease", lease, "-n", NS, "--ignore-not-found", check=False)


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def wait_for_watches(cluster: Cluster, before: Counter[Key], want: Counter[Key]) -> Counter[Key]:
    """The open watches added since `before`, once they are `want` (or as they are after 20 s)."""
    got: Counter[Key] = Counter()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = difference(steady_watches(cluster), before)
        if got == want:
            break
        time.sleep(1)
    return got


def wait_ready(component: str, proc: subprocess.Popen[bytes], probe: int, log: Path, path: str = "/readyz") -> None:
    deadline = time.monotonic() + 60
    while http_status(f"http://127.0.0.1:{probe}{path}") != 200:
        assert proc.poll() is None, f"{component} exited ({proc.returncode}):\n{log.read_text(errors='replace')}"
        assert time.monotonic() < deadline, f"{component}: {path} not 200 in 60 s:\n{log.read_text(errors='replace')}"
        time.sleep(0.3)


@pytest.mark.parametrize("component", list(CORE))
def test_a_component_process_opens_one_watch_per_resource(
        cluster: Cluster, component_process: Callable[[str, str], Started], component: str) -> None:
    want = expected(cluster, component)
    lease = f"one-watch-{component}-{uuid.uuid4().hex[:6]}"
    wait_for_dev_watches(cluster)
    before = steady_watches(cluster)
    proc, probe, log = component_process(component, lease)
    wait_ready(component, proc, probe, log)
    # Ready means synced and leading; watches opened once working (webhook, side loops) follow within moments.
    time.sleep(3)
    got = wait_for_watches(cluster, before, want)
    assert proc.poll() is None, f"{component} exited:\n{log.read_text(errors='replace')}"
    assert got == want, (f"{component}: open watches by (group, resource, scope) {dict(got)}, "
                         f"expected one each of {sorted(want)}\n{log.read_text(errors='replace')[-3000:]}")
    if component != "admission":
        # A standby on the same Lease keeps warm caches: the same informers, one watch each; only the leader's
        # side loops (the pod-grouper's RayJob checks) wait for the lease.
        standby, standby_probe, standby_log = component_process(component, lease)
        standby_want = Counter({k: n for k, n in want.items() if k not in LEADER_ONLY.get(component, set())})
        wait_ready(component, standby, standby_probe, standby_log, "/healthz")
        got = wait_for_watches(cluster, before, want + standby_want)
        assert got - want == standby_want, (
            f"{component} standby: open watches {dict(got - want)}, expected one each of {sorted(standby_want)}"
            f"\n{standby_log.read_text(errors='replace')[-3000:]}")
        assert http_status(f"http://127.0.0.1:{standby_probe}/readyz") == 503
        stop(standby)
    # And they are the process's: they close with it.
    stop(proc)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and difference(steady_watches(cluster), before):
        time.sleep(1)
    assert not difference(steady_watches(cluster), before)
