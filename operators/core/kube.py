"""Kubernetes client construction and small helpers every component shares.

kubernetes_asyncio picks JSON-patch for dict bodies of custom objects; the helpers here always set the content
type explicitly (merge patch, or server-side apply with a per-controller field manager).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


async def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client for the cluster: in-cluster config when running in a pod, else the kubeconfig."""
    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        await config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"),
                                      client_configuration=cfg)
    # Controllers issue many small concurrent requests; the default pool of 4 serialises them.
    cfg.connection_pool_maxsize = 64
    return client.ApiClient(configuration=cfg)


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
        except (OSError, asyncio.TimeoutError):
            if attempt == attempts - 1:
                raise
        await asyncio.sleep(base_delay * 2**attempt)
    raise AssertionError("unreachable")


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"]}
