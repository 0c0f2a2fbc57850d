"""Queue, `scheduling.run.ai/v2` (cluster-scoped): quota, limit and over-quota weight per resource."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from operators.core.api.base import ObjectMeta, ResourceList, WireModel

API_VERSION: Literal["scheduling.run.ai/v2"] = "scheduling.run.ai/v2"
KIND: Literal["Queue"] = "Queue"


class QueueResource(WireModel):
    """One resource's share settings. -1 means unlimited; an omitted field is 0 (a 0 limit blocks allocation)."""

    quota: float | None = Field(default=None, description="Guaranteed amount; -1 = unlimited.")
    limit: float | None = Field(default=None, description="Hard cap; -1 = no limit, 0 = nothing may be allocated.")
    over_quota_weight: float | None = Field(default=None, description="Weight for dividing surplus resources.")


class QueueResources(WireModel):
    """cpu in millicores, memory in megabytes (10^6 bytes), gpu in devices (fractions allowed)."""

    cpu: QueueResource | None = None
    gpu: QueueResource | None = None
    memory: QueueResource | None = None


class QueueSpec(WireModel):
    display_name: str | None = None
    parent_queue: str | None = None
    priority: int | None = Field(default=None, description="Higher is considered first; default 100.")
    preempt_min_runtime: str | None = None
    reclaim_min_runtime: str | None = None
    resources: QueueResources | None = None


class QueueCondition(WireModel):
    type: str
    status: str
    last_probe_time: str | None = None
    last_transition_time: str | None = None
    reason: str | None = None
    message: str | None = None


class QueueStatus(WireModel):
    child_queues: list[str] | None = None
    allocated: ResourceList | None = None
    allocated_non_preemptible: ResourceList | None = None
    requested: ResourceList | None = None
    conditions: list[QueueCondition] | None = None


class Queue(WireModel):
    api_version: Literal["scheduling.run.ai/v2"] = API_VERSION
    kind: Literal["Queue"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus | None = None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> Queue:
        return cls.model_validate(obj)
