"""Fault injection: fill a cluster while killing components and restarting the API server; lose nothing.

Two replicas of every component run as local processes (leader election for the five singletons; admission
is active-active behind a TCP proxy standing in for its Service, as are the queue and PodGroup webhooks). A
seeded fill of RayCluster gangs, 0.5-GPU Jobs and plain Jobs across two child queues of one parent is applied
in waves while a seeded schedule kills components with SIGKILL (leaders and standbys; each is started again
after a few seconds, as a kubelet would, and so is any process that exits by itself) and stops (SIGTERM, then
SIGKILL if it has not drained in 20 s) and restarts the API server once. Once the fill has settled:

- every pod a fault-free run binds is bound: the fault-free run is `kai simulate` (the scheduler's own
  decision code) on the settled objects with every pod made pending again and every binding artefact removed;
- no pod was bound twice (the API server's audit log of pods/binding calls, per pod; every bound pod has its
  audited binding unless the API server had to be killed) and no pod has two
  Succeeded BindRequests or a Succeeded one naming another node;
- no gang is partially bound for longer than the stale grace period (sampled through the run) or at the end;
- every GPU-sharing reservation pod has users, every bound fractional pod its reservation and its ConfigMaps,
  and no GPU-sharing ConfigMap outlives its pod;
- every PodGroup's and Queue's stored status equals a recount from the objects;
- every replica not killed on purpose answers /healthz 200 for the whole run, and the standby of each killed
  leader takes over (its /readyz turns 200) within 15 s. A component is hit only once both its replicas have
  run for 20 s (a Deployment's minReadySeconds), so that a takeover is measured from a warm standby.

The short form (`make test`) fills 200 pods; KAI_CHAOS_LONG=1 fills 2,000. KAI_CHAOS_SEED sets the seed (default
1), KAI_CHAOS_PODS the pod count. Own cluster: KAI_CHAOS_CLUSTER (default `chaos`) at KAI_CHAOS_PORT_BASE
(default 19000), brought up without the dev components and with an audit policy for bindings; kept with
KAI_TEST_REUSE=1. Run with `-s` to see the seed, the schedule and the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chaos import chaos_kit as kit
from tests.support import TEST_LABEL, Cluster, Replicas, labelled, own_cluster, probe_status, queue, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.chaos]

LONG = os.environ.get("KAI_CHAOS_LONG") == "1"
SEED = int(os.environ.get("KAI_CHAOS_SEED") or 1)
PODS = int(os.environ.get("KAI_CHAOS_PODS") or (2000 if LONG else 200))
PORT_BASE = int(os.environ.get("KAI_CHAOS_PORT_BASE", "19000"))
REPLICAS = ("a", "b")
GPUS_PER_NODE = 16
FAILOVER_BOUND = 15.0
STALE_GRACE = 60.0  # the scheduler's default staleness grace period
WINDOW = 240.0 if LONG else 90.0  # faults happen within this many seconds of the start of the fill
KILLS = 16 if LONG else 8
WAVES = 8 if LONG else 6  # the fill arrives in waves over the fault window
SETTLE_TIMEOUT = 1800.0 if LONG else 600.0
POLL = 10.0 if LONG else 4.0
WARM = 20.0  # seconds a replica runs before a fault may hit its component
API_DRAIN = 20.0  # seconds the stopped API server gets to finish its requests before a SIGKILL


def probe_port(component: str, replica: str) -> int:
    return PORT_BASE + 600 + 100 * REPLICAS.index(replica) + 10 * kit.COMPONENTS.index(component) + 1


def webhook_port(component: str, replica: str) -> int:
    return probe_port(component, replica) + 1


def proxy_port(component: str) -> int:
    return PORT_BASE + 590 + kit.WEBHOOK_SERVERS.index(component)


@pytest.fixture(scope="module")
def chaos_cluster() -> Iterator[Cluster]:
    yield from own_cluster(os.environ.get("KAI_CHAOS_CLUSTER", "chaos"), port_base=PORT_BASE, nodes=0,
                           components=False, timeout=300, audit_policy=kit.AUDIT_POLICY)


def webhook_setup(cluster: Cluster) -> str:
    """A serving certificate for the webhook replicas, and the webhook configurations pointing at the proxies."""
    from operators.devcluster import pki, webhooks

    ca = pki.CertificateAuthority(Path(cluster.state_dir) / "pki")
    cert = ca.issue("chaos-webhook", "kai-webhooks", server=True, ips=["127.0.0.1"], dns=["localhost"])
    cert_dir = Path(cluster.state_dir) / "pki" / "chaos-webhook"
    cert_dir.mkdir(exist_ok=True)
    shutil.copyfile(cert.cert, cert_dir / "tls.crt")
    shutil.copyfile(cert.key, cert_dir / "tls.key")
    configs = webhooks.configurations(ca_pem=ca.pem, admission_port=proxy_port("admission"),
                                      queue_port=proxy_port("queue-controller"),
                                      podgroup_port=proxy_port("podgroup-controller"))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(configs))
    return str(cert_dir)


def component_args(cert_dir: str) -> Any:
    def args(component: str, replica: str) -> list[str]:
        if component not in kit.WEBHOOK_SERVERS:
            return []
        out = [f"--webhook-addr=127.0.0.1:{webhook_port(component, replica)}", f"--cert-dir={cert_dir}"]
        return out + (["--gpu-sharing-enabled=true"] if component == "admission" else [])
    return args


class Chaos:
    """Runs the fault schedule and watches every replica: /healthz, exits, failovers."""

    def __init__(self, cluster: Cluster, replicas: Replicas, api: kit.Api) -> None:
        self.cluster = cluster
        self.replicas = replicas
        self.api = api
        self.lock = threading.Lock()
        self.up: set[tuple[str, str]] = set()  # started, /healthz seen, not killed since
        self.up_since: dict[tuple[str, str], float] = {}
        self.t0 = 0.0
        self.log: list[str] = []
        self.faults: Counter[str] = Counter()
        self.failovers: list[tuple[str, float]] = []
        self.exits: list[str] = []  # processes that exited without being killed
        self.violations: list[str] = []
        self.health_checks = 0
        self.api_outage = 0.0
        self.api_drain = 0.0
        self.done = threading.Event()
        self.applied = threading.Event()
        self._stop = threading.Event()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, line: str) -> None:
        line = f"t+{self.now():6.1f}s  {line}"
        print(line, flush=True)
        with self.lock:
            self.log.append(line)

    def start(self, key: tuple[str, str], timeout: float = 120) -> None:
        self.replicas.start(*key)
        wait_for(f"{key} /healthz", lambda: self.replicas.alive(key)
                 and probe_status(probe_port(*key), "/healthz") == 200, timeout=timeout, interval=0.3)
        with self.lock:
            self.up.add(key)
            self.up_since[key] = time.monotonic()
            self.replicas.killed.discard(key)

    def leader(self, component: str, timeout: float = 60) -> str:
        def one() -> str | None:
            ready = [r for r in REPLICAS if probe_status(probe_port(component, r), "/readyz") == 200]
            return ready[0] if len(ready) == 1 else None
        return str(wait_for(f"one ready replica of {component}", one, timeout=timeout, interval=0.3))

    # --- the monitor: /healthz of every live replica, and exits nobody asked for -------------------------------

    def monitor(self) -> None:
        while not self._stop.wait(1.0):
            with self.lock:
                keys = sorted(self.up)
            for key in keys:
                proc = self.replicas.procs[key]
                code = proc.poll()
                if code is not None:
                    with self.lock:
                        if key not in self.up:
                            continue
                        self.up.discard(key)
                    tail = self.replicas.log(*key, lines=40)
                    lost = "lost the leadership" in tail
                    self.note(f"{key[0]}-{key[1]} exited by itself (code {code})"
                              + (": it lost its lease (it restarts as a standby)" if lost else ""))
                    self.exits.append(f"{key[0]}-{key[1]} code {code} at t+{self.now():.1f}s"
                                      + (" (lost its lease)" if lost else ""))
                    if not lost:
                        self.violations.append(f"{key[0]}-{key[1]} crashed (code {code}):\n{tail}")
                    threading.Thread(target=self._restart, args=(key, 1.0), daemon=True).start()
                    continue
                status = probe_status(probe_port(*key), "/healthz", timeout=5)
                self.health_checks += 1
                if status != 200:
                    time.sleep(0.5)  # an exit in progress is reported as an exit, on the next round
                with self.lock:
                    still_up = key in self.up and self.replicas.procs[key].poll() is None
                if status != 200 and still_up:
                    self.violations.append(f"{key[0]}-{key[1]} /healthz -> {status} at t+{self.now():.1f}s")

    def _restart(self, key: tuple[str, str], delay: float) -> None:
        """Start the process again after `delay`, and again with a doubled delay (up to 10 s) while it exits
        before answering /healthz, as a kubelet restarts a container."""
        while not self._stop.is_set():
            time.sleep(delay)
            try:
                self.start(key, timeout=90)
            except AssertionError:
                code = self.replicas.procs[key].poll()
                self.note(f"{key[0]}-{key[1]} exited during start-up (code {code}); restarting it")
                self.violations.append(f"{key[0]}-{key[1]} exited during start-up (code {code}):\n"
                                       f"{self.replicas.log(*key, lines=15)}")
                if code is None:
                    self.replicas.kill(key)
                delay = min(2 * delay, 10)
                continue
            self.note(f"{key[0]}-{key[1]} started again")
            return

    # --- the faults -------------------------------------------------------------------------------------------

    def run(self, schedule: list[kit.Fault]) -> None:
        try:
            for fault in schedule:
                delay = fault.at - self.now()
                if delay > 0:
                    time.sleep(delay)
                try:
                    if fault.target == "kube-apiserver":
                        self.restart_apiserver(fault)
                    else:
                        self.kill(fault)
                except AssertionError as exc:
                    self.violations.append(f"fault {fault} could not be carried out: {exc}")
        finally:
            self.done.set()

    def kill(self, fault: kit.Fault) -> None:
        component = fault.target
        # One replica down at a time per component: wait until both run, each for WARM seconds (a Deployment's
        # minReadySeconds): a standby started a moment ago has not listed its caches yet, and its takeover
        # would measure a cold start rather than a failover.
        def both_warm() -> bool:
            now = time.monotonic()
            return all((component, r) in self.up and now - self.up_since.get((component, r), now) >= WARM
                       for r in REPLICAS)
        wait_for(f"both replicas of {component}", both_warm, timeout=180, interval=0.5)
        if fault.role == "replica":
            victim, measure = REPLICAS[int(fault.at * 10) % 2], False
        else:
            leader = self.leader(component)
            victim = leader if fault.role == "leader" else ("b" if leader == "a" else "a")
            measure = fault.role == "leader"
        key = (component, victim)
        with self.lock:
            self.up.discard(key)
        self.replicas.kill(key)
        killed = time.monotonic()
        self.faults[component] += 1
        self.note(f"kill -9 {component}-{victim} ({fault.role})")
        if measure:
            standby = "b" if victim == "a" else "a"
            threading.Thread(target=self._failover, args=(component, standby, killed), daemon=True).start()
        threading.Thread(target=self._restart, args=(key, fault.down_for), daemon=True).start()

    def _failover(self, component: str, standby: str, killed: float) -> None:
        deadline = killed + 60
        while time.monotonic() < deadline:
            if probe_status(probe_port(component, standby), "/readyz") == 200:
                took = time.monotonic() - killed
                self.failovers.append((component, took))
                self.note(f"{component}-{standby} took over in {took:.1f}s")
                if took > FAILOVER_BOUND:
                    self.violations.append(f"{component} failover took {took:.1f}s (> {FAILOVER_BOUND:.0f}s)")
                return
            time.sleep(0.2)
        self.violations.append(f"{component}-{standby} did not take over within 60s of the leader's kill")

    def restart_apiserver(self, fault: kit.Fault) -> None:
        from operators.devcluster import cluster as dev

        state = dev.load_state(self.cluster.name)
        assert state is not None
        stopped = time.monotonic()
        # SIGTERM: the API server drains its requests for up to API_DRAIN seconds, then SIGKILL (which can end a
        # binding after its write to etcd and before its audit record: the audit check allows for that).
        argv = dev.stop_component(state, "kube-apiserver", grace=API_DRAIN)
        self.faults["kube-apiserver"] += 1
        self.api_drain = time.monotonic() - stopped
        self.note(f"kube-apiserver stopped (drained in {self.api_drain:.1f}s); down for {fault.down_for:.1f}s")
        time.sleep(fault.down_for)
        dev.start_component(state, "kube-apiserver", argv)
        wait_for("the API server to be ready again", self.api.ready, timeout=180, interval=0.5)
        self.api_outage = time.monotonic() - stopped
        self.note(f"kube-apiserver ready again after {self.api_outage:.1f}s without it")

    def fill(self, namespace: str, docs: list[dict[str, Any]]) -> None:
        """The workloads in WAVES waves spread over the fault window, so that faults meet work in flight."""
        try:
            per = -(-len(docs) // WAVES)
            for i in range(WAVES):
                delay = i * WINDOW / WAVES - self.now()
                if delay > 0:
                    time.sleep(delay)
                apply_with_retries(self.cluster, namespace, docs[i * per:(i + 1) * per])
                self.note(f"wave {i + 1}/{WAVES} of the fill applied")
        except AssertionError as exc:
            self.violations.append(f"the fill could not be applied: {exc}")
        finally:
            self.applied.set()

    def stop(self) -> None:
        self._stop.set()


def apply_with_retries(cluster: Cluster, namespace: str, docs: list[dict[str, Any]], chunk: int = 25) -> None:
    """kubectl apply in chunks; a chunk refused while the API server restarts is applied again."""
    for i in range(0, len(docs), chunk):
        part = labelled(docs[i:i + chunk])
        deadline = time.monotonic() + 300
        while True:
            # Server-side apply: one request per object; no client-side validation (it would download the
            # OpenAPI documents, KubeRay's large ones included, on every call).
            try:
                proc = cluster.kubectl("apply", "--server-side", "--force-conflicts", "--validate=false", "-f", "-",
                                       input=part, namespace=namespace, check=False)
                if proc.returncode == 0:
                    break
                error = proc.stderr[-2000:]
            except subprocess.TimeoutExpired as exc:
                error = str(exc)
            if time.monotonic() > deadline:
                raise AssertionError(f"kubectl apply kept failing:\n{error}")
            time.sleep(2)


def ensure_nodes(cluster: Cluster, count: int) -> None:
    from operators.core.kube import api_client
    from operators.devcluster import nodes

    have = {n["metadata"]["name"] for n in cluster.get_json("nodes")["items"]}
    names = [f"{kit.GPU_NODE_PREFIX}{i}" for i in range(count) if f"{kit.GPU_NODE_PREFIX}{i}" not in have]
    if not names:
        return

    async def create() -> list[str]:
        client = await api_client(cluster.kubeconfig)
        async with client:
            await nodes.create_nodes(client, names, nodes.NodeShape(gpus=GPUS_PER_NODE))
            return await nodes.wait_nodes_ready(client, names, 180)

    assert not asyncio.run(create()), "nodes did not become Ready"


def fault_free_binds(world: kit.World, tmp_path: Path) -> set[str]:
    """The pods `kai simulate` binds when it starts from the settled objects with every pod pending."""
    path = tmp_path / "fault-free.yaml"
    path.write_text(yaml.safe_dump_all(kit.unbound_podgroup_free_snapshot(world)))
    proc = subprocess.run([sys.executable, "-m", "operators.cli", "simulate", "-f", str(path), "-o", "json",
                           "--cycles", "3"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    return {b["pod"] for b in result["binds"]}


@pytest.mark.timeout(SETTLE_TIMEOUT + 1200)
def test_fill_survives_kills_and_an_api_server_restart(chaos_cluster: Cluster, tmp_path: Path) -> None:
    cluster = chaos_cluster
    rng = random.Random(SEED)
    run = uuid.uuid4().hex[:5]
    parent, children = f"chaos-{run}", [f"chaos-{run}-a", f"chaos-{run}-b"]
    namespace = f"chaos-{run}"
    fill = kit.make_fill(rng, PODS, children)
    schedule = kit.make_schedule(rng, WINDOW, KILLS)
    node_count = kit.nodes_for(fill, GPUS_PER_NODE)
    print(f"\nchaos seed {SEED} ({'long' if LONG else 'short'} form): {fill.pods} pods in {len(fill.docs)} "
          f"workloads asking {fill.gpus:g} GPUs, on {node_count} nodes x {GPUS_PER_NODE} GPUs; queues {parent} -> "
          f"{', '.join(children)}")
    for kind, count in sorted(fill.kinds.items()):
        print(f"  {count:5d} pods of {kind}")
    print("fault schedule:\n" + "\n".join(f"  {f}" for f in schedule), flush=True)

    ensure_nodes(cluster, node_count)
    cluster.kubectl("create", "namespace", "kai-scheduler", check=False)
    for lease in kit.LEASES.values():  # a reused cluster: no stale holder to wait out
        cluster.kubectl("delete", "lease", lease, "-n", "kai-scheduler", "--ignore-not-found", check=False)
    proxies = [kit.Proxy(proxy_port(c), [webhook_port(c, r) for r in REPLICAS]) for c in kit.WEBHOOK_SERVERS]
    cert_dir = webhook_setup(cluster)
    api = kit.Api(cluster.kubeconfig)
    audit_log = Path(cluster.state_dir) / "logs" / "audit.log"
    replicas = Replicas(cluster, tmp_path, probe_port, component_args(cert_dir), leader_elected=kit.ELECTED)
    chaos = Chaos(cluster, replicas, api)
    chaos.t0 = time.monotonic()
    threads: list[threading.Thread] = []
    try:
        for component in kit.COMPONENTS:
            for replica in REPLICAS:
                replicas.start(component, replica)
        for component in kit.COMPONENTS:
            for replica in REPLICAS:
                key = (component, replica)
                wait_for(f"{key} /healthz", lambda key=key: replicas.alive(key)  # type: ignore[misc]
                         and probe_status(probe_port(*key), "/healthz") == 200, timeout=120, interval=0.3)
                chaos.up.add(key)
                chaos.up_since[key] = time.monotonic()
        for component in kit.ELECTED:
            chaos.leader(component, timeout=90)
        for replica in REPLICAS:
            wait_for("admission ready", lambda r=replica: probe_status(  # type: ignore[misc]
                probe_port("admission", r), "/readyz") == 200, timeout=60)
        cluster.kubectl("create", "namespace", namespace)
        cluster.kubectl("label", "namespace", namespace, f"{TEST_LABEL}=true")
        cluster.kubectl("apply", "-f", "-", input=labelled([queue(parent), *[queue(c, parent) for c in children]]))

        # The fill, with the faults running alongside.
        chaos.t0 = time.monotonic()
        threads = [threading.Thread(target=chaos.monitor, daemon=True),
                   threading.Thread(target=chaos.run, args=(schedule,), daemon=True),
                   threading.Thread(target=chaos.fill, args=(namespace, fill.docs), daemon=True)]
        for thread in threads:
            thread.start()

        partial_since: dict[str, float] = {}
        stale: dict[str, str] = {}
        settled_at: float | None = None
        last = ""
        world: kit.World | None = None
        while chaos.now() < SETTLE_TIMEOUT:
            time.sleep(POLL)
            try:
                world = kit.World.read(api, namespace)
            except OSError:
                continue  # the API server is restarting
            now = chaos.now()
            partial = kit.partial_gangs(world.pods, world.podgroups)
            for name in list(partial_since):
                if name not in partial:
                    del partial_since[name]
            for name, (bound, minimum) in partial.items():
                since = partial_since.setdefault(name, now)
                if now - since > STALE_GRACE + 2 * POLL and name not in stale:
                    stale[name] = f"gang {name}: {bound}/{minimum} pods bound for {now - since:.0f}s"
            live = [p for p in world.pods if not kit.meta(p).get("deletionTimestamp")]
            bound = sum(kit.is_bound(p) for p in live)
            mismatches = kit.status_mismatches(world, namespace, [parent, *children])
            line = (f"{len(live)}/{fill.pods} pods, {bound} bound, {len(partial)} partial gangs, "
                    f"{len(mismatches)} status mismatches")
            if line != last:
                chaos.note(line)
                last = line
            quiet = chaos.done.is_set() and chaos.applied.is_set() and len(chaos.up) == 2 * len(kit.COMPONENTS)
            if quiet and len(live) == fill.pods and bound == fill.pods and not partial and not mismatches:
                settled_at = now
                break
        chaos.stop()
        if settled_at is None:
            chaos.violations.append(f"the fill did not settle within {SETTLE_TIMEOUT:.0f}s: {last}")
        world = kit.World.read(api, namespace)

        # The checks on the settled cluster.
        violations: dict[str, list[str]] = {}
        expected = fault_free_binds(world, tmp_path)
        bound_names = {kit.meta(p)["name"] for p in world.pods if kit.is_bound(p)}
        violations["unbound (a fault-free run binds them)"] = sorted(expected - bound_names)
        codes, audit_lines = kit.audit_bindings(audit_log, namespace)
        violations["bound twice"] = [f"{pod}: {c}" for pod, c in sorted(codes.items()) if c.count(201) > 1]
        # A binding can be stored and still answered with an error (a 504 after its write): any audited call counts.
        unaudited = sorted(n for n in bound_names if not codes.get(n))
        # Only a SIGKILL of the API server (it did not drain in time) may lose the audit record of a binding.
        violations["bound without an audited binding"] = unaudited if chaos.api_drain < API_DRAIN else []
        rejected = {pod: c for pod, c in codes.items() if any(code != 201 for code in c)}
        violations["BindRequests acted on twice"] = kit.bindrequest_violations(world)
        violations["partially bound gangs past the grace period"] = sorted(stale.values()) + [
            f"gang {n}: {b}/{m} bound at the end" for n, (b, m) in kit.partial_gangs(world.pods,
                                                                                      world.podgroups).items()]
        violations["GPU sharing"] = kit.sharing_violations(world)
        violations["statuses differ from a recount"] = kit.status_mismatches(world, namespace, [parent, *children])
        violations["replicas (health, crashes, failover)"] = list(chaos.violations)
        total = sum(len(v) for v in violations.values())

        failover = ", ".join(f"{c} {t:.1f}s" for c, t in chaos.failovers) or "none measured"
        by_component = ", ".join(f"{c} {n}" for c, n in sorted(chaos.faults.items()))
        settle = f"{settled_at:.0f}s" if settled_at is not None else "not settled"
        print(f"""
chaos seed {SEED}: {fill.pods} pods ({len(bound_names)} bound; fault-free run binds {len(expected)}), \
{len(world.podgroups)} PodGroups in all, {len(world.bindrequests)} BindRequests, \
{len(world.reservations)} reservation pods
  faults injected: {sum(chaos.faults.values())} ({by_component}); API server outage {chaos.api_outage:.1f}s \
(stopped with SIGTERM, drained in {chaos.api_drain:.1f}s)
  time to settle: {settle} from the start of the fill
  failover (kill -9 of the leader -> standby ready): {failover}
  exits without a kill: {len(chaos.exits)} {chaos.exits}
  /healthz checks: {chaos.health_checks}; audited bindings: {sum(len(c) for c in codes.values())} in {audit_lines} \
audit lines, {len(rejected)} pods with a rejected binding call {dict(list(rejected.items())[:5])}, \
{len(unaudited)} bound pods without an audited binding call
  violations: {total}""")
        for what, found in violations.items():
            print(f"    {what}: {len(found)}" + "".join(f"\n      {v}" for v in found[:10]))
        assert total == 0, f"{total} violations (seed {SEED}); see the printout"
    finally:
        chaos.stop()
        for thread in threads:
            thread.join(timeout=5)
        replicas.stop_all()
        for proxy in proxies:
            proxy.close()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "queues.scheduling.run.ai", *children, parent, "--wait=false", check=False)
        cluster.kubectl("delete", "pods", "--all", "-n", "kai-resource-reservation", "--wait=false", check=False)
