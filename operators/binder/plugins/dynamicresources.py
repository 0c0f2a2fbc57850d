"""DRA, the chain's `dynamicresources` slot (KAI: k8s-plugins DynamicResources): before the binding, each claim of
the BindRequest's `resourceClaimAllocations` gets the pod in `status.reservedFor` and, unless it is allocated
already (a shared claim), the scheduler's allocation as `status.allocation`; one status update per claim, retried on
conflict, judged by the API server's validation. A failed bind removes the pod from the claims' reservedFor and
clears the allocations this bind wrote when no other consumer is left (KAI leaves them to the claim controller).
Releasing the claims of a pod that goes is the controller-manager's resource-claim controller's work, as for KAI.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from operators.binder.common import error_message, meta
from operators.binder.plugins import BindingState, Node, Pod
from operators.binder.plugins.extended_claim import (
    DEVICE_CLASSES,
    NAMESPACE_CLAIMS,
    POD_STATUS,
    existing_claim,
    pod_status_patch,
    special_claim,
)
from operators.core.api.bindrequest import BindRequestRecord
from operators.core.dra import EXTENDED_RESOURCE_CLAIM
from operators.core.kube import is_conflict, raw

log = logging.getLogger("binder")
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
ATTEMPTS = 5


class ClaimError(RuntimeError):
    """A claim of the BindRequest that cannot be written; the message is the bind's failure reason."""


def claim_name(pod: Pod, pod_claim: str) -> str:
    """The ResourceClaim of one pod claim: named in the spec, or generated from its template (pod status)."""
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if ref.get("name") != pod_claim:
            continue
        if ref.get("resourceClaimName"):
            return str(ref["resourceClaimName"])
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            if status.get("name") == pod_claim and status.get("resourceClaimName"):
                return str(status["resourceClaimName"])
        raise ClaimError(f"the ResourceClaim of pod claim {pod_claim} is not created yet")
    raise ClaimError(f"claim {pod_claim} from the bind request is not a claim of pod {meta(pod).get('name')}")


def reserve(claim: Mapping[str, Any], pod: Pod, allocation: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The claim with the pod in reservedFor and `allocation` unless allocated; and whether it was allocated here."""
    out = dict(claim)
    status = dict(out.get("status") or {})
    m = meta(pod)
    reserved = list(status.get("reservedFor") or [])
    if not any(r.get("resource") == "pods" and r.get("uid") == m.get("uid") for r in reserved):
        reserved.append({"resource": "pods", "name": m.get("name"), "uid": m.get("uid")})
    status["reservedFor"] = reserved
    allocated = status.get("allocation") is None
    if allocated:
        status["allocation"] = dict(allocation)
    out["status"] = status
    return out, allocated


def release(claim: Mapping[str, Any], pod_uid: str, deallocate: bool) -> dict[str, Any]:
    """The claim without the pod in reservedFor; without its allocation too when `deallocate` and no consumer is
    left."""
    out = dict(claim)
    status = dict(out.get("status") or {})
    status["reservedFor"] = [r for r in status.get("reservedFor") or () if r.get("uid") != pod_uid] or None
    if deallocate and not status["reservedFor"]:
        status.pop("allocation", None)
    out["status"] = {k: v for k, v in status.items() if v is not None}
    return out


class DynamicResources:
    name = "dynamicresources"

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    async def _update(self, namespace: str, name: str, change: Any) -> Any:
        """GET, change, PUT the status; retried on conflict (someone else wrote the claim in between)."""
        path = CLAIMS.format(namespace=namespace, name=name)
        for attempt in range(ATTEMPTS):
            claim = await raw(self.api, "GET", path)
            body, result = change(claim)
            if body is None:
                return result
            try:
                await raw(self.api, "PUT", f"{path}/status", body=body)
                return result
            except Exception as exc:
                if not is_conflict(exc) or attempt == ATTEMPTS - 1:
                    raise
        return None

    async def pre_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        m = meta(pod)
        for pod_claim, allocation in request.claim_allocations:
            wanted = json.loads(allocation)
            if pod_claim == EXTENDED_RESOURCE_CLAIM:
                name = existing_claim(pod) or await self._create_special_claim(pod, wanted)
            else:
                name = claim_name(pod, pod_claim)
            try:
                allocated = await self._update(m["namespace"], name, lambda c, a=wanted: reserve(c, pod, a))
            except Exception as exc:
                raise ClaimError(f"failed to update claim {name} for pod {m['namespace']}/{m['name']}: "
                                 f"{error_message(exc)}") from exc
            state.claims.append((name, bool(allocated)))

    async def _create_special_claim(self, pod: Pod, allocation: Mapping[str, Any]) -> str:
        """KEP-5004: creates the pod's special claim and names it in the pod's status (a retried bind finds it
        there, so a failed bind leaves no second claim); its name."""
        m = meta(pod)
        try:
            # The pod as it is now: the bind may be a retry of one that created the claim.
            fresh = await raw(self.api, "GET", POD_STATUS.format(namespace=m["namespace"], name=m["name"]))
            if existing_claim(fresh):
                return existing_claim(fresh)
            classes = (await raw(self.api, "GET", DEVICE_CLASSES)).get("items") or ()
            body, mappings = special_claim(pod, allocation, classes)
            created = await raw(self.api, "POST", NAMESPACE_CLAIMS.format(namespace=m["namespace"]), body=body)
            name = str(created["metadata"]["name"])
            await raw(self.api, "PATCH", POD_STATUS.format(namespace=m["namespace"], name=m["name"]),
                      body=pod_status_patch(name, mappings), content_type="application/merge-patch+json")
        except Exception as exc:
            raise ClaimError(f"failed to create the extended resource claim of pod {m['namespace']}/{m['name']}: "
                             f"{error_message(exc)}") from exc
        return name

    async def post_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        return None

    async def rollback(self, pod: Pod | None, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        uid = request.pod_uid or (meta(pod).get("uid") if pod is not None else "")
        for name, allocated_here in state.claims:
            try:
                await self._update(request.namespace, name,
                                   lambda c, d=allocated_here: (release(c, str(uid), d), None))
            except Exception as exc:
                log.warning("rollback: releasing claim %s/%s failed: %s", request.namespace, name,
                            error_message(exc))
