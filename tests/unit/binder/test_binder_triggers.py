"""The binder's informer-driven triggers: a reservation pod's GPU is read from the reservations informer (no watch
of its own), and BindRequest events enqueue exactly the requests that may still need a bind."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.binder.binding import Binder
from operators.binder.common import BinderConfig, reservation_record
from operators.binder.reservation import reservation_pod_manifest
from operators.core import keys
from operators.core.api.bindrequest import parse_bindrequest

CONFIG = BinderConfig(allocation_timeout=600)


def binder() -> Binder:
    return Binder(None, None, CONFIG)  # type: ignore[arg-type]  # no API calls in these tests


def reservation(device: str | None = None) -> dict[str, Any]:
    pod = reservation_pod_manifest("node-a", "group-1", suffix="x1", image="img",
                                   namespace=CONFIG.reservation_namespace)
    if device:
        pod["metadata"]["annotations"][keys.RESERVE_FOR_GPU_INDEX] = device
    return pod


def key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


async def test_the_device_arrives_through_the_reservations_informer() -> None:
    b, pod = binder(), reservation()
    waiting = asyncio.create_task(b.gpu_reservations.wait_for_device(pod))
    await asyncio.sleep(0)
    b.reservations._put(key(pod), reservation_record(pod), "ADDED")  # created, no GPU reported yet
    await asyncio.sleep(0)
    assert not waiting.done()
    b.reservations._put(key(pod), reservation_record(reservation("GPU-7")), "MODIFIED")
    assert await asyncio.wait_for(waiting, 5) == "GPU-7"
    assert not b.gpu_reservations._devices, "a finished wait leaves nothing behind"


async def test_a_device_the_informer_already_showed_is_returned_at_once() -> None:
    b, pod = binder(), reservation("GPU-3")
    b.reservations._put(key(pod), reservation_record(pod), "ADDED")
    assert await asyncio.wait_for(b.gpu_reservations.wait_for_device(pod), 5) == "GPU-3"


async def test_a_reservation_pod_deleted_before_reporting_ends_the_wait_with_none() -> None:
    b, pod = binder(), reservation()
    other = reservation_pod_manifest("node-b", "group-2", suffix="y2", image="img",
                                     namespace=CONFIG.reservation_namespace)
    waiting = asyncio.create_task(b.gpu_reservations.wait_for_device(pod))
    await asyncio.sleep(0)
    b.reservations._put(key(other), reservation_record(other), "ADDED")  # another pod: not ours, not a deletion
    b.reservations._put(key(pod), reservation_record(pod), "ADDED")
    b.reservations._put(key(other), None, "DELETED")
    await asyncio.sleep(0)
    assert not waiting.done()
    b.reservations._put(key(pod), None, "DELETED")
    assert await asyncio.wait_for(waiting, 5) is None


def bindrequest(name: str, phase: str | None = None, fraction: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"podName": name, "selectedNode": "node-a"}
    if fraction:
        spec.update(receivedResourceType=keys.RESOURCE_TYPE_FRACTION, selectedGPUGroups=["group-1"])
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", "managedFields": [{}]},
            "spec": spec, "status": {"phase": phase} if phase else {}}


def test_bindrequest_events_enqueue_open_requests_and_a_deleted_fraction_syncs_its_groups() -> None:
    b = binder()
    for br in (bindrequest("open"), bindrequest("done", keys.BIND_PHASE_SUCCEEDED, fraction=True)):
        b.bindrequests._put(f"ns/{br['metadata']['name']}", parse_bindrequest(br), "ADDED")
    assert b.binds._queued == {"ns/open"}
    assert b.requests["ns/open"] == parse_bindrequest(bindrequest("open"))  # the latest copy, as a typed record
    b.bindrequests._put("ns/done", None, "DELETED")
    assert b.group_syncs._queued == {"group-1"}
    # Start-up (a restarted binder): every request not Succeeded is enqueued, from the informer.
    b.binds._queued.clear()
    assert b.enqueue_pending_bindrequests() == 1 and b.binds._queued == {"ns/open"}
