"""The helm chart on the local control plane, as a user installs KAI (the seeds' `helm upgrade -i ...`).

Own cluster, without the dev components: the shared `cluster` fixture starts `kai run` components with the admin
kubeconfig, which would do the work (and mask missing RBAC). This module brings up (or, with KAI_TEST_REUSE=1,
reuses) a cluster named by KAI_CHART_TEST_CLUSTER (default `chart-test`, ports KAI_CHART_TEST_PORT_BASE, default
24000) with `--no-components`, and takes it down at the end unless reused.

The chart's Deployments are scheduled by kube-scheduler onto kwok nodes, where no container runs; the real
work is done by the six components started here as local processes, each with a token of its chart
ServiceAccount and the flags of its chart Deployment, and the webhook configurations pointed at them through
the chart's development switches (`<component>.webhook.url`, `global.webhookCert.ipAddresses`).

Tests run in file order and build on each other (install, upgrade, workload, RBAC, metrics, HA, uninstall).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.helm_chart import CHART, DEPLOYMENTS, helm_binary
from tests.support import EXAMPLES, TEST_LABEL, Cluster, load_yaml, own_cluster, wait_for

pytestmark = pytest.mark.cluster

NS = "kai-scheduler"
RELEASE = "kai-scheduler"
# The chart's own component templates (`operator.enabled: false`): the components run here as local processes with
# the flags of the chart's Deployments. The default, operator path is test_operator_chart.py's and test_deployed.py's.
CHART_RENDERS = ["--set", "operator.enabled=false"]
SEED = ["upgrade", "-i", RELEASE, str(CHART), "-n", NS, "--create-namespace", "--set", "global.gpuSharing=true",
        *CHART_RENDERS]
WORKLOAD_NS = "chart-e2e"
PORT_BASE = int(os.environ.get("KAI_CHART_TEST_PORT_BASE", "24000"))
# Local component ports: metrics, probes, webhook at COMPONENT_PORT + 10 * i + (0, 1, 2).
COMPONENT_PORT = PORT_BASE + 900
LOCAL = ["admission", "binder", "pod-grouper", "podgroup-controller", "queue-controller", "scheduler"]
DEPLOYMENT_OF = {component: name for name, (component, _) in DEPLOYMENTS.items()}
SA_OF = {component: sa for _, (component, sa) in DEPLOYMENTS.items()}
T = TypeVar("T")


def ports(component: str) -> tuple[int, int, int]:
    base = COMPONENT_PORT + 10 * LOCAL.index(component)
    return base, base + 1, base + 2


def probe_status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code




class Helm:
    def __init__(self, binary: str, kubeconfig: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.binary, f"--kubeconfig={self.kubeconfig}", *args], capture_output=True,
                              text=True, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc


@pytest.fixture(scope="module")
def chart_cluster() -> Iterator[Cluster]:
    yield from own_cluster(os.environ.get("KAI_CHART_TEST_CLUSTER", "chart-test"), port_base=PORT_BASE,
                           components=False, timeout=300)


@pytest.fixture(scope="module")
def helm(chart_cluster: Cluster) -> Helm:
    return Helm(helm_binary(), chart_cluster.kubeconfig)


def identity(cluster: Cluster) -> dict[str, Any]:
    """What must not change on an upgrade with the same values: ServiceAccounts, TLS, webhook registrations."""
    out: dict[str, Any] = {}
    for sa in cluster.get_json("serviceaccounts", namespace=NS)["items"]:
        out[f"sa/{sa['metadata']['name']}"] = sa["metadata"]["uid"]
    for secret in cluster.get_json("secrets", namespace=NS)["items"]:
        if secret["type"] == "kubernetes.io/tls":
            out[f"secret/{secret['metadata']['name']}"] = (secret["metadata"]["uid"], secret["data"])
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for config in cluster.get_json(kind)["items"]:
            out[f"{kind}/{config['metadata']['name']}"] = (
                config["metadata"]["uid"], [w["clientConfig"].get("caBundle") for w in config["webhooks"]])
    for deploy in cluster.get_json("deployments", namespace=NS)["items"]:
        out[f"deploy/{deploy['metadata']['name']}"] = deploy["metadata"]["generation"]
    return out


# --- 1. install ---------------------------------------------------------------------------------------------
def test_seed_install_runs_six_deployments_on_kwok_nodes(chart_cluster: Cluster, helm: Helm) -> None:
    helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)
    out = helm(*SEED).stdout
    assert "STATUS: deployed" in out
    deployments = {d["metadata"]["name"]: d for d in chart_cluster.get_json("deployments", namespace=NS)["items"]}
    assert set(deployments) == set(DEPLOYMENTS)

    def scheduled() -> list[dict[str, Any]] | None:
        pods = chart_cluster.get_json("pods", namespace=NS)["items"]
        ok = [p for p in pods if p["spec"].get("nodeName", "").startswith("kwok-node-")
              and p["status"].get("phase") == "Running"]
        return pods if len({p["metadata"]["labels"]["app"] for p in ok}) == len(DEPLOYMENTS) else None

    pods = wait_for("the chart's pods to be scheduled onto kwok nodes", scheduled, timeout=90)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "default-scheduler", "kube-scheduler places the suite itself"
        assert pod["spec"]["serviceAccountName"] == DEPLOYMENTS[pod["metadata"]["labels"]["app"]][1]
    # On top of what `kai dev up` installed: CRDs skipped (present), priority classes and queues left alone.
    assert {q["metadata"]["name"] for q in chart_cluster.get_json("queues")["items"]} >= {
        "default-parent-queue", "default-queue"}
    assert {pc["metadata"]["name"] for pc in chart_cluster.get_json("priorityclasses")["items"]} >= {
        "train", "build-preemptible", "build", "inference"}
    manifest = helm("get", "manifest", RELEASE, "-n", NS).stdout
    assert "kind: PriorityClass" not in manifest, "the dev cluster's priority classes are not adopted"
    assert chart_cluster.kubectl("get", "namespace", "kai-resource-reservation").returncode == 0


def test_upgrade_with_the_same_values_changes_nothing(chart_cluster: Cluster, helm: Helm) -> None:
    before = identity(chart_cluster)
    helm(*SEED)
    assert identity(chart_cluster) == before, "no ServiceAccount, certificate, webhook or Deployment churn"


# --- 2. the components, each with its chart ServiceAccount's token ------------------------------------------
def dev_values() -> list[str]:
    """The chart's development switches: webhooks at the local processes (the kwok pods run nothing)."""
    sets = ["global.gpuSharing=true", "global.webhookCert.ipAddresses={127.0.0.1}",
            "admission.gpuFractionRuntimeClassName=", "scheduler.leaderElection=true", "binder.leaderElection=true",
            "global.resourceReservation.fakeGpuNodes=true"]
    for key, component in (("admission", "admission"), ("queuecontroller", "queue-controller"),
                           ("podgroupcontroller", "podgroup-controller")):
        sets.append(f"{key}.webhook.url=https://127.0.0.1:{ports(component)[2]}")
    return [arg for s in sets for arg in ("--set", s)]


def token_kubeconfig(cluster: Cluster, sa: str, path: Path) -> Path:
    token = cluster.kubectl("create", "token", sa, "-n", NS, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": sa,
        "clusters": [{"name": "kai", "cluster": server}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "kai", "user": sa}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Stack:
    """The six components as local processes, with their chart Deployment's flags and their SA's token."""

    def __init__(self, cluster: Cluster, root: Path) -> None:
        self.cluster = cluster
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def chart_args(self, component: str) -> list[str]:
        deploy = self.cluster.get_json("deployment", DEPLOYMENT_OF[component], namespace=NS)
        args: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:2] == ["run", component]
        if component == "scheduler":  # the chart mounts its ConfigMap at /etc/config
            config = self.cluster.get_json("configmap", DEPLOYMENT_OF[component], namespace=NS)["data"]
            path = self.root / "scheduler-config.yaml"
            path.write_text(config["config.yaml"])
            args = [f"--config={path}" if a.startswith("--config=") else a for a in args]
        return args[2:]

    def certs(self, component: str) -> Path:
        secret = {"admission": "kai-admission-webhook-tls-secret", "queue-controller": "queue-webhook-tls-secret",
                  "podgroup-controller": "podgroup-webhook-tls-secret"}[component]
        data = self.cluster.get_json("secret", secret, namespace=NS)["data"]
        out = self.root / f"certs-{component}"
        out.mkdir(exist_ok=True)
        for key in ("tls.crt", "tls.key"):
            (out / key).write_bytes(base64.b64decode(data[key]))
        return out

    def start(self, component: str, *extra: str, name: str | None = None, port_offset: int = 0) -> str:
        name = name or component
        metrics, probe, webhook = (p + port_offset for p in ports(component))
        kubeconfig = token_kubeconfig(self.cluster, SA_OF[component], self.root / f"{name}.kubeconfig")
        argv = [sys.executable, "-m", "operators.cli", "run", component, *self.chart_args(component),
                f"--kubeconfig={kubeconfig}", f"--metrics-bind-address=127.0.0.1:{metrics}",
                f"--health-probe-bind-address=127.0.0.1:{probe}", *extra]
        if component in ("admission", "queue-controller", "podgroup-controller"):
            argv += [f"--webhook-addr=127.0.0.1:{webhook}", f"--cert-dir={self.certs(component)}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update(KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1", POD_NAME=name)
        log = self.root / f"{name}.log"
        self.logs[name] = log
        self.procs[name] = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        return name

    def wait_ready(self, name: str, component: str, port_offset: int = 0, timeout: float = 90) -> None:
        self._wait_probe(name, component, "/readyz", port_offset, timeout)

    def wait_alive(self, name: str, component: str, port_offset: int = 0, timeout: float = 60) -> None:
        """Until the process serves /healthz: a process still importing or logging in serves no probe yet."""
        self._wait_probe(name, component, "/healthz", port_offset, timeout)

    def _wait_probe(self, name: str, component: str, path: str, port_offset: int, timeout: float) -> None:
        probe = ports(component)[1] + port_offset

        def answers() -> bool:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.tail(name)}")
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}{path}", timeout=2) as resp:
                return resp.status == 200

        wait_for(f"{name} to answer {path}", answers, timeout=timeout)

    def tail(self, name: str, lines: int = 40) -> str:
        return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-lines:])

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def errors(self, name: str) -> list[str]:
        """Authorization failures in a component's log: the RBAC was not enough."""
        text = self.logs[name].read_text(errors="replace")
        # Not a bare "403": log timestamps carry milliseconds (",403").
        return [line for line in text.splitlines() if re.search(r"[Ff]orbidden|\(403\)", line)]


@pytest.fixture(scope="module")
def stack(chart_cluster: Cluster, helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    helm(*SEED, *dev_values())
    s = Stack(chart_cluster, tmp_path_factory.mktemp("chart-stack"))
    try:
        for component in LOCAL:
            s.start(component)
        for component in LOCAL:
            s.wait_ready(component, component)
        yield s
    finally:
        s.stop_all()
        chart_cluster.kubectl("delete", "namespace", WORKLOAD_NS, "--wait=false", check=False)
        chart_cluster.kubectl("delete", "queues", "-l", f"{TEST_LABEL}=true", "--wait=false", check=False)


def workload_docs() -> list[dict[str, Any]]:
    docs = load_yaml(EXAMPLES / "ray-cluster.kai-gpu-sharing.yaml")
    for doc in docs:
        if doc["kind"] == "Queue":
            doc["metadata"].setdefault("labels", {})[TEST_LABEL] = "true"
    return docs


def ray_pods(cluster: Cluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("pods", "-l", "ray.io/cluster=raycluster-half-gpu",
                                                   namespace=WORKLOAD_NS)["items"]
    return items


def bound(pods: list[dict[str, Any]], count: int) -> bool:
    return len(pods) == count and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                                      for p in pods)


def test_components_with_their_serviceaccount_tokens_schedule_a_gpu_sharing_raycluster(
        chart_cluster: Cluster, helm: Helm, stack: Stack) -> None:
    chart_cluster.kubectl("create", "namespace", WORKLOAD_NS, check=False)
    chart_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(workload_docs()), namespace=WORKLOAD_NS)
    pods = wait_for("the RayCluster's 3 pods to be bound and Running",
                    lambda: (p := ray_pods(chart_cluster)) and bound(p, 3) and p, timeout=120)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["annotations"].get("pod-group-name"), "pod-grouper grouped it"
    workers = [p for p in pods if p["metadata"]["annotations"].get("gpu-fraction") == "0.5"]
    assert len(workers) == 2
    # admission mutated the fractional pods (GPU sharing env from the binder's ConfigMaps)
    for worker in workers:
        env = worker["spec"]["containers"][0].get("env") or []
        assert any(e["name"] == "NVIDIA_VISIBLE_DEVICES" for e in env), env
    # binder: a reservation pod in the reservation namespace (its Role there), bind requests succeeded
    reservations = chart_cluster.get_json("pods", namespace="kai-resource-reservation")["items"]
    assert reservations and all(p["metadata"]["labels"]["app"] == "kai-resource-reservation" for p in reservations)
    brs = chart_cluster.get_json("bindrequests.scheduling.run.ai", namespace=WORKLOAD_NS)["items"]
    assert len(brs) == 3 and all(br.get("status", {}).get("phase") == "Succeeded" for br in brs)

    # podgroup-controller and queue-controller: statuses with the allocation
    def statuses() -> bool:
        group = chart_cluster.get_json("podgroups.scheduling.run.ai", namespace=WORKLOAD_NS)["items"][0]
        queue = chart_cluster.get_json("queue", "team-a")
        allocated = ((queue.get("status") or {}).get("allocated") or {})
        return bool((group.get("status") or {}).get("resourcesStatus", {}).get("allocated")) and \
            allocated.get("cpu") not in (None, "0")

    wait_for("PodGroup and Queue statuses", statuses, timeout=60)
    # the queue webhook validates with the chart's certificate: an invalid queue is denied
    bad = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
           "metadata": {"name": "chart-bad-queue", "labels": {TEST_LABEL: "true"}},
           "spec": {"parentQueue": "chart-bad-queue", "resources": {}}}  # its own parent: a cycle
    denied = chart_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert denied.returncode != 0 and "denied" in denied.stderr, denied.stderr
    # binder and scheduler elect with their chart ServiceAccounts (the chart's Lease Roles are enough)
    for lease, holder in (("kai-binder", "binder_"), ("kai-scheduler-default", "scheduler_")):
        spec = chart_cluster.get_json("lease", lease, namespace=NS)["spec"]
        assert spec["holderIdentity"].startswith(holder), spec
    for name in stack.procs:
        assert not stack.errors(name), f"{name} was refused by RBAC:\n" + "\n".join(stack.errors(name)[:5])


def test_upgrade_under_load_keeps_workloads_schedulable(chart_cluster: Cluster, helm: Helm, stack: Stack) -> None:
    before = identity(chart_cluster)
    helm(*SEED, *dev_values())
    assert identity(chart_cluster) == before, "no ServiceAccount, certificate, webhook or Deployment churn"
    # The running components keep their tokens (bound to the unchanged ServiceAccounts) and schedule more.
    chart_cluster.kubectl("patch", "raycluster", "raycluster-half-gpu", "--type=json", "-p",
                          json.dumps([{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 4},
                                      {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas",
                                       "value": 4}]), namespace=WORKLOAD_NS)
    wait_for("the scaled RayCluster's 5 pods to be bound",
             lambda: bound(ray_pods(chart_cluster), 5), timeout=120)
    for name in stack.procs:
        assert stack.procs[name].poll() is None, f"{name} died:\n{stack.tail(name)}"
        assert not stack.errors(name), f"{name} was refused by RBAC"


# --- 3. not excessive ---------------------------------------------------------------------------------------
FORBIDDEN = [
    ("delete", "nodes"), ("get", "secrets", "-A"), ("list", "secrets", "-A"), ("get", "secrets", "-n", NS),
    ("create", "clusterrolebindings"), ("create", "pods", "-n", "default"), ("delete", "namespaces"),
    ("update", "deployments", "-n", NS), ("delete", "customresourcedefinitions"),
    ("create", "mutatingwebhookconfigurations"), ("impersonate", "serviceaccounts"), ("*", "*"),
]
ALLOWED = {
    "scheduler": [("create", "bindrequests.scheduling.run.ai", "-n", "default"), ("delete", "pods", "-A"),
                  ("watch", "configmaps", "-A"), ("watch", "topologies.kai.scheduler"),
                  ("create", "pods", "--subresource=eviction", "-A"), ("watch", "poddisruptionbudgets.policy", "-A")],
    "binder": [("create", "pods", "--subresource=binding", "-n", "default"),
               ("create", "pods", "-n", "kai-resource-reservation"),
               ("patch", "bindrequests.scheduling.run.ai", "--subresource=status", "-A")],
    "pod-grouper": [("create", "podgroups.scheduling.run.ai", "-A"), ("get", "rayclusters.ray.io", "-A")],
    "podgroup-controller": [("patch", "podgroups.scheduling.run.ai", "--subresource=status", "-A")],
    "queue-controller": [("patch", "queues.scheduling.run.ai", "--subresource=status")],
    "admission": [],
}
NOT_THEIRS = {
    "scheduler": [("create", "pods", "--subresource=binding", "-n", "default"),
                  ("patch", "queues.scheduling.run.ai", "--subresource=status"),
                  ("update", "topologies.kai.scheduler")],
    "binder": [("create", "bindrequests.scheduling.run.ai", "-n", "default"), ("list", "configmaps", "-A")],
    "pod-grouper": [("delete", "pods", "-A"), ("delete", "podgroups.scheduling.run.ai", "-A")],
    "podgroup-controller": [("patch", "pods", "-A"), ("update", "podgroups.scheduling.run.ai", "-A")],
    "queue-controller": [("list", "pods", "-A"), ("delete", "queues.scheduling.run.ai")],
    "admission": [("list", "pods", "-A"), ("get", "nodes")],
}


def test_serviceaccounts_can_do_their_job_and_no_more(chart_cluster: Cluster, helm: Helm) -> None:
    problems = []
    for sa in SA_OF.values():
        who = f"--as=system:serviceaccount:{NS}:{sa}"
        for check, expected in ([(c, "yes") for c in ALLOWED[sa]] + [(c, "no") for c in FORBIDDEN]
                                + [(c, "no") for c in NOT_THEIRS[sa]]):
            answer = chart_cluster.kubectl("auth", "can-i", *check, who, check=False).stdout.strip()
            if answer != expected:
                problems.append(f"{sa}: can-i {' '.join(check)} -> {answer}, expected {expected}")
    assert not problems, "\n".join(problems)


# --- 4. metrics and probes ----------------------------------------------------------------------------------
QUEUE_METRICS = ["kai_queue_info", "kai_queue_deserved_gpus", "kai_queue_quota_cpu_cores",
                 "kai_queue_quota_memory_bytes", "kai_queue_allocated_gpus", "kai_queue_allocated_cpu_cores",
                 "kai_queue_allocated_memory_bytes"]
# KAI's scheduler metrics, exposed under exactly these names (counters without an added `_total`).
SCHEDULER_METRICS = ["kai_e2e_scheduling_latency_milliseconds", "kai_open_session_latency_milliseconds",
                     "kai_close_session_latency_milliseconds", "kai_action_scheduling_latency_milliseconds",
                     "kai_plugin_scheduling_latency_milliseconds", "kai_task_scheduling_latency_milliseconds",
                     "kai_task_bind_latency_milliseconds", "kai_podgroups_scheduled_by_action",
                     "kai_podgroups_acted_on_by_action", "kai_scenarios_simulation_by_action",
                     "kai_scenarios_filtered_by_action", "kai_total_preemption_attempts",
                     "kai_queue_fair_share_cpu_cores", "kai_queue_fair_share_memory_gb", "kai_queue_fair_share_gpu",
                     "kai_queue_cpu_usage", "kai_queue_memory_usage", "kai_queue_gpu_usage",
                     "kai_usage_query_latency_milliseconds", "kai_pod_group_evicted_pods_total"]


def scrape(port: int) -> dict[str, list[tuple[str, float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):  # declared, even if a labelled family has no series yet
            out.setdefault(line.split()[2], [])
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def test_every_component_serves_metrics_and_probes_with_live_values(stack: Stack) -> None:
    for component in LOCAL:
        metrics, probe, _ = ports(component)
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}{path}", timeout=5) as resp:
                assert resp.status == 200, (component, path)
        assert scrape(metrics), component
    queues = scrape(ports("queue-controller")[0])
    for name in QUEUE_METRICS:
        assert any('queue_name="team-a"' in labels for labels, _ in queues.get(name, [])), name
    team_a = '{queue_display_name="",queue_metadata_name="team-a",queue_name="team-a"}'  # KAI's three queue labels
    assert dict(queues["kai_queue_allocated_cpu_cores"])[team_a] >= 5
    assert dict(queues["kai_queue_allocated_gpus"])[team_a] > 0
    assert dict(queues["kai_queue_deserved_gpus"])[team_a] == -1
    sched = scrape(ports("scheduler")[0])
    missing = [n for n in SCHEDULER_METRICS if n not in sched]
    assert not missing, missing
    assert not [k for k in sched if k.endswith("_total_total") or k.endswith("_created")]
    assert sched["kai_e2e_scheduling_latency_milliseconds"][0][1] > 0
    assert sum(v for labels, v in sched["kai_podgroups_scheduled_by_action"]
               if 'action="allocate"' in labels) >= 1
    assert any(v > 0 for labels, v in sched["kai_queue_fair_share_cpu_cores"] if "team-a" in labels)
    assert sched["kai_task_scheduling_latency_milliseconds_count"][0][1] >= 5
    binder = scrape(ports("binder")[0])
    assert sum(v for _, v in binder.get("kai_binder_binds_total", [])) >= 5


# --- 5. high availability -----------------------------------------------------------------------------------
def lease_holder(cluster: Cluster) -> str:
    lease = cluster.get_json("lease", "kai-scheduler-default", namespace=NS)
    return str(lease["spec"].get("holderIdentity") or "")


def test_scheduler_failover_within_the_lease_and_no_double_binding(chart_cluster: Cluster, stack: Stack) -> None:
    stack.stop("scheduler")
    one = stack.start("scheduler", name="scheduler-a", port_offset=100)
    two = stack.start("scheduler", name="scheduler-b", port_offset=200)
    holder = wait_for("a leader", lambda: (h := lease_holder(chart_cluster)).split("_")[0] in (one, two) and h,
                      timeout=40)
    leader, standby = (one, two) if holder.startswith(one + "_") else (two, one)
    offset = {one: 100, two: 200}
    # Readiness is leadership: the leader turns ready, the standby stays alive but not ready.
    stack.wait_ready(leader, "scheduler", port_offset=offset[leader])
    # Both processes started together, but on a busy machine the standby may still be starting when the leader
    # turns ready: wait until it serves probes at all, then it must be alive and not ready.
    stack.wait_alive(standby, "scheduler", port_offset=offset[standby])
    standby_probe = ports("scheduler")[1] + offset[standby]
    assert probe_status(standby_probe, "/healthz") == 200
    assert probe_status(standby_probe, "/readyz") == 503
    # Work while the leader leads, then kill it hard (no lease release) and scale up again.
    chart_cluster.kubectl("patch", "raycluster", "raycluster-half-gpu", "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 6},
         {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": 6}]), namespace=WORKLOAD_NS)
    wait_for("7 pods bound by the first leader", lambda: bound(ray_pods(chart_cluster), 7), timeout=120)
    killed = time.monotonic()
    stack.stop(leader, signal.SIGKILL)
    new = wait_for("the standby to take over", lambda: lease_holder(chart_cluster).startswith(standby + "_"),
                   timeout=30, interval=0.2)
    took = time.monotonic() - killed
    assert new
    stack.wait_ready(standby, "scheduler", port_offset=offset[standby], timeout=15)
    # The bound. With our defaults (lease 8 s, retry 1 s) the standby may see the leader's last renewal up
    # to one retry period after the kill, then waits the lease duration and retries every second: <= ~10 s.
    assert took <= 15, f"takeover took {took:.1f}s"
    print(f"scheduler takeover {took:.1f}s after SIGKILL of the leader")
    chart_cluster.kubectl("patch", "raycluster", "raycluster-half-gpu", "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 8},
         {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": 8}]), namespace=WORKLOAD_NS)
    pods = wait_for("9 pods bound after the failover", lambda: (p := ray_pods(chart_cluster)) and bound(p, 9) and p,
                    timeout=120)
    # No pod bound twice: one BindRequest per pod naming the node it runs on, one Scheduled event per pod.
    brs = {br["spec"]["podName"]: br for br in
           chart_cluster.get_json("bindrequests.scheduling.run.ai", namespace=WORKLOAD_NS)["items"]}
    for pod in pods:
        assert brs[pod["metadata"]["name"]]["spec"]["selectedNode"] == pod["spec"]["nodeName"]
    events = chart_cluster.get_json("events", "--field-selector=reason=Scheduled", namespace=WORKLOAD_NS)["items"]
    per_pod: dict[str, int] = {}
    for event in events:
        per_pod[event["involvedObject"]["name"]] = per_pod.get(event["involvedObject"]["name"], 0) + event.get(
            "count", 1)
    assert all(n == 1 for n in per_pod.values()), per_pod
    assert stack.procs[standby].poll() is None


# --- 6. uninstall -------------------------------------------------------------------------------------------
def test_uninstall_removes_the_suite_and_keeps_queues(chart_cluster: Cluster, helm: Helm, stack: Stack) -> None:
    stack.stop_all()
    helm("uninstall", RELEASE, "-n", NS, "--wait")
    assert not chart_cluster.get_json("deployments", namespace=NS)["items"]
    assert not chart_cluster.get_json("services", namespace=NS)["items"]
    sas = {sa["metadata"]["name"] for sa in chart_cluster.get_json("serviceaccounts", namespace=NS)["items"]}
    assert sas <= {"default"}
    assert not [s for s in chart_cluster.get_json("secrets", namespace=NS)["items"]
                if s["type"] == "kubernetes.io/tls"]
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        names = {c["metadata"]["name"] for c in chart_cluster.get_json(kind)["items"]}
        assert not names & {"mutating-kai-admission", "validating-kai-admission", "kai-queue-validation-v2",
                            "kai-podgroup-validation-v2alpha2", "kai-topology-validation-v1alpha1"}
    roles = {r["metadata"]["name"] for r in chart_cluster.get_json("clusterroles")["items"]}
    assert not roles & {"kai-scheduler", "kai-binder", "kai-podgrouper", "kai-podgroup-controller",
                        "kai-queuecontroller", "kai-resource-reservation"}
    queues = {q["metadata"]["name"] for q in chart_cluster.get_json("queues")["items"]}
    assert {"default-parent-queue", "default-queue", "team-a", "department-1"} <= queues
    crds = {c["metadata"]["name"] for c in chart_cluster.get_json("crds")["items"]}
    assert {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "bindrequests.scheduling.run.ai"} <= crds
    assert chart_cluster.kubectl("get", "namespace", "kai-resource-reservation").returncode == 0


# --- 7. a values file written for KAI -----------------------------------------------------------------------
KAI_VALUES = Path(__file__).resolve().parents[1] / "data" / "kai-values.yaml"


def test_a_kai_values_file_installs_and_the_components_run_with_it(chart_cluster: Cluster, helm: Helm,
                                                                    stack: Stack) -> None:
    stack.stop_all()
    out = helm("upgrade", "-i", RELEASE, str(CHART), "-n", NS, "-f", str(KAI_VALUES), *CHART_RENDERS,
               *dev_values()).stdout
    assert "STATUS: deployed" in out
    assert "operator.qps, operator.burst" in out and "KAI's operator settings" in out, "KAI-only values are named"
    try:
        deployments = {d["metadata"]["name"]: d for d in chart_cluster.get_json("deployments", namespace=NS)["items"]}
        assert set(deployments) == set(DEPLOYMENTS)
        args = {name: d["spec"]["template"]["spec"]["containers"][0]["args"] for name, d in deployments.items()}
        assert all("--log-format=json" in a for a in args.values()), args
        assert "--queue-label-key=example.com/queue" in args["pod-grouper"]
        assert "--runtime-class-name=nvidia" in args["binder"] and "--cdi-enabled=true" in args["binder"]
        assert not [a for a in args["kai-scheduler-default"] if a.startswith("--actions")]
        budgets = {p["metadata"]["name"] for p in chart_cluster.get_json("pdb", namespace=NS)["items"]}
        assert budgets == {"kai-scheduler-default"}
        config = yaml.safe_load(chart_cluster.get_json("configmap", "kai-scheduler-default", namespace=NS)["data"][
            "config.yaml"])
        assert config["actions"] == {"consolidation": {"enabled": False}, "stalegangeviction": {"enabled": False},
                                     "reclaim": {"priority": 550}}
        assert config["plugins"]["proportion"] == {"arguments": {"kValue": "2.0"}}
        # The scheduler and the pod-grouper run with exactly these flags and this configuration (their chart
        # ServiceAccount's token), log JSON, and become ready.
        for component in ("scheduler", "pod-grouper"):
            stack.start(component)
            stack.wait_ready(component, component)
        for component in ("scheduler", "pod-grouper"):
            lines = [json.loads(line) for line in stack.logs[component].read_text().splitlines() if line.strip()]
            assert lines and {line["component"] for line in lines} == {component}, stack.tail(component)
            assert all({"object", "reason", "msg", "level"} <= set(line) for line in lines)
    finally:
        stack.stop_all()
        helm("uninstall", RELEASE, "-n", NS, "--wait")
