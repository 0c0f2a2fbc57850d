"""A scripted list+watch server on 127.0.0.1 for unit tests of the informer's failure paths.

A test double of one resource's list and watch endpoints, not of the API server: each list answers the next
scripted page set, each watch request plays the next scripted session (events, then an end: a clean close, an
ERROR event, a broken connection, an HTTP error, or hanging until the test stops). Every request is recorded
with its query and the monotonic time it arrived, so tests can check resourceVersions and backoff gaps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

PATH = "/api/v1/pods"


def pod(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv), "labels": labels}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(rv: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": str(rv)}}}


def gone() -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": "too old resource version"}}


@dataclass
class Session:
    """One watch answer: `events` written as JSON lines, then `end`.

    end: "close" (the server ends the stream cleanly, as at timeoutSeconds), "break" (half a line, then the
    connection is cut), "hang" (stays open), or an HTTP status (e.g. 500, 410) answered instead of a stream.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    end: str | int = "close"


@dataclass
class Request:
    kind: str  # "list" or "watch"
    query: dict[str, str]
    at: float


class WatchServer:
    def __init__(self) -> None:
        self.lists: list[tuple[list[dict[str, Any]], int]] = []  # (items, resourceVersion) per list call
        self.sessions: list[Session] = []
        self.requests: list[Request] = []
        self.changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def watches(self) -> list[Request]:
        return [r for r in self.requests if r.kind == "watch"]

    def list_calls(self) -> list[Request]:
        return [r for r in self.requests if r.kind == "list"]

    async def wait_requests(self, kind: str, count: int, timeout: float = 10) -> None:
        async def enough() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: len([r for r in self.requests if r.kind == kind]) >= count)
        await asyncio.wait_for(enough(), timeout)

    async def _record(self, kind: str, request: web.Request) -> None:
        async with self.changed:
            self.requests.append(Request(kind, dict(request.query), time.monotonic()))
            self.changed.notify_all()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            await self._record("list", request)
            items, rv = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
            return web.json_response({"kind": "PodList", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": str(rv)}, "items": items})
        await self._record("watch", request)
        session = self.sessions.pop(0) if self.sessions else Session(end="hang")
        if isinstance(session.end, int):
            return web.json_response({"kind": "Status", "code": session.end, "message": "scripted"},
                                     status=session.end)
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        for item in session.events:
            await resp.write(json.dumps(item).encode() + b"\n")
        if session.end == "break":
            await resp.write(b'{"type": "MODIFIED", "obj')
            assert request.transport is not None
            request.transport.abort()
            return resp
        if session.end == "hang":
            await asyncio.Event().wait()
        await resp.write_eof()
        return resp

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[WatchServer, client.ApiClient]]:
    server = WatchServer()
    await server.start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.port}"
    api = client.ApiClient(configuration=cfg)
    try:
        yield server, api
    finally:
        await api.close()
        await server.stop()
