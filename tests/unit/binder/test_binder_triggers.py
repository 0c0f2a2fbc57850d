"""The binder's informer-driven triggers: a reservation pod's GPU is read from the reservations informer (no watch
of its own), BindRequest events enqueue exactly the requests that may still need a bind, and the reservation code
reads the informers, not LISTs, unless a delete is called for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.binder import common as common_module
from operators.binder import reservation_pods as reservation_pods_module
from operators.binder.binding import Binder
from operators.binder.common import BinderConfig, BindError, member_record, reservation_record
from operators.binder.reservation import reservation_pod_manifest
from operators.core import keys
from operators.core.api.bindrequest import parse_bindrequest

CONFIG = BinderConfig(allocation_timeout=600)


def binder() -> Binder:
    return Binder(None, None, CONFIG)  # type: ignore[arg-type]  # no API calls in these tests


def reservation(device: str | None = None) -> dict[str, Any]:
    pod = reservation_pod_manifest("node-a", "group-1", suffix="x1", image="img",
                                   namespace=CONFIG.reservation_namespace)
    pod["metadata"]["uid"] = "uid-reservation"
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
    # An open fraction request has its own queue: plain binds never wait behind reservation pods.
    b.bindrequests._put("ns/half", parse_bindrequest(bindrequest("half", fraction=True)), "ADDED")
    assert b.fraction_binds._queued == {"ns/half"} and b.binds._queued == {"ns/open"}
    b.fraction_binds._queued.clear()
    # Start-up (a restarted binder): every request not Succeeded is enqueued, from the informer.
    b.binds._queued.clear()
    assert b.enqueue_pending_bindrequests() == 2 and b.binds._queued == {"ns/open"}
    assert b.fraction_binds._queued == {"ns/half"}


class RecordingApi:
    """Answers the reservation code's requests in process: LISTs find `listed`, a PATCH answers the patched pod."""

    def __init__(self, listed: list[dict[str, Any]]) -> None:
        self.listed = listed
        self.calls: list[tuple[str, str]] = []

    async def raw(self, api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        if method == "GET":
            return {"items": self.listed}
        if method == "PATCH":
            return {"metadata": {"name": path.rsplit("/", 1)[1], "namespace": "ns", "uid": "uid-user",
                                 "labels": {keys.GPU_GROUP_LABEL: "group-1"}}, "status": {"phase": "Pending"}}
        return {}

    def lists(self) -> int:
        return sum(1 for method, _ in self.calls if method == "GET")


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> RecordingApi:
    fake = RecordingApi([])
    monkeypatch.setattr(common_module, "raw", fake.raw)
    monkeypatch.setattr(reservation_pods_module, "raw", fake.raw)
    return fake


def user_pod(name: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {keys.GPU_GROUP_LABEL: "group-1"}},
            "spec": {"nodeName": "node-a"}, "status": {"phase": phase}}


async def test_a_group_the_informers_show_alive_is_synced_without_a_list(recording: RecordingApi) -> None:
    b, pod = binder(), reservation("GPU-1")
    b.reservations._put(key(pod), reservation_record(pod), "ADDED")
    b.members._put("ns/user", member_record(user_pod("user")), "ADDED")
    await b.gpu_reservations.sync_node("node-a")
    assert recording.calls == [], "a reservation with a live user: nothing to delete, nothing listed"
    # Its last user gone: the informers call for a delete, which is decided on fresh LISTs (here: still in use).
    b.members._put("ns/user", None, "DELETED")
    recording.listed = [pod, user_pod("user")]
    await b.gpu_reservations.sync_group("group-1")
    assert recording.lists() == 2 and all(method == "GET" for method, _ in recording.calls), recording.calls
    recording.listed, recording.calls = [pod], []
    await b.gpu_reservations.sync_group("group-1")
    assert [method for method, _ in recording.calls] == ["GET", "GET", "DELETE"], recording.calls


async def test_reserve_reuses_the_informers_reservation_and_not_one_it_deleted(recording: RecordingApi) -> None:
    b, pod = binder(), reservation("GPU-5")
    b.reservations._put(key(pod), reservation_record(pod), "ADDED")
    node = {"metadata": {"name": "node-a"}}
    assert await b.gpu_reservations.reserve("group-1", node, user_pod("user", "Pending")) == "GPU-5"
    assert [method for method, _ in recording.calls] == ["PATCH"], "found in the informer: no LIST, no create"
    # The labelled pod is in the members informer at once, so the group's next GC sees its user.
    member = b.members.get("ns/user")
    assert member is not None and member.groups == ("group-1",)
    with pytest.raises(BindError, match="reserved on node node-a"):
        await b.gpu_reservations.reserve("group-1", {"metadata": {"name": "node-b"}}, user_pod("other", "Pending"))
    # The GC deletes it (no user left); until the informer shows it gone it is not reused: a new one is created.
    b.members._put("ns/user", None, "DELETED")
    recording.listed = [pod]
    await b.gpu_reservations.sync_group("group-1")
    assert ("DELETE", f"/api/v1/namespaces/{CONFIG.reservation_namespace}/pods/{pod['metadata']['name']}") \
        in recording.calls
    assert b.gpu_reservations._cached_reservation("group-1") is None
    b.reservations._put(key(pod), None, "DELETED")
    assert not b.gpu_reservations._deleted, "forgotten once the informer shows it gone"


async def test_a_reservation_created_is_found_by_the_groups_next_bind(recording: RecordingApi,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake GPU's reservation pod is born with its device (nothing waits for the informer): the next bind of its
    group must still find it, not create a second one."""
    answered = recording.raw

    async def raw(api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "POST":
            recording.calls.append((method, path))
            return reservation("GPU-fake")
        return await answered(api, method, path, **kwargs)

    monkeypatch.setattr(reservation_pods_module, "raw", raw)
    b, node = binder(), {"metadata": {"name": "node-a"}}
    assert await b.gpu_reservations.reserve("group-1", node, user_pod("a", "Pending")) == "GPU-fake"
    assert await b.gpu_reservations.reserve("group-1", node, user_pod("b", "Pending")) == "GPU-fake"
    assert [method for method, _ in recording.calls] == ["POST", "PATCH", "PATCH"], recording.calls


@pytest.mark.parametrize("reconciles", ["1", "10", "64"])
def test_the_client_has_a_connection_per_request_the_binder_has_in_flight(reconciles: str) -> None:
    """Its workers (plain and fraction binds, background reports, GPU-group syncs) never wait for one another's
    connection: at 1,000 nodes 64 connections for ~160 requests made requests wait up to 10 s for one."""
    from operators.binder.main import COMPONENT, config_from_args, parser

    args = parser().parse_args(["--max-concurrent-reconciles", reconciles])
    b = Binder(None, None, config_from_args(args))  # type: ignore[arg-type]  # no API calls
    workers = b.binds.workers + b.fraction_binds.workers + b.group_syncs.workers + b._report_gate._value
    assert COMPONENT.pool is not None
    assert COMPONENT.pool(args) >= workers
