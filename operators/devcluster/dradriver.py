"""A test DRA driver for the local control plane: what NVIDIA's GPU DRA driver publishes, without a kubelet plugin.

For every node labelled `nvidia.com/dra-kubelet-plugin=true` it keeps one ResourceSlice of driver
`gpu.nvidia.com` (pool = the node, one device `gpu-<i>` per GPU of the node's `nvidia.com/gpu.count` label, with
the attributes NVIDIA's driver sets: type, uuid, productName, index, minor, brand, and the capacity `memory` from
`nvidia.com/gpu.memory` MiB), owned by the Node so it goes with it; and the DeviceClass `gpu.nvidia.com` as NVIDIA's
chart defines it. Nothing prepares devices on the node (kwok runs no kubelet): allocation, reservation and the
claims' lifecycle are the real API's and the scheduler's. Run by `kai dev up --dra`
(`python -m operators.devcluster.dradriver`); tests run `Driver.run` against the session's cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
from typing import Any

from operators.core import keys
from operators.core.kube import api_client, is_conflict, is_not_found, raw
from operators.devcluster.nodes import DRA_NODE_LABEL

log = logging.getLogger("dra-driver")
DRIVER = "gpu.nvidia.com"
API = "/apis/resource.k8s.io/v1"
MANAGED_LABEL = "kai.dev/dra-driver"
# KEP-5004: pods asking `requests[EXTENDED_RESOURCE]` get devices of the class (a name kwok's nodes never list).
EXTENDED_RESOURCE = "example.com/dra-gpu"
DEVICE_CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": DRIVER, "labels": {MANAGED_LABEL: DRIVER}},
            "spec": {"selectors": [{"cel": {"expression": DEVICE_CLASS_SELECTOR}}],
                     "extendedResourceName": EXTENDED_RESOURCE}}


def _uuid(node: str, index: int) -> str:
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice(node: dict[str, Any]) -> dict[str, Any] | None:
    """The ResourceSlice of a node's GPUs, from its GPU labels; None for a node without GPUs."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        count = int(labels.get(keys.NODE_GPU_COUNT) or 0)
        memory_mib = int(labels.get(keys.NODE_GPU_MEMORY) or 0)
    except ValueError:
        return None
    if count <= 0:
        return None
    name = str(meta.get("name"))
    product = str(labels.get(keys.NODE_GPU_PRODUCT) or "NVIDIA-GPU")
    devices = [{
        "name": f"gpu-{i}",
        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": _uuid(name, i)},
                       "productName": {"string": product}, "brand": {"string": "Nvidia"},
                       "index": {"int": i}, "minor": {"int": i}},
        "capacity": {"memory": {"value": f"{memory_mib}Mi"}},
    } for i in range(count)]
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": slice_name(name), "labels": {MANAGED_LABEL: DRIVER},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                          "uid": str(meta.get("uid")), "controller": True}]},
        "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }


class Driver:
    """Keeps the DeviceClass and one ResourceSlice per DRA node, polling the nodes every `interval` seconds."""

    def __init__(self, api: Any, interval: float = 0.5) -> None:
        self.api = api
        self.interval = interval

    async def ensure_device_class(self) -> None:
        try:
            await raw(self.api, "POST", f"{API}/deviceclasses", body=device_class())
        except Exception as exc:
            if not is_conflict(exc):
                raise

    async def sync(self) -> int:
        """One pass: create the missing slices, delete those of nodes gone; the number of slices kept."""
        nodes = await raw(self.api, "GET", "/api/v1/nodes", query={"labelSelector": f"{DRA_NODE_LABEL}=true"})
        slices = await raw(self.api, "GET", f"{API}/resourceslices",
                           query={"labelSelector": f"{MANAGED_LABEL}={DRIVER}"})
        have = {s["metadata"]["name"]: s for s in slices.get("items") or ()}
        want = {}
        for node in nodes.get("items") or ():
            if (node.get("metadata") or {}).get("deletionTimestamp"):
                continue
            body = resource_slice(node)
            if body is not None:
                want[body["metadata"]["name"]] = body
        for name, body in want.items():
            if name in have and have[name]["metadata"].get("ownerReferences", [{}])[0].get("uid") == \
                    body["metadata"]["ownerReferences"][0]["uid"]:
                continue
            if name in have:  # a node of the same name was re-created: a new slice
                await self._delete(name)
            try:
                await raw(self.api, "POST", f"{API}/resourceslices", body=body)
                log.info("published %s (%d devices)", name, len(body["spec"]["devices"]))
            except Exception as exc:
                if not is_conflict(exc):
                    raise
        for name in set(have) - set(want):
            await self._delete(name)
        return len(want)

    async def _delete(self, name: str) -> None:
        try:
            await raw(self.api, "DELETE", f"{API}/resourceslices/{name}")
        except Exception as exc:
            if not is_not_found(exc):
                raise

    async def run(self) -> None:
        await self.ensure_device_class()
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API server restarting: try again next pass
                log.warning("sync failed: %s", exc)
            await asyncio.sleep(self.interval)


async def _main(kubeconfig: str | None, interval: float) -> None:
    api = await api_client(kubeconfig)
    async with api:
        await Driver(api, interval).run()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dra-driver", description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between passes over the nodes")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(_main(args.kubeconfig, args.interval))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
