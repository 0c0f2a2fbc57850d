"""A plain bind's bookkeeping never holds a worker, and a duplicate look while it is in flight does nothing.

This needs a BindRequest status write held in flight for as long as the test wants, which a live API server cannot
be made to do reliably; so the binder's requests are answered in process here. What a bind costs the API server
(reads, writes, the retry of a refused status write) is tested live in tests/integration/test_binder.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.binder import binding as binding_module
from operators.binder.binding import Binder
from operators.binder.common import BinderConfig, Member
from operators.core import events as events_module
from operators.core import keys
from operators.core.api.bindrequest import parse_bindrequest


class FakeApi:
    """Answers every request; requests whose path contains a `held` string wait until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.held: dict[str, asyncio.Event] = {}

    async def raw(self, api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path, kwargs.get("body")))
        for part, gate in self.held.items():
            if part in path:
                await gate.wait()
        return dict(kwargs.get("body") or {})

    def made(self, method: str, part: str) -> int:
        return sum(1 for m, p, _ in self.calls if m == method and part in p)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()
    monkeypatch.setattr(binding_module, "raw", fake.raw)
    monkeypatch.setattr(events_module, "raw", fake.raw)
    return fake


def binder_with_request(name: str = "p") -> Binder:
    binder = Binder(object(), object(), BinderConfig(base_delay=0.0))  # type: ignore[arg-type]
    binder.members._put(f"ns/{name}", Member("", "Pending", (), f"uid-{name}"), "ADDED")
    binder.nodes._put("n1", True, "ADDED")
    binder.requests[f"ns/{name}"] = parse_bindrequest({
        "metadata": {"name": name, "namespace": "ns",
                     "ownerReferences": [{"kind": "Pod", "name": name, "uid": f"uid-{name}"}]},
        "spec": {"podName": name, "selectedNode": "n1", "receivedResourceType": keys.RESOURCE_TYPE_REGULAR}})
    return binder


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_worker_is_free_once_the_pod_is_bound(api: FakeApi) -> None:
    binder = binder_with_request()
    release = api.held["/bindrequests/"] = asyncio.Event()

    reconcile = asyncio.ensure_future(binder.reconcile("ns/p"))
    await settle()
    assert reconcile.done()  # while the BindRequest status is still being written
    assert (api.made("PATCH", "/pods/p/status"), api.made("POST", "/pods/p/binding")) == (1, 1)
    assert api.made("PATCH", "/bindrequests/p/status") == 1  # in flight
    # The request is handled: a second look (a duplicate event) binds nothing again and announces nothing twice.
    await binder.reconcile("ns/p")
    release.set()
    await settle()
    assert api.made("POST", "/pods/p/binding") == 1
    assert api.made("PATCH", "/pods/p/status") == 1
    assert api.made("PATCH", "/bindrequests/p/status") == 1
    assert api.made("POST", "/events") == 1
    assert binder.requests == {} and binder._reporting == set()

