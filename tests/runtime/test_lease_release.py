"""A leader stopped cleanly releases its Lease once its work has ended: holderIdentity cleared, a one-second
duration, written under the resourceVersion it read, so a replica that took the lease meanwhile keeps it.
The Lease endpoints are a scripted aiohttp double that enforces the resourceVersion precondition."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from operators.core import leader
from tests.runtime.leaseserver import served


class Leases:
    """One Lease named `lock`; a PUT whose resourceVersion is not the stored one is a 409, as on a real server."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.writes: list[tuple[float, dict[str, Any]]] = []
        self.conflict_next = False

    @staticmethod
    def _status(code: int, reason: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "code": code, "reason": reason,
                                  "message": reason}, status=code)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        body.setdefault("metadata", {}).update({"name": "lock", "namespace": "kai", "resourceVersion": str(self.rv)})
        self.lease = body
        self.writes.append((time.monotonic(), body))
        return body

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self.lease) if self.lease else self._status(404, "NotFound")

    async def create(self, request: web.Request) -> web.Response:
        if self.lease:
            return self._status(409, "AlreadyExists")
        return web.json_response(self._store(await request.json()), status=201)

    async def replace(self, request: web.Request) -> web.Response:
        body = await request.json()
        assert self.lease is not None
        if self.conflict_next or body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            self.conflict_next = False
            return self._status(409, "Conflict")
        return web.json_response(self._store(body))

    def take(self, holder: str) -> None:
        """Another replica writes the lease (its own renewal)."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert self.lease is not None
        self._store({**self.lease, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 8,
                                            "acquireTime": now, "renewTime": now}})

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        return dict(self.lease["spec"])


@asynccontextmanager
async def lease_api() -> AsyncIterator[tuple[Leases, client.ApiClient]]:
    leases = Leases()
    async with served(leases, name="lock") as api:
        yield leases, api


async def wait_until(what: str, check: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_cancelled_leader_stops_its_work_then_releases_the_lease() -> None:
    work_ended: list[float] = []

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # work that takes a moment to wind down: the release waits for it
            work_ended.append(time.monotonic())
            raise

    async with lease_api() as (leases, api):
        task = asyncio.create_task(leader.run_as_leader(api, name="lock", namespace="kai", work=work,
                                                        lease_duration=8, renew_deadline=6, retry_period=1))
        await wait_until("a renewal", lambda: task.done() or len(leases.writes) >= 2)
        assert not task.done()
        me = leases.spec["holderIdentity"]
        assert me and leader.is_leading()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not leader.is_leading()
    assert work_ended, "the work was not cancelled"
    released_at, released = leases.writes[-1]
    assert released["spec"]["holderIdentity"] == ""
    assert released["spec"]["leaseDurationSeconds"] == leader.RELEASED_LEASE_SECONDS
    assert released_at >= work_ended[0], "the lease was released while the work was still running"


async def test_release_leaves_a_lease_another_replica_holds() -> None:
    async with lease_api() as (leases, api):
        leases.lease = {"metadata": {"name": "lock", "namespace": "kai", "resourceVersion": "0"}, "spec": {}}
        leases.take("other-replica")
        writes = len(leases.writes)
        assert await leader.release(api, "lock", "kai", "me_1234") is False
        assert len(leases.writes) == writes
        assert leases.spec["holderIdentity"] == "other-replica"


async def test_release_under_a_stale_resource_version_writes_nothing() -> None:
    async with lease_api() as (leases, api):
        leases.lease = {"metadata": {"name": "lock", "namespace": "kai", "resourceVersion": "0"}, "spec": {}}
        leases.take("me_1234")
        leases.conflict_next = True  # another replica wrote between our read and our write
        assert await leader.release(api, "lock", "kai", "me_1234") is False
        assert leases.spec["holderIdentity"] == "me_1234"
        assert await leader.release(api, "lock", "kai", "me_1234") is True
        assert leases.spec["holderIdentity"] == ""
