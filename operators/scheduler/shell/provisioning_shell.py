"""The I/O of autoscaler provisioning: read ProvisioningRequests, create and delete them with their PodTemplates.

The loop calls `hold` after each cycle's decisions (pure: plan + held decisions) and `write` after committing them.
The ProvisioningRequest CRD is optional: until the API server serves it, no gang is planned for and the
scheduler behaves as without autoscaler (the check is repeated every minute, so installing it later works).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from operators.core.cache import Informer, Resource
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import is_conflict, is_not_found, raw, status_of
from operators.scheduler.decide import provisioning
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.provisioning import NewRequest, ProvisioningPlan, ProvisioningRequestRecord
from operators.scheduler.decide.snapshot import Snapshot

log = logging.getLogger("scheduler.provisioning")
REQUESTS = Resource(provisioning.API_GROUP, provisioning.API_VERSION, provisioning.PLURAL)
PODTEMPLATES = Resource("", "v1", "podtemplates")
EVENT_REQUESTED = "ProvisioningRequested"
EVENT_FAILED = "ProvisioningFailed"


class ProvisioningShell:
    def __init__(self, api: Any, events: EventRecorder, wake: Callable[[], None], node_pool: str,
                 recheck: float = 60.0) -> None:
        self.api = api
        self.events = events
        self.node_pool = node_pool
        self.recheck = recheck
        # Indexed by gang: every streamed bind asks whether its gang has a request.
        self.requests: Informer[ProvisioningRequestRecord] = Informer(
            api, REQUESTS, provisioning.provisioning_request_record, label_selector=provisioning.MANAGED_LABEL,
            indexes={"gang": lambda r: [(r.namespace, r.pod_group)]})
        self.requests.add_listener(lambda _e, old, new: wake() if old != new else None)
        self.available = False
        self._plan = ProvisioningPlan()
        self._written: dict[str, float] = {}  # request key -> monotonic time of our create/delete

    async def run(self) -> None:
        """Wait until the API server serves ProvisioningRequests, then keep the informer running."""
        while True:  # discovery is polled: no event announces a new CRD
            if await self._served():
                break
            await asyncio.sleep(self.recheck)
        log.info("ProvisioningRequests are served: autoscaler provisioning is on")
        runner = asyncio.create_task(self.requests.run())
        await self.requests.synced.wait()
        self.available = True
        await runner

    async def _served(self) -> bool:
        try:
            doc = await raw(self.api, "GET", f"/apis/{provisioning.API_GROUP}/{provisioning.API_VERSION}")
        except Exception as exc:
            if status_of(exc) != 404:
                log.debug("discovery of %s failed: %s", provisioning.API_GROUP, exc)
            return False
        return any(r.get("name") == provisioning.PLURAL for r in doc.get("resources") or [])

    # --- pure steps, run in the loop ---------------------------------------------------------------
    def prefer(self, snapshot: Snapshot) -> Snapshot:
        if not self.available:
            return snapshot
        return provisioning.prefer_new_nodes(snapshot, list(self.requests.store.values()))

    def hold(self, snapshot: Snapshot, decisions: Decisions, now: float) -> Decisions:
        if not self.available:
            return decisions
        self._plan = provisioning.plan(snapshot, decisions, list(self.requests.store.values()), now)
        return provisioning.apply(decisions, self._plan, self.node_pool)

    # --- writes -------------------------------------------------------------------------------------
    async def write(self) -> None:
        plan, self._plan = self._plan, ProvisioningPlan()
        now = time.monotonic()
        self._written = {k: t for k, t in self._written.items() if now - t < 30}
        calls = []
        for record in plan.delete:
            if now - self._written.get(f"delete/{record.key}", -1e9) > 10:
                self._written[f"delete/{record.key}"] = now
                calls.append(self._delete(record))
        for new in plan.create:
            key = f"{new.namespace}/{new.name}"
            if key in self.requests.store or now - self._written.get(f"create/{key}", -1e9) < 10:
                continue  # the watch has not echoed our create yet
            self._written[f"create/{key}"] = now
            calls.append(self._create(new))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("provisioning write failed: %s", result)

    def _pg_ref(self, namespace: str, name: str, uid: str) -> ObjectRef:
        from operators.core import keys

        return ObjectRef(f"{keys.GROUP}/{keys.PODGROUP_VERSION}", "PodGroup", namespace, name, uid)

    async def _create(self, new: NewRequest) -> None:
        for template in new.templates():
            try:
                await raw(self.api, "POST", PODTEMPLATES.path(new.namespace), body=template)
            except Exception as exc:
                if not is_conflict(exc):
                    raise
        try:
            created = await raw(self.api, "POST", REQUESTS.path(new.namespace), body=new.manifest())
        except Exception as exc:
            if is_conflict(exc):
                return
            if is_not_found(exc):
                return  # the namespace (or the PodGroup's world) is gone
            raise
        record = provisioning.provisioning_request_record(created)
        if record is not None:
            self.requests.put(record.key, record, "ADDED")
        pods = sum(p.count for p in new.pod_sets)
        await self.events.emit(self._pg_ref(new.namespace, new.pod_group, new.pod_group_uid), "Normal",
                               EVENT_REQUESTED, f"Created ProvisioningRequest {new.name} "
                               f"({new.class_name}, attempt {new.attempt}) for {pods} pods")

    async def _delete(self, record: ProvisioningRequestRecord) -> None:
        try:
            await raw(self.api, "DELETE", f"{REQUESTS.path(record.namespace)}/{record.name}",
                      body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
        except Exception as exc:
            if not is_not_found(exc):
                raise
        for name in record.templates:
            try:
                await raw(self.api, "DELETE", f"{PODTEMPLATES.path(record.namespace)}/{name}")
            except Exception as exc:
                if not is_not_found(exc):
                    raise
        self.requests.put(record.key, None, "DELETED")
