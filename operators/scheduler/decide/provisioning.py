"""Gangs and the cluster autoscaler: which gang needs a ProvisioningRequest, as a pure function.

A gang whose workload (or queue) opted in with a provisioning class, that cannot be placed on today's nodes but is
not blocked by its queue's quota, gets one `ProvisioningRequest` (autoscaling.x-k8s.io/v1) for its pending pods,
with one PodTemplate per pod shape. While the request is not provisioned the gang is held: nothing is evicted on
its behalf (gang scheduling already forbids a partial bind), and it is not bound before `Provisioned=True`, when
it is placed with a preference for the nodes that arrived (`prefer_new_nodes`), once those nodes are Ready (for at
most `NODES_READY_GRACE` after `Provisioned`). `Failed`, `CapacityRevoked` or
`BookingExpired` puts the reason on the PodGroup and the request is replaced by a new attempt after an exponential
backoff. The request goes away once the gang runs or its PodGroup is gone.

Every state lives in the cluster (the attempt number and the failure time are on the request), so the plan is a
function of the snapshot, the requests and the clock; `provisioning_shell` does the I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from operators.core import keys
from operators.core.api.queue import QueueRecord
from operators.scheduler.decide.decisions import Decisions, Reason, Unschedulable
from operators.scheduler.decide.plugins.preemptiondelay.delay import effective_delay, verdict
from operators.scheduler.decide.plugins.subgroups.tree import build_tree
from operators.scheduler.decide.records import PodGroupRecord, PodRecord, parse_time
from operators.scheduler.decide.snapshot import Snapshot

API_GROUP = "autoscaling.x-k8s.io"
API_VERSION = "v1"
KIND = "ProvisioningRequest"
PLURAL = "provisioningrequests"
# On every request (and its PodTemplates) this scheduler creates.
MANAGED_LABEL = "kai.scheduler/provisioning"
PODGROUP_ANNOTATION = "kai.scheduler/podgroup"
ATTEMPT_ANNOTATION = "kai.scheduler/provisioning-attempt"
NODE_POOL_LABEL_VALUE_EMPTY = "default"

PROVISIONED = "Provisioned"
FAILED = "Failed"
CAPACITY_REVOKED = "CapacityRevoked"
BOOKING_EXPIRED = "BookingExpired"
# Reasons on the PodGroup's scheduling condition.
REASON_PENDING = "ProvisioningRequestPending"
REASON_PROVISIONED = "ProvisioningRequestProvisioned"
REASON_FAILED = "ProvisioningRequestFailed"
# Quota decides first: a gang its queue cannot take gets no capacity requested.
_QUOTA_REASONS = frozenset({keys.REASON_OVER_LIMIT, keys.REASON_NON_PREEMPTIBLE_OVER_QUOTA,
                            keys.REASON_QUEUE_DOES_NOT_EXIST})

# How long a provisioned gang waits for the nodes that arrived since its request to turn Ready.
NODES_READY_GRACE = 60.0
BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0
_MAX_NAME = 253


def backoff(attempt: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX) -> float:
    """Seconds to wait after attempt `attempt` (1-based) failed before the next one."""
    return float(min(base * 2 ** max(attempt - 1, 0), cap))


def request_name(pod_group: str, attempt: int) -> str:
    """Deterministic: the PodGroup's name and the attempt; long names keep a hash of the full name."""
    name = f"{pod_group}-provisioning-{attempt}"
    if len(name) <= _MAX_NAME - 4:  # room for "-<podset index>" of the PodTemplates
        return name
    digest = hashlib.sha256(pod_group.encode()).hexdigest()[:10]
    return f"{pod_group[:_MAX_NAME - 40].rstrip('-.')}-{digest}-provisioning-{attempt}"


def template_name(request: str, index: int) -> str:
    return f"{request}-{index}"


# --- the requests as read from the cluster --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    since: float


@dataclass(frozen=True, slots=True)
class ProvisioningRequestRecord:
    namespace: str
    name: str
    uid: str
    pod_group: str  # the PodGroup's name (same namespace)
    attempt: int
    class_name: str
    templates: tuple[str, ...]
    conditions: tuple[Condition, ...] = ()
    deleting: bool = False
    node_pool: str = ""
    created: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind and c.status == "True"), None)

    @property
    def provisioned(self) -> bool:
        return self.condition(PROVISIONED) is not None and self.failure is None

    @property
    def failure(self) -> Condition | None:
        """The terminal condition that makes the request useless, if any."""
        for kind in (FAILED, CAPACITY_REVOKED, BOOKING_EXPIRED):
            found = self.condition(kind)
            if found is not None:
                return found
        return None


def provisioning_request_record(obj: Mapping[str, Any]) -> ProvisioningRequestRecord | None:
    """Only the requests this scheduler made (they carry the managed label and the PodGroup annotation)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    pod_group = annotations.get(PODGROUP_ANNOTATION)
    if MANAGED_LABEL not in labels or not pod_group:
        return None
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    try:
        attempt = int(annotations.get(ATTEMPT_ANNOTATION) or 1)
    except ValueError:
        attempt = 1
    conditions = tuple(
        Condition(str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason") or ""),
                  str(c.get("message") or ""), parse_time(c.get("lastTransitionTime")))
        for c in status.get("conditions") or () if isinstance(c, Mapping))
    templates = tuple(str((p.get("podTemplateRef") or {}).get("name", "")) for p in spec.get("podSets") or ()
                      if isinstance(p, Mapping))
    pool = str(labels.get(MANAGED_LABEL) or "")
    return ProvisioningRequestRecord(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""), pod_group=str(pod_group), attempt=max(attempt, 1),
        class_name=str(spec.get("provisioningClassName") or ""), templates=templates, conditions=conditions,
        deleting=bool(meta.get("deletionTimestamp")),
        node_pool="" if pool == NODE_POOL_LABEL_VALUE_EMPTY else pool,
        created=parse_time(meta.get("creationTimestamp")))


# --- what to request --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodShape:
    """Requests of one pod, as Kubernetes quantities (sorted by resource name)."""

    requests: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict[str, str]:
        return dict(self.requests)


@dataclass(frozen=True, slots=True)
class PodSetRequest:
    shape: PodShape
    count: int


@dataclass(frozen=True, slots=True)
class NewRequest:
    """One ProvisioningRequest to create, with its PodTemplates (`template_name(name, i)` for pod set i)."""

    namespace: str
    name: str
    pod_group: str
    pod_group_uid: str
    attempt: int
    class_name: str
    parameters: tuple[tuple[str, str], ...]
    pod_sets: tuple[PodSetRequest, ...]
    node_pool: str = ""

    def templates(self) -> list[dict[str, Any]]:
        return [template_manifest(self, i) for i in range(len(self.pod_sets))]

    def manifest(self) -> dict[str, Any]:
        return request_manifest(self)

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "podGroup": self.pod_group,
                "attempt": self.attempt, "provisioningClassName": self.class_name,
                "parameters": dict(self.parameters),
                "podSets": [{"podTemplate": template_name(self.name, i), "count": p.count,
                             "requests": p.shape.to_dict()} for i, p in enumerate(self.pod_sets)]}


def _owner(r: NewRequest) -> list[dict[str, Any]]:
    return [{"apiVersion": f"{keys.GROUP}/{keys.PODGROUP_VERSION}", "kind": "PodGroup", "name": r.pod_group,
             "uid": r.pod_group_uid, "blockOwnerDeletion": False}]


def _metadata(r: NewRequest, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": r.namespace,
            "labels": {MANAGED_LABEL: r.node_pool or NODE_POOL_LABEL_VALUE_EMPTY},
            "annotations": {PODGROUP_ANNOTATION: r.pod_group, ATTEMPT_ANNOTATION: str(r.attempt)},
            "ownerReferences": _owner(r)}


def template_manifest(r: NewRequest, index: int) -> dict[str, Any]:
    requests = r.pod_sets[index].shape.to_dict()
    limits = {k: v for k, v in requests.items() if k == keys.GPU_RESOURCE}  # extended resources need limits
    container: dict[str, Any] = {"name": "workload", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": requests, **({"limits": limits} if limits else {})}}
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": _metadata(r, template_name(r.name, index)),
            "template": {"metadata": {"labels": {MANAGED_LABEL: "template"}},
                         "spec": {"containers": [container]}}}


def request_manifest(r: NewRequest) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "provisioningClassName": r.class_name,
        "podSets": [{"podTemplateRef": {"name": template_name(r.name, i)}, "count": p.count}
                    for i, p in enumerate(r.pod_sets)]}
    if r.parameters:
        spec["parameters"] = dict(r.parameters)
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "metadata": _metadata(r, r.name),
            "spec": spec}


def _quantity_cpu(millicores: float) -> str:
    return f"{round(millicores)}m"


def pod_shape(pod: PodRecord) -> PodShape:
    """What one pod needs from a new node; a GPU share counts as whole devices (a node has no half GPU)."""
    out: dict[str, str] = {}
    if pod.cpu > 0:
        out["cpu"] = _quantity_cpu(pod.cpu)
    if pod.memory > 0:
        out["memory"] = str(round(pod.memory))
    gpus = pod.gpu.num_devices if pod.gpu.is_shared else pod.gpu.whole
    if gpus > 0:
        out[keys.GPU_RESOURCE] = str(gpus)
    for name, value in pod.scalars:
        if name != keys.GPU_RESOURCE and value > 0:
            out[name] = str(round(value)) if float(value).is_integer() else str(value)
    return PodShape(tuple(sorted(out.items())))


def pod_sets(pods: Iterable[PodRecord]) -> tuple[PodSetRequest, ...]:
    """Pods grouped by shape, in first-seen order of the pods sorted by name."""
    counts: dict[PodShape, int] = {}
    for pod in sorted(pods, key=lambda p: p.name):
        shape = pod_shape(pod)
        counts[shape] = counts.get(shape, 0) + 1
    return tuple(PodSetRequest(s, n) for s, n in counts.items())


# --- the plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    class_name: str
    parameters: tuple[tuple[str, str], ...]


def settings_for(group: PodGroupRecord, queue: QueueRecord | None) -> Settings | None:
    """The workload's own class wins over its queue's; parameters merge (the workload's win)."""
    class_name = group.provisioning_class or (queue.provisioning_class if queue else "")
    if not class_name:
        return None
    parameters = dict(queue.provisioning_parameters if queue else ())
    parameters.update(group.provisioning_parameters)
    return Settings(class_name, tuple(sorted(parameters.items())))


@dataclass(frozen=True, slots=True)
class Hold:
    """A gang waiting on its request: no evictions on its behalf; `reason` goes on its PodGroup."""

    namespace: str
    pod_group: str
    reason: Reason
    pending_pods: tuple[str, ...]
    # Its preemption delay has passed: evictions on its behalf go ahead while the request is pending.
    may_evict: bool = False


@dataclass(slots=True)
class ProvisioningPlan:
    create: list[NewRequest] = field(default_factory=list)
    delete: list[ProvisioningRequestRecord] = field(default_factory=list)
    holds: dict[str, Hold] = field(default_factory=dict)  # PodGroup key -> hold
    explained: dict[str, Reason] = field(default_factory=dict)  # PodGroup key -> reason (held or not)
    hold_binds: set[str] = field(default_factory=set)  # PodGroup keys whose binds wait for Provisioned

    def to_dict(self) -> list[dict[str, Any]]:
        """What `kai simulate` prints: the requests this cycle would create."""
        return [r.to_dict() for r in self.create]


def _is_active(pod: PodRecord, binding: frozenset[str]) -> bool:
    return not pod.deleting and (bool(pod.node_name) or pod.key in binding) and pod.phase not in (
        "Succeeded", "Failed")


def _is_pending(pod: PodRecord, binding: frozenset[str]) -> bool:
    return (not pod.deleting and not pod.node_name and pod.key not in binding and not pod.gated
            and pod.phase == "Pending")


def plan(snapshot: Snapshot, decisions: Decisions, requests: Sequence[ProvisioningRequestRecord], now: float,
         *, backoff_base: float = BACKOFF_BASE, backoff_max: float = BACKOFF_MAX) -> ProvisioningPlan:
    """What to create and delete this cycle, and which gangs to hold.

    `decisions` are this cycle's (a gang bound in it runs; one explained as unschedulable or with evictions on
    its behalf needs capacity); `requests` are this scheduler's existing ProvisioningRequests (of its node pool).
    """
    out = ProvisioningPlan()
    if not requests and not any(q.provisioning_class for q in snapshot.queues) and not any(
            g.provisioning_class for g in snapshot.podgroups):
        return out  # nobody opted in: no per-pod work in the cycle
    queues = {q.name: q for q in snapshot.queues}
    groups = {g.key: g for g in snapshot.podgroups}
    by_group: dict[str, list[ProvisioningRequestRecord]] = {}
    for r in requests:
        if r.node_pool == snapshot.node_pool:
            by_group.setdefault(f"{r.namespace}/{r.pod_group}", []).append(r)
    # A request whose PodGroup is gone: the gang was deleted.
    for key, reqs in by_group.items():
        if key not in groups:
            out.delete += [r for r in reqs if not r.deleting]
    binding = frozenset(f"{b.namespace}/{b.pod_name}" for b in snapshot.bindrequests if not b.failed)
    pods: dict[str, list[PodRecord]] = {}
    for pod in snapshot.pods:
        if pod.pod_group:
            pods.setdefault(f"{pod.namespace}/{pod.pod_group}", []).append(pod)
    bound_now: dict[str, int] = {}
    for b in decisions.binds:
        k = f"{b.namespace}/{b.pod_group}"
        bound_now[k] = bound_now.get(k, 0) + 1
    unschedulable = {f"{u.namespace}/{u.pod_group}": u for u in decisions.unschedulable}
    wanted = {e.for_pod_group for e in decisions.evictions}  # would fit only by evicting others

    for key, group in groups.items():
        existing = [r for r in by_group.get(key, []) if not r.deleting]
        settings = settings_for(group, queues.get(group.queue))
        members = pods.get(key, [])
        active = sum(1 for p in members if _is_active(p, binding))
        pending = [p for p in members if _is_pending(p, binding)]
        minimum = _minimum(group)
        if settings is None or active >= minimum or not pending:
            # Opted out, running (the nodes served their purpose), or nothing left to place.
            if existing and (settings is None or active >= minimum):
                out.delete += existing
            continue
        latest = max(existing, key=lambda r: r.attempt, default=None)
        if key in bound_now:
            held: Reason | None = None
            if latest is not None and not latest.provisioned and latest.failure is None:
                # The nodes are arriving but the request has not reported Provisioned: the gang waits for it,
                # then goes onto the new nodes (placed now, part of it would land on whatever was free).
                held = Reason(REASON_PENDING, f"waiting for ProvisioningRequest {latest.name} "
                                              f"({latest.class_name}) to be provisioned")
            elif latest is not None and latest.provisioned and (coming := _nodes_coming(snapshot, latest, now)):
                # Provisioned, but some nodes that arrived since the request are not Ready yet (the request and
                # the nodes come on different watches): placed now, the pods those nodes were added for would
                # land on whatever else was free and leave the new nodes idle. Bounded, as those nodes may be
                # another workload's.
                held = Reason(REASON_PROVISIONED, f"ProvisioningRequest {latest.name} is provisioned; waiting "
                                                  f"for {coming} of the nodes added since to be Ready")
            if held is not None:
                out.explained[key] = held
                out.holds[key] = Hold(group.namespace, group.name, held, tuple(sorted(p.name for p in pending)))
                out.hold_binds.add(key)
            continue  # placed this cycle: the next cycle sees it running and deletes the request
        u = unschedulable.get(key)
        if u is None and key not in wanted:
            continue  # not tried this cycle (backoff, not ready): leave the request alone
        if u is not None and any(r.reason in _QUOTA_REASONS for r in u.reasons):
            continue  # the queue cannot take it: no capacity is requested for it
        out.delete += [r for r in existing if r is not latest]
        names = tuple(sorted(p.name for p in pending))
        if latest is None:
            new = _new_request(group, settings, pending, 1, snapshot.node_pool)
            out.create.append(new)
            reason = Reason(REASON_PENDING, f"requesting capacity for {len(pending)} pods from the cluster "
                                            f"autoscaler with ProvisioningRequest {new.name} "
                                            f"({settings.class_name})")
        elif latest.provisioned:
            reason = Reason(REASON_PROVISIONED, f"ProvisioningRequest {latest.name} is provisioned; "
                                                "the gang does not fit the nodes yet")
            out.explained[key] = reason
            continue  # provisioned: the gang is scheduled as any other (evictions allowed again)
        elif (failure := latest.failure) is not None:
            retry_at = failure.since + backoff(latest.attempt, backoff_base, backoff_max)
            detail = f"ProvisioningRequest {latest.name} {failure.type}: {failure.reason}"
            if failure.message:
                detail += f": {failure.message}"
            if now >= retry_at:
                new = _new_request(group, settings, pending, latest.attempt + 1, snapshot.node_pool)
                out.delete.append(latest)
                out.create.append(new)
                reason = Reason(REASON_FAILED, f"{detail}; retrying with {new.name}")
            else:
                reason = Reason(REASON_FAILED, f"{detail}; retrying in {retry_at - now:.0f}s")
        else:
            reason = Reason(REASON_PENDING, f"waiting for ProvisioningRequest {latest.name} "
                                            f"({latest.class_name}) to be provisioned")
        may_evict = _delay_passed(group, members, now)
        if may_evict:
            reason = Reason(reason.reason, f"{reason.message}; its preemption delay has passed, so it may evict "
                                           "other workloads meanwhile")
        out.explained[key] = reason
        out.holds[key] = Hold(group.namespace, group.name, reason, names, may_evict)
    return out


def _nodes_coming(snapshot: Snapshot, request: ProvisioningRequestRecord, now: float) -> int:
    """Nodes created since `request` that are not Ready yet, while its Provisioned condition is younger than
    NODES_READY_GRACE (cordoned nodes are not coming)."""
    provisioned = request.condition(PROVISIONED)
    if provisioned is None or now - provisioned.since >= NODES_READY_GRACE:
        return 0
    return sum(1 for n in snapshot.nodes if n.created >= request.created and not n.ready and not n.unschedulable)


def _minimum(group: PodGroupRecord) -> int:
    """Pods the gang needs to run: minMember, or for a minSubGroup tree the fewest that satisfy it."""
    if group.min_sub_group is None and not any(s.min_sub_group is not None for s in group.subgroups):
        return group.min_member
    return build_tree(group.subgroups, group.min_member, group.min_sub_group).minimum_pods()


def _delay_passed(group: PodGroupRecord, members: Sequence[PodRecord], now: float) -> bool:
    """The gang has a preemption delay and has waited it out (since creation or its last eviction stamp)."""
    delay = effective_delay(group.preemption_delay, (p.preemption_delay for p in members))
    return delay > 0 and verdict(delay, group.created, group.last_eviction, now).may_disrupt


def _new_request(group: PodGroupRecord, settings: Settings, pending: Sequence[PodRecord], attempt: int,
                 node_pool: str) -> NewRequest:
    return NewRequest(namespace=group.namespace, name=request_name(group.name, attempt), pod_group=group.name,
                      pod_group_uid=group.uid, attempt=attempt, class_name=settings.class_name,
                      parameters=settings.parameters, pod_sets=pod_sets(pending), node_pool=node_pool)


def apply(decisions: Decisions, p: ProvisioningPlan, node_pool: str) -> Decisions:
    """The cycle's decisions with held gangs held: no evictions or pipelining for them (nor binds while their
    request has not reported Provisioned), the reason explained.

    Only evictions made on a held gang's behalf go; victims of other gangs' evictions are not touched.
    """
    if not p.holds and not p.explained:
        return decisions
    held = {key: hold for key, hold in p.holds.items() if not hold.may_evict}
    binds = [b for b in decisions.binds if f"{b.namespace}/{b.pod_group}" not in p.hold_binds]
    evictions = [e for e in decisions.evictions if e.for_pod_group not in held]
    # The eviction stamp stays only on PodGroups that still take part in an eviction.
    evicting = {e.for_pod_group for e in evictions} | {f"{e.namespace}/{e.pod_group}" for e in evictions}
    annotations = [a for a in decisions.annotations if f"{a.namespace}/{a.pod_group}" not in p.hold_binds
                   and (a.key != keys.LAST_EVICTION_TIMESTAMP or f"{a.namespace}/{a.pod_group}" in evicting)]
    pipelined = [x for x in decisions.pipelined if f"{x.namespace}/{x.pod_group}" not in held]
    unschedulable: list[Unschedulable] = []
    seen: set[str] = set()
    for u in decisions.unschedulable:
        key = f"{u.namespace}/{u.pod_group}"
        reason = p.explained.get(key)
        if reason is not None:
            seen.add(key)
            u = replace(u, reasons=(*u.reasons, reason), message=f"{u.message} {reason.message}.")
        unschedulable.append(u)
    for key, hold in p.holds.items():
        if key in seen:
            continue  # explained above
        message = f"{hold.reason.message}."
        unschedulable.append(Unschedulable(
            namespace=hold.namespace, pod_group=hold.pod_group, node_pool=node_pool or "default",
            message=message, reasons=(hold.reason,), pod_messages={pod: message for pod in hold.pending_pods},
            has_allocated_pods=False))
    return replace(decisions, binds=binds, annotations=annotations, evictions=evictions, pipelined=pipelined,
                   unschedulable=unschedulable)


@dataclass(slots=True)
class _Room:
    """What is left on a freshly provisioned node while pending pods are nominated to it."""

    cpu: int
    memory: int
    gpus: int  # whole devices
    pods: int  # pod slots

    def fits(self, pod: PodRecord) -> bool:
        return self.cpu >= pod.cpu and self.memory >= pod.memory and self.gpus >= pod.gpu.whole and self.pods >= 1

    def take(self, pod: PodRecord) -> None:
        self.cpu -= pod.cpu
        self.memory -= pod.memory
        self.gpus -= pod.gpu.whole
        self.pods -= 1


def prefer_new_nodes(snapshot: Snapshot, requests: Sequence[ProvisioningRequestRecord]) -> Snapshot:
    """The snapshot with each pending pod of a gang with a provisioned request nominated to a node that arrived.

    The autoscaler does not say which nodes it added for a request: nodes created after the request are taken
    as its nodes. Each pending whole-GPU or CPU pod (largest first) is nominated to the first such node with room
    left, counting what runs there and what was nominated before; placement tries a nominated node first and
    falls back to every other node, so the gang still runs if the new nodes were taken meanwhile.
    """
    provisioned = {f"{r.namespace}/{r.pod_group}": r for r in requests
                   if r.provisioned and not r.deleting and r.node_pool == snapshot.node_pool}
    if not provisioned:
        return snapshot
    oldest = min(r.created for r in provisioned.values())
    fresh = [n for n in snapshot.nodes if n.created >= oldest and n.ready and not n.unschedulable]
    if not fresh:
        return snapshot
    free = {n.name: _Room(n.cpu, n.memory, n.gpus, n.max_pods) for n in fresh}
    binding = {f"{b.namespace}/{b.pod_name}": b.selected_node for b in snapshot.bindrequests if not b.failed}
    pending: dict[str, list[PodRecord]] = {}
    for pod in snapshot.pods:
        node = pod.node_name or binding.get(pod.key, "")
        if node in free and not pod.deleting and pod.phase not in ("Succeeded", "Failed"):
            free[node].take(pod)
        elif not node and f"{pod.namespace}/{pod.pod_group}" in provisioned and _is_pending(pod, frozenset()):
            pending.setdefault(f"{pod.namespace}/{pod.pod_group}", []).append(pod)
    nominated: dict[str, PodRecord] = {}
    for key in sorted(pending):
        request = provisioned[key]
        nodes = [n.name for n in sorted(fresh, key=lambda n: n.name) if n.created >= request.created]
        for pod in sorted(pending[key], key=lambda p: (-p.gpu.whole, -p.cpu, -p.memory, p.name)):
            if pod.gpu.is_shared or pod.nominated_node:
                continue
            for name in nodes:
                room = free[name]
                if room.fits(pod):
                    room.take(pod)
                    nominated[pod.key] = replace(pod, nominated_node=name)
                    break
    if not nominated:
        return snapshot
    return replace(snapshot, pods=tuple(nominated.get(p.key, p) for p in snapshot.pods))
