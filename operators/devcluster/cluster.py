"""`kai dev up` / `kai dev down`: start and stop the local control plane.

Every process is ours (a new session, its pid recorded, its output in `<state>/logs/<name>.log`), so `down`
can stop exactly what `up` started and remove the state directory. A piece that fails to come up is named in
the error together with the path of its log.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from operators.devcluster import build, nodes, pki, webhooks
from operators.devcluster.node import lifecycle as real_node
from operators.devcluster.node import slots
from operators.devcluster.node.addresses import NODE_NAME, NodeAddresses

MANIFESTS = Path(__file__).parent / "manifests"
STAGES = Path(__file__).parent / "kwok-stages.yaml"
# KEP-5004 (alpha in v1.35): DeviceClass.extendedResourceName and the special claims of pods asking for it. The API
# server drops the field without it; the controller-manager's resource-claim controller deletes those claims.
FEATURE_GATES = "--feature-gates=DRAExtendedResource=true"
CRDS = build.REPO / "crds"
AUTOSCALER = build.REPO / "e2e" / "autoscaler"


class StartError(RuntimeError):
    pass


@dataclass
class Options:
    name: str = "default"
    nodes: int = 4
    gpus: int = 8
    gpu_memory_mib: int = 81920
    gpu_product: str = "NVIDIA-A100-SXM4-80GB"
    cpu: str = "64"
    memory: str = "512Gi"
    port_base: int = 16000
    components: bool = True  # start `kai run all` when the components exist
    kuberay: bool = True
    autoscaler: bool = False  # ProvisioningRequest CRD + the test provisioner (e2e/autoscaler)
    timeout: float = 180.0
    shards: list[str] = field(default_factory=list)  # node-pool shards, each with its own scheduler process
    shard_nodes: int = 2  # fake nodes per shard, labelled with its node pool
    # An audit policy (YAML text) for the API server; its log goes to `<state>/logs/audit.log` (off when empty).
    audit_policy: str = ""
    topology: tuple[int, int] | None = None  # (zones, racks per zone): zone and rack labels on the nodes
    # One node with a real kubelet, containerd and kube-proxy (tainted for the suite's own pods), beside the
    # kwok nodes. Off here (the tests' clusters need no pods to run); `kai dev up` turns it on by default.
    real_node: bool = False
    # How the components run: "host" (`kai run <component>` processes, the fast inner loop) or "chart" (the image
    # built here, the chart installed with the seed's helm command, every component a pod on the real node).
    suite: str = "host"
    # Time-based fair share: a Prometheus (Debian's package) scraping the components, the default shard using it.
    usage_db: bool = False
    # The kwok nodes' GPUs as DRA devices: the test DRA driver (`dradriver`) publishes their ResourceSlices and the
    # DeviceClass gpu.nvidia.com; the nodes have no nvidia.com/gpu resource.
    dra: bool = False


@dataclass
class State:
    """What `up` recorded for `down` and for clients (tests, the CLI)."""

    name: str
    dir: str
    kubeconfig: str
    server: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    bin_dir: str = ""
    node: dict[str, Any] = field(default_factory=dict)  # the real node, if any: slot, name, containerd socket

    @property
    def node_addresses(self) -> NodeAddresses | None:
        return NodeAddresses(self.node["slot"], self.name) if self.node else None

    @property
    def kubectl(self) -> str:
        return str(Path(self.bin_dir) / "kubectl")

    def save(self) -> None:
        (Path(self.dir) / "state.json").write_text(json.dumps(asdict(self), indent=2))


def state_dir(name: str) -> Path:
    return build.CACHE / "clusters" / name


def load_state(name: str) -> State | None:
    path = state_dir(name) / "state.json"
    if not path.exists():
        return None
    return State(**json.loads(path.read_text()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def is_running(state: State) -> bool:
    pid = state.pids.get("kube-apiserver")
    return bool(pid and _alive(pid))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Launcher:
    def __init__(self, state: State) -> None:
        self.state = state
        self.logdir = Path(state.dir) / "logs"
        self.logdir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              preexec: Callable[[], None] | None = None) -> None:
        log = self.logdir / f"{name}.log"
        slot_lock = slots.held(self.state.name)  # inherited: the real node's slot is held while any process lives
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env={**os.environ, **(env or {})},
                                    cwd=self.state.dir, preexec_fn=preexec,
                                    pass_fds=(slot_lock,) if slot_lock is not None else ())
        self.state.pids[name] = proc.pid
        self.state.logs[name] = str(log)
        self.state.save()

    def check_alive(self, name: str) -> None:
        pid = self.state.pids[name]
        if not _alive(pid):
            raise StartError(f"{name} exited during start-up; see its log: {self.state.logs[name]}\n"
                             + _tail(Path(self.state.logs[name])))

    def wait_http(self, name: str, url: str, timeout: float, *, tls: ssl.SSLContext | None = None) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive(name)
            try:
                with urllib.request.urlopen(url, timeout=2, context=tls) as resp:
                    body = resp.read().decode(errors="replace")
                    if resp.status == 200:
                        return
                    last = body
            except Exception as exc:
                last = str(exc)
            time.sleep(0.3)
        raise StartError(f"{name} did not become ready at {url} within {timeout:.0f}s ({last}); "
                         f"see its log: {self.state.logs[name]}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join("    " + ln for ln in path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _ports(base: int) -> dict[str, int]:
    return {"etcd": base + 379, "etcd-peer": base + 380, "apiserver": base + 443,
            "controller-manager": base + 257, "scheduler": base + 259, "kwok": base + 247,
            "ray-operator-metrics": base + 80, "ray-operator-probe": base + 81}


def up(opts: Options) -> State:
    existing = load_state(opts.name)
    if existing and is_running(existing):
        raise StartError(f"cluster {opts.name!r} is already running (KUBECONFIG={existing.kubeconfig}); "
                         f"`kai dev down --name {opts.name}` first")
    if existing:
        down(opts.name, quiet=True)
    bins = build.ensure_binaries()
    ports = _ports(opts.port_base)
    # Ports of a cluster stopped a moment ago can linger in closing TCP states for a few seconds.
    deadline = time.monotonic() + 30
    while (busy := [f"{k}={p}" for k, p in ports.items() if not _port_free(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    if busy:
        raise StartError(f"ports in use: {', '.join(busy)}; choose another --port-base")
    root = state_dir(opts.name)
    root.mkdir(parents=True, exist_ok=True)
    server = f"https://127.0.0.1:{ports['apiserver']}"
    state = State(name=opts.name, dir=str(root), kubeconfig=str(root / "kubeconfig"), server=server,
                  ports=ports, bin_dir=str(bins.kube_dir))
    if opts.real_node:
        slot = slots.claim(SLOTS, opts.name, alive=_cluster_alive, clean=_clean_stale_node)
        state.node = {"slot": slot, "name": NODE_NAME,
                      "containerd_socket": str(real_node.paths_of(root).containerd_socket)}
    state.save()
    try:
        _start(state, bins, opts)
    except BaseException:
        print(f"start-up failed; logs are in {root / 'logs'}; stopping what was started", file=sys.stderr)
        try:
            _teardown(state)
        except StartError as exc:
            print(exc, file=sys.stderr)
        raise
    slots.hand_over(opts.name)  # the cluster's processes hold its slot from now on
    return state


SLOTS = build.CACHE / "real-node-slots"  # one file per claimed slot, naming its cluster


def _cluster_alive(name: str) -> bool:
    state = load_state(name)
    return state is not None and is_running(state)


def _clean_stale_node(name: str, slot: int) -> None:
    """Remove what a dead cluster's node left behind (its slot is being taken over)."""
    real_node.stop(state_dir=state_dir(name), addrs=NodeAddresses(slot, name), pids={})


def _start(state: State, bins: build.Binaries, opts: Options) -> None:
    root = Path(state.dir)
    ports = state.ports
    pki_dir = root / "pki"
    ca = pki.CertificateAuthority(pki_dir)
    sa = pki.service_account_keys(pki_dir)
    addrs = state.node_addresses
    api_ips = ["127.0.0.1", addrs.host_ip, addrs.kubernetes_service_ip] if addrs else ["127.0.0.1", "10.96.0.1"]
    serving = ca.issue("apiserver", "kube-apiserver", server=True,
                       dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                            "kubernetes.default.svc.cluster.local"], ips=api_ips)
    network = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
               "--service-cluster-ip-range=10.96.0.0/16"]
    if addrs:
        kubelet_client = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", org="system:masters",
                                  client=True)
        network = real_node.apiserver_flags(addrs, kubelet_client)
    admin = ca.issue("admin", "kubernetes-admin", org="system:masters", client=True)
    kcm = ca.issue("controller-manager", "system:kube-controller-manager", client=True)
    sched = ca.issue("scheduler", "system:kube-scheduler", client=True)
    pki.write_kubeconfig(Path(state.kubeconfig), server=state.server, ca=ca.cert_path, client=admin,
                         user="kubernetes-admin")
    kcm_config = pki.write_kubeconfig(root / "controller-manager.kubeconfig", server=state.server,
                                      ca=ca.cert_path, client=kcm, user="system:kube-controller-manager")
    sched_config = pki.write_kubeconfig(root / "scheduler.kubeconfig", server=state.server, ca=ca.cert_path,
                                        client=sched, user="system:kube-scheduler")
    launcher = Launcher(state)
    tls = ssl.create_default_context(cafile=str(ca.cert_path))
    tls.load_cert_chain(str(admin.cert), str(admin.key))
    timeout = opts.timeout

    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    launcher.start("etcd", [str(bins.tool("etcd")), "--name", "kai-dev", "--data-dir", str(root / "etcd"),
                            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                            "--initial-cluster", f"kai-dev={peer_url}", "--unsafe-no-fsync",
                            "--quota-backend-bytes", str(8 * 2**30), "--log-level", "warn"])
    launcher.wait_http("etcd", f"{etcd_url}/health", timeout)

    audit: list[str] = []
    if opts.audit_policy:
        (root / "audit-policy.yaml").write_text(opts.audit_policy)
        audit = [f"--audit-policy-file={root / 'audit-policy.yaml'}",
                 f"--audit-log-path={launcher.logdir / 'audit.log'}", "--audit-log-mode=blocking"]
    launcher.start("kube-apiserver", [
        str(bins.tool("kube-apiserver")),
        f"--etcd-servers={etcd_url}",
        *network, f"--secure-port={ports['apiserver']}",
        f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
        f"--client-ca-file={ca.cert_path}",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={sa.cert}", f"--service-account-signing-key-file={sa.key}",
        "--allow-privileged=true",
        # Nodes are fake and never heartbeat (no node-lifecycle controller): do not taint new ones not-ready.
        "--disable-admission-plugins=TaintNodesByCondition",
        "--max-requests-inflight=1600", "--max-mutating-requests-inflight=800",
        # /debug/pprof on (served only to authorized clients, costs nothing until asked): where the API server's
        # CPU goes at a backlog is read from its CPU profile (bench/README.md, the e2e at 20,000 pods).
        "--profiling=true", "--event-ttl=2h",
        FEATURE_GATES,
        *audit,
    ])
    launcher.wait_http("kube-apiserver", f"{state.server}/readyz", timeout, tls=tls)

    launcher.start("kube-controller-manager", [
        str(bins.tool("kube-controller-manager")),
        f"--kubeconfig={kcm_config}", f"--authentication-kubeconfig={kcm_config}",
        f"--authorization-kubeconfig={kcm_config}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['controller-manager']}",
        f"--service-account-private-key-file={sa.key}", f"--root-ca-file={ca.cert_path}",
        f"--cluster-signing-cert-file={ca.cert_path}", f"--cluster-signing-key-file={pki_dir / 'ca.key'}",
        "--use-service-account-credentials=true",
        # Fake nodes never heartbeat: without node-lifecycle nobody taints them unreachable and evicts pods.
        "--controllers=*,-node-lifecycle-controller,-node-ipam-controller,-cloud-node-lifecycle-controller,"
        "-service-lb-controller,-node-route-controller",
        "--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400",
        FEATURE_GATES,
    ])
    launcher.start("kube-scheduler", [
        str(bins.tool("kube-scheduler")),
        f"--kubeconfig={sched_config}", f"--authentication-kubeconfig={sched_config}",
        f"--authorization-kubeconfig={sched_config}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['scheduler']}", "--leader-elect=false",
    ])
    launcher.start("kwok", [
        str(bins.kwok), f"--kubeconfig={state.kubeconfig}", f"--config={STAGES}",
        "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}=fake",
        f"--server-address=127.0.0.1:{ports['kwok']}", "--node-lease-duration-seconds=0",
        "--cidr=10.244.0.0/16", "--node-ip=10.0.0.1",
    ])
    kubectl = [str(bins.kubectl), f"--kubeconfig={state.kubeconfig}"]
    _kubectl(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", str(CRDS)], "our CRDs", launcher)
    if opts.kuberay:
        _kubectl(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", str(bins.kuberay_crds)],
                 "KubeRay CRDs", launcher)
    if opts.autoscaler:
        crd = AUTOSCALER / "provisioningrequests.crd.yaml"
        _kubectl(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", str(crd)],
                 "ProvisioningRequest CRD", launcher)
    _kubectl(kubectl + ["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"], "CRDs",
             launcher)
    _kubectl(kubectl + ["apply", "--server-side", "--force-conflicts", "-f",
                        str(MANIFESTS / "defaults.yaml")], "priority classes and default queues", launcher)
    if opts.kuberay:
        launcher.start("ray-operator", [
            str(bins.ray_operator), "--batch-scheduler=kai-scheduler", "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{ports['ray-operator-metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['ray-operator-probe']}",
            "--log-stdout-encoder=console",
        ], env={"KUBECONFIG": state.kubeconfig})
    shape = nodes.NodeShape(gpus=opts.gpus, gpu_memory_mib=opts.gpu_memory_mib, gpu_product=opts.gpu_product,
                            cpu=opts.cpu, memory=opts.memory, dra=opts.dra)
    names = [f"kwok-node-{i}" for i in range(opts.nodes)]
    per_node = nodes.spread_over_topology(names, *opts.topology) if opts.topology else None
    missing = asyncio.run(_create_nodes(state, names, shape, timeout, per_node))
    if missing:
        launcher.check_alive("kwok")
        raise StartError(f"{len(missing)} node(s) did not become Ready (e.g. {missing[0]}); "
                         f"see the kwok log: {state.logs['kwok']}")
    if addrs:
        _start_real_node(state, launcher, ca, addrs, kubectl, timeout)
    for name in ("kube-controller-manager", "kube-scheduler"):
        launcher.wait_http(name, f"https://127.0.0.1:{ports[name.removeprefix('kube-')]}/healthz", timeout,
                           tls=_insecure())
    if opts.kuberay:
        launcher.wait_http("ray-operator", f"http://127.0.0.1:{ports['ray-operator-probe']}/readyz", timeout)
    if opts.autoscaler:
        launcher.start("test-provisioner", [sys.executable, str(AUTOSCALER / "provisioner.py")],
                       env={"KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"})
    if opts.dra:
        launcher.start("dra-driver", [sys.executable, "-m", "operators.devcluster.dradriver",
                                      f"--kubeconfig={state.kubeconfig}"], env={"PYTHONUNBUFFERED": "1"})
    if opts.components and opts.suite == "chart":
        _deploy_chart(state, bins, timeout)
    elif opts.components:
        _start_components(state, launcher, ca, timeout)
    if opts.shards:
        from operators.devcluster import shards

        shards.start_shards(state, opts.shards, nodes_per_shard=opts.shard_nodes, shape=shape, timeout=timeout)
    if opts.usage_db and opts.components and opts.suite == "host":
        _start_usage_db(state, opts, kubectl, timeout)
    elif opts.usage_db:
        print("--usage-db scrapes the components run as host processes (--suite host): not started",
              file=sys.stderr)


def _start_usage_db(state: State, opts: Options, kubectl: list[str], timeout: float) -> None:
    """Prometheus scraping every component's metrics; the default SchedulingShard reads usage from it."""
    from operators.core.resources import parse_quantity
    from operators.devcluster import usagedb

    base = state.ports["apiserver"] - 443
    targets = {name: f"127.0.0.1:{p['metrics']}" for name, p in component_ports(base).items()}
    url = usagedb.start(state, targets, port=base + usagedb.PORT_OFFSET, timeout=timeout)
    capacity = (float(opts.nodes * opts.gpus), float(opts.nodes * parse_quantity(opts.cpu)),
                float(opts.nodes * parse_quantity(opts.memory)))
    usagedb.point_shard(kubectl, "default", usagedb.usage_db_config(url, capacity))


def _start_real_node(state: State, launcher: Launcher, ca: pki.CertificateAuthority, addrs: NodeAddresses,
                     kubectl: list[str], timeout: float) -> None:
    binaries = real_node.NodeBinaries.from_dir(build.ensure_node_binaries())

    def start(name: str, argv: list[str], preexec: Callable[[], None]) -> None:
        launcher.start(name, argv, preexec=preexec)

    try:
        seconds = real_node.start(state_dir=Path(state.dir), addrs=addrs, ca=ca, api_port=state.ports["apiserver"],
                                  binaries=binaries, kubectl=kubectl, start_process=start,
                                  wait_http=launcher.wait_http, timeout=timeout)
    except (RuntimeError, OSError) as exc:  # NodeError, and the packages', network's and images' own errors
        raise StartError(f"the real node did not come up: {exc}; logs: {launcher.logdir}") from exc
    state.node["start_seconds"] = round(seconds, 1)
    state.save()


def _deploy_chart(state: State, bins: build.Binaries, timeout: float) -> None:
    from operators.devcluster import deployed

    if not state.node:
        raise StartError("--suite chart runs the components as pods on the real node: start with --real-node")
    try:
        seconds = deployed.deploy(state_dir=Path(state.dir), kubeconfig=state.kubeconfig,
                                  kubectl=[state.kubectl, f"--kubeconfig={state.kubeconfig}"], helm=str(bins.helm),
                                  timeout=timeout)
    except RuntimeError as exc:  # the image build, its import into the node, or helm
        raise StartError(f"installing the suite with its chart failed: {exc}") from exc
    print(f"the suite is installed by its chart, every component Ready on the real node in {seconds:.1f}s",
          file=sys.stderr)


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def _create_nodes(state: State, names: list[str], shape: nodes.NodeShape, timeout: float,
                        per_node: dict[str, dict[str, str]] | None = None) -> list[str]:
    from operators.core.kube import api_client

    api = await api_client(state.kubeconfig)
    async with api:
        await nodes.create_nodes(api, names, shape, per_node=per_node)
        return await nodes.wait_nodes_ready(api, names, timeout)


def _kubectl(argv: list[str], what: str, launcher: Launcher) -> None:
    for attempt in range(10):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode == 0:
            return
        time.sleep(0.5 * (attempt + 1))
    raise StartError(f"installing {what} failed: {' '.join(argv)}\n{proc.stderr.strip()}")


def component_ports(base: int) -> dict[str, dict[str, int]]:
    """Per component: metrics, probe and (for webhook servers) webhook ports on 127.0.0.1."""
    from operators import components

    return {name: {"metrics": base + 800 + 10 * i, "probe": base + 801 + 10 * i, "webhook": base + 802 + 10 * i}
            for i, name in enumerate(components.COMPONENTS)}


def component_args(state: State, name: str, ports: dict[str, int]) -> list[str]:
    webhook_dir = str(Path(state.dir) / "pki" / "webhook")
    args = [f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['probe']}"]
    if name in ("admission", "queue-controller", "podgroup-controller"):
        args += [f"--webhook-addr=127.0.0.1:{ports['webhook']}", f"--cert-dir={webhook_dir}"]
    if name == "admission":
        args += ["--gpu-sharing-enabled=true"]
    return args


def _start_components(state: State, launcher: Launcher, ca: pki.CertificateAuthority, timeout: float) -> None:
    from operators import components

    names = components.available()
    if not names:
        print("no KAI components are implemented yet; the cluster runs without them", file=sys.stderr)
        return
    webhook = ca.issue("webhook", "kai-webhooks", server=True, ips=["127.0.0.1"],
                       dns=["localhost", "admission.kai-scheduler.svc", "queue-controller.kai-scheduler.svc",
                            "podgroup-controller.kai-scheduler.svc"])
    webhook_dir = Path(state.dir) / "pki" / "webhook"
    webhook_dir.mkdir(exist_ok=True)
    shutil.copyfile(webhook.cert, webhook_dir / "tls.crt")
    shutil.copyfile(webhook.key, webhook_dir / "tls.key")
    ports = component_ports(state.ports["apiserver"] - 443)
    for name in names:
        launcher.start(name, [sys.executable, "-m", "operators.cli", "run", name,
                              *component_args(state, name, ports[name])],
                       env={"KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"})
    for name in names:
        launcher.wait_http(name, f"http://127.0.0.1:{ports[name]['probe']}/readyz", timeout)
    configs = webhooks.configurations(
        ca_pem=ca.pem,
        admission_port=ports["admission"]["webhook"] if "admission" in names else None,
        queue_port=ports["queue-controller"]["webhook"] if "queue-controller" in names else None,
        podgroup_port=ports["podgroup-controller"]["webhook"] if "podgroup-controller" in names else None,
        admission_args=component_args(state, "admission", ports["admission"]))
    if configs:
        import yaml

        kubectl = [str(Path(state.bin_dir) / "kubectl"), f"--kubeconfig={state.kubeconfig}"]
        manifest = Path(state.dir) / "webhooks.yaml"
        manifest.write_text(yaml.safe_dump_all(configs))
        _kubectl(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", str(manifest)], "webhooks",
                 launcher)


def _stop_processes(state: State, grace: float = 5.0) -> None:
    pids = {name: pid for name, pid in state.pids.items() if _alive(pid)}
    # Stop in reverse start order: clients before the API server, the API server before etcd.
    for name in reversed(list(pids)):
        try:
            os.killpg(pids[name], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids.values()):
        time.sleep(0.1)
    for pid in pids.values():
        if _alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids.values()):
        time.sleep(0.05)
    for pid in pids.values():
        try:
            os.waitpid(pid, os.WNOHANG)  # reap our own children (no zombies left behind)
        except ChildProcessError:
            pass


def _teardown(state: State) -> None:
    """Stop the real node (its containers, mounts and network) first, then every other process."""
    addrs = state.node_addresses
    left = real_node.stop(state_dir=state.dir, addrs=addrs, pids=state.pids) if addrs else []
    _stop_processes(state)
    if left:  # the state directory stays (it may hold mounts); `down` again retries
        raise StartError(f"the real node of {state.name!r} left behind: {'; '.join(left)}")
    slots.release(SLOTS, state.name)


def down(name: str, *, quiet: bool = False) -> bool:
    """Stop every process of the cluster and remove its state. True if there was something to stop."""
    state = load_state(name)
    root = state_dir(name)
    if state is None:
        shutil.rmtree(root, ignore_errors=True)
        return False
    _teardown(state)
    shutil.rmtree(root, ignore_errors=True)
    if not quiet:
        print(f"cluster {name!r} stopped and its state removed")
    return True


def env_lines(state: State) -> str:
    return f"export KUBECONFIG={state.kubeconfig}\nexport PATH={state.bin_dir}:$PATH"


def describe(state: State) -> dict[str, Any]:
    return {"name": state.name, "kubeconfig": state.kubeconfig, "server": state.server,
            "kubectl": state.kubectl, "logs": str(Path(state.dir) / "logs")}


def stop_component(state: State, name: str, grace: float = 5.0) -> list[str]:
    """Stop one process of a running cluster (e.g. to test failover): SIGTERM, and SIGKILL if it still runs
    after `grace` seconds. Returns its argv for a restart."""
    pid = state.pids[name]
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        argv = []
    _stop_processes(State(state.name, state.dir, state.kubeconfig, state.server, state.ports, pids={name: pid}),
                    grace=grace)
    return argv


def start_component(state: State, name: str, argv: list[str]) -> None:
    """Start a process under the cluster's supervision again (logs appended, pid recorded for `down`)."""
    Launcher(state).start(name, argv, env={"KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"})
