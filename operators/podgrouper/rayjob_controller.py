"""The shell of RayJob admission: watch suspended RayJobs and Queues, un-suspend the ones `decide` admits.

Runs in the pod-grouper once the API server serves RayJobs (checked every minute, so KubeRay may come later).
Each pass is cheap (informers in memory); it runs on a change and at least every few seconds while RayJobs wait.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from operators.core.cache import QUEUES, Informer, Resource
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import MERGE_PATCH, is_not_found, raw, status_of
from operators.core.times import rfc3339
from operators.podgrouper import rayjob_admission as admission

log = logging.getLogger("pod-grouper.rayjobs")
RAYJOBS = Resource("ray.io", "v1", "rayjobs")
REQUESTS = Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests")
PODGROUP_ANNOTATION = "kai.scheduler/podgroup"
PROVISIONING_LABEL = "kai.scheduler/provisioning"
PERIOD = 5.0


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    keep = {k: meta.get(k) for k in ("name", "namespace", "uid", "labels", "annotations", "deletionTimestamp")}
    return {"metadata": keep, "spec": {"suspend": (obj.get("spec") or {}).get("suspend"),
                                       "rayClusterSpec": (obj.get("spec") or {}).get("rayClusterSpec")}}


class RayJobAdmission:
    def __init__(self, api: Any, events: EventRecorder, queue_label: str, recheck: float = 60.0) -> None:
        self.api = api
        self.events = events
        self.queue_label = queue_label
        self.recheck = recheck
        self.jobs: Informer[dict[str, Any]] = Informer(api, RAYJOBS, _slim, label_selector=queue_label)
        self.queues: Informer[admission.QueueView] = Informer(api, QUEUES, admission.queue_view)
        self.wake = asyncio.Event()
        for informer in (self.jobs, self.queues):
            informer.add_listener(lambda _e, old, new: self.wake.set() if old != new else None)
        self._admitted: set[str] = set()  # uids un-suspended by this process (until the watch echoes it)

    async def _served(self, group_version: str, plural: str) -> bool:
        try:
            doc = await raw(self.api, "GET", f"/apis/{group_version}")
        except Exception as exc:
            if status_of(exc) != 404:
                log.debug("discovery of %s failed: %s", group_version, exc)
            return False
        return any(r.get("name") == plural for r in doc.get("resources") or [])

    async def run(self) -> None:
        while True:  # discovery is polled: no event announces a new CRD
            if await self._served("ray.io/v1", "rayjobs"):
                break
            await asyncio.sleep(self.recheck)
        tasks = [asyncio.create_task(self.jobs.run()), asyncio.create_task(self.queues.run())]
        try:
            await self.jobs.synced.wait()
            await self.queues.synced.wait()
            log.info("RayJob admission is on")
            while True:
                self.wake.clear()
                try:
                    await self.pass_once()
                except Exception as exc:
                    log.warning("RayJob admission pass failed: %s", exc)
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=PERIOD)
                except TimeoutError:
                    pass
        finally:
            for task in tasks:
                task.cancel()

    async def pass_once(self) -> None:
        queues = {q.name: q for q in self.queues.values()}
        for job in self.jobs.values():
            if job["metadata"]["uid"] in self._admitted:
                continue
            if admission.needs_mark(job, self.queue_label):
                await self._mark(job, {"metadata": {"annotations": {
                    admission.ADMITTED_ANNOTATION: "created-unsuspended"}}})
                continue
            if not admission.is_candidate(job, self.queue_label):
                continue
            provisioned = await self._provisioned(job)
            decision = admission.decide(job, queues, provisioned, self.queue_label)
            if decision.admit:
                await self._unsuspend(job)
            await self._explain(job, decision)

    async def _provisioned(self, job: dict[str, Any]) -> str:
        """The provisioned ProvisioningRequest of the job's gang (PodGroup pg-<job>-<uid>), if one exists."""
        meta = job["metadata"]
        pod_group = f"pg-{meta['name']}-{meta['uid']}"
        try:
            page = await raw(self.api, "GET", REQUESTS.path(meta["namespace"]),
                             query={"labelSelector": PROVISIONING_LABEL})
        except Exception as exc:
            if status_of(exc) not in (404, 403):
                log.debug("ProvisioningRequests of %s/%s not read: %s", meta["namespace"], meta["name"], exc)
            return ""
        for request in page.get("items") or []:
            annotations = (request.get("metadata") or {}).get("annotations") or {}
            conditions = (request.get("status") or {}).get("conditions") or []
            if annotations.get(PODGROUP_ANNOTATION) == pod_group and any(
                    c.get("type") == "Provisioned" and c.get("status") == "True" for c in conditions):
                return str(request["metadata"]["name"])
        return ""

    async def _unsuspend(self, job: dict[str, Any]) -> None:
        now = rfc3339()
        await self._mark(job, {"metadata": {"annotations": {admission.ADMITTED_ANNOTATION: now}},
                               "spec": {"suspend": False}})

    async def _mark(self, job: dict[str, Any], body: dict[str, Any]) -> None:
        meta = job["metadata"]
        try:
            await raw(self.api, "PATCH", f"{RAYJOBS.path(meta['namespace'])}/{meta['name']}", body=body,
                      content_type=MERGE_PATCH)
        except Exception as exc:
            if is_not_found(exc):
                return
            raise
        self._admitted.add(meta["uid"])
        if len(self._admitted) > 10000:
            self._admitted.clear()

    async def _explain(self, job: dict[str, Any], decision: admission.Decision) -> None:
        meta = job["metadata"]
        ref = ObjectRef("ray.io/v1", "RayJob", meta["namespace"], meta["name"], meta["uid"])
        await self.events.emit(ref, "Normal", decision.reason, decision.message)
