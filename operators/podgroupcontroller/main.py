"""The podgroup-controller: keeps `status.resourcesStatus` and the running/pending pod counts of every PodGroup
exact, and validates PodGroups.

PodGroups, pods (kai-scheduler's only, filtered by the API server), nodes (GPU memory labels), PriorityClasses and,
where the API server serves DRA, ResourceClaims (their GPU counts, KAI's DRA GPUs) come from one informer each, the
process's only watches. A pod change, or a PodGroup change in what the reconcile
reads, enqueues the PodGroup (the echo of the controller's own status write and the scheduler's condition writes
do not); the reconcile recomputes the sums from the group's pods and merge-patches them only on change.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Hashable, Mapping
from typing import Any, cast

from operators.core import component, dra, keys, slim
from operators.core.api.podgroup import counts_patch, podgroup_status_record, resources_status_patch
from operators.core.api.podgroup_validation import podgroup_warnings, validate_podgroup
from operators.core.booleans import add_bool_flag
from operators.core.cache import NODES, PODGROUPS, PODS, PRIORITY_CLASSES, Informer, Resource, run_when_synced
from operators.core.kube import MERGE_PATCH, is_not_found, merge_patched, raw, status_of
from operators.core.webhook import verdict
from operators.core.workqueue import WorkQueue
from operators.podgroupcontroller.status import pod_counts, resources_status

log = logging.getLogger("podgroup-controller")
FIELD_MANAGER = "kai-podgroup-controller"
VALIDATE_PATH = "/validate-scheduling-run-ai-v2alpha2-podgroup"
RESYNC_SECONDS = 120.0
# A PodGroup's status is written at most once per this many seconds: the changes of a burst (pods grouped, then
# bound a moment later) land in one write, and the work queue keeps at most one write per PodGroup in flight,
# computed from the latest informer state when it runs. Nothing schedules from resourcesStatus, so the delay
# costs no scheduling latency.
COALESCE_SECONDS = 2.0
# A PodGroup whose pods the scheduler has not decided on yet (no PodScheduled condition) gets its status once they
# are decided, so that a job created and bound moments later costs one write, not "requested" then "allocated";
# never later than this many seconds after the first change was seen.
SETTLE_SECONDS = 20.0
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims")
DRA_RECHECK_SECONDS = 60.0
ClaimGpus = tuple[str, str, str, int]  # namespace, name, first GPU device class, GPUs


def _claim_gpus(obj: dict[str, Any]) -> ClaimGpus:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""), *dra.claim_gpus(obj))


def _group_key(pod: dict[str, Any]) -> tuple[str, str] | None:
    meta = pod["metadata"]
    name = (meta.get("annotations") or {}).get(keys.POD_GROUP_NAME)
    return (meta.get("namespace") or "", name) if name else None


def _slim_podgroup(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj.get("apiVersion"), "kind": "PodGroup",
            "metadata": {k: obj["metadata"].get(k) for k in ("name", "namespace", "uid")},
            "spec": {k: v for k, v in (obj.get("spec") or {}).items()
                     if k in ("priorityClassName", "preemptibility", "queue", "minMember", "minNonPreemptible",
                              "subGroups")},
            "status": {"resourcesStatus": (obj.get("status") or {}).get("resourcesStatus") or {},
                       **{k: v for k, v in (obj.get("status") or {}).items() if k in ("running", "pending")}}}


def decided(pod: dict[str, Any]) -> bool:
    """The scheduler has placed or explained the pod (or it is no longer pending)."""
    if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
        return True
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(c.get("type") == keys.CONDITION_POD_SCHEDULED for c in (pod.get("status") or {}).get("conditions") or [])


class PodGroupController:
    def __init__(self, api: Any, args: argparse.Namespace) -> None:
        self.api = api
        self.pods: Informer[dict[str, Any]] = Informer(
            api, PODS, slim.accounting_pod, field_selector=f"spec.schedulerName={args.scheduler_name}",
            indexes={"group": lambda p: [k] if (k := _group_key(p)) else [],
                     "claim": lambda p: [(p["metadata"].get("namespace"), c) for c in dra.pod_claim_names(p)]},
            freeze_records=True)
        self.podgroups: Informer[dict[str, Any]] = Informer(api, PODGROUPS, _slim_podgroup, freeze_records=True)
        self.nodes: Informer[dict[str, Any]] = Informer(api, NODES, slim.node)
        self.priority_classes: Informer[dict[str, Any]] = Informer(api, PRIORITY_CLASSES, lambda o: o)
        self.informers = (self.pods, self.podgroups, self.nodes, self.priority_classes)
        # (namespace, name, first GPU device class, GPUs) per claim; not part of readiness: a cluster may not serve DRA.
        self.claims: Informer[ClaimGpus] = Informer(api, RESOURCE_CLAIMS, _claim_gpus)
        self.claims.add_listener(self._on_claim)
        self.work = WorkQueue(self.reconcile, workers=8, name="podgroup-controller", kind="PodGroup")
        # PodGroup -> its status as this process's last write returned it: the watch's echo of the write is no
        # reason to reconcile again.
        self._written: dict[Hashable, Any] = {}
        self._waiting: dict[Hashable, float] = {}  # PodGroup -> when a status change was first held back
        self.pods.add_listener(self._on_pod)
        self.podgroups.add_listener(self._on_podgroup)

    def _on_pod(self, _: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for pod in (old, new):
            if pod is not None and (key := _group_key(pod)):
                self.work.add_after(key, COALESCE_SECONDS)

    def _on_claim(self, _: str, old: ClaimGpus | None, new: ClaimGpus | None) -> None:
        claim = new or old
        if claim is not None:
            for pod in self.pods.by_index("claim", (claim[0], claim[1])):
                self._on_pod("", None, pod)

    def dra_gpus(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """The pod's DRA GPUs by device class, from its claims (KAI counts them in requested and allocated)."""
        namespace = pod["metadata"].get("namespace")
        found = (self.claims.get(f"{namespace}/{name}") for name in dra.pod_claim_names(pod))
        return dra.gpus_by_class(c[2:] for c in found if c is not None)

    async def run_claims(self) -> None:
        """The claims informer, once the API server serves resource.k8s.io/v1 (rechecked every minute)."""
        while True:
            try:
                doc = await raw(self.api, "GET", "/apis/resource.k8s.io/v1")
                if any(r.get("name") == RESOURCE_CLAIMS.plural for r in doc.get("resources") or []):
                    break
            except Exception as exc:
                if status_of(exc) != 404:
                    log.warning("discovery of resource.k8s.io/v1 failed: %s", exc)
            await asyncio.sleep(DRA_RECHECK_SECONDS)
        await self.claims.run()

    def _on_podgroup(self, _: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            if old is not None:
                self._written.pop((old["metadata"]["namespace"], old["metadata"]["name"]), None)
            return
        key = (new["metadata"]["namespace"], new["metadata"]["name"])
        if old is not None and old["spec"] == new["spec"] and new["status"] == self._written.get(key):
            return  # our own status write coming back
        self.work.add_after(key, COALESCE_SECONDS)

    async def reconcile(self, key: Hashable) -> None:
        namespace, name = cast(tuple[str, str], key)
        podgroup = self.podgroups.get(f"{namespace}/{name}")
        if podgroup is None:
            self._waiting.pop(key, None)
            self._written.pop(key, None)  # gone: no echo of a write of it is coming
            return
        pods = self.pods.by_index("group", (namespace, name))
        nodes = {n["metadata"]["name"]: n for n in self.nodes.values()}
        classes = {pc["metadata"]["name"]: pc for pc in self.priority_classes.values()}
        computed = resources_status(podgroup, pods, nodes, classes, self.dra_gpus)
        stored = podgroup_status_record(podgroup)
        patch = resources_status_patch(stored, computed)
        counts = counts_patch(stored, pod_counts(podgroup, pods))
        if counts:
            patch = patch or {"status": {}}
            patch["status"].update(counts)
        if patch is None:
            self._waiting.pop(key, None)
            return
        now = time.monotonic()
        if key not in self._waiting:
            self._waiting[key] = now
            # The pods' own changes bring the PodGroup back; this is only the latest it is written.
            asyncio.get_running_loop().call_later(SETTLE_SECONDS, self.work.add, key)
        if not all(decided(pod) for pod in pods) and now - self._waiting[key] < SETTLE_SECONDS:
            return
        self._waiting.pop(key, None)
        # A merge patch of resourcesStatus and the pod counts only (the scheduler's schedulingConditions are
        # untouched). Not server-side apply: it stores an emptied ResourceList as null, which the CRD rejects.
        # The watch may deliver the write's echo before the PATCH returns: expect it from now on.
        previous = self._written.get(key)
        self._written[key] = _slim_podgroup({**podgroup, "status": merge_patched(podgroup["status"],
                                                                                 patch["status"])})["status"]
        try:
            updated = await raw(self.api, "PATCH", f"{PODGROUPS.path(namespace)}/{name}/status",
                                query={"fieldManager": FIELD_MANAGER}, body=patch, content_type=MERGE_PATCH)
        except Exception as exc:
            self._written[key] = previous
            if not is_not_found(exc):
                raise
            updated = None
        if updated:
            self._written[key] = _slim_podgroup(updated)["status"]
        # The PodGroup's DELETED event may have come while the PATCH was out (its pods' deletion is what enqueued
        # this write, and their PodGroup goes with them): that event has already dropped the entry, so nothing
        # would drop the one set here and it would be kept for good, one per PodGroup.
        if self.podgroups.get(f"{namespace}/{name}") is None or self._written.get(key) is None:
            self._written.pop(key, None)

    async def resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for pg in self.podgroups.values():
                self.work.add((pg["metadata"]["namespace"], pg["metadata"]["name"]))

    def validate(self, review: dict[str, Any]) -> dict[str, Any]:
        request = review.get("request") or {}
        podgroup = request.get("object") or {}
        old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
        message = validate_podgroup(podgroup, old if isinstance(old, dict) else None)
        return verdict(review, message, warnings=podgroup_warnings(podgroup) if message is None else None)

    @property
    def ready(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)


async def build(args: argparse.Namespace, api: Any, _: component.Lifecycle) -> PodGroupController:
    return PodGroupController(api, args)


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("podgroup-controller")
    component.add_webhook_arguments(p)
    add_bool_flag(p, "--enable-podgroup-webhook", default=True)
    return p


COMPONENT = component.Component(
    "podgroup-controller", parser, build, caches=lambda c: [*(i.run() for i in c.informers), c.run_claims()],
    work=lambda c: [run_when_synced(c.informers, c.work.run()), c.resync()], ready=lambda c: c.ready,
    webhook=lambda args, c: {VALIDATE_PATH: c.validate} if args.enable_podgroup_webhook else None)


def main(argv: list[str]) -> int:
    return COMPONENT.main(argv)
