"""What one scheduling cycle decided, as plain data: everything the live loop writes and `kai simulate` prints."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from operators.scheduler.decide.searchbackoff import Backoff


class Bind(NamedTuple):
    """Create a BindRequest (spec.selectedNode, receivedResourceType, receivedGPU, selectedGPUGroups).

    A NamedTuple, not a frozen dataclass: one is built per bound pod, and a frozen dataclass's constructor sets
    each field through object.__setattr__ (~1.3 us against ~0.4 us); a NamedTuple is as immutable, hashable and
    picklable. Compare Binds only with Binds (a tuple of the same fields compares equal)."""

    namespace: str
    pod: str
    pod_group: str
    node: str
    resource_type: str  # Regular | Fraction
    gpu_groups: tuple[str, ...] = ()
    gpu_portion: str = "0.00"  # per device, two decimals, as on the BindRequest
    gpu_count: int = 0
    # DRA: (pod claim name, status.allocation JSON) per claim: the BindRequest's resourceClaimAllocations.
    claim_allocations: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"namespace": self.namespace, "pod": self.pod, "podGroup": self.pod_group, "node": self.node,
               "resourceType": self.resource_type, "gpuGroups": list(self.gpu_groups),
               "gpuPortion": self.gpu_portion, "gpuCount": self.gpu_count}
        if self.claim_allocations:
            out["resourceClaimAllocations"] = [{"name": name, "allocation": json.loads(allocation)}
                                               for name, allocation in self.claim_allocations]
        return out


@dataclass(frozen=True, slots=True)
class Pipelined:
    """Nothing is persisted: emit the `Pipelined` event; the pod is decided again next cycle."""

    namespace: str
    pod: str
    pod_group: str
    node: str
    message: str
    gpu_groups: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "pod": self.pod, "podGroup": self.pod_group, "node": self.node,
                "gpuGroups": list(self.gpu_groups), "message": self.message}


@dataclass(frozen=True, slots=True)
class Eviction:
    """Delete the pod; `Evict` event on its PodGroup with this message."""

    namespace: str
    pod: str
    pod_group: str
    action: str
    for_pod_group: str  # "namespace/name" of the job the eviction makes room for ("" for stale gangs)
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "pod": self.pod, "podGroup": self.pod_group, "action": self.action,
                "forPodGroup": self.for_pod_group, "message": self.message}


@dataclass(frozen=True, slots=True)
class Ungate:
    """Remove the quota gate (keys.QUOTA_GATE) from the pod's spec.schedulingGates: its queue admits its gang."""

    namespace: str
    pod: str
    pod_group: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "pod": self.pod, "podGroup": self.pod_group}


@dataclass(frozen=True, slots=True)
class Suspension:
    """Suspend the victim's top owner (one merge patch of its suspend field) instead of evicting its pods; its
    controller removes them. `evictions`: what to do instead if the owner turns out not to be suspendable."""

    namespace: str
    pod_group: str
    owner: tuple[str, str, str, str]  # apiVersion, kind, name, uid
    field_path: tuple[str, ...]  # ("spec", "suspend"), or ("spec", "runPolicy", "suspend") for Kubeflow jobs
    verify: bool  # a kind not in the known table: suspend only if the owner has a boolean at field_path
    action: str
    for_pod_group: str
    message: str
    evictions: tuple[Eviction, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "owner": "/".join(self.owner[:3]),
                "action": self.action, "forPodGroup": self.for_pod_group, "message": self.message,
                "pods": sorted(e.pod for e in self.evictions)}


@dataclass(frozen=True, slots=True)
class Resume:
    """Lift the suspension the scheduler set on a top owner: its whole gang fits in this cycle."""

    namespace: str
    pod_group: str
    owner: tuple[str, str, str, str]
    field_path: tuple[str, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "owner": "/".join(self.owner[:3]),
                "message": self.message}


@dataclass(frozen=True, slots=True)
class Reason:
    """One `status.schedulingConditions[].reasons[]` entry."""

    reason: str
    message: str
    details: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A PodGroup left with Pending pods.

    The loop emits `Normal Unschedulable` with `message` on the PodGroup, `Warning Unschedulable` with
    `pod_messages[pod]` on each Pending pod (plus PodScheduled=False unless `mark_unschedulable` is false), and
    writes the `UnschedulableOnNodePool` condition only when `has_allocated_pods` is false.
    """

    namespace: str
    pod_group: str
    node_pool: str
    message: str
    reasons: tuple[Reason, ...]
    pod_messages: dict[str, str]
    has_allocated_pods: bool
    mark_unschedulable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "nodePool": self.node_pool,
                "message": self.message, "reasons": [r.to_dict() for r in self.reasons],
                "podMessages": dict(sorted(self.pod_messages.items())),
                "hasAllocatedPods": self.has_allocated_pods, "markUnschedulable": self.mark_unschedulable}


@dataclass(frozen=True, slots=True)
class NotReady:
    """`Normal NotReady` event on the PodGroup: too few pods exist for the gang."""

    namespace: str
    pod_group: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "message": self.message}


@dataclass(frozen=True, slots=True)
class QueueShare:
    """Per-resource numbers in Queue units: gpu devices, cpu millicores, memory megabytes."""

    name: str
    fair_share: dict[str, float]
    allocated: dict[str, float]
    requested: dict[str, float]
    deserved: dict[str, float]
    limit: dict[str, float]
    display_name: str = ""  # spec.displayName, for the metrics' queue_display_name label (not in the output)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fairShare": self.fair_share, "allocated": self.allocated,
                "requested": self.requested, "deserved": self.deserved, "limit": self.limit}


@dataclass(frozen=True, slots=True)
class AnnotationUpdate:
    """Patch one PodGroup annotation; value None = remove it."""

    namespace: str
    pod_group: str
    key: str
    value: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "key": self.key, "value": self.value}


@dataclass(frozen=True, slots=True)
class StaleJob:
    """`Normal StaleJob` event on the PodGroup (grace period elapsed)."""

    namespace: str
    pod_group: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "podGroup": self.pod_group, "message": self.message}


@dataclass(slots=True)
class Decisions:
    binds: list[Bind] = field(default_factory=list)
    pipelined: list[Pipelined] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    not_ready: list[NotReady] = field(default_factory=list)
    stale: list[StaleJob] = field(default_factory=list)
    queues: list[QueueShare] = field(default_factory=list)
    annotations: list[AnnotationUpdate] = field(default_factory=list)
    ungates: list[Ungate] = field(default_factory=list)
    suspensions: list[Suspension] = field(default_factory=list)  # the `suspend` plugin's (opt-in)
    resumes: list[Resume] = field(default_factory=list)
    # Milliseconds spent per phase ("open-session", each action, "close-session"): for metrics, never printed.
    timings: dict[str, float] = field(default_factory=dict)
    # Event counts for metrics ("scenarios_simulation/<action>", "scenarios_filtered/<action>",
    # "scenarios_duplicate/<action>"): never printed.
    counters: dict[str, int] = field(default_factory=dict)
    # Scenario searches of this cycle, (action, job key, solved), and the failed-search back-off table they lead
    # to (`searchbackoff`): the shell passes the table to the next cycle's snapshot. Never printed.
    search_outcomes: list[tuple[str, str, bool]] = field(default_factory=list)
    search_backoff: dict[tuple[str, str], Backoff] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        opt_in = {name: [x.to_dict() for x in items] for name, items in
                  (("ungates", self.ungates), ("suspensions", self.suspensions), ("resumes", self.resumes))
                  if items}
        return {
            "binds": [b.to_dict() for b in self.binds],
            "pipelined": [p.to_dict() for p in self.pipelined],
            "evictions": [e.to_dict() for e in self.evictions],
            "unschedulable": [u.to_dict() for u in self.unschedulable],
            "notReady": [n.to_dict() for n in self.not_ready],
            "stale": [s.to_dict() for s in self.stale],
            "queues": [q.to_dict() for q in self.queues],
            "annotations": [a.to_dict() for a in self.annotations],
            **opt_in,
        }
