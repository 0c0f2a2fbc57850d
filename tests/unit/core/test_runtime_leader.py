"""Losing the lease mid-reconcile: the loss is noticed within the renew deadline, the work is cancelled and the
process exits (Kubernetes restarts it as a standby). The Lease endpoints are a scripted aiohttp double."""

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

BASE = "/apis/coordination.k8s.io/v1/namespaces/kai/leases"


def micro_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseServer:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.stolen = False
        self.renewals = 0
        self.rv = 0

    def _status(self, code: int, reason: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "code": code, "reason": reason,
                                  "message": reason}, status=code)

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self.lease) if self.lease else self._status(404, "NotFound")

    async def create(self, request: web.Request) -> web.Response:
        if self.lease:
            return self._status(409, "AlreadyExists")
        self.lease = await self._stored(request)
        return web.json_response(self.lease, status=201)

    async def replace(self, request: web.Request) -> web.Response:
        if self.stolen:  # another replica renewed first: our stale resourceVersion conflicts
            return self._status(409, "Conflict")
        self.lease = await self._stored(request)
        self.renewals += 1
        return web.json_response(self.lease)

    async def _stored(self, request: web.Request) -> dict[str, Any]:
        body = await request.json()
        self.rv += 1
        body.setdefault("metadata", {}).update({"namespace": "kai", "resourceVersion": str(self.rv)})
        body["metadata"]["name"] = "controller"
        return dict(body)

    def steal(self) -> None:
        assert self.lease is not None
        self.stolen = True
        now = micro_time()
        self.rv += 1
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        self.lease["spec"] = {"holderIdentity": "other-replica", "leaseDurationSeconds": 15,
                              "acquireTime": now, "renewTime": now}


@asynccontextmanager
async def lease_api() -> AsyncIterator[tuple[LeaseServer, client.ApiClient]]:
    lease = LeaseServer()
    app = web.Application()
    app.router.add_get(f"{BASE}/controller", lease.get)
    app.router.add_put(f"{BASE}/controller", lease.replace)
    app.router.add_post(BASE, lease.create)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    api = client.ApiClient(configuration=cfg)
    try:
        yield lease, api
    finally:
        await api.close()
        await runner.cleanup()


class Exited(Exception):
    pass


async def test_losing_the_lease_mid_reconcile_cancels_the_work_and_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(leader.os, "_exit", fake_exit)
    ticks: list[float] = []
    cancelled_at: list[float] = []

    async def work() -> None:  # a reconcile loop that writes as long as it runs
        try:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled_at.append(time.monotonic())
            raise

    async with lease_api() as (lease, api):
        task = asyncio.create_task(leader.run_as_leader(
            api, name="controller", namespace="kai", work=work, lease_duration=3, renew_deadline=1.5,
            retry_period=1))
        deadline = time.monotonic() + 10
        while lease.renewals < 2:  # leading, and renewing: the work must keep going meanwhile
            assert time.monotonic() < deadline and not task.done(), "never renewed the lease"
            await asyncio.sleep(0.05)
        assert ticks and not cancelled_at
        assert lease.lease is not None
        holder = lease.lease["spec"]["holderIdentity"]
        assert holder and holder != "other-replica"

        stolen_at = time.monotonic()
        lease.steal()
        with pytest.raises(Exited) as exited:
            await asyncio.wait_for(task, timeout=10)
        exited_at = time.monotonic()

    assert exited.value.args == (1,)
    assert cancelled_at, "the reconcile in flight was not cancelled"
    # Noticed within renew deadline plus a retry period or two, not after the other replica's 15 s lease.
    assert cancelled_at[0] - stolen_at < 5, cancelled_at[0] - stolen_at
    assert cancelled_at[0] <= exited_at
    assert max(ticks) <= cancelled_at[0], "the work went on after it was cancelled"
    count = len(ticks)
    await asyncio.sleep(0.2)
    assert len(ticks) == count
