"""What the binder's modules share: its configuration, its errors, the pod record its informers keep, and the few
API calls beyond the informers (reads that tolerate absence, idempotent deletes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from operators.binder.gpusharing import pod_gpu_groups
from operators.binder.reservation import reserved_device_id
from operators.core import keys
from operators.core.kube import MERGE_PATCH, is_not_found, raw


class BindError(Exception):
    """A failed bind; the message becomes the BindRequest's `status.reason`."""


class InvalidBindRequest(BindError):
    """The request itself is wrong; it is deleted so that the scheduler writes a new one."""


@dataclass(frozen=True)
class BinderConfig:
    scheduler_name: str = keys.SCHEDULER_NAME
    reservation_namespace: str = keys.RESERVATION_NAMESPACE
    service_account: str = keys.RESERVATION_SERVICE_ACCOUNT
    app_label: str = keys.RESERVATION_APP_LABEL_VALUE
    image: str = "registry/local/kai-scheduler/resource-reservation"
    allocation_timeout: float = 40.0
    runtime_class_name: str | None = None
    reservation_resources: Mapping[str, Any] | None = None
    fake_gpu_nodes: bool = False
    cdi_enabled: bool = False
    workers: int = 10
    base_delay: float = 1.0
    max_delay: float = 60.0


class Member(NamedTuple):
    """What the binder keeps of a kai-scheduler pod: enough to bind a plain pod without reading it, and the GPU
    groups the GC triggers need (groups is empty for pods without GPU sharing)."""

    node: str
    phase: str
    groups: tuple[str, ...]
    uid: str = ""
    pod_bound: tuple[str, str, str] | None = None  # PodBound condition (status, reason, message)
    device: str = ""  # a reservation pod's reported GPU id (annotation), once it has one
    deleting: bool = False  # a reservation pod with a deletionTimestamp


def member_record(obj: dict[str, Any]) -> Member | None:
    groups = pod_gpu_groups(obj)
    condition = next((c for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == keys.CONDITION_POD_BOUND), None)
    bound = None if condition is None else (str(condition.get("status") or ""), str(condition.get("reason") or ""),
                                            str(condition.get("message") or ""))
    return Member(str((obj.get("spec") or {}).get("nodeName") or ""),
                  str((obj.get("status") or {}).get("phase") or "Pending"), tuple(groups),
                  str(meta(obj).get("uid") or ""), bound)


def reservation_record(obj: dict[str, Any]) -> Member | None:
    member = member_record(obj) if pod_gpu_groups(obj) else None
    if member is None:
        return None
    return member._replace(device=reserved_device_id(obj) or "", deleting=bool(meta(obj).get("deletionTimestamp")))


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def error_message(exc: BaseException) -> str:
    """The API server's own message for an API error (`nodes "n1" not found`), else the exception text."""
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "")
            if isinstance(body, dict) and body.get("message"):
                return str(body["message"])
        except (TypeError, ValueError):
            pass
        return f"{exc.status} {exc.reason}".strip()
    return str(exc) or type(exc).__name__


async def get(api: client.ApiClient, path: str) -> dict[str, Any] | None:
    """The object at `path`, None when it does not exist."""
    try:
        obj: dict[str, Any] = await raw(api, "GET", path)
        return obj
    except Exception as exc:
        if is_not_found(exc):
            return None
        raise


async def list_labelled(api: client.ApiClient, path: str, selector: str) -> list[dict[str, Any]]:
    page = await raw(api, "GET", path, query={"labelSelector": selector})
    return list(page.get("items") or [])


async def merge_patch(api: client.ApiClient, path: str, patch: dict[str, Any]) -> None:
    await raw(api, "PATCH", path, body=patch, content_type=MERGE_PATCH)


async def delete(api: client.ApiClient, path: str, *, grace_period: int | None = None) -> None:
    """Delete `path`; an object already gone is no error."""
    body = None if grace_period is None else {"apiVersion": "v1", "kind": "DeleteOptions",
                                              "gracePeriodSeconds": grace_period}
    try:
        await raw(api, "DELETE", path, body=body)
    except Exception as exc:
        if not is_not_found(exc):
            raise
