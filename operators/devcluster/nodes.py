"""Fake GPU nodes for kwok: the capacity and labels a GPU operator would publish on a real node."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from operators.core import keys
from operators.core.kube import is_conflict, retry

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
DEV_NODE_LABEL = "kai.dev/fake-node"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "cloud.provider.com/topology-rack"
# The label NVIDIA's DRA driver deployment selects its kubelet plugin's nodes by.
DRA_NODE_LABEL = "nvidia.com/dra-kubelet-plugin"


@dataclass(frozen=True)
class NodeShape:
    gpus: int = 8
    gpu_memory_mib: int = 81920
    gpu_product: str = "NVIDIA-A100-SXM4-80GB"
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    # GPUs published through DRA (our test driver's ResourceSlices) instead of the nvidia.com/gpu resource.
    dra: bool = False


def node_manifest(name: str, shape: NodeShape, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    capacity = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods),
                "ephemeral-storage": "1Ti"}
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        DEV_NODE_LABEL: "true",
    }
    if shape.gpus:
        node_labels |= {
            keys.NODE_GPU_COUNT: str(shape.gpus),
            keys.NODE_GPU_MEMORY: str(shape.gpu_memory_mib),
            keys.NODE_GPU_PRODUCT: shape.gpu_product,
        }
        if shape.dra:  # the test DRA driver publishes this node's GPUs as devices of a ResourceSlice
            node_labels[DRA_NODE_LABEL] = "true"
        else:
            capacity[keys.GPU_RESOURCE] = str(shape.gpus)
            # No device plugin runs on kwok nodes: the binder hands out deterministic fake GPU ids here.
            node_labels[keys.FAKE_GPU_NODE_LABEL] = "true"
    node_labels |= labels or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def topology_labels(prefix: str, zones: int, racks: int, nodes_per_rack: int) -> dict[str, dict[str, str]]:
    """Node name -> zone and rack labels of a zones x racks x nodes hierarchy.

    Nodes are named `<prefix>-z<zone>-r<rack>-<i>`; zones are `<prefix>-z<zone>`, racks `r<rack>` (the same rack
    names repeat in every zone, as a data center numbers its racks per hall).
    """
    out: dict[str, dict[str, str]] = {}
    for zone in range(zones):
        for rack in range(racks):
            for i in range(nodes_per_rack):
                out[f"{prefix}-z{zone}-r{rack}-{i}"] = {ZONE_LABEL: f"{prefix}-z{zone}", RACK_LABEL: f"r{rack}"}
    return out


def parse_topology(value: str) -> tuple[int, int]:
    """`ZxR` (zones x racks per zone) as two positive integers; ValueError with the expected form otherwise."""
    parts = value.lower().split("x")
    try:
        zones, racks = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"--topology takes ZONESxRACKS (racks per zone), e.g. 2x2; got {value!r}") from None
    if zones < 1 or racks < 1:
        raise ValueError(f"--topology needs at least one zone and one rack per zone; got {value!r}")
    return zones, racks


def spread_over_topology(names: list[str], zones: int, racks: int) -> dict[str, dict[str, str]]:
    """Node name -> zone and rack labels, the nodes cut in order into zones x racks blocks of (nearly) equal size:
    with 8 nodes and 2x2, nodes 0-1 are rack r0 of zone-0, 2-3 rack r1 of zone-0, 4-5 rack r0 of zone-1, ..."""
    total = zones * racks
    out: dict[str, dict[str, str]] = {}
    for i, name in enumerate(names):
        block = i * total // len(names)
        out[name] = {ZONE_LABEL: f"zone-{block // racks}", RACK_LABEL: f"r{block % racks}"}
    return out


def topology_node_manifests(prefix: str, shape: NodeShape, *, zones: int = 2, racks: int = 2,
                            nodes_per_rack: int = 2, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Node manifests of a zones x racks x nodes hierarchy (see topology_labels), each also with `labels`."""
    return [node_manifest(name, shape, labels={**(labels or {}), **extra})
            for name, extra in topology_labels(prefix, zones, racks, nodes_per_rack).items()]


async def create_nodes(api: client.ApiClient, names: list[str], shape: NodeShape, *,
                       labels: dict[str, str] | None = None, concurrency: int = 32,
                       per_node: dict[str, dict[str, str]] | None = None) -> None:
    """Create the nodes (existing ones are left as they are), many at a time: thousands take seconds.

    `labels` go on every node, `per_node` (name -> labels) on the named ones, e.g. their zone and rack.
    """
    core = client.CoreV1Api(api)
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        node_labels = {**(labels or {}), **(per_node or {}).get(name, {})}
        async with gate:
            try:
                await retry(lambda: core.create_node(node_manifest(name, shape, labels=node_labels)))  # type: ignore[arg-type]
            except Exception as exc:
                if not is_conflict(exc):
                    raise

    await asyncio.gather(*(one(n) for n in names))


async def wait_nodes_ready(api: client.ApiClient, names: list[str], timeout: float) -> list[str]:
    """Wait until every named node reports Ready; return the ones that did not."""
    core = client.CoreV1Api(api)
    wanted = set(names)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        nodes = await core.list_node(label_selector=f"{DEV_NODE_LABEL}=true")
        ready = {
            n.metadata.name for n in nodes.items
            if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        }
        missing = sorted(wanted - ready)
        if not missing or loop.time() > deadline:
            return missing
        await asyncio.sleep(0.5)
