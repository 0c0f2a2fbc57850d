"""The scheduler's DRA informers: DeviceClasses, ResourceSlices and ResourceClaims (resource.k8s.io/v1), one watch
each, started once the API server serves them (discovery is rechecked every minute until then; a cluster without
DRA schedules as before, and a pod with claims stays pending saying its claim does not exist)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from operators.core.cache import Informer, Resource
from operators.core.kube import raw, status_of
from operators.scheduler.decide.devices import (
    ClaimRecord,
    DeviceClassRecord,
    SliceRecord,
    claim_record,
    device_class_record,
    slice_record,
)

log = logging.getLogger("scheduler.dra")
GROUP, VERSION = "resource.k8s.io", "v1"
DEVICE_CLASSES = Resource(GROUP, VERSION, "deviceclasses")
RESOURCE_SLICES = Resource(GROUP, VERSION, "resourceslices")
RESOURCE_CLAIMS = Resource(GROUP, VERSION, "resourceclaims")


class DraShell:
    def __init__(self, api: Any, wake: Callable[[], None], recheck: float = 60.0, list_timeout: float = 30.0) -> None:
        self.api = api
        self.recheck = recheck
        self.list_timeout = list_timeout
        self.classes: Informer[DeviceClassRecord] = Informer(api, DEVICE_CLASSES, device_class_record)
        self.slices: Informer[SliceRecord] = Informer(api, RESOURCE_SLICES, slice_record)
        self.claims: Informer[ClaimRecord] = Informer(api, RESOURCE_CLAIMS, claim_record)
        self.informers: list[Informer[Any]] = [self.classes, self.slices, self.claims]
        for informer in self.informers:
            informer.add_listener(lambda _e, old, new: wake() if old != new else None)
        self.known = asyncio.Event()  # set once synced, or once known not to be served (or not listable)

    async def _served(self) -> bool:
        try:
            doc = await raw(self.api, "GET", f"/apis/{GROUP}/{VERSION}")
        except Exception as exc:
            if status_of(exc) != 404:
                log.warning("discovery of %s/%s failed: %s", GROUP, VERSION, exc)
            return False
        names = {r.get("name") for r in doc.get("resources") or []}
        return all(i.resource.plural in names for i in self.informers)

    async def run(self) -> None:
        while not await self._served():
            if not self.known.is_set():
                log.warning("the API server does not serve %s/%s: pods with ResourceClaims stay pending", GROUP,
                            VERSION)
            self.known.set()
            await asyncio.sleep(self.recheck)
        runners = [asyncio.create_task(i.run()) for i in self.informers]
        try:
            await asyncio.wait_for(asyncio.gather(*(asyncio.shield(i.synced.wait()) for i in self.informers)),
                                   timeout=self.list_timeout)
        except TimeoutError:
            log.warning("DRA objects not listed within %.0f s (does the scheduler's role allow list/watch of %s "
                        "deviceclasses, resourceslices, resourceclaims?)", self.list_timeout, GROUP)
        self.known.set()
        await asyncio.gather(*runners)

    def records(self) -> dict[str, list[Any]]:
        """The build_snapshot arguments of the DRA objects."""
        return {"resource_slices": list(self.slices.store.values()),
                "resource_claims": list(self.claims.store.values()),
                "device_classes": list(self.classes.store.values())}
