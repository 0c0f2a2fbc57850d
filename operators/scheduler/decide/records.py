"""Slim frozen records parsed once per watch event from Kubernetes objects (plain camelCase dicts).

The live loop keeps one record per object and rebuilds the snapshot from them every cycle, so everything that
is costly (quantity parsing, affinity parsing, the placement signature) is done here, once.
Units used throughout the scheduler core are integers (`units`): cpu in millicores, memory in bytes, other
resources in whole units, a node's GPUs in devices, GPU requests and queue GPU amounts in micro-GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from sys import intern as _intern
from typing import Any

from operators.core import keys

# One record per CRD: the scheduler reads core's BindRequest record, as the binder does.
from operators.core.api.bindrequest import BindRequestRecord as BindRequestRecord
from operators.core.api.fields import delay as _delay
from operators.core.api.fields import meta as _meta
from operators.core.api.fields import parse_time as parse_time

# The PodGroup record lives with its wire model; the scheduler's modules find it here with the other records.
from operators.core.api.podgroup import PodGroupRecord as PodGroupRecord
from operators.core.api.podgroup import SubGroupSpec as SubGroupSpec
from operators.core.api.podgroup import TopologyConstraintSpec as TopologyConstraintSpec
from operators.core.api.podgroup import podgroup_record as podgroup_record
from operators.core.api.podgroup import topology_constraint as topology_constraint
from operators.core.api.queue import UNLIMITED as UNLIMITED  # re-exported: -1, a Queue's "no bound"
from operators.core.api.queue import QueueRecord as QueueRecord
from operators.core.api.queue import queue_record as queue_record
from operators.core.api.topology import TopologyRecord as TopologyRecord
from operators.core.api.topology import topology_record as topology_record
from operators.core.dra import extended_requests
from operators.core.resources import (
    GpuRequest,
    GpuRequestError,
    QuantityError,
    gpu_request,
    node_gpu_memory_mib,
    parse_quantity,
    pod_container_requests,
    resize_pending,
)
from operators.scheduler.decide.devices import pod_claims
from operators.scheduler.decide.units import MILLI, ceil_scaled

DEFAULT_MAX_PODS = 110
# Resources with a dedicated field; everything else requested is a "scalar" checked generically.
_BASE_RESOURCES = frozenset({"cpu", "memory", "pods", keys.GPU_RESOURCE})
_GPU_GROUP_PREFIX = keys.GPU_GROUP_LABEL + "/"
_ZERO = Decimal(0)


def _q(value: Any, scale: int = 1) -> int:
    """A quantity in core units (`scale` per unit), rounded up; 0 when malformed."""
    if type(value) is str:
        return _q_text(value, scale)
    try:
        return ceil_scaled(parse_quantity(value), scale)
    except (QuantityError, TypeError, ArithmeticError):
        return 0


@lru_cache(maxsize=4096)
def _q_text(value: str, scale: int) -> int:
    # Memoised: nodes of one kind report the same allocatable quantities.
    try:
        return ceil_scaled(parse_quantity(value), scale)
    except (QuantityError, TypeError, ArithmeticError):
        return 0


# --- label selectors and node affinity ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions entry; also used for matchLabels (operator In with one value)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            if self.key not in labels or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # only metadata.name is defined by Kubernetes

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term selects nothing (Kubernetes semantics)
        if not all(r.matches(labels) for r in self.expressions):
            return False
        return all(r.key == "metadata.name" and r.matches({"metadata.name": name}) for r in self.fields)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    selector: LabelSelector
    namespaces: tuple[str, ...]  # empty = the pod's own namespace (resolved at parse time)
    topology_key: str


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    """A preferredDuringScheduling pod (anti-)affinity term: scores nodes, never filters them."""

    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


def _requirements(raw: Any) -> tuple[Requirement, ...]:
    out = []
    for item in raw or ():
        out.append(Requirement(str(item.get("key", "")), str(item.get("operator", "In")),
                               tuple(str(v) for v in item.get("values") or ())))
    return tuple(out)


def parse_label_selector(raw: Mapping[str, Any] | None) -> LabelSelector:
    raw = raw or {}
    reqs = [Requirement(k, "In", (str(v),)) for k, v in sorted((raw.get("matchLabels") or {}).items())]
    reqs.extend(_requirements(raw.get("matchExpressions")))
    return LabelSelector(tuple(reqs))


def _pod_affinity_terms(raw: Any, namespace: str) -> tuple[PodAffinityTerm, ...]:
    out = []
    for term in raw or ():
        namespaces = tuple(sorted(term.get("namespaces") or ())) or (namespace,)
        out.append(PodAffinityTerm(parse_label_selector(term.get("labelSelector")), namespaces,
                                   str(term.get("topologyKey", ""))))
    return tuple(out)


def _weighted_pod_affinity_terms(raw: Any, namespace: str) -> tuple[WeightedPodAffinityTerm, ...]:
    out = []
    for item in raw or ():
        if not isinstance(item, Mapping):
            continue
        try:
            weight = int(item.get("weight") or 0)
        except (TypeError, ValueError):
            weight = 0
        if weight == 0:
            continue  # a zero weight adds nothing to any node's score
        for term in _pod_affinity_terms([item.get("podAffinityTerm") or {}], namespace):
            out.append(WeightedPodAffinityTerm(weight, term))
    return tuple(out)


# --- placement constraints -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Constraints:
    """What makes placement differ between pods apart from resources; hashable, used as the signature.

    Pods with equal constraints (and equal requests) share feasible-node sets and failure results in a cycle.
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None  # None = no required node affinity
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[tuple[str, int, str], ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    configmaps: tuple[str, ...] = ()  # required ConfigMaps (namespace-qualified "ns/name")
    # preferredDuringScheduling terms: part of equality and hash like every field, so cached masks stay exact.
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    _hard: Constraints | None = field(default=None, compare=False, hash=False, repr=False)
    _hash: int | None = field(default=None, init=False, compare=False, hash=False, repr=False)

    def __hash__(self) -> int:
        # Hashed for every fit signature lookup; the nested term tuples are hashed once, on first use.
        h = self._hash
        if h is None:
            h = hash((self.node_selector, self.node_affinity, self.tolerations, self.host_ports, self.pod_affinity,
                      self.pod_anti_affinity, self.configmaps, self.preferred_pod_affinity,
                      self.preferred_pod_anti_affinity))
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self) -> tuple[type[Constraints], tuple[object, ...]]:
        # Rebuilt through __init__ in a copy or an unpickling process, whose string hashes differ.
        return Constraints, (self.node_selector, self.node_affinity, self.tolerations, self.host_ports,
                             self.pod_affinity, self.pod_anti_affinity, self.configmaps,
                             self.preferred_pod_affinity, self.preferred_pod_anti_affinity)

    @property
    def has_static(self) -> bool:
        return bool(self.node_selector or self.node_affinity is not None or self.configmaps)

    @property
    def has_dynamic(self) -> bool:
        return bool(self.host_ports or self.pod_affinity or self.pod_anti_affinity)

    @property
    def has_preferred(self) -> bool:
        return bool(self.preferred_pod_affinity or self.preferred_pod_anti_affinity)

    @property
    def hard(self) -> Constraints:
        """These constraints without the preferred terms, which never filter a node: the key of what depends
        only on feasibility (node masks, fit failures, fit summaries), so pods differing only in preferences
        share it."""
        if not (self.preferred_pod_affinity or self.preferred_pod_anti_affinity):
            return self
        hard = self._hard
        if hard is None:
            hard = replace(self, preferred_pod_affinity=(), preferred_pod_anti_affinity=(), _hard=None)
            object.__setattr__(self, "_hard", hard)
        return hard


NO_CONSTRAINTS = Constraints()


# --- records -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool
    cpu: int  # millicores
    memory: int  # bytes
    gpus: int
    max_pods: int
    scalars: tuple[tuple[str, int], ...]
    gpu_memory_mib: int | None
    gpu_count_label: int | None
    created: float = 0.0  # epoch seconds (autoscaler provisioning prefers nodes newer than a gang's request)


@dataclass(frozen=True, slots=True)
class PodRecord:
    namespace: str
    name: str
    uid: str
    created: float
    phase: str
    node_name: str
    deleting: bool
    gated: bool
    scheduler_name: str
    pod_group: str
    subgroup: str
    labels: Mapping[str, str]
    cpu: int  # millicores
    memory: int  # bytes
    gpu: GpuRequest
    scalars: tuple[tuple[str, int], ...]
    gpu_groups: tuple[str, ...]
    constraints: Constraints
    task_priority: int | None
    is_leader: bool
    nominated_node: str
    is_reservation: bool
    gpu_error: str = ""
    owner_kinds: tuple[str, ...] = ()
    # kai.scheduler/preemption-delay of the pod (label, else annotation) in seconds; None: unset or malformed.
    preemption_delay: float | None = None
    # A Deferred in-place resize: (millicores, bytes) the node holds for the pod today; cpu / memory above are what
    # it holds once the resize is enacted (the larger of the two, as Kubernetes accounts it).
    resize_from: tuple[int, int] | None = None
    # spec.preemptionPolicy is Never (admission copies it from the PriorityClass): this pod never evicts anyone.
    preempt_never: bool = False
    # DRA: (pod claim name, ResourceClaim name; "" while a template's claim is not created yet) per spec.resourceClaims.
    claims: tuple[tuple[str, str], ...] = ()
    # KEP-5004: (container, resource, device request name, count) of its extended resources (core.dra), and the
    # special ResourceClaim made for those backed by DRA (status.extendedResourceClaimStatus; "" until made).
    extended: tuple[tuple[str, str, str, int], ...] = ()
    extended_claim: str = ""
    # What placement depends on of the claims (set with the snapshot's claims): pods whose claims ask the same of
    # unallocated devices share fit results; an allocated or shared claim is itself part of it. () : the pod key.
    claim_fit: tuple[object, ...] = ()
    quota_gated: bool = False  # its only scheduling gate is keys.QUOTA_GATE (waits for quota, counts as demand)
    # What placement depends on (feasibility constraints and requests): pods with equal keys fit the same
    # nodes and fail for the same reasons. Derived once per record, which lives across cycles.
    fit_key: tuple[object, ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fit_key", (self.constraints.hard, self.cpu, self.memory, self.gpu, self.scalars,
                                             self.nominated_node,
                                             *((self.claim_fit or (self.key,)) if self.claims else ())))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PriorityClassRecord:
    name: str
    value: int
    global_default: bool
    preempt_never: bool = False  # preemptionPolicy: Never


@dataclass(frozen=True, slots=True)
class PdbRecord:
    """A PodDisruptionBudget (policy/v1): which pods of its namespace it covers and how many may go now."""

    namespace: str
    name: str
    selector: LabelSelector | None  # None: a null selector, which covers no pod
    disruptions_allowed: int  # status.disruptionsAllowed (0 until the disruption controller computed it)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: PodRecord) -> bool:
        return self.selector is not None and pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class RefusedEviction:
    """An eviction the API server refused (429: a PodDisruptionBudget, or an admission policy), remembered by
    the live loop for a while: that pod is no victim meanwhile, and the job it was for is told why it waits."""

    pod: str  # "namespace/name"
    for_pod_group: str  # "namespace/name" of the job the eviction was for
    message: str  # the API server's reason


@dataclass(frozen=True, slots=True)
class ConfigMapRecord:
    namespace: str
    name: str


# --- parsers -------------------------------------------------------------------------------------


def node_record(obj: Mapping[str, Any]) -> NodeRecord:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    labels = _labels(meta.get("labels"))
    alloc = status.get("allocatable") or status.get("capacity") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    taints = tuple(Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
                   for t in spec.get("taints") or ())
    scalars = tuple(sorted((k, _q(v)) for k, v in alloc.items() if k not in _BASE_RESOURCES))
    raw_count = labels.get(keys.NODE_GPU_COUNT)
    try:
        gpu_count = int(raw_count) if raw_count is not None else None
    except ValueError:
        gpu_count = None
    max_pods = _q(alloc["pods"]) if "pods" in alloc else DEFAULT_MAX_PODS
    return NodeRecord(
        name=str(meta.get("name", "")), labels=labels, taints=taints,
        unschedulable=bool(spec.get("unschedulable")), ready=ready,
        cpu=_q(alloc.get("cpu", 0), MILLI), memory=_q(alloc.get("memory", 0)),
        gpus=_whole(alloc.get(keys.GPU_RESOURCE, 0)), max_pods=max_pods, scalars=scalars,
        gpu_memory_mib=node_gpu_memory_mib(labels), gpu_count_label=gpu_count,
        created=parse_time(meta.get("creationTimestamp")))


def _required_configmaps(spec: Mapping[str, Any], namespace: str, shared_prefix: str) -> tuple[str, ...]:
    names: set[str] = set()
    for vol in spec.get("volumes") or ():
        cm = vol.get("configMap")
        if cm and not cm.get("optional"):
            names.add(str(cm.get("name", "")))
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        for src in container.get("envFrom") or ():
            ref = src.get("configMapRef")
            if ref and not ref.get("optional"):
                names.add(str(ref.get("name", "")))
        for env in container.get("env") or ():
            source = env.get("valueFrom")
            ref = source.get("configMapKeyRef") if source else None
            if ref and not ref.get("optional"):
                names.add(str(ref.get("name", "")))
    if not names:
        return ()
    # The GPU-sharing ConfigMaps are created by the binder after scheduling, so they cannot be required.
    if shared_prefix:
        names = {n for n in names if not n.startswith(shared_prefix)}
    return tuple(sorted(f"{namespace}/{n}" for n in names if n))


@dataclass(frozen=True, slots=True)
class _Requests:
    """What a pod asks (shared between pods of one shape): its effective requests (read only), cpu and memory in
    units, the other resources it asks, and while an in-place resize is Deferred what the node holds today."""

    requests: Mapping[str, Decimal]
    cpu: int
    memory: int
    scalars: tuple[tuple[str, int], ...]
    resize_from: tuple[int, int] | None


# Pods made from one template share their tolerations, requests and constraints: each distinct shape is parsed
# once and its frozen result shared (less CPU per pod at list time, one object instead of one per pod). Keys are
# the raw JSON values; a key holding anything but strings is never stored (True == 1 would alias two inputs).
_MEMO_MAX = 4096
_TOLERATIONS: dict[tuple[tuple[Any, ...], ...], tuple[Toleration, ...]] = {}
_CONSTRAINTS: dict[tuple[object, ...], Constraints] = {}
_REQUESTS: dict[tuple[object, ...], _Requests] = {}


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= _MEMO_MAX:
        memo.clear()  # bounded: shapes come and go with workloads
    memo[key] = value


def _strings(values: Any) -> bool:
    """Whether a memo key holds only strings (and None) down to its leaves."""
    if isinstance(values, tuple):
        return all(_strings(v) for v in values)
    return values is None or isinstance(values, str)


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    if not raw:
        return ()
    try:
        key: tuple[tuple[Any, ...], ...] | None = tuple(
            (t.get("key"), t.get("operator"), t.get("value"), t.get("effect")) for t in raw)
        found = _TOLERATIONS.get(key)  # type: ignore[arg-type]
    except (AttributeError, TypeError):
        key, found = None, None
    if found is not None:
        return found
    tolerations = tuple(sorted(
        (Toleration(str(t.get("key", "") or ""), str(t.get("operator", "Equal") or "Equal"),
                    str(t.get("value", "") or ""), str(t.get("effect", "") or ""))
         for t in raw), key=lambda t: (t.key, t.operator, t.value, t.effect)))
    if key is not None and _strings(key):
        _remember(_TOLERATIONS, key, tolerations)
    return tolerations


def _constraints(spec: Mapping[str, Any], namespace: str, annotations: Mapping[str, str]) -> Constraints:
    affinity = spec.get("affinity") or {}
    terms: tuple[NodeSelectorTerm, ...] | None = None
    pod_aff: Mapping[str, Any] = {}
    pod_anti: Mapping[str, Any] = {}
    pa = paa = None
    if affinity:
        node_aff = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if node_aff is not None:
            terms = tuple(NodeSelectorTerm(_requirements(t.get("matchExpressions")),
                                           _requirements(t.get("matchFields")))
                          for t in node_aff.get("nodeSelectorTerms") or ())
        pod_aff, pod_anti = affinity.get("podAffinity") or {}, affinity.get("podAntiAffinity") or {}
        pa = pod_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        paa = pod_anti.get("requiredDuringSchedulingIgnoredDuringExecution")
    tolerations = _tolerations(spec.get("tolerations"))
    ports = sorted({(str(p.get("protocol", "TCP")), int(p["hostPort"]), str(p.get("hostIP", "") or "0.0.0.0"))
                    for c in spec.get("containers") or () for p in c.get("ports") or () if p.get("hostPort")})
    node_selector = spec.get("nodeSelector")
    selector = tuple(sorted((str(k), str(v)) for k, v in node_selector.items())) if node_selector else ()
    shared_prefix = annotations.get(keys.SHARED_GPU_CONFIGMAP, "")
    key = (selector, terms, tolerations, tuple(ports), _pod_affinity_terms(pa, namespace),
           _pod_affinity_terms(paa, namespace), _required_configmaps(spec, namespace, shared_prefix),
           _weighted_pod_affinity_terms(pod_aff.get("preferredDuringSchedulingIgnoredDuringExecution"), namespace),
           _weighted_pod_affinity_terms(pod_anti.get("preferredDuringSchedulingIgnoredDuringExecution"), namespace))
    found = _CONSTRAINTS.get(key)
    if found is None:
        c = Constraints(*key)
        found = NO_CONSTRAINTS if c == NO_CONSTRAINTS else c
        _remember(_CONSTRAINTS, key, found)
    return found


def _items(raw: Any) -> tuple[Any, ...]:
    return tuple(raw.items()) if raw else ()


def _requests_key(spec: Mapping[str, Any], status: Mapping[str, Any], resize: str) -> tuple[object, ...]:
    """Everything `pod_container_requests` reads of a pod (resource names, quantities, container names, sidecar
    policies, what the kubelet reports it gave each container) and the pending resize's reason."""
    def resources(c: Mapping[str, Any]) -> tuple[object, ...]:
        res = c.get("resources") or {}
        return (c.get("name"), c.get("restartPolicy"), _items(res.get("requests")), _items(res.get("limits")))

    given = tuple((kind, cs.get("name"), _items((cs.get("resources") or {}).get("requests")
                                                 or cs.get("allocatedResources")))
                  for kind in ("containerStatuses", "initContainerStatuses") for cs in status.get(kind) or ()
                  if isinstance(cs, Mapping))
    return (tuple(resources(c) for c in spec.get("containers") or ()),
            tuple(resources(c) for c in spec.get("initContainers") or ()),
            _items(spec.get("overhead")), given, resize)


def _pod_requests(spec: Mapping[str, Any], status: Mapping[str, Any]) -> _Requests:
    resize = resize_pending(status) if status.get("conditions") else ""
    try:
        key: tuple[object, ...] | None = _requests_key(spec, status, resize)
        found = _REQUESTS.get(key)  # type: ignore[arg-type]
    except (AttributeError, TypeError):
        key, found = None, None
    if found is not None:
        return found
    resize_from: tuple[int, int] | None = None
    try:
        requests = pod_container_requests(spec, status)
        if resize == "Deferred":
            given = pod_container_requests(spec, status, actual=True)
            resize_from = (ceil_scaled(given.get("cpu", _ZERO), MILLI), ceil_scaled(given.get("memory", _ZERO), 1))
    except QuantityError:
        requests = {}
    scalars = tuple(sorted((str(k), ceil_scaled(v, 1)) for k, v in requests.items()
                           if k not in _BASE_RESOURCES and v > 0))
    asked = _Requests(requests, ceil_scaled(requests.get("cpu", _ZERO), MILLI),
                      ceil_scaled(requests.get("memory", _ZERO), 1), scalars, resize_from)
    if key is not None and _strings(key):
        _remember(_REQUESTS, key, asked)
    return asked


def _labels(raw: Any) -> dict[str, Any]:
    """A pod's labels, keys and short values interned: the pods of one job share them."""
    if not raw:
        return {}
    return {_intern(k) if type(k) is str else k: _intern(v) if type(v) is str and len(v) <= 64 else v
            for k, v in raw.items()}


def pod_record(obj: Mapping[str, Any]) -> PodRecord:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    namespace = _intern(str(meta.get("namespace") or "default"))
    labels = _labels(meta.get("labels"))
    raw_annotations = meta.get("annotations")
    annotations = {str(k): str(v) for k, v in raw_annotations.items()} if raw_annotations else {}
    asked = _pod_requests(spec, status)
    gpu_error = ""
    try:
        gpu = gpu_request(annotations, asked.requests)
    except GpuRequestError as exc:
        gpu, gpu_error = GpuRequest(), str(exc)
    groups: list[str] = []
    task_priority: int | None = None
    is_leader = is_reservation = False
    subgroup = ""
    delay: Any = annotations.get(keys.PREEMPTION_DELAY)
    if labels:
        is_reservation = labels.get("app") == keys.RESERVATION_APP_LABEL_VALUE
        if keys.GPU_GROUP_LABEL in labels:
            groups.append(labels[keys.GPU_GROUP_LABEL])
        groups.extend(sorted(k[len(_GPU_GROUP_PREFIX):] for k in labels if k.startswith(_GPU_GROUP_PREFIX)))
        raw_priority = labels.get(keys.TASK_PRIORITY_LABEL)
        try:
            task_priority = int(raw_priority) if raw_priority is not None else None
        except ValueError:
            task_priority = None
        is_leader = (labels.get(keys.RAY_NODE_TYPE_LABEL) == "head"
                     or labels.get(keys.KUBEFLOW_JOB_ROLE) in ("master", "launcher"))
        subgroup = labels.get(keys.SUBGROUP_LABEL, "")
        if keys.PREEMPTION_DELAY in labels:
            delay = labels[keys.PREEMPTION_DELAY]
    owners = meta.get("ownerReferences")
    gates = spec.get("schedulingGates")
    extended_status = status.get("extendedResourceClaimStatus")
    return PodRecord(
        namespace=namespace, name=str(meta.get("name", "")), uid=str(meta.get("uid") or meta.get("name", "")),
        created=parse_time(meta.get("creationTimestamp")), phase=_intern(str(status.get("phase") or "Pending")),
        node_name=_intern(str(spec.get("nodeName") or "")), deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(gates), scheduler_name=_intern(str(spec.get("schedulerName") or "default-scheduler")),
        pod_group=annotations.get(keys.POD_GROUP_NAME, ""), subgroup=subgroup,
        labels=labels, cpu=asked.cpu, memory=asked.memory,
        gpu=gpu, scalars=asked.scalars, gpu_groups=tuple(dict.fromkeys(groups)) if groups else (),
        constraints=_constraints(spec, namespace, annotations), task_priority=task_priority,
        is_leader=is_leader, nominated_node=str(status.get("nominatedNodeName") or ""),
        is_reservation=is_reservation, gpu_error=gpu_error,
        owner_kinds=tuple(_intern(str(o.get("kind", ""))) for o in owners) if owners else (),
        preemption_delay=_delay(delay), resize_from=asked.resize_from,
        preempt_never=spec.get("preemptionPolicy") == "Never",
        claims=pod_claims(spec, status) if spec.get("resourceClaims") else (),
        extended=extended_requests(spec) if asked.scalars else (),
        extended_claim=str((extended_status or {}).get("resourceClaimName") or "") if extended_status else "",
        quota_gated=[g.get("name") for g in gates or ()] == [keys.QUOTA_GATE])


def _whole(value: Any) -> int:
    """A count of devices: the quantity's integer part (a node has no partial GPU); 0 when malformed."""
    try:
        return int(parse_quantity(value))
    except (QuantityError, TypeError, ArithmeticError):
        return 0


def priorityclass_record(obj: Mapping[str, Any]) -> PriorityClassRecord:
    meta = _meta(obj)
    return PriorityClassRecord(str(meta.get("name", "")), int(obj.get("value") or 0), bool(obj.get("globalDefault")),
                               obj.get("preemptionPolicy") == "Never")


def pdb_record(obj: Mapping[str, Any]) -> PdbRecord:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    raw = spec.get("selector")
    return PdbRecord(str(meta.get("namespace") or "default"), str(meta.get("name", "")),
                     None if raw is None else parse_label_selector(raw),
                     max(int(status.get("disruptionsAllowed") or 0), 0))


def configmap_record(obj: Mapping[str, Any]) -> ConfigMapRecord:
    meta = _meta(obj)
    return ConfigMapRecord(str(meta.get("namespace") or "default"), str(meta.get("name", "")))


