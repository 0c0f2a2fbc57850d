"""Dynamic Resource Allocation (resource.k8s.io/v1): slim records of DeviceClasses, ResourceSlices and ResourceClaims,
the CEL selectors over devices, and KAI's rule for which claims are GPUs.

Records are parsed once per watch event, like the others of `records`. Selectors are CEL (the Kubernetes DRA
environment: `device.driver`, `device.attributes[domain].name`, `device.capacity[domain].name`) evaluated by
`cel-python`; each expression is compiled once per process, and a result is remembered per expression and the
device's values that the expression can read (devices differing only in attributes it never names share it), so
thousands of identical GPUs cost one evaluation. Capacities are integers (`quantity("40Gi")` is an integer too);
`compareTo`, `isGreaterThan`, `isLessThan`, `asInteger` and `asApproximateFloat` are provided on them.

KAI's GPU rule (pkg/common/resources/dra.go): a device class whose name contains "gpu" (any case) is a GPU class;
a claim's GPUs are its GPU-class requests' counts (ExactCount: `count`, 1 when unset; All: 1 for bookkeeping); a node
has one GPU per device of its ResourceSlices whose driver contains "gpu". Those GPUs count as whole GPUs in the pod's
request and on its node, in quota, fair share, reclaim and preemption exactly like `nvidia.com/gpu`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from operators.core import keys
from operators.core.dra import is_gpu_class, request_gpus
from operators.core.resources import GpuRequest, QuantityError, parse_quantity

EXACT_COUNT = "ExactCount"
ALL = "All"
# resource.k8s.io/v1 ResourceClaimReservedForMaxSize.
RESERVED_FOR_MAX = 256


# --- records -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | NoExecute (both keep the device from new allocations)


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # "" with Exists: every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "": every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice; attributes and capacities keyed "domain/name" (the driver is the default
    domain of an unqualified name)."""

    driver: str
    pool: str
    name: str
    attributes: tuple[tuple[str, str | int | bool], ...] = ()
    capacity: tuple[tuple[str, int], ...] = ()
    taints: tuple[Taint, ...] = ()  # spec.devices[].taints (KEP-5055, alpha: DRADeviceTaints)

    @property
    def id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class SliceRecord:
    name: str
    driver: str
    pool: str
    node: str  # spec.nodeName; "" for slices not bound to one node (not used for placement here)
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class DeviceClassRecord:
    name: str
    selectors: tuple[str, ...]  # CEL expressions
    extended_resource: str = ""  # spec.extendedResourceName (KEP-5004)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One `spec.devices.requests[]` of a claim: `exactly`, or `firstAvailable` (its sub-requests in order of
    preference, in `alternatives`, each named "<request>/<sub-request>" as the allocation result names it)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    unsupported: str = ""  # a request this scheduler cannot allocate (capacity requests), why
    tolerations: tuple[Toleration, ...] = ()
    alternatives: tuple[DeviceRequest, ...] = ()

    @property
    def exact(self) -> bool:
        """An `exactly` request (KAI counts GPUs of these only)."""
        return not self.alternatives


@dataclass(frozen=True, slots=True)
class Constraint:
    """`spec.devices.constraints[]`: every device of `requests` (all the claim's when empty) has the same value
    of `match_attribute` ("domain/name")."""

    requests: tuple[str, ...]
    match_attribute: str


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str

    @property
    def id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    constraints: tuple[Constraint, ...] = ()
    allocated: tuple[AllocatedDevice, ...] | None = None  # status.allocation.devices.results; None: unallocated
    allocated_node: str = ""  # the node of status.allocation.nodeSelector (metadata.name or hostname)
    reserved_for: tuple[str, ...] = ()  # status.reservedFor pod uids
    owner_pod: str = ""  # uid of the Pod owning it (a claim generated from a ResourceClaimTemplate)
    gpus: int = field(default=0, init=False, compare=False)  # KAI's GPU count of the claim

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", sum(request_gpus(r.mode, r.count)
                                             for r in self.requests if r.exact and is_gpu_class(r.device_class)))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_gpu(self) -> bool:
        return any(r.exact and is_gpu_class(r.device_class) for r in self.requests)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _qualified(driver: str, name: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _attribute(raw: Any) -> str | int | bool | None:
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            value = raw[kind]
            return int(value) if kind == "int" else bool(value) if kind == "bool" else str(value)
    return None


def _capacity(raw: Any) -> int:
    try:
        value = parse_quantity((raw or {}).get("value", 0))
    except (QuantityError, TypeError, AttributeError):
        return 0
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def slice_record(obj: Mapping[str, Any]) -> SliceRecord:
    meta, spec = _meta(obj), obj.get("spec") or {}
    driver = str(spec.get("driver") or "")
    pool = str((spec.get("pool") or {}).get("name") or "")
    devices = []
    for d in spec.get("devices") or ():
        if not isinstance(d, Mapping):
            continue
        attrs = tuple(sorted((_qualified(driver, str(k)), v) for k, raw in (d.get("attributes") or {}).items()
                             if (v := _attribute(raw)) is not None))
        caps = tuple(sorted((_qualified(driver, str(k)), _capacity(raw))
                            for k, raw in (d.get("capacity") or {}).items()))
        taints = tuple(Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
                       for t in d.get("taints") or () if isinstance(t, Mapping))
        devices.append(Device(driver, pool, str(d.get("name") or ""), attrs, caps, taints))
    return SliceRecord(str(meta.get("name") or ""), driver, pool, str(spec.get("nodeName") or ""), tuple(devices))


def _selectors(raw: Any) -> tuple[str, ...]:
    return tuple(str((s.get("cel") or {}).get("expression") or "") for s in raw or ()
                 if isinstance(s, Mapping) and s.get("cel"))


def device_class_record(obj: Mapping[str, Any]) -> DeviceClassRecord:
    spec = obj.get("spec") or {}
    return DeviceClassRecord(str(_meta(obj).get("name") or ""), _selectors(spec.get("selectors")),
                             str(spec.get("extendedResourceName") or ""))


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    return tuple(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
                            str(t.get("effect") or "")) for t in raw or () if isinstance(t, Mapping))


def _exactly(name: str, exactly: Mapping[str, Any]) -> DeviceRequest:
    mode = str(exactly.get("allocationMode") or EXACT_COUNT)
    count = exactly.get("count")
    return DeviceRequest(name, str(exactly.get("deviceClassName") or ""), _selectors(exactly.get("selectors")), mode,
                         int(count) if isinstance(count, int) and count > 0 else 1,
                         "capacity requests are not supported" if exactly.get("capacity") else "",
                         _tolerations(exactly.get("tolerations")))


def _request(raw: Mapping[str, Any]) -> DeviceRequest:
    name = str(raw.get("name") or "")
    exactly = raw.get("exactly")
    if isinstance(exactly, Mapping):
        return _exactly(name, exactly)
    subs = tuple(_exactly(f"{name}/{sub.get('name') or ''}", sub) for sub in raw.get("firstAvailable") or ()
                 if isinstance(sub, Mapping))
    if not subs:
        return DeviceRequest(name, "", unsupported="the request has neither exactly nor firstAvailable")
    return DeviceRequest(name, subs[0].device_class, alternatives=subs)


def _allocation_node(allocation: Mapping[str, Any]) -> str:
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
        for req in [*(term.get("matchFields") or ()), *(term.get("matchExpressions") or ())]:
            if req.get("key") in ("metadata.name", "kubernetes.io/hostname") and req.get("values"):
                return str(req["values"][0])
    return ""


def claim_record(obj: Mapping[str, Any]) -> ClaimRecord:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    devices = spec.get("devices") or {}
    requests = tuple(_request(r) for r in devices.get("requests") or () if isinstance(r, Mapping))
    constraints = tuple(Constraint(tuple(str(r) for r in c.get("requests") or ()), str(c.get("matchAttribute")))
                        for c in devices.get("constraints") or () if isinstance(c, Mapping) and c.get("matchAttribute"))
    allocation = status.get("allocation")
    allocated: tuple[AllocatedDevice, ...] | None = None
    node = ""
    if isinstance(allocation, Mapping):
        allocated = tuple(AllocatedDevice(str(r.get("request") or ""), str(r.get("driver") or ""),
                                          str(r.get("pool") or ""), str(r.get("device") or ""))
                          for r in (allocation.get("devices") or {}).get("results") or ())
        node = _allocation_node(allocation)
    owner = next((str(o.get("uid") or "") for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"), "")
    return ClaimRecord(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or meta.get("name") or ""), requests=requests, labels=dict(meta.get("labels") or {}),
        constraints=constraints,
        allocated=allocated, allocated_node=node,
        reserved_for=tuple(str(r.get("uid") or "") for r in status.get("reservedFor") or ()
                           if r.get("resource") == "pods"),
        owner_pod=owner)


def pod_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(pod claim name, ResourceClaim name) of each `spec.resourceClaims` entry; the name of a template's claim
    comes from `status.resourceClaimStatuses` ("" until the resource-claim controller has created it)."""
    generated = {str(s.get("name")): str(s.get("resourceClaimName") or "")
                 for s in status.get("resourceClaimStatuses") or () if isinstance(s, Mapping)}
    out = []
    for ref in spec.get("resourceClaims") or ():
        if not isinstance(ref, Mapping):
            continue
        name = str(ref.get("name") or "")
        claim = ref.get("resourceClaimName")
        out.append((name, str(claim) if claim else generated.get(name, "")))
    return tuple(out)


# --- KAI's GPU accounting -------------------------------------------------------------------------------------


def node_dra_gpus(slices: Iterable[SliceRecord]) -> dict[str, int]:
    """Node -> its DRA GPUs: the devices of its slices whose driver names a GPU (KAI's populateDRAGPUs)."""
    out: dict[str, int] = {}
    for s in slices:
        if s.node and is_gpu_class(s.driver):
            out[s.node] = out.get(s.node, 0) + len(s.devices)
    return out


def with_dra_gpus(nodes: Iterable[Any], pods: Iterable[Any], slices: Iterable[SliceRecord],
                  claims: Mapping[str, ClaimRecord]) -> tuple[list[Any], list[Any]]:
    """Nodes and pods with their DRA GPUs added as whole GPUs (node capacity, pod request); others unchanged."""
    per_node = node_dra_gpus(slices)
    out_nodes = [replace(n, gpus=n.gpus + per_node[n.name]) if n.name in per_node else n for n in nodes]
    out_pods = []
    for p in pods:
        if p.claims:
            found = [(pc, c) for pc, name in p.claims if name and (c := claims.get(f"{p.namespace}/{name}"))]
            gpus = sum(c.gpus for _, c in found)
            fit = _claim_fit(p, found) if len(found) == len(p.claims) else ()
            if (gpus and not p.gpu.is_shared) or fit:
                p = replace(p, gpu=GpuRequest(whole=p.gpu.whole + gpus) if gpus and not p.gpu.is_shared else p.gpu,
                            claim_fit=fit)
        out_pods.append(p)
    return out_nodes, out_pods


def _claim_fit(pod: Any, found: list[tuple[str, ClaimRecord]]) -> tuple[object, ...]:
    """The claims as placement sees them: a claim of this pod alone, not allocated, by its requests (pods made from
    one template share fit results); any other (allocated, shared) by its key."""
    return tuple((pc, c.requests) if c.allocated is None and c.owner_pod == pod.uid else (pc, c.key)
                 for pc, c in found)


# --- CEL ------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Macros and functions that can read a map's keys: an expression using one reads every attribute.
_WHOLE_MAP = frozenset({"all", "exists", "exists_one", "map", "filter", "size", "keys"})


class SelectorError(ValueError):
    """A selector that does not compile; the message names it."""


@dataclass(frozen=True, slots=True)
class Outcome:
    matches: bool
    error: str = ""


class Selector:
    """One compiled CEL expression over `device`; `matches(device)` is remembered per what it can read."""

    __slots__ = ("_lock", "_memo", "_program", "_tokens", "_whole", "expression")

    def __init__(self, expression: str) -> None:
        import celpy

        self.expression = expression
        env = celpy.Environment()
        try:
            ast = env.compile(expression)
        except Exception as exc:  # celpy raises CELParseError with the position
            raise SelectorError(f"selector {expression!r} does not compile: {exc}") from None
        self._program = env.program(ast, functions=_FUNCTIONS)
        tokens = set(_TOKEN.findall(expression))
        self._whole = bool(tokens & _WHOLE_MAP)
        self._tokens = frozenset(tokens)
        self._memo: dict[tuple[object, ...], Outcome] = {}
        self._lock = threading.Lock()

    def _key(self, device: Device) -> tuple[object, ...]:
        if self._whole:
            return (device.driver, device.attributes, device.capacity)
        t = self._tokens
        return (device.driver, tuple(a for a in device.attributes if a[0].rpartition("/")[2] in t),
                tuple(c for c in device.capacity if c[0].rpartition("/")[2] in t))

    def matches(self, device: Device) -> Outcome:
        key = self._key(device)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        out = self._evaluate(device)
        with self._lock:
            if len(self._memo) > 100_000:
                self._memo.clear()
            self._memo[key] = out
        return out

    def _evaluate(self, device: Device) -> Outcome:
        from celpy import celtypes
        from celpy.evaluation import CELEvalError

        try:
            result = self._program.evaluate({"device": _activation(device)})
        except Exception as exc:  # a runtime error (missing attribute, wrong type): the device does not match
            return Outcome(False, str(exc))
        if isinstance(result, CELEvalError):
            return Outcome(False, str(result.args[0] if result.args else result))
        if isinstance(result, bool | celtypes.BoolType):
            return Outcome(bool(result))
        return Outcome(False, f"selector {self.expression!r} is not a boolean")


def _activation(device: Device) -> Any:
    from celpy.adapter import json_to_cel

    attributes: dict[str, dict[str, Any]] = {}
    for key, value in device.attributes:
        domain, _, name = key.rpartition("/")
        attributes.setdefault(domain, {})[name] = value
    capacity: dict[str, dict[str, int]] = {}
    for key, amount in device.capacity:
        domain, _, name = key.rpartition("/")
        capacity.setdefault(domain, {})[name] = amount
    return json_to_cel({"driver": device.driver, "attributes": attributes, "capacity": capacity,
                              "allowMultipleAllocations": False})


def _quantity(text: Any) -> Any:
    from celpy import celtypes

    try:
        value = parse_quantity(str(text))
    except QuantityError as exc:
        raise ValueError(f"invalid quantity {text!r}: {exc}") from None
    return celtypes.IntType(int(value.to_integral_value(rounding="ROUND_CEILING")))


def _compare(a: Any, b: Any) -> Any:
    from celpy import celtypes

    return celtypes.IntType((a > b) - (a < b))


def _celbool(value: bool) -> Any:
    from celpy import celtypes

    return celtypes.BoolType(value)


def _as_float(a: Any) -> Any:
    from celpy import celtypes

    return celtypes.DoubleType(float(Decimal(int(a))))


_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity, "compareTo": _compare, "isGreaterThan": lambda a, b: _celbool(a > b),
    "isLessThan": lambda a, b: _celbool(a < b), "asInteger": lambda a: a, "asApproximateFloat": _as_float,
}
_COMPILED: dict[str, Selector | SelectorError] = {}
_COMPILE_LOCK = threading.Lock()


def selector(expression: str) -> Selector:
    """The compiled selector of an expression (compiled once per process); SelectorError if it does not compile."""
    found = _COMPILED.get(expression)
    if found is None:
        try:
            found = Selector(expression)
        except SelectorError as exc:
            found = exc
        with _COMPILE_LOCK:
            _COMPILED[expression] = found
    if isinstance(found, SelectorError):
        raise found
    return found


def allocation_json(node: str, devices: Iterable[AllocatedDevice]) -> str:
    """status.allocation of a claim allocated on one node (AllocationResult), as canonical JSON text."""
    return json.dumps({
        "devices": {"results": [{"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
                                for d in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }, sort_keys=True, separators=(",", ":"))


def claims_after(claims: Iterable[ClaimRecord], bound: Mapping[str, list[tuple[str, str]]],
                 released: Mapping[str, list[str]]) -> tuple[ClaimRecord, ...]:
    """Claims as the binder and the claim controller leave them (for `kai simulate`'s next cycle): `bound` claim
    key -> (allocation JSON, pod uid) written by binds, `released` claim key -> uids of pods that went."""
    out = []
    for c in claims:
        for allocation, uid in bound.get(c.key, ()):
            if c.allocated is None:
                raw = json.loads(allocation)
                c = replace(c, allocated=tuple(
                    AllocatedDevice(str(r["request"]), str(r["driver"]), str(r["pool"]), str(r["device"]))
                    for r in raw["devices"]["results"]), allocated_node=_allocation_node(raw))
            if uid not in c.reserved_for:
                c = replace(c, reserved_for=(*c.reserved_for, uid))
        gone = released.get(c.key)
        if gone:
            left = tuple(u for u in c.reserved_for if u not in gone)
            c = replace(c, reserved_for=left) if left else replace(c, reserved_for=(), allocated=None,
                                                                    allocated_node="")
        out.append(c)
    return tuple(out)


QUEUE_LABEL = keys.QUEUE_LABEL  # the label a shared GPU claim names its queue by (KAI)
