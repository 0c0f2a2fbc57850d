"""PodGroup, `scheduling.run.ai/v2alpha2` (namespaced, short name `pg`): one gang of pods.

Two views of one resource, kept together so that they cannot drift apart:
- `PodGroup` (pydantic) is the wire schema: `crds/` is generated from it.
- `PodGroupRecord` (the spec) and `PodGroupStatusRecord` (the status the podgroup-controller keeps) are what the
  components read: `podgroup_record` parses every watched PodGroup once per event, `podgroup_status_record` its
  resource sums and pod counts. Frozen records, not validated models: the scheduler holds 30,000 of them at the
  envelope, and the API server has validated each against the schema already. The podgroup-controller writes the
  status with `resources_status_patch` and `counts_patch`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from operators.core import keys
from operators.core.api.base import Int32, ObjectMeta, ResourceList, WireModel
from operators.core.api.fields import count as _count
from operators.core.api.fields import delay as _delay
from operators.core.api.fields import meta as _meta
from operators.core.api.fields import owner as _owner
from operators.core.api.fields import parse_time
from operators.core.api.fields import provisioning_class as _provisioning_class
from operators.core.api.fields import provisioning_parameters as _provisioning_parameters
from operators.core.resources import QuantityError, parse_resource_list
from operators.core.resources import ResourceList as Amounts

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


# --- the body the pod-grouper writes --------------------------------------------------------------------------


def subgroup_body(name: str, *, min_member: int | None = None, min_sub_group: int | None = None,
                  parent: str | None = None, topology: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One wire SubGroup: a leaf sets minMember (pods), a parent minSubGroup (children); never both."""
    out: dict[str, Any] = {"name": name}
    if min_sub_group is not None:
        out["minSubGroup"] = min_sub_group
    elif min_member is not None:
        out["minMember"] = min_member
    if parent:
        out["parent"] = parent
    if topology:
        out["topologyConstraint"] = dict(topology)
    return out


def podgroup_body(*, name: str, namespace: str, owner: Mapping[str, Any], labels: Mapping[str, str],
                  annotations: Mapping[str, str], min_member: int, queue: str, priority_class: str = "",
                  preemptibility: str = "", sub_groups: Sequence[Mapping[str, Any]] = (),
                  topology: Mapping[str, str] | None = None, preemption_delay: str = "",
                  safe_to_consolidate: bool | None = None) -> dict[str, Any]:
    """The PodGroup the pod-grouper creates (or applies over a live one) for a workload: its grouping rules decide
    the values, this is their shape. Optional fields are left out when unset (the scheduler's defaults apply);
    topologyConstraint is always written, empty when the workload asks for none, as KAI's pod-grouper does."""
    spec: dict[str, Any] = {
        # The CRD requires minMember >= 1; a zero from user input (minAvailable: 0) would be rejected.
        "minMember": max(1, min_member),
        "queue": queue,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if preemptibility:
        spec["preemptibility"] = preemptibility
    if sub_groups:
        spec["subGroups"] = [dict(s) for s in sub_groups]
    spec["topologyConstraint"] = dict(topology or {})
    if preemption_delay:
        spec["preemptionDelay"] = preemption_delay
    if safe_to_consolidate is not None:
        spec["safeToConsolidate"] = safe_to_consolidate
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
            "ownerReferences": [dict(owner)],
        },
        "spec": spec,
    }


# --- the status the scheduler writes ----------------------------------------------------------------------------


def unschedulable_condition_body(namespace: str, name: str, existing: Sequence[Mapping[str, Any]], node_pool: str,
                                 message: str, reasons: list[dict[str, Any]], now: str) -> dict[str, Any] | None:
    """The server-side apply body that makes the PodGroup's last schedulingCondition say it is unschedulable on
    `node_pool` for `message` and `reasons`: one condition per node pool, each new one with the next transitionID
    (KAI's). None when the last condition says so already: nothing to write. `existing`: the stored conditions."""
    last = existing[-1] if existing else {}
    if (last.get("type") == keys.CONDITION_UNSCHEDULABLE_ON_NODE_POOL and last.get("nodePool") == node_pool
            and last.get("message") == message and last.get("reasons") == reasons):
        return None
    transition = max([int(c.get("transitionID") or 0) for c in existing] + [0]) + 1
    others = [c for c in existing if c.get("nodePool") != node_pool]
    condition = {"type": keys.CONDITION_UNSCHEDULABLE_ON_NODE_POOL, "nodePool": node_pool,
                 "reason": keys.REASON_UNSCHEDULABLE, "message": message, "reasons": reasons,
                 "transitionID": str(transition), "lastTransitionTime": now, "status": "True"}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": namespace},
            "status": {"schedulingConditions": [*others, condition]}}


# --- the record ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopologyConstraintSpec:
    """Where a gang (or one subgroup) must or should land: a Topology's name and levels named by label or alias.

    Empty strings mean unset. `required`: every pod in one domain of that level, or none placed; `preferred`:
    the smallest domain of that level that fits, else a coarser one.
    """

    topology: str
    required: str = ""
    preferred: str = ""

    @property
    def active(self) -> bool:
        return bool(self.topology and (self.required or self.preferred))


@dataclass(frozen=True, slots=True)
class SubGroupSpec:
    name: str
    min_member: int  # a leaf's minimum of pods
    parent: str
    # A parent's minimum of direct children that meet their own minimum; None: all of them.
    min_sub_group: int | None = None
    topology: TopologyConstraintSpec | None = None


@dataclass(frozen=True, slots=True)
class PodGroupRecord:
    namespace: str
    name: str
    uid: str
    created: float
    queue: str
    min_member: int
    priority_class: str
    preemptibility: str
    subgroups: tuple[SubGroupSpec, ...]
    last_start: str | None
    stale_since: str | None
    scheduling_backoff: int
    mark_unschedulable: bool
    unschedulable_pools: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    # Autoscaler opt-in from the workload's annotations: class name and ProvisioningRequest parameters.
    provisioning_class: str = ""
    provisioning_parameters: tuple[tuple[str, str], ...] = ()
    # spec.minSubGroup: how many root SubGroups must meet their own minimum; None: all of them.
    min_sub_group: int | None = None
    # spec.preemptionDelay in seconds; None: unset or malformed (the pods' own value may apply).
    preemption_delay: float | None = None
    # kai.scheduler/last-eviction-timestamp in epoch seconds; 0.0: never.
    last_eviction: float = 0.0
    topology: TopologyConstraintSpec | None = None  # spec.topologyConstraint of the whole gang
    min_non_preemptible: int | None = None  # spec.minNonPreemptible (semi-preemptible: the core's size)
    safe_to_consolidate: bool = True  # spec.safeToConsolidate: false keeps consolidation from moving the job
    # metadata.ownerReferences[0] (the top owner, as the pod-grouper writes it): apiVersion, kind, name, uid.
    owner: tuple[str, str, str, str] | None = None
    suspend_on_preemption: str = ""  # kai.scheduler/suspend-on-preemption, lower-cased ("": the queue's)
    suspended: str | None = None  # kai.scheduler/suspended-by-scheduler (JSON), set while we keep it suspended
    # Asks for an optional scheduling feature (SubGroups, minSubGroup, a preemption delay, a topology constraint,
    # semi-preemptibility, safeToConsolidate: false): derived from the fields above, so a session tests one flag
    # per PodGroup and the features' plugins look only at the jobs (`Session.feature_jobs`) that set it.
    optional_features: bool = field(default=False, init=False, compare=False, repr=False)
    # "namespace/name": formatted once per record (which lives across cycles), not once per session's job.
    key: str = field(default="", init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")
        object.__setattr__(self, "optional_features", bool(
            self.subgroups or self.min_sub_group is not None or self.preemption_delay is not None
            or self.topology is not None or self.preemptibility == keys.SEMI_PREEMPTIBLE
            or not self.safe_to_consolidate))


def topology_constraint(raw: Any) -> TopologyConstraintSpec | None:
    """`topologyConstraint` {topology, requiredTopologyLevel, preferredTopologyLevel}; None when it sets nothing."""
    if not isinstance(raw, Mapping):
        return None
    spec = TopologyConstraintSpec(str(raw.get("topology") or "").strip(),
                                  str(raw.get("requiredTopologyLevel") or "").strip(),
                                  str(raw.get("preferredTopologyLevel") or "").strip())
    return spec if spec.topology or spec.required or spec.preferred else None


def podgroup_queue(obj: Mapping[str, Any]) -> str:
    """spec.queue as `podgroup_record` reads it, alone: the queue-controller attributes every PodGroup of a subtree
    to its queue on each reconcile and needs nothing else (the whole record would triple that cost)."""
    return str((obj.get("spec") or {}).get("queue") or "")


def podgroup_record(obj: Mapping[str, Any]) -> PodGroupRecord:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    subgroups = tuple(SubGroupSpec(str(s.get("name", "")), max(int(s.get("minMember") or 1), 1),
                                   str(s.get("parent") or ""), _count(s.get("minSubGroup")),
                                   topology_constraint(s.get("topologyConstraint")))
                      for s in spec.get("subGroups") or ())
    pools = tuple(str(c.get("nodePool", "")) for c in status.get("schedulingConditions") or ()
                  if c.get("type") == keys.CONDITION_UNSCHEDULABLE_ON_NODE_POOL)
    backoff = spec.get("schedulingBackoff")
    return PodGroupRecord(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or meta.get("name", "")), created=parse_time(meta.get("creationTimestamp")),
        queue=str(spec.get("queue") or ""), min_member=int(spec.get("minMember") or 1),
        priority_class=str(spec.get("priorityClassName") or ""), preemptibility=str(spec.get("preemptibility") or ""),
        subgroups=subgroups, last_start=annotations.get(keys.LAST_START_TIMESTAMP),
        stale_since=annotations.get(keys.STALE_PODGROUP_TIMESTAMP),
        scheduling_backoff=int(backoff) if backoff is not None else -1,
        mark_unschedulable=spec.get("markUnschedulable") is not False, unschedulable_pools=pools,
        labels=dict(meta.get("labels") or {}), provisioning_class=_provisioning_class(annotations),
        provisioning_parameters=_provisioning_parameters(annotations), min_sub_group=_count(spec.get("minSubGroup")),
        preemption_delay=_delay(spec.get("preemptionDelay")),
        last_eviction=parse_time(annotations.get(keys.LAST_EVICTION_TIMESTAMP)),
        topology=topology_constraint(spec.get("topologyConstraint")),
        min_non_preemptible=_count(spec.get("minNonPreemptible")),
        safe_to_consolidate=spec.get("safeToConsolidate") is not False, owner=_owner(meta),
        suspend_on_preemption=str(annotations.get(keys.SUSPEND_ON_PREEMPTION) or "").strip().lower(),
        suspended=annotations.get(keys.SUSPENDED_BY_SCHEDULER))


# --- the status the podgroup-controller writes ----------------------------------------------------------------
# status.resourcesStatus's lists, by their wire names: sums over the group's pods.
RESOURCES_STATUS_FIELDS = ("allocated", "allocatedNonPreemptible", "requested")
POD_COUNT_FIELDS = ("running", "pending")


@dataclass(frozen=True, slots=True)
class PodGroupStatusRecord:
    """A PodGroup's resourcesStatus lists (parsed quantities, by wire name) and its running/pending pod counts.

    Lenient: a list that does not parse reads as empty (and is kept in `malformed` with the names it holds, so the
    controller rewrites it); a count that is not a non-negative integer reads as unset.
    """

    resources: Mapping[str, Amounts] = field(default_factory=dict)  # RESOURCES_STATUS_FIELDS name -> stored list
    malformed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # field name -> its resource names
    running: int | None = None
    pending: int | None = None

    def listed(self, field_name: str) -> Amounts:
        """One of RESOURCES_STATUS_FIELDS ({} when absent or malformed)."""
        return self.resources.get(field_name) or {}

    def stored_names(self, field_name: str) -> tuple[str, ...] | None:
        """The resource names a stored list holds, valid or not; None when the list is not stored."""
        if field_name in self.resources:
            return tuple(self.resources[field_name])
        return self.malformed.get(field_name)

    def count(self, field_name: str) -> int | None:
        """One of POD_COUNT_FIELDS (None when unset)."""
        return self.running if field_name == "running" else self.pending if field_name == "pending" else None


def _amounts(raw: Any) -> Amounts | None:
    """A stored ResourceList parsed; None when it does not parse."""
    try:
        return parse_resource_list(raw if isinstance(raw, Mapping) else None)
    except QuantityError:
        return None


def podgroup_status_record(obj: Mapping[str, Any]) -> PodGroupStatusRecord:
    status = obj.get("status") or {}
    stored = status.get("resourcesStatus") or {}
    resources: dict[str, Amounts] = {}
    malformed: dict[str, tuple[str, ...]] = {}
    for f in RESOURCES_STATUS_FIELDS:
        if f in stored:
            raw = stored[f]
            parsed = _amounts(raw)
            if parsed is not None:
                resources[f] = parsed
            else:
                malformed[f] = tuple(str(n) for n in raw) if isinstance(raw, Mapping) else ()
    return PodGroupStatusRecord(resources, malformed, _count(status.get("running")), _count(status.get("pending")))


def _nonzero(values: Amounts) -> Amounts:
    return {name: q for name, q in values.items() if q != 0}


def resources_status_patch(stored: PodGroupStatusRecord,
                           computed: Mapping[str, Mapping[str, str]]) -> dict[str, Any] | None:
    """The JSON merge patch that makes the stored `status.resourcesStatus` say `computed` (wire form), or None when
    it says the same already (quantities by value: "1000m" against "1" is no write; a malformed list always is).

    Resources no longer reported are set to null (a merge patch keeps keys it does not name), and a list that became
    empty is removed. (Server-side apply cannot express the empty case: the API server turns an applied `{}` into
    null and the CRD rejects it, so the last pod's resources would never be released.)
    """
    if not stored.malformed and all(_nonzero(stored.listed(f)) == _nonzero(_amounts(computed.get(f)) or {})
                                    for f in RESOURCES_STATUS_FIELDS):
        return None
    patch: dict[str, dict[str, str | None] | None] = {}
    for f in RESOURCES_STATUS_FIELDS:
        values, names = computed.get(f), stored.stored_names(f)
        if values:
            patch[f] = {**dict(values), **{n: None for n in names or () if n not in values}}
        elif names is not None:
            patch[f] = None
    return {"status": {"resourcesStatus": patch}}


def counts_patch(stored: PodGroupStatusRecord, counts: Mapping[str, int]) -> dict[str, int]:
    """The pod counts that differ from the stored ones (an unset stored count differs from every value)."""
    return {name: value for name, value in counts.items() if stored.count(name) != value}
