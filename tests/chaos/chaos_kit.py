"""Pieces of the fault-injection suite: the seeded fill and fault schedule, a TCP proxy standing in for a
Service in front of webhook replicas, a small API reader, and the checks run on the settled cluster.

Everything random comes from one `random.Random(seed)`: the same seed gives the same workloads, in the same
order, and the same faults at the same offsets from the start of the fill.
"""

from __future__ import annotations

import json
import math
import random
import selectors
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from operators.binder import gpusharing
from operators.core import keys
from operators.podgroupcontroller import status as pg_status
from operators.queuecontroller import status as queue_status

Obj = dict[str, Any]
ELECTED = ["pod-grouper", "queue-controller", "podgroup-controller", "binder", "scheduler"]
COMPONENTS = [*ELECTED, "admission"]  # admission is active-active (no lease): its replicas both serve
LEASES = {"pod-grouper": "pod-grouper", "queue-controller": "queue-controller",
          "podgroup-controller": "podgroup-controller", "binder": "kai-binder", "scheduler": "kai-scheduler-default"}
WEBHOOK_SERVERS = ("admission", "queue-controller", "podgroup-controller")
QUEUE_LABEL = "kai.scheduler/queue"
GPU_NODE_PREFIX = "chaos-node-"
POD_CPU, POD_MEMORY = "50m", "64Mi"
# Only bindings are audited: one line per pods/binding call with its response code.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create]
  resources: [{group: "", resources: [pods/binding]}]
- level: None
"""


# --- the fill ----------------------------------------------------------------------------------------------------

@dataclass
class Fill:
    docs: list[Obj]
    pods: int
    gpus: float  # whole GPUs the fill asks for (a 0.5 share counts half)
    kinds: Counter[str] = field(default_factory=Counter)  # pods per kind of workload


def _container(name: str, whole_gpu: bool) -> Obj:
    resources: Obj = {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}}
    if whole_gpu:
        resources["limits"] = {keys.GPU_RESOURCE: "1"}
    return {"name": name, "image": "busybox", "resources": resources}


def _pod_template(queue: str, gpu: str, container: str) -> Obj:
    metadata: Obj = {"labels": {QUEUE_LABEL: queue}}
    if gpu == "0.5":
        metadata["annotations"] = {keys.GPU_FRACTION: "0.5"}
    return {"metadata": metadata,
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
                     "containers": [_container(container, gpu == "1")]}}


def job(name: str, queue: str, pods: int, gpu: str) -> Obj:
    """A batch Job of `pods` parallel pods, each with no GPU (""), a whole one ("1") or half of one ("0.5")."""
    template = _pod_template(queue, gpu, "main")
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template}}


def ray_cluster(name: str, queue: str, workers: int, gpu: str) -> Obj:
    """A RayCluster gang: a CPU head and `workers` workers (whole GPU or a 0.5 share each), all or nothing."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"headGroupSpec": {"template": _pod_template(queue, "", "head")},
                     "workerGroupSpecs": [{"groupName": "workers", "replicas": workers, "minReplicas": workers,
                                           "maxReplicas": workers,
                                           "template": _pod_template(queue, gpu, "worker")}]}}


def make_fill(rng: random.Random, pods: int, queues: Sequence[str]) -> Fill:
    """Workloads until `pods` pods: RayCluster gangs, 0.5-GPU Jobs and plain Jobs (CPU or one GPU per pod)."""
    fill = Fill(docs=[], pods=0, gpus=0.0)
    index = 0
    while fill.pods < pods:
        roll = rng.random()
        queue = rng.choice(list(queues))
        if roll < 0.35:
            workers, gpu = rng.randint(2, 4), rng.choice(["1", "0.5"])
            fill.docs.append(ray_cluster(f"ray-{index:04d}", queue, workers, gpu))
            count, kind = 1 + workers, f"raycluster({'whole' if gpu == '1' else 'half'}-gpu workers)"
            fill.gpus += workers * float(gpu)
        elif roll < 0.65:
            count = rng.randint(1, 3)
            fill.docs.append(job(f"half-{index:04d}", queue, count, "0.5"))
            kind = "job(0.5 gpu)"
            fill.gpus += 0.5 * count
        else:
            count, gpu = rng.randint(1, 4), rng.choice(["", "", "1"])
            fill.docs.append(job(f"plain-{index:04d}", queue, count, gpu))
            kind = f"job({'1 gpu' if gpu else 'cpu'})"
            fill.gpus += count * (1.0 if gpu else 0.0)
        fill.pods += count
        fill.kinds[kind] += count
        index += 1
    return fill


def nodes_for(fill: Fill, gpus_per_node: int, pods_per_node: int = 110) -> int:
    """Enough nodes for the fill to fit with room to spare (a fault-free run binds every pod)."""
    return max(4, math.ceil(fill.gpus * 1.4 / gpus_per_node), math.ceil(fill.pods * 1.5 / pods_per_node))


# --- the fault schedule ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start of the fill
    target: str  # a component, or "kube-apiserver"
    role: str  # leader | standby | replica (admission) | "" (API server)
    down_for: float  # seconds before the killed process is started again (as a kubelet would)

    def __str__(self) -> str:
        what = "stop+restart kube-apiserver" if self.target == "kube-apiserver" else \
            f"kill -9 {self.target} ({self.role})"
        return f"t+{self.at:6.1f}s  {what}, down {self.down_for:.1f}s"


def make_schedule(rng: random.Random, window: float, kills: int) -> list[Fault]:
    """`kills` kill -9 of components (every leader-elected component's leader at least once, an admission
    replica) at random moments within `window`, and one stop/restart of the API server, away from the kills."""
    api_at = rng.uniform(0.55, 0.7) * window
    faults = [Fault(round(api_at, 1), "kube-apiserver", "", round(rng.uniform(2, 5), 1))]
    targets = [(c, "leader") for c in rng.sample(ELECTED, len(ELECTED))] + [("admission", "replica")]
    while len(targets) < kills:
        component = rng.choice(COMPONENTS)
        targets.append((component, "replica" if component == "admission" else rng.choice(["leader", "standby"])))
    for component, role in targets:
        at = rng.uniform(3, window)
        while api_at - 10 < at < api_at + 30:  # failover is measured with the API server up
            at = rng.uniform(3, window)
        faults.append(Fault(round(at, 1), component, role, round(rng.uniform(1, 6), 1)))
    return sorted(faults, key=lambda f: f.at)


# --- a TCP proxy: a Service in front of the webhook replicas -----------------------------------------------------

class Proxy:
    """Forwards each connection (TLS passes through) to the first backend that accepts it, trying them in turn
    from a rotating start: a killed replica refuses, the other answers, as behind a Service."""

    def __init__(self, port: int, backends: Sequence[int]) -> None:
        self.port = port
        self.backends = list(backends)
        self._next = 0
        self._sock = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._sock.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket | None:
        self._next += 1
        for i in range(len(self.backends)):
            port = self.backends[(self._next + i) % len(self.backends)]
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                continue
        return None

    def _pipe(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            client.close()
            return
        upstream.settimeout(None)
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=1):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            upstream.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


# --- reading the API ---------------------------------------------------------------------------------------------

class Api:
    """GETs with the kubeconfig's client certificate (cheaper than a kubectl process per poll)."""

    def __init__(self, kubeconfig: str) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.server = cluster["server"]
        self.tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.tls.load_cert_chain(user["client-certificate"], user["client-key"])

    def get(self, path: str, timeout: float = 60, **query: str) -> Any:
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(url, timeout=timeout, context=self.tls) as resp:
            return json.loads(resp.read())

    def items(self, path: str, **query: str) -> list[Obj]:
        out: list[Obj] = self.get(path, **query)["items"]
        return out

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.server + "/readyz", timeout=3, context=self.tls) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def crd_path(plural: str, namespace: str | None = None, version: str = "v2alpha2") -> str:
    where = f"namespaces/{namespace}/" if namespace else ""
    return f"/apis/{keys.GROUP}/{version}/{where}{plural}"


@dataclass
class World:
    """The objects the checks read, listed once."""

    pods: list[Obj]  # the fill's namespace
    reservations: list[Obj]  # the reservation namespace
    podgroups: list[Obj]  # every namespace (queue totals count them all)
    queues: list[Obj]
    bindrequests: list[Obj]
    configmaps: list[Obj]
    nodes: list[Obj]
    priorityclasses: list[Obj]

    @classmethod
    def read(cls, api: Api, namespace: str) -> World:
        return cls(pods=api.items(pods_path(namespace)),
                   reservations=api.items(pods_path(keys.RESERVATION_NAMESPACE)),
                   podgroups=api.items(crd_path("podgroups")),
                   queues=api.items(crd_path("queues", version="v2")),
                   bindrequests=api.items(crd_path("bindrequests", namespace, version="v1alpha2")),
                   configmaps=api.items(f"/api/v1/namespaces/{namespace}/configmaps"),
                   nodes=api.items("/api/v1/nodes"),
                   priorityclasses=api.items("/apis/scheduling.k8s.io/v1/priorityclasses"))


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and not meta(pod).get("deletionTimestamp")


def partial_gangs(pods: Iterable[Obj], podgroups: Iterable[Obj]) -> dict[str, tuple[int, int]]:
    """PodGroups with some but fewer than minMember pods bound: name -> (bound, minMember)."""
    bound: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        if is_bound(pod):
            bound[meta(pod).get("namespace"), (meta(pod).get("annotations") or {}).get(keys.POD_GROUP_NAME)] += 1
    out: dict[str, tuple[int, int]] = {}
    for pg in podgroups:
        minimum = int((pg.get("spec") or {}).get("minMember") or 1)
        n = bound[meta(pg).get("namespace"), meta(pg).get("name")]
        if 0 < n < minimum:
            out[f"{meta(pg).get('namespace')}/{meta(pg).get('name')}"] = (n, minimum)
    return out


# --- the checks --------------------------------------------------------------------------------------------------

def status_mismatches(world: World, namespace: str, queues: Sequence[str]) -> list[str]:
    """PodGroups of the fill and its Queues whose stored status differs from a recount from the objects."""
    out: list[str] = []
    nodes = {meta(n)["name"]: n for n in world.nodes}
    classes = {meta(c)["name"]: c for c in world.priorityclasses}
    members: dict[str, list[Obj]] = defaultdict(list)
    for pod in world.pods:
        if not meta(pod).get("deletionTimestamp"):
            members[(meta(pod).get("annotations") or {}).get(keys.POD_GROUP_NAME) or ""].append(pod)
    for pg in world.podgroups:
        if meta(pg).get("namespace") != namespace:
            continue
        live = members.get(meta(pg)["name"], [])
        computed = pg_status.resources_status(pg, live, nodes, classes)
        if pg_status.status_patch(pg, computed) is not None:
            out.append(f"PodGroup {meta(pg)['name']}: resourcesStatus "
                       f"{(pg.get('status') or {}).get('resourcesStatus')} != recount {computed}")
        counts = pg_status.pod_counts(pg, live)
        stored = {k: int((pg.get("status") or {}).get(k) or 0) for k in ("running", "pending")}
        if stored != counts:
            out.append(f"PodGroup {meta(pg)['name']}: running/pending {stored} != recount {counts}")
    statuses = queue_status.all_queue_statuses(world.queues, world.podgroups)
    for q in world.queues:
        name = meta(q)["name"]
        if name in queues and queue_status.status_patch(q, statuses[name]) is not None:
            stored = {k: v for k, v in (q.get("status") or {}).items() if k != "conditions"}
            out.append(f"Queue {name}: status {stored} != recount {statuses[name]}")
    return out


def gpu_groups(pod: Mapping[str, Any]) -> set[str]:
    labels = meta(pod).get("labels") or {}
    groups = {v for k, v in labels.items() if k == keys.GPU_GROUP_LABEL or k.startswith(keys.GPU_GROUP_LABEL + "/")}
    return {g for g in groups if g}


def sharing_configmaps(pod: Mapping[str, Any]) -> set[str]:
    """The two GPU-sharing ConfigMaps the binder writes for a fractional pod (none for other pods)."""
    try:
        names = gpusharing.configmap_names(pod)
    except gpusharing.GpuSharingError:
        return set()
    return {names.capabilities, names.direct_env}


def is_fractional_user(pod: Mapping[str, Any]) -> bool:
    return (meta(pod).get("annotations") or {}).get(keys.GPU_FRACTION) is not None


def sharing_violations(world: World) -> list[str]:
    """Reservation pods without users, bound fractional pods without a reservation, two reservations of one GPU
    group, and GPU-sharing ConfigMaps whose pod is gone (or that no pod names)."""
    out: list[str] = []
    reservations: dict[str, list[str]] = defaultdict(list)
    for pod in world.reservations:
        if meta(pod).get("deletionTimestamp"):
            continue
        for group in gpu_groups(pod) or {"<none>"}:
            reservations[group].append(meta(pod)["name"])
    users: dict[str, list[str]] = defaultdict(list)
    for pod in world.pods:
        if is_bound(pod) and is_fractional_user(pod):
            groups = gpu_groups(pod)
            if not groups:
                out.append(f"fractional pod {meta(pod)['name']} is bound without a GPU group")
            for group in groups:
                users[group].append(meta(pod)["name"])
    for group, names in sorted(reservations.items()):
        if group not in users:
            out.append(f"reservation pod(s) {names} of GPU group {group} have no user")
        if len(names) > 1:
            out.append(f"GPU group {group} has {len(names)} reservation pods: {names}")
    for group, names in sorted(users.items()):
        if group not in reservations:
            out.append(f"fractional pod(s) {names} use GPU group {group}, which has no reservation pod")
    live = {meta(p).get("uid"): p for p in world.pods if not meta(p).get("deletionTimestamp")}
    named = {meta(p).get("uid"): sharing_configmaps(p) for p in live.values()}
    have = {meta(cm)["name"] for cm in world.configmaps}
    for cm in world.configmaps:
        owners = [o for o in meta(cm).get("ownerReferences") or [] if o.get("kind") == "Pod"]
        if not owners:
            continue
        name, owner = meta(cm)["name"], owners[0]
        if owner.get("uid") not in live:
            out.append(f"GPU-sharing ConfigMap {name} is orphaned: its pod {owner.get('name')} is gone")
        elif name not in named[owner.get("uid")]:
            out.append(f"ConfigMap {name} is owned by pod {owner.get('name')}, whose ConfigMaps are "
                       f"{sorted(named[owner.get('uid')])}")
    for pod in live.values():
        missing = sharing_configmaps(pod) - have
        if is_bound(pod) and is_fractional_user(pod) and missing:
            out.append(f"bound fractional pod {meta(pod)['name']} lacks its ConfigMaps {sorted(missing)}")
    return out


def audit_bindings(path: Path, namespace: str) -> tuple[dict[str, list[int]], int]:
    """Per pod of the namespace, the response codes of its pods/binding calls, and the lines read."""
    codes: dict[str, list[int]] = defaultdict(list)
    lines = 0
    if not path.exists():
        return codes, 0
    with path.open() as f:
        for line in f:
            lines += 1
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("subresource") != "binding" or ref.get("namespace") != namespace:
                continue
            codes[ref.get("name", "")].append(int((event.get("responseStatus") or {}).get("code") or 0))
    return codes, lines


def bindrequest_violations(world: World) -> list[str]:
    """Two BindRequests of one pod both Succeeded, or one Succeeded naming a node the pod is not on."""
    out: list[str] = []
    pods = {meta(p)["name"]: p for p in world.pods}
    succeeded: dict[str, list[str]] = defaultdict(list)
    for br in world.bindrequests:
        spec = br.get("spec") or {}
        if (br.get("status") or {}).get("phase") != keys.BIND_PHASE_SUCCEEDED:
            continue
        pod = pods.get(str(spec.get("podName")))
        succeeded[str(spec.get("podName"))].append(meta(br)["name"])
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if pod is not None and node != spec.get("selectedNode"):
            out.append(f"BindRequest {meta(br)['name']} Succeeded for node {spec.get('selectedNode')}, "
                       f"but pod {spec.get('podName')} is on {node}")
    for pod, names in sorted(succeeded.items()):
        if len(names) > 1:
            out.append(f"pod {pod} has {len(names)} Succeeded BindRequests: {names}")
    return out


def unbound_podgroup_free_snapshot(world: World) -> list[Obj]:
    """The fill's objects as a fault-free run starts from: every pod pending, no bindings, no reservations,
    no BindRequests or GPU-sharing ConfigMaps, statuses cleared."""
    docs: list[Obj] = []
    for node in world.nodes:
        docs.append({"apiVersion": "v1", "kind": "Node", **_strip(node, keep_status=True)})
    for pc in world.priorityclasses:
        docs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **_strip(pc)})
    for q in world.queues:
        docs.append({"apiVersion": f"{keys.GROUP}/v2", "kind": "Queue", **_strip(q)})
    namespaces = {meta(p).get("namespace") for p in world.pods}
    for pg in world.podgroups:
        if meta(pg).get("namespace") in namespaces:
            docs.append({"apiVersion": f"{keys.GROUP}/v2alpha2", "kind": "PodGroup", **_strip(pg)})
    for pod in world.pods:
        if meta(pod).get("deletionTimestamp"):
            continue
        body = _strip(pod)
        body["spec"].pop("nodeName", None)
        labels = body["metadata"].get("labels") or {}
        for key in [k for k in labels if k.startswith(keys.GPU_GROUP_LABEL)]:
            labels.pop(key)
        body["status"] = {"phase": "Pending"}
        docs.append({"apiVersion": "v1", "kind": "Pod", **body})
    return docs


def _strip(obj: Mapping[str, Any], keep_status: bool = False) -> Obj:
    m = {k: v for k, v in meta(obj).items() if k not in ("managedFields", "resourceVersion")}
    out: Obj = {"metadata": json.loads(json.dumps(m)), "spec": json.loads(json.dumps(obj.get("spec") or {}))}
    if "value" in obj:  # PriorityClass
        out.update({k: obj[k] for k in ("value", "globalDefault", "preemptionPolicy") if k in obj})
    if keep_status:
        out["status"] = obj.get("status") or {}
    return out
