"""`kai snapshot -o FILE`: the live cluster state the scheduler uses, as a YAML stream of ordinary objects.

The output feeds `kai simulate -f FILE`, so a scheduling decision can be replayed and explained offline.
Managed fields and other bulky bookkeeping are dropped; everything the scheduler reads is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import yaml

from operators.core import cache
from operators.core.kube import api_client, raw
from operators.scheduler.shell import dra

KINDS: list[tuple[cache.Resource, str, str]] = [
    (cache.NODES, "v1", "Node"),
    (cache.PRIORITY_CLASSES, "scheduling.k8s.io/v1", "PriorityClass"),
    (cache.QUEUES, "scheduling.run.ai/v2", "Queue"),
    (cache.PODGROUPS, "scheduling.run.ai/v2alpha2", "PodGroup"),
    (cache.BINDREQUESTS, "scheduling.run.ai/v1alpha2", "BindRequest"),
    (cache.PODS, "v1", "Pod"),
    (cache.CONFIGMAPS, "v1", "ConfigMap"),
    (cache.TOPOLOGIES, "kai.scheduler/v1alpha1", "Topology"),
    (cache.PDBS, "policy/v1", "PodDisruptionBudget"),
    (dra.DEVICE_CLASSES, "resource.k8s.io/v1", "DeviceClass"),
    (dra.RESOURCE_SLICES, "resource.k8s.io/v1", "ResourceSlice"),
    (dra.RESOURCE_CLAIMS, "resource.k8s.io/v1", "ResourceClaim"),
]


def _slim(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    obj = dict(obj)
    obj["apiVersion"], obj["kind"] = api_version, kind
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    (meta.get("annotations") or {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    obj["metadata"] = meta
    if kind == "ConfigMap":
        obj.pop("binaryData", None)
    return obj


async def collect(kubeconfig: str | None, *, configmaps: bool = True) -> list[dict[str, Any]]:
    api = await api_client(kubeconfig)
    out: list[dict[str, Any]] = []
    async with api:
        for resource, api_version, kind in KINDS:
            if kind == "ConfigMap" and not configmaps:
                continue
            cont: str | None = None
            query: dict[str, Any] = {"limit": 500}
            if kind == "Pod":
                query["fieldSelector"] = "status.phase!=Succeeded,status.phase!=Failed"
            while True:
                try:
                    page = await raw(api, "GET", resource.path(), query={**query, "continue": cont}, timeout=120)
                except Exception as exc:
                    if getattr(exc, "status", None) == 404:
                        break  # CRD not installed
                    raise
                out += [_slim(o, api_version, kind) for o in page.get("items") or []]
                cont = (page.get("metadata") or {}).get("continue")
                if not cont:
                    break
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="kai snapshot", description=__doc__)
    p.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--no-configmaps", action="store_true", help="leave ConfigMaps out (they can be large)")
    args = p.parse_args(argv)
    objects = asyncio.run(collect(args.kubeconfig, configmaps=not args.no_configmaps))
    text = yaml.safe_dump_all(objects, sort_keys=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {len(objects)} objects to {args.output}", file=sys.stderr)
    return 0
