"""PodGroup, `scheduling.run.ai/v2alpha2` (namespaced, short name `pg`): one gang of pods."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from operators.core.api.base import Int32, ObjectMeta, ResourceList, WireModel

API_VERSION: Literal["scheduling.run.ai/v2alpha2"] = "scheduling.run.ai/v2alpha2"
KIND: Literal["PodGroup"] = "PodGroup"


class TopologyConstraint(WireModel):
    preferred_topology_level: str | None = None
    required_topology_level: str | None = None
    topology: str | None = None


# One node of the PodGroup's SubGroup tree. A leaf (no SubGroup names it as parent) sets minMember, its minimum
# of pods; a parent sets minSubGroup, how many of its direct children must meet their own minimum (0: an elastic
# subtree). The two are exclusive.
class SubGroup(WireModel):
    name: str = Field(min_length=1)
    min_member: Int32 | None = Field(default=None, ge=1)
    min_sub_group: Int32 | None = Field(default=None, ge=0)
    parent: str | None = None
    topology_constraint: TopologyConstraint | None = None


class PodGroupSpec(WireModel):
    min_member: Int32 | None = Field(default=None, ge=1)
    # How many of the root SubGroups (those without a parent) must meet their own minimum; exclusive with
    # minMember.
    min_sub_group: Int32 | None = Field(default=None, ge=0)
    queue: str | None = None
    priority_class_name: str | None = None
    preemptibility: Literal["preemptible", "non-preemptible", "semi-preemptible"] | None = None
    # semi-preemptible (KAI v0.18, alpha): how many pods are non-preemptible and in quota, when more than the gang
    # minimum (unset: minMember, or the minSubGroup tree's minimum).
    min_non_preemptible: Int32 | None = Field(default=None, ge=0)
    # false: consolidation never moves this workload (KAI v0.18; the pod-grouper sets it from
    # kai.scheduler/safe-to-consolidate). Reclaim and preempt may still evict it.
    safe_to_consolidate: bool | None = None
    parallelism: Int32 | None = None
    completions: Int32 | None = None
    backoff_limit: Int32 | None = None
    mark_unschedulable: bool | None = None
    scheduling_backoff: Int32 | None = None
    topology_constraint: TopologyConstraint | None = None
    sub_groups: list[SubGroup] | None = None
    # A Go duration ("30s", "5m"): how long the PodGroup must be pending (since its creation or the last
    # eviction stamped on it) before it may make the scheduler evict others (preempt, reclaim, consolidation).
    preemption_delay: str | None = None


class QueueDetails(WireModel):
    name: str | None = None
    queue_requested_resources: ResourceList | None = None
    queue_deserved_resources: ResourceList | None = None
    queue_allocated_resources: ResourceList | None = None
    queue_allocated_non_preemptible_resources: ResourceList | None = None
    queue_resource_limits: ResourceList | None = None
    pod_group_requested_resources: ResourceList | None = None
    pod_group_requested_non_preemptible_resources: ResourceList | None = None


class UnschedulableDetails(WireModel):
    queue_details: QueueDetails | None = None


class UnschedulableReason(WireModel):
    reason: str
    message: str | None = None
    details: UnschedulableDetails | None = None


class SchedulingCondition(WireModel):
    type: str
    node_pool: str | None = None
    reason: str | None = None
    message: str | None = None
    reasons: list[UnschedulableReason] | None = None
    transition_id: str | None = Field(default=None, alias="transitionID")
    last_transition_time: str | None = None
    status: str | None = None


class PodGroupCondition(WireModel):
    type: str | None = None
    status: str | None = None
    transition_id: str | None = Field(default=None, alias="transitionID")
    last_transition_time: str | None = None
    reason: str | None = None
    message: str | None = None


class ResourcesStatus(WireModel):
    requested: ResourceList | None = None
    allocated: ResourceList | None = None
    allocated_non_preemptible: ResourceList | None = None


class PodGroupStatus(WireModel):
    phase: str | None = None
    conditions: list[PodGroupCondition] | None = None
    running: Int32 | None = None
    succeeded: Int32 | None = None
    failed: Int32 | None = None
    pending: Int32 | None = None
    scheduling_conditions: list[SchedulingCondition] | None = None
    resources_status: ResourcesStatus | None = None


class PodGroup(WireModel):
    api_version: Literal["scheduling.run.ai/v2alpha2"] = API_VERSION
    kind: Literal["PodGroup"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> PodGroup:
        return cls.model_validate(obj)
