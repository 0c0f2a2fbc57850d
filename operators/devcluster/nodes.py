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


@dataclass(frozen=True)
class NodeShape:
    gpus: int = 8
    gpu_memory_mib: int = 81920
    gpu_product: str = "NVIDIA-A100-SXM4-80GB"
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110


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
        capacity[keys.GPU_RESOURCE] = str(shape.gpus)
        node_labels |= {
            keys.NODE_GPU_COUNT: str(shape.gpus),
            keys.NODE_GPU_MEMORY: str(shape.gpu_memory_mib),
            keys.NODE_GPU_PRODUCT: shape.gpu_product,
            # No device plugin runs on kwok nodes: the binder hands out deterministic fake GPU ids here.
            keys.FAKE_GPU_NODE_LABEL: "true",
        }
    node_labels |= labels or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


async def create_nodes(api: client.ApiClient, names: list[str], shape: NodeShape, *,
                       labels: dict[str, str] | None = None, concurrency: int = 32) -> None:
    """Create the nodes (existing ones are left as they are), many at a time: thousands take seconds."""
    core = client.CoreV1Api(api)
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        async with gate:
            try:
                await retry(lambda: core.create_node(node_manifest(name, shape, labels=labels)))  # type: ignore[arg-type]
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
