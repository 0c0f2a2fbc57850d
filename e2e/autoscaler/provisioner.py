"""A test provisioner for the local control plane: what a cluster autoscaler does with ProvisioningRequests.

Every request without an outcome is accepted, and after a delay gets one kwok node per requested pod, shaped
like the pod (its CPU, memory and GPUs), then `Provisioned=True` once the nodes are Ready. Its parameters (from
the workload's `provisioning.kai.scheduler/<name>` annotations) steer it:

- `delay-seconds`: wait this long instead of `--delay`;
- `fail-attempts`: answer `Failed=True` to attempts 1..N (the attempt number is the scheduler's annotation);
- `partial`: add only this many nodes and never report the request provisioned.

Run by `kai dev up --autoscaler`; nodes it adds carry the label `kai.dev/provisioned-by=test-provisioner`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import logging
import time
from typing import Any

from operators.core.kube import MERGE_PATCH, api_client, is_conflict, is_not_found, raw
from operators.devcluster import nodes

log = logging.getLogger("test-provisioner")
PATH = "/apis/autoscaling.x-k8s.io/v1"
NODE_LABEL = "kai.dev/provisioned-by"
FOR_LABEL = "kai.dev/provisioned-for"
ATTEMPT_ANNOTATION = "kai.scheduler/provisioning-attempt"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": _now()}


def _has(obj: dict[str, Any], kind: str, status: str = "True") -> bool:
    return any(c.get("type") == kind and c.get("status") == status
               for c in (obj.get("status") or {}).get("conditions") or [])


def node_shape(requests: dict[str, str]) -> nodes.NodeShape:
    """A node that holds exactly one pod of this shape."""
    gpus = int(requests.get("nvidia.com/gpu", "0") or 0)
    return nodes.NodeShape(gpus=gpus, cpu=requests.get("cpu", "1"), memory=requests.get("memory", "1Gi"))


class Provisioner:
    def __init__(self, api: Any, delay: float) -> None:
        self.api = api
        self.delay = delay
        self.seen: dict[str, float] = {}  # request uid -> first seen (monotonic)

    async def run(self, interval: float = 0.5) -> None:
        while True:
            try:
                await self.pass_once()
            except Exception as exc:
                log.warning("pass failed: %s", exc)
            await asyncio.sleep(interval)

    async def pass_once(self) -> None:
        page = await raw(self.api, "GET", f"{PATH}/provisioningrequests")
        live = set()
        for request in page.get("items") or []:
            uid = request["metadata"]["uid"]
            live.add(uid)
            if _has(request, "Provisioned") or _has(request, "Failed") or request["metadata"].get(
                    "deletionTimestamp"):
                continue
            await self.handle(request)
        self.seen = {k: v for k, v in self.seen.items() if k in live}

    async def set_conditions(self, request: dict[str, Any], *conditions: dict[str, str]) -> None:
        meta = request["metadata"]
        kinds = {c["type"] for c in conditions}
        kept = [c for c in (request.get("status") or {}).get("conditions") or [] if c.get("type") not in kinds]
        path = f"{PATH}/namespaces/{meta['namespace']}/provisioningrequests/{meta['name']}/status"
        try:
            await raw(self.api, "PATCH", path, body={"status": {"conditions": [*kept, *conditions]}},
                      content_type=MERGE_PATCH)
        except Exception as exc:
            if not is_not_found(exc):
                raise

    async def event(self, request: dict[str, Any], condition: dict[str, str]) -> None:
        """An Event like the autoscaler's: it outlives the request (deleted as soon as the gang runs)."""
        meta = request["metadata"]
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                                   "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
                "reason": condition["reason"], "message": condition["message"], "type": "Normal",
                "firstTimestamp": condition["lastTransitionTime"], "lastTimestamp": condition["lastTransitionTime"],
                "count": 1, "source": {"component": "test-provisioner"}}
        try:
            await raw(self.api, "POST", f"/api/v1/namespaces/{meta['namespace']}/events", body=body)
        except Exception as exc:
            log.warning("event on %s not written: %s", meta["name"], exc)

    async def handle(self, request: dict[str, Any]) -> None:
        meta, spec = request["metadata"], request.get("spec") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        params = spec.get("parameters") or {}
        first = self.seen.setdefault(meta["uid"], time.monotonic())
        if not _has(request, "Accepted"):
            await self.set_conditions(request, _condition("Accepted", "True", "Accepted", "accepted by the test "
                                                                                           "provisioner"))
            log.info("accepted %s", key)
            return
        delay = float(params.get("delay-seconds", self.delay))
        if time.monotonic() - first < delay:
            return
        attempt = int((meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION) or 1)
        if attempt <= int(params.get("fail-attempts", "0")):
            failed = _condition("Failed", "True", "OutOfCapacity", f"test provisioner: told to fail attempt {attempt}")
            await self.set_conditions(request, failed)
            await self.event(request, failed)
            log.info("failed %s (attempt %d)", key, attempt)
            return
        shapes: list[nodes.NodeShape] = []
        for podset in spec.get("podSets") or []:
            name = podset["podTemplateRef"]["name"]
            template = await raw(self.api, "GET", f"/api/v1/namespaces/{meta['namespace']}/podtemplates/{name}")
            requests: dict[str, str] = {}
            for container in ((template.get("template") or {}).get("spec") or {}).get("containers") or []:
                resources = container.get("resources") or {}
                requests.update(resources.get("limits") or {})
                requests.update(resources.get("requests") or {})
            shapes += [node_shape(requests)] * int(podset.get("count") or 1)
        partial = params.get("partial")
        wanted = shapes if partial is None else shapes[:int(partial)]
        tag = hashlib.sha256(meta["uid"].encode()).hexdigest()[:8]
        names = [f"prov-{tag}-{i}" for i in range(len(wanted))]
        for name, shape in zip(names, wanted, strict=True):
            body = nodes.node_manifest(name, shape, labels={NODE_LABEL: "test-provisioner", FOR_LABEL: tag})
            try:
                await raw(self.api, "POST", "/api/v1/nodes", body=body)
            except Exception as exc:
                if not is_conflict(exc):
                    raise
        if partial is not None:
            await self.set_conditions(request, _condition(
                "Provisioned", "False", "PartiallyProvisioned",
                f"test provisioner: added {len(wanted)} of {len(shapes)} nodes"))
            log.info("partially provisioned %s: %d of %d nodes", key, len(wanted), len(shapes))
            self.seen[meta["uid"]] = float("inf")  # never again
            return
        missing = await nodes.wait_nodes_ready(self.api, names, timeout=60)
        if missing:
            log.warning("%s: nodes not Ready: %s", key, missing)
            return
        done = _condition("Provisioned", "True", "Provisioned", f"test provisioner: added {len(names)} nodes")
        await self.set_conditions(request, done)
        await self.event(request, done)
        log.info("provisioned %s: %d nodes", key, len(names))


async def main_async(args: argparse.Namespace) -> None:
    api = await api_client(args.kubeconfig)
    async with api:
        await Provisioner(api, args.delay).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--delay", type=float, default=3.0, help="seconds from acceptance to new nodes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
