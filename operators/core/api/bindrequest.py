"""BindRequest, `scheduling.run.ai/v1alpha2` (namespaced): the scheduler's decision for one pod, for the binder.

Two views of one resource, kept together so that they cannot drift apart:
- `BindRequest` (pydantic) is the wire schema: `crds/` is generated from it.
- `BindRequestRecord` is what the components exchange: the scheduler builds one (`decided`) and posts its `body`;
  the binder reads every watched BindRequest with `parse_bindrequest`, the scheduler with `parse_decision`. A
  frozen record, not a validated model: every watched object is parsed, and the API server has validated it
  against the schema already.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from operators.core import keys
from operators.core.api.base import Int32, ObjectMeta, Opaque, WireModel

API_VERSION: Literal["scheduling.run.ai/v1alpha2"] = "scheduling.run.ai/v1alpha2"
KIND: Literal["BindRequest"] = "BindRequest"


class ReceivedGPU(WireModel):
    count: int | None = None
    portion: str | None = Field(default=None, description='Portion per device with two decimals, e.g. "0.50".')


class ResourceClaimAllocation(WireModel):
    name: str | None = None
    allocation: Opaque | None = None


class BindRequestSpec(WireModel):
    pod_name: str | None = None
    selected_node: str | None = None
    received_resource_type: str | None = None
    received_gpu: ReceivedGPU | None = Field(default=None, alias="receivedGPU")
    selected_gpu_groups: list[str] | None = Field(default=None, alias="selectedGPUGroups")
    resource_claim_allocations: list[ResourceClaimAllocation] | None = None
    backoff_limit: Int32 | None = None


class BindRequestStatus(WireModel):
    phase: str | None = None
    reason: str | None = None
    failed_attempts: Int32 | None = None


class BindRequest(WireModel):
    api_version: Literal["scheduling.run.ai/v1alpha2"] = API_VERSION
    kind: Literal["BindRequest"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: BindRequestSpec = Field(default_factory=BindRequestSpec)
    status: BindRequestStatus | None = None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> BindRequest:
        return cls.model_validate(obj)


@dataclass(frozen=True, slots=True)
class BindRequestRecord:
    """One BindRequest: the decision (which pod, which node, which GPUs) and how far the binder got with it."""

    namespace: str
    name: str
    pod_name: str  # spec.podName, else the BindRequest's own name (the scheduler names it after the pod)
    selected_node: str
    resource_type: str = keys.RESOURCE_TYPE_REGULAR  # spec.receivedResourceType: Regular | Fraction
    gpu_groups: tuple[str, ...] = ()  # spec.selectedGPUGroups
    gpu_count: int = 0  # spec.receivedGPU.count
    gpu_portion: str = ""  # spec.receivedGPU.portion, per device with two decimals ("0.50")
    pod_uid: str = ""  # the uid of the Pod owning the request: the pod the decision was made for
    uid: str = ""
    deleting: bool = False  # metadata.deletionTimestamp is set
    phase: str = ""  # status.phase: "" (open), Succeeded or Failed
    reason: str = ""  # status.reason: why the last attempt failed
    failed_attempts: int = 0
    backoff_limit: int | None = None
    # spec.resourceClaimAllocations: (pod claim name, status.allocation of the claim as canonical JSON text).
    claim_allocations: tuple[tuple[str, str], ...] = ()
    # The DRA devices those allocations hold, as (driver, pool, device) of each status.allocation.devices.results:
    # derived once here, so the scheduler's sessions read them without parsing the JSON again.
    claim_devices: tuple[tuple[str, str, str], ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.claim_allocations:
            object.__setattr__(self, "claim_devices", _claim_devices(self.claim_allocations))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fraction(self) -> bool:
        """GPU sharing: the binder reserves the GPU groups and writes the pod's ConfigMaps."""
        return self.resource_type == keys.RESOURCE_TYPE_FRACTION

    @property
    def succeeded(self) -> bool:
        return self.phase == keys.BIND_PHASE_SUCCEEDED

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: no watch event needs a bind (a failure is retried by the binder's own backoff)."""
        return self.phase in (keys.BIND_PHASE_SUCCEEDED, keys.BIND_PHASE_FAILED)

    @property
    def failed(self) -> bool:
        """Failed for good: Failed with no attempt left under spec.backoffLimit (no limit: the first failure)."""
        return self.phase == keys.BIND_PHASE_FAILED and (
            self.backoff_limit is None or self.failed_attempts >= self.backoff_limit)

    @classmethod
    def decided(cls, namespace: str, pod: str, pod_uid: str, node: str, resource_type: str,
                gpu_groups: tuple[str, ...] = (), gpu_count: int = 0, gpu_portion: str = "0.00",
                claim_allocations: tuple[tuple[str, str], ...] = ()) -> BindRequestRecord:
        """The request the scheduler is about to create for one pod (named after the pod, owned by it)."""
        return cls(namespace=namespace, name=pod, pod_name=pod, selected_node=node, resource_type=resource_type,
                   gpu_groups=tuple(gpu_groups), gpu_count=gpu_count, gpu_portion=gpu_portion, pod_uid=pod_uid,
                   claim_allocations=tuple(claim_allocations))

    def body(self, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The object the scheduler POSTs: labelled with its node (and `labels`, e.g. the shard's node pool),
        owned by its pod so that it goes with the pod."""
        spec: dict[str, Any] = {"podName": self.pod_name, "selectedNode": self.selected_node,
                                "receivedResourceType": self.resource_type,
                                "receivedGPU": {"count": self.gpu_count, "portion": self.gpu_portion},
                                "selectedGPUGroups": list(self.gpu_groups)}
        if self.claim_allocations:
            spec["resourceClaimAllocations"] = [{"name": name, "allocation": json.loads(allocation)}
                                                for name, allocation in self.claim_allocations]
        return {
            "apiVersion": f"{keys.GROUP}/{keys.BINDREQUEST_VERSION}", "kind": KIND,
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {keys.SELECTED_NODE_LABEL: self.selected_node, **(labels or {})},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": self.pod_name,
                                              "uid": self.pod_uid}]},
            "spec": spec,
        }


def _claim_devices(allocations: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str, str], ...]:
    results = ((json.loads(allocation).get("devices") or {}).get("results") or () for _, allocation in allocations)
    return tuple((str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
                 for devices in results for r in devices)


def parse_bindrequest(obj: Mapping[str, Any]) -> BindRequestRecord:
    """The record of a BindRequest as the API server returns it (missing fields take their defaults)."""
    return _parse(obj, progress=True)


def parse_decision(obj: Mapping[str, Any]) -> BindRequestRecord:
    """The record as the scheduler keeps it: the decision, with the binder's progress reduced to failed for good or
    not (and no uid). Its informer wakes the cycle only when a record changes, so neither the echo of a request
    it posted nor the binder's status writes (Succeeded, a retried attempt) start a cycle that could decide nothing
    new."""
    return _parse(obj, progress=False)


def _parse(obj: Mapping[str, Any], progress: bool) -> BindRequestRecord:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    received = spec.get("receivedGPU") or {}
    raw_limit = spec.get("backoffLimit")
    limit = None if raw_limit is None else int(raw_limit)
    phase, attempts = str(status.get("phase") or ""), int(status.get("failedAttempts") or 0)
    if not progress:  # failed for good or not, by the rule of BindRequestRecord.failed
        failed = phase == keys.BIND_PHASE_FAILED and (limit is None or attempts >= limit)
        phase, attempts, limit = (keys.BIND_PHASE_FAILED if failed else ""), 0, None
    name = str(meta.get("name") or "")
    return BindRequestRecord(
        namespace=str(meta.get("namespace") or "default"), name=name,
        pod_name=str(spec.get("podName") or name), selected_node=str(spec.get("selectedNode") or ""),
        resource_type=str(spec.get("receivedResourceType") or keys.RESOURCE_TYPE_REGULAR),
        gpu_groups=tuple(str(g) for g in spec.get("selectedGPUGroups") or ()),
        gpu_count=int(received.get("count") or 0), gpu_portion=str(received.get("portion") or ""),
        pod_uid=next((str(o.get("uid") or "") for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"),
                     ""),
        uid=str(meta.get("uid") or "") if progress else "", deleting=progress and bool(meta.get("deletionTimestamp")),
        phase=phase, reason=str(status.get("reason") or "") if progress else "", failed_attempts=attempts,
        backoff_limit=limit,
        claim_allocations=tuple((str(a.get("name") or ""), json.dumps(a.get("allocation") or {}, sort_keys=True,
                                                                        separators=(",", ":")))
                                for a in spec.get("resourceClaimAllocations") or () if isinstance(a, Mapping)))
