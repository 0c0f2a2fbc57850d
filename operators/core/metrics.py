"""The HTTP side every component serves: /metrics (prometheus-client), /healthz and /readyz."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


async def serve(address: str, *, registry: CollectorRegistry = REGISTRY,
                ready: Callable[[], bool] = lambda: True) -> web.AppRunner:
    """Start the probe/metrics server on `host:port` (":8080" = all interfaces) and return its runner."""

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if ready() else web.Response(status=503, text="not ready")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    await web.TCPSite(runner, host or None, int(port)).start()
    log.info("serving /metrics, /healthz, /readyz on %s", address)
    return runner
