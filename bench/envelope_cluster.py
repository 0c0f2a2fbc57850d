"""Synthetic clusters of KAI's published scale envelope (issue 26), for `scheduler_bench.py --envelope`.

KAI tests its scheduler at 1,008 nodes, 90,000 pods, 16,000 workloads, 8,000 GPUs and a largest job of 1,000 pods;
`ENVELOPE` is that shape, `ENVELOPE_2X` twice it (10,000 nodes, 150,000 pods, 30,000 workloads). The workloads mix
single-GPU pods, gangs of 2-32 pods (1-8 GPUs each), elastic jobs (minMember below their pod count), fractions
(0.25 / 0.5 / 0.75 of a GPU; the running ones 0.5, two to a device), CPU-only deployments of many pods, and one
pending 1,000-pod gang; every node carries zone / rack labels and a Topology, and of the pending gangs one in four
requires a rack and one in four prefers a rack inside a required zone. The first 85% of the pods are placed as
running as far as the nodes' GPUs, CPUs and pod slots allow (a gang whole or not at all); the rest are pending.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from scheduler_bench import (
    RACK_LABEL,
    RACK_NODES,
    TOPOLOGY,
    ZONE_LABEL,
    ZONE_RACKS,
    Filler,
    _node,
    queues_and_priorities,
)

MAX_PODS = 110  # the nodes' pod slots (kubelet default)
GANG = 1000  # the largest job: one pending gang of this many one-GPU pods


@dataclass(frozen=True)
class Profile:
    name: str
    nodes: int
    pods: int
    workloads: int


ENVELOPE = Profile("envelope", 1000, 90_000, 16_000)
ENVELOPE_2X = Profile("envelope2x", 10_000, 150_000, 30_000)


class SlotFiller(Filler):
    """`Filler` that also keeps within each node's pod slots (the envelope runs ~90 pods per node)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.slots = [MAX_PODS] * n

    def whole(self, gpus: int, cpu: int) -> int | None:
        for _ in range(len(self.gpus)):
            i = self.cursor
            if self.gpus[i] >= gpus and self.cpu[i] >= cpu and self.slots[i] > 0:
                self.gpus[i] -= gpus
                self.cpu[i] -= cpu
                self.slots[i] -= 1
                return i
            self.cursor = (self.cursor + 1) % len(self.gpus)
        return None

    def second_tenant(self, i: int, cpu: int) -> bool:
        if self.slots[i] <= 0 or not super().second_tenant(i, cpu):
            return False
        self.slots[i] -= 1
        return True


def _pod(name: str, k: int, ns: str, gpus: int, cpu: int, fraction: str | None,
         selector: dict[str, str] | None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": str(cpu), "memory": f"{2 * max(gpus, 1)}Gi"}}
    annotations = {"pod-group-name": name}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    if fraction:
        annotations["gpu-fraction"] = fraction
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "resources": resources}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{k}", "namespace": ns, "uid": f"{name}-{k}", "labels": {"app": name},
                         "annotations": annotations},
            "spec": spec, "status": {"phase": "Pending"}}


def generate_envelope(profile: Profile, seed: int = 11, gang: int = GANG) -> list[dict[str, Any]]:
    """The objects of `profile`'s cluster (see the module docstring); deterministic for a seed."""
    rnd = random.Random(seed)
    n_nodes = profile.nodes
    objs: list[dict[str, Any]] = [_node(i) for i in range(n_nodes)]
    for i, n in enumerate(objs):
        rack = i // RACK_NODES
        n["metadata"]["labels"].update({ZONE_LABEL: f"zone-{rack // ZONE_RACKS}", RACK_LABEL: f"rack-{rack}"})
        n["status"]["allocatable"]["pods"] = str(MAX_PODS)
    objs.append(TOPOLOGY)
    teams = queues_and_priorities(objs, n_nodes)
    filler = SlotFiller(n_nodes)
    running_target = profile.pods * 17 // 20
    made = 0
    workloads = profile.workloads - (1 if gang else 0)
    pods_left = profile.pods - (gang if gang else 0)
    for job in range(1, workloads + 1):
        mean = max(1.0, pods_left / max(1, workloads - job + 1))
        kind = rnd.choices(["single", "gang", "elastic", "fraction", "cpu"], weights=[30, 15, 10, 15, 30])[0]
        spread = max(2, int(2 * mean))
        if kind == "single":
            size, gpus = 1, 1
        elif kind == "fraction":
            size, gpus = rnd.randint(1, 4), 0
        elif kind == "gang":
            size, gpus = min(32, rnd.randint(2, spread)), rnd.choice([1, 1, 2, 4, 8])
        elif kind == "elastic":
            size, gpus = min(32, rnd.randint(2, spread)), 1
        else:
            size, gpus = min(64, rnd.randint(1, 2 * spread)), 0
        if job == workloads:
            size = max(1, pods_left)  # the last workload takes what is left (CPU-only: it always fits somewhere)
            kind, gpus = "cpu", 0
        size = max(1, min(size, pods_left - (workloads - job)))
        cpu = 4 * gpus if gpus else 2
        fraction = "0.5" if kind == "fraction" else None
        running = made < running_target
        if kind == "fraction" and not running:
            fraction = rnd.choice(["0.25", "0.5", "0.75"])
        ns = f"ns-{job % 100}"
        name = f"w-{job:06d}"
        min_member = {"gang": size, "elastic": max(1, size // 2)}.get(kind, 1)
        selector = {"nvidia.com/gpu.product": "H100"} if gpus and rnd.random() < 0.1 else None
        group: dict[str, Any] = {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "uid": name,
                         "creationTimestamp": f"2025-01-01T{job // 3600 % 24:02d}:{job // 60 % 60:02d}:"
                                              f"{job % 60:02d}Z"},
            "spec": {"minMember": min_member, "queue": teams[rnd.randrange(len(teams))],
                     "priorityClassName": "build" if kind == "cpu" else "train"}}
        objs.append(group)
        pods = [_pod(name, k, ns, gpus, cpu, fraction, selector) for k in range(size)]
        placed = 0
        if running:
            for pod in pods:
                if kind == "fraction":
                    spot = filler.fraction(cpu)
                    if spot is None:
                        break
                    node_idx, gpu_group = spot
                    pod["metadata"]["labels"]["runai-gpu-group"] = gpu_group
                else:
                    found = filler.whole(gpus, cpu)
                    if found is None:
                        break
                    node_idx = found
                pod["spec"]["nodeName"] = f"node-{node_idx:05d}"
                pod["status"]["phase"] = "Running"
                placed += 1
            if placed < min_member:  # a gang that did not fit whole is pending (its slots stay taken: harmless)
                for pod in pods[:placed]:
                    del pod["spec"]["nodeName"]
                    pod["metadata"]["labels"].pop("runai-gpu-group", None)
                    pod["status"]["phase"] = "Pending"
                placed = 0
        if kind in ("gang", "elastic") and not placed and job % 4 < 2:
            group["spec"]["topologyConstraint"] = (
                {"topology": "dc", "requiredTopologyLevel": "rack"} if job % 4 == 0
                else {"topology": "dc", "requiredTopologyLevel": "zone", "preferredTopologyLevel": "rack"})
        objs += pods
        made += size
        pods_left -= size
    if gang:
        name = "big-gang"
        objs.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                     "metadata": {"name": name, "namespace": "ns-big", "uid": name,
                                  "creationTimestamp": "2025-01-01T00:00:00Z"},
                     "spec": {"minMember": gang, "queue": teams[0], "priorityClassName": "train",
                              "topologyConstraint": {"topology": "dc", "preferredTopologyLevel": "zone"}}})
        objs += [_pod(name, k, "ns-big", 1, 4, None, None) for k in range(gang)]
    return objs


def add_gang(objs: list[dict[str, Any]], size: int = GANG) -> list[dict[str, Any]]:
    """`--gang1000`: the plain bench's cluster plus one pending gang of `size` one-GPU pods in a queue of its own
    whose deserved GPUs cover it (so fair share tries it first), at a priority that does not preempt. The plain
    cluster's GPUs are all but full, so the jobs with a pod on every fourth node are left out: the gang fits
    without evictions, and the cycle measured is the one that places it."""
    gone = {(o["metadata"]["namespace"], o["metadata"]["annotations"]["pod-group-name"]) for o in objs
            if o["kind"] == "Pod" and int((o["spec"].get("nodeName") or "node-00001")[5:]) % 4 == 0}
    out = [o for o in objs if not (
        (o["kind"] == "Pod" and (o["metadata"]["namespace"], o["metadata"]["annotations"]["pod-group-name"]) in gone)
        or (o["kind"] == "PodGroup" and (o["metadata"]["namespace"], o["metadata"]["name"]) in gone))]
    out.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "big"},
                "spec": {"resources": {"gpu": {"quota": size, "limit": -1, "overQuotaWeight": 1},
                                       "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                       "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}})
    name = "big-gang"
    out.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "ns-big", "uid": name,
                             "creationTimestamp": "2025-01-01T00:00:00Z"},
                "spec": {"minMember": size, "queue": "big", "priorityClassName": "train"}})
    out += [_pod(name, k, "ns-big", 1, 4, None, None) for k in range(size)]
    return out
