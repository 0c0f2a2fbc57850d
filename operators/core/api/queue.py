"""Queue, `scheduling.run.ai/v2` (cluster-scoped): quota, limit and over-quota weight per resource.

Two views of one resource, kept together so that they cannot drift apart:
- `Queue` (pydantic) is the wire schema: `crds/` is generated from it.
- `QueueRecord` (the spec) and `QueueStatusRecord` (the status) are what the components read: the scheduler, the
  queue-controller, the pod-grouper's RayJob admission and `kai` parse a Queue with `queue_record` /
  `queue_status_record`. Frozen records, not validated models: the API server has validated the object against the
  schema already. The queue-controller writes the status with `status_patch`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from operators.core import keys
from operators.core.api.base import ObjectMeta, ResourceList, WireModel
from operators.core.api.fields import meta as _meta
from operators.core.api.fields import parse_time, provisioning_class, provisioning_parameters
from operators.core.durations import parse_seconds
from operators.core.resources import QuantityError, format_resource_list, parse_resource_list
from operators.core.resources import ResourceList as Amounts
from operators.core.units import GPU, MB, queue_amount

API_VERSION: Literal["scheduling.run.ai/v2"] = "scheduling.run.ai/v2"
KIND: Literal["Queue"] = "Queue"
UNLIMITED = -1  # a quota or limit of -1: no bound


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


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """Per-resource vectors are (gpu, cpu millicores, memory bytes); -1 = unlimited."""

    name: str
    uid: str
    created: float
    parent: str
    priority: int
    display_name: str
    quota: tuple[int, int, int]  # micro-GPUs, millicores, bytes
    limit: tuple[int, int, int]
    weight: tuple[float, float, float]
    labels: Mapping[str, str] = field(default_factory=dict)
    # spec.preemptMinRuntime / spec.reclaimMinRuntime in seconds; None = unset (inherit from the parent).
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None
    # Autoscaler opt-in for every workload of the queue (a workload's own annotation wins).
    provisioning_class: str = ""
    provisioning_parameters: tuple[tuple[str, str], ...] = ()
    # kai.scheduler/pdb-violation: forbid | allow | "" (unset: the parent's, else the pdb plugin's argument).
    pdb_violation: str = ""
    suspend_on_preemption: str = ""  # kai.scheduler/suspend-on-preemption: true | false | "" (the parent's)

    @property
    def title(self) -> str:
        return self.display_name or self.name


def _queue_vector(resources: Mapping[str, Any], field_name: str) -> tuple[int, int, int]:
    def one(name: str, scale: int) -> int:
        raw = (resources.get(name) or {}).get(field_name)
        if raw is None:
            return 0
        value = float(raw)
        return UNLIMITED if value == UNLIMITED else queue_amount(value, scale)
    # Queue GPUs are devices (the core counts micro-GPUs), cpu millicores, memory megabytes (the core: bytes).
    return one("gpu", GPU), one("cpu", 1), one("memory", MB)


def _weights(resources: Mapping[str, Any]) -> tuple[float, float, float]:
    def one(name: str) -> float:
        raw = (resources.get(name) or {}).get("overQuotaWeight")
        return 0.0 if raw is None else float(raw)
    return one("gpu"), one("cpu"), one("memory")


def _duration(value: Any) -> float | None:
    """A Go duration string ("20s", "1m30s") or seconds; None when unset or malformed."""
    if value is None or value == "":
        return None
    try:
        return parse_seconds(value if isinstance(value, int | float) else str(value))
    except ValueError:
        return None


def queue_record(obj: Mapping[str, Any]) -> QueueRecord:
    meta, spec = _meta(obj), obj.get("spec") or {}
    resources = spec.get("resources") or {}
    priority = spec.get("priority")
    return QueueRecord(
        name=str(meta.get("name", "")), uid=str(meta.get("uid") or meta.get("name", "")),
        created=parse_time(meta.get("creationTimestamp")), parent=str(spec.get("parentQueue") or ""),
        priority=int(priority) if priority is not None else 100, display_name=str(spec.get("displayName") or ""),
        quota=_queue_vector(resources, "quota"), limit=_queue_vector(resources, "limit"),
        weight=_weights(resources), labels=dict(meta.get("labels") or {}),
        preempt_min_runtime=_duration(spec.get("preemptMinRuntime")),
        reclaim_min_runtime=_duration(spec.get("reclaimMinRuntime")),
        provisioning_class=provisioning_class(meta.get("annotations") or {}),
        provisioning_parameters=provisioning_parameters(meta.get("annotations") or {}),
        pdb_violation=str((meta.get("annotations") or {}).get(keys.PDB_VIOLATION) or "").strip().lower(),
        suspend_on_preemption=str((meta.get("annotations") or {}).get(keys.SUSPEND_ON_PREEMPTION) or "")
        .strip().lower())


# --- status ----------------------------------------------------------------------------------------
# The status resource lists, by their wire names: sums over the queue's PodGroups and its child queues.
STATUS_FIELDS = ("allocated", "allocatedNonPreemptible", "requested")


@dataclass(frozen=True, slots=True)
class QueueStatusRecord:
    """A Queue's status: its children, the resource sums by wire name (parsed quantities), its conditions."""

    child_queues: tuple[str, ...] = ()
    amounts: Mapping[str, Amounts] = field(default_factory=dict)  # STATUS_FIELDS name -> resource -> quantity
    conditions: tuple[Mapping[str, Any], ...] = ()

    def listed(self, field_name: str) -> Amounts:
        """One of STATUS_FIELDS ({} when absent)."""
        return self.amounts.get(field_name) or {}

    @property
    def allocated(self) -> Amounts:
        return self.listed("allocated")

    def to_wire(self) -> dict[str, Any]:
        """The status as written: every STATUS_FIELDS list formatted ({} when empty), childQueues and conditions
        only when there are any."""
        out: dict[str, Any] = {f: format_resource_list(self.listed(f)) for f in STATUS_FIELDS}
        if self.child_queues:
            out["childQueues"] = list(self.child_queues)
        if self.conditions:
            out["conditions"] = [dict(c) for c in self.conditions]
        return out


def _amounts(raw: Any) -> Amounts:
    # A malformed list written by someone else must not stop the whole hierarchy from being accounted.
    try:
        return parse_resource_list(raw if isinstance(raw, Mapping) else None)
    except QuantityError:
        return {}


def queue_status_record(obj: Mapping[str, Any]) -> QueueStatusRecord:
    status = obj.get("status") or {}
    return QueueStatusRecord(
        child_queues=tuple(str(c) for c in status.get("childQueues") or ()),
        amounts={f: _amounts(status.get(f)) for f in STATUS_FIELDS if f in status},
        conditions=tuple(c for c in status.get("conditions") or () if isinstance(c, Mapping)))


def _nonzero(values: Amounts) -> Amounts:
    return {name: q for name, q in values.items() if q != 0}


def status_patch(queue: Mapping[str, Any], computed: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status merge patch that makes `queue`'s stored status say `computed` (a status in wire form), or None
    when it already says the same (by value).

    `computed["conditions"]`, when present, is the whole desired conditions list (the queue-controller is the only
    writer of Queue conditions); a merge patch replaces a list as a whole.
    """
    stored = queue_status_record(queue)
    stored_wire = queue.get("status") or {}
    conditions: dict[str, Any] = {}
    if "conditions" in computed and (stored_wire.get("conditions") or []) != (computed["conditions"] or []):
        conditions = {"conditions": list(computed["conditions"] or []) or None}
    same = all(_nonzero(stored.listed(f)) == _nonzero(_amounts(computed.get(f))) for f in STATUS_FIELDS)
    if same and sorted(stored.child_queues) == sorted(computed.get("childQueues") or []):
        return {"status": conditions} if conditions else None
    # A merge patch only removes keys it names as null: clear what the computation no longer reports, and
    # remove a list that became empty (server-side apply cannot: an applied `{}` is stored as an invalid null).
    patch: dict[str, Any] = {}
    for f in STATUS_FIELDS:
        values = computed.get(f) or {}
        if values:
            patch[f] = {**{name: None for name in stored_wire.get(f) or {}}, **values}
        elif f in stored_wire:
            patch[f] = None
    return {"status": {**patch, "childQueues": list(computed.get("childQueues") or []) or None, **conditions}}
