"""BindRequest, `scheduling.run.ai/v1alpha2` (namespaced): the scheduler's decision for one pod, for the binder."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

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
