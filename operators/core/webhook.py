"""A small HTTPS server for admission webhooks (AdmissionReview v1), with certificate hot reload.

Handlers are plain functions `review request dict -> AdmissionReview response dict`; they run on the event loop
and must be quick and pure. The certificate and key files are re-read when they change (cert-manager and the
chart's rotation replace the mounted files), so rotation needs no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import Histogram

from operators.core.badreview import BadReview

log = logging.getLogger(__name__)

# A handler answers a review; it may be a coroutine function when it must read the cluster.
Handler = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any]]"]
KEEPALIVE_SECONDS = 120.0
# Beyond KAI: the server's share of an admission call (body read, decode, decision, encode), to tell a slow
# webhook from a slow API server. Buckets fine enough for the sub-millisecond reviews it usually answers.
REVIEW_SECONDS = Histogram("kai_webhook_review_duration_seconds", "Time to answer one AdmissionReview", ["path"],
                           buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))


def _response_for_error(review: dict[str, Any], message: str) -> dict[str, Any]:
    # Must not fail itself: the body may be any JSON (a list, a string) when the handler choked on it.
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid", "") if isinstance(request, dict) else ""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": False, "status": {"code": 500, "message": message}}}


class WebhookServer:
    def __init__(self, routes: Mapping[str, Handler], *, address: str, certfile: str | None, keyfile: str | None,
                 reload_interval: float = 30.0) -> None:
        self.routes = routes
        self.address = address
        self.certfile = certfile
        self.keyfile = keyfile
        self.reload_interval = reload_interval
        self.ready = False
        self._runner: web.AppRunner | None = None
        self._ctx: ssl.SSLContext | None = None
        self._stamp: tuple[float, float] = (0.0, 0.0)
        self._reloader: asyncio.Task[None] | None = None

    def _files_stamp(self) -> tuple[float, float]:
        assert self.certfile and self.keyfile
        return (os.stat(self.certfile).st_mtime, os.stat(self.keyfile).st_mtime)

    def _load(self) -> None:
        assert self._ctx is not None and self.certfile and self.keyfile
        self._ctx.load_cert_chain(self.certfile, self.keyfile)
        self._stamp = self._files_stamp()

    async def _watch_files(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                if self._files_stamp() != self._stamp:
                    self._load()  # new handshakes use the new certificate
                    log.info("reloaded the webhook certificate from %s", self.certfile)
            except (OSError, ssl.SSLError) as exc:
                log.warning("cannot reload the webhook certificate: %s", exc)

    async def start(self) -> None:
        app = web.Application(client_max_size=8 * 2**20)
        for path, handler in self.routes.items():
            app.router.add_post(path, self._wrap(handler))
        # The API server keeps up to 25 idle connections per webhook host for 90 s (client-go's transport
        # defaults): idling longer than that here lets the client close first, so a review after a lull reuses
        # its connection instead of paying a TLS handshake (aiohttp's default is 75 s).
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_SECONDS)
        await self._runner.setup()
        if self.certfile and self.keyfile:
            missing = [f for f in (self.certfile, self.keyfile) if not os.path.exists(f)]  # noqa: ASYNC240 (once, at start)
            if missing:
                raise SystemExit(f"webhook server: no certificate at {', '.join(missing)}; mount the TLS Secret "
                                 "there or pass --cert-dir DIR with tls.crt and tls.key")
            self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._load()
            self._reloader = asyncio.create_task(self._watch_files())
        host, _, port = self.address.rpartition(":")
        await web.TCPSite(self._runner, host or None, int(port), ssl_context=self._ctx).start()
        self.ready = True
        log.info("admission webhooks %s listening on %s", sorted(self.routes), self.address)

    async def stop(self) -> None:
        self.ready = False
        if self._reloader:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        if self._runner:
            await self._runner.cleanup()

    def _wrap(self, handler: Handler) -> Callable[[web.Request], Any]:
        async def endpoint(request: web.Request) -> web.Response:
            with REVIEW_SECONDS.labels(request.path).time():
                return await respond(request)

        async def respond(request: web.Request) -> web.Response:
            try:
                review = json.loads(await request.read())
            except ValueError:
                return web.Response(status=400, text="expected an AdmissionReview")
            try:
                answer = handler(review)
                if inspect.isawaitable(answer):
                    answer = await answer
            except BadReview as exc:
                return web.Response(status=400, text=f"expected an AdmissionReview: {exc}")
            except Exception as exc:  # a bug must deny with a reason, not hang the API server
                log.exception("webhook %s failed", request.path)
                answer = _response_for_error(review, f"internal error: {exc}")
            return web.json_response(answer)

        return endpoint


def cert_paths(cert_dir: str | None) -> tuple[str | None, str | None]:
    """`tls.crt`/`tls.key` in a mounted Secret directory, as KAI's deployments lay them out."""
    if not cert_dir:
        return None, None
    base = Path(cert_dir)
    return str(base / "tls.crt"), str(base / "tls.key")


def verdict(review: dict[str, Any], message: str | None, *, warnings: list[str] | None = None) -> dict[str, Any]:
    """An AdmissionReview answer: allowed when `message` is None, else denied with it (HTTP 400 semantics)."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": message is None}
    if message is not None:
        response["status"] = {"code": 400, "reason": "BadRequest", "message": message}
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
