"""Kubernetes client construction and small helpers every component shares.

kubernetes_asyncio picks JSON-patch for dict bodies of custom objects; the helpers here always set the content
type explicitly (merge patch, or server-side apply with a per-controller field manager).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Histogram

T = TypeVar("T")
log = logging.getLogger(__name__)
# The exit code of a process whose credentials the API server refused.
UNAUTHORIZED_EXIT = 3

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# Every client of the process names its component (`set_user_agent`), as client-go's binaries do, so the API
# server's logs and audit events tell the components' requests apart.
_user_agent = "kai-scheduler-py"
# The default size of a client's connection pool (see `api_client`).
POOL_SIZE = 64

# A request beyond the pool's size waits for a connection before it is sent; this is that wait (requests that
# found a free connection are not observed).
POOL_WAIT = Histogram("kai_client_connection_wait_seconds",
                      "Time a request waited for one of its API client's pooled connections (waits only)",
                      buckets=(0.01, 0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120))


def set_user_agent(component: str) -> None:
    global _user_agent
    _user_agent = f"kai-{component}" if not component.startswith("kai") else component


def merge_patched(target: Any, patch: Any) -> Any:
    """What a JSON merge patch (RFC 7386) makes of `target`: objects merged key by key, a null removes its key,
    anything else (lists included) replaces. `target` is not changed."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patched(out.get(key), value)
    return out


async def api_client(kubeconfig: str | None = None, *, pool: int = POOL_SIZE) -> client.ApiClient:
    """A client for the cluster: in-cluster config when running in a pod, else the kubeconfig. At most `pool`
    requests are in flight at once (one per connection); more wait for a connection (`POOL_WAIT`)."""
    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"),
                                      client_configuration=cfg)
    # Controllers issue many small concurrent requests; the default pool of 4 serialises them.
    cfg.connection_pool_maxsize = pool
    if not cfg.proxy:
        cfg.proxy = env_proxy(cfg.host or "")
    api = client.ApiClient(configuration=cfg)
    api.user_agent = _user_agent
    # kubernetes_asyncio opens its aiohttp session with trust_env=True, which re-reads ~/.netrc and the proxy
    # variables on every request (a measurable share of a busy controller's CPU). The proxy is resolved once
    # above instead; credentials come from the kubeconfig, never from .netrc.
    session = api.rest_client.pool_manager
    if hasattr(session, "_trust_env"):
        session._trust_env = False
    if isinstance(getattr(session, "_trace_configs", None), list):
        session._trace_configs.append(_POOL_WAIT_TRACE)
    exit_on_unauthorized(api)
    return api


async def _queued(_: Any, ctx: SimpleNamespace, __: Any) -> None:
    ctx.queued_at = time.monotonic()


async def _dequeued(_: Any, ctx: SimpleNamespace, __: Any) -> None:
    POOL_WAIT.observe(time.monotonic() - ctx.queued_at)


def _pool_wait_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_queued_start.append(_queued)
    trace.on_connection_queued_end.append(_dequeued)
    trace.freeze()
    return trace


# Added to every client's session after construction (kubernetes_asyncio builds the session itself).
_POOL_WAIT_TRACE = _pool_wait_trace()


def unauthorized(method: str, url: str) -> None:
    """The API server refused our credentials (e.g. a rotated ServiceAccount token): exit, as KAI does, so the
    kubelet restarts the process with the current token, instead of retrying with a dead one forever."""
    log.critical("the API server answered 401 Unauthorized to %s %s: the credentials are invalid or were "
                 "rotated; exiting so that the process restarts with fresh ones", method, url.split("?")[0])
    logging.shutdown()
    sys.stderr.flush()
    os._exit(UNAUTHORIZED_EXIT)


def exit_on_unauthorized(api: client.ApiClient) -> None:
    """Make every request of `api` (typed calls, `raw`, watches) end the process on 401 Unauthorized."""
    rest = api.rest_client
    request = rest.request

    async def checked(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        try:
            resp = await request(method, url, *args, **kwargs)
        except ApiException as exc:
            if exc.status == 401:
                unauthorized(method, url)
            raise
        if getattr(resp, "status", None) == 401:
            unauthorized(method, url)
        return resp

    rest.request = checked  # type: ignore[method-assign]


def env_proxy(host: str) -> str | None:
    """The proxy the environment names for `host` (HTTPS_PROXY / NO_PROXY), read once per client."""
    hostname = urllib.parse.urlsplit(host).hostname or ""
    proxies = urllib.request.getproxies()
    scheme = urllib.parse.urlsplit(host).scheme or "https"
    proxy = proxies.get(scheme)
    if not proxy or not hostname or urllib.request.proxy_bypass(hostname):
        return None
    return proxy


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


def is_not_found(exc: BaseException) -> bool:
    return status_of(exc) == 404


def is_conflict(exc: BaseException) -> bool:
    return status_of(exc) == 409


async def retry(call: Callable[[], Awaitable[T]], *, attempts: int = 5, base_delay: float = 0.2) -> T:
    """Retry transient API failures (429, 5xx, connection errors) with exponential backoff."""
    for attempt in range(attempts):
        try:
            return await call()
        except ApiException as exc:
            if exc.status not in (429, 500, 502, 503, 504) or attempt == attempts - 1:
                raise
        except (TimeoutError, OSError):
            if attempt == attempts - 1:
                raise
        await asyncio.sleep(base_delay * 2**attempt)
    raise AssertionError("unreachable")


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"]}


class RawError(ApiException):
    """A non-2xx answer of the raw helpers, shaped like kubernetes_asyncio's own errors."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(status=status, reason=reason)
        self.body = body  # type: ignore[assignment]


async def raw(api: client.ApiClient, method: str, path: str, *, query: dict[str, Any] | None = None,
              body: Any = None, content_type: str = "application/json",
              timeout: float | tuple[float, float] | None = 30) -> Any:
    """One request on any API path, JSON in and out (for custom objects, raw lists and subresources)."""
    resp = await raw_stream(api, method, path, query=query, body=body, content_type=content_type,
                            timeout=timeout)
    async with resp:
        data = await resp.read()
    if resp.status == 204 or not data:
        return None
    import json

    return json.loads(data)


def server_deadline(timeout: float | tuple[float, float] | None) -> aiohttp.ClientTimeout | None:
    """A request timeout that bounds the API server's part only: `timeout` (or `(connect, read)`) seconds to open
    a connection and then between the request going out and each part of the answer, none for the wait for a
    pooled connection. kubernetes_asyncio turns a number into aiohttp's `total`, which counts that wait too: a
    busy client (the binder's 128 workers on 64 connections) then failed requests the API server was never
    sent, or answered in time."""
    if timeout is None:
        return None
    connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
    return aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect, sock_read=read)


async def raw_stream(api: client.ApiClient, method: str, path: str, *, query: dict[str, Any] | None = None,
                     body: Any = None, content_type: str = "application/json",
                     timeout: float | tuple[float, float] | None = 30) -> Any:
    """Like `raw` but returns the open aiohttp response (for watches); raises on non-2xx answers."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    params = [(k, v) for k, v in (query or {}).items() if v is not None]
    resp = await api.call_api(path, method, query_params=params, header_params=headers, body=body,
                              auth_settings=["BearerToken"], _preload_content=False,
                              _return_http_data_only=True,
                              _request_timeout=server_deadline(timeout))
    if not 200 <= resp.status <= 299:
        text = (await resp.read()).decode(errors="replace")
        resp.release()
        raise RawError(resp.status, resp.reason or "", text)
    return resp
