"""A scripted double of the Lease endpoints on 127.0.0.1 for unit tests of leader election (`operators.core.leader`):
one Lease, created, read and replaced as the API server would, that a test can hand to "another replica"
(`steal`); and the helpers to run a leader against it."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable
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


async def serve(lease: Any, port: int = 0, name: str = "controller") -> tuple[web.AppRunner, int]:
    """The endpoints of the Lease `kai/name` on 127.0.0.1, answered by `lease` (its `get`, `replace` and `create`
    handlers; `port` 0: any free one): the runner and the port."""
    app = web.Application()
    app.router.add_get(f"{BASE}/{name}", lease.get)
    app.router.add_put(f"{BASE}/{name}", lease.replace)
    app.router.add_post(BASE, lease.create)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def api_for(port: int) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    return client.ApiClient(configuration=cfg)


@asynccontextmanager
async def served(handler: Any, name: str = "controller") -> AsyncIterator[client.ApiClient]:
    """A client of the Lease `kai/name` answered by `handler` (see `serve`), for the length of the block."""
    runner, port = await serve(handler, name=name)
    api = api_for(port)
    try:
        yield api
    finally:
        await api.close()
        await runner.cleanup()


@asynccontextmanager
async def lease_api() -> AsyncIterator[tuple[LeaseServer, client.ApiClient]]:
    lease = LeaseServer()
    async with served(lease) as api:
        yield lease, api


class Exited(Exception):
    """What `os._exit` raises instead, once `exit_raises` patched it."""


def exit_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(leader.os, "_exit", fake_exit)


async def leading(lease: LeaseServer, api: client.ApiClient, work: Callable[[], Awaitable[None]],
                  **timing: float) -> asyncio.Task[None]:
    """`leader.run_as_leader` of `work` on the Lease "controller", once it leads and renewed twice."""
    task = asyncio.create_task(leader.run_as_leader(api, name="controller", namespace="kai", work=work, **timing))
    deadline = time.monotonic() + 10
    while lease.renewals < 2:
        assert time.monotonic() < deadline and not task.done(), "never renewed the lease"
        await asyncio.sleep(0.05)
    return task
