"""Kubernetes quantities, resource lists and the GPU request of a pod.

Quantities are parsed exactly (Decimal) so that status sums never drift; the scheduler's hot path converts
them once per pod into plain floats (see `operators.scheduler.decide.snapshot`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from operators.core import keys
from operators.core.numbers import go_parse_float
from operators.core.units import MIB

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

ResourceList = dict[str, Decimal]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """Parse a Kubernetes quantity ("1", "500m", "2Gi", "1e3", 0.5) into an exact Decimal."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"not a quantity: {value!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    return base * _DECIMAL[suffix]


def format_quantity(name: str, value: Decimal) -> str:
    """Render a quantity the way kubectl users expect: cpu in cores or millicores, memory in binary units."""
    value = value.normalize() if value != 0 else Decimal(0)
    if name == "cpu":
        if value == value.to_integral_value():
            return str(int(value))
        milli = value * 1000
        if milli == milli.to_integral_value():
            return f"{int(milli)}m"
        return _plain(value)
    if name in ("memory", "ephemeral-storage") or name.endswith("hugepages"):
        if value == value.to_integral_value():
            as_int = int(value)
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                unit = _BINARY[suffix]
                if as_int != 0 and as_int % unit == 0:
                    return f"{as_int // unit}{suffix}"
            return str(as_int)
        return _plain(value)
    return _plain(value)


def _plain(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def parse_resource_list(raw: Mapping[str, Any] | None) -> ResourceList:
    return {name: parse_quantity(q) for name, q in (raw or {}).items()}


def format_resource_list(resources: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: format_quantity(name, resources[name]) for name in sorted(resources)}


def add(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> ResourceList:
    out = dict(a)
    for name, q in b.items():
        out[name] = out.get(name, Decimal(0)) + q
    return out


def total(lists: Iterable[Mapping[str, Decimal]]) -> ResourceList:
    out: ResourceList = {}
    for item in lists:
        for name, q in item.items():
            out[name] = out.get(name, Decimal(0)) + q
    return out


def resize_pending(pod_status: Mapping[str, Any] | None) -> str:
    """The reason of the pod's `PodResizePending` condition (Deferred / Infeasible), "" when no resize waits."""
    for condition in (pod_status or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodResizePending" \
                and condition.get("status") == "True":
            return str(condition.get("reason") or "Deferred")
    return ""


def pod_container_requests(pod_spec: Mapping[str, Any], pod_status: Mapping[str, Any] | None = None, *,
                           actual: bool = False) -> ResourceList:
    """Effective requests of a pod, as Kubernetes computes them (`resourcehelper.PodRequests`), plus overhead.

    The main containers and the sidecars (init containers with `restartPolicy: Always`, which keep running) are
    summed; each init container runs next to the sidecars started before it, so the pod's init peak is the largest
    of (that init container + those sidecars); the pod needs the larger of the two, per resource. A container with
    a limit but no request gets the limit as request, as the API server defaults it.

    In-place resize (KEP-1287), with `pod_status`: a container the kubelet reports resources for counts at the
    larger of what it was given (`status.containerStatuses[].resources`, else `allocatedResources`) and what its
    spec asks now (a resize not yet enacted), per resource; at what it was given alone when the resize is
    Infeasible (it will never be enacted) or with `actual` (what the node holds today).
    """
    given: dict[tuple[str, str], ResourceList] = {}
    for kind, key in (("containers", "containerStatuses"), ("initContainers", "initContainerStatuses")):
        for cs in (pod_status or {}).get(key) or ():
            if isinstance(cs, Mapping):
                raw = (cs.get("resources") or {}).get("requests") or cs.get("allocatedResources")
                if raw:
                    given[(kind, str(cs.get("name") or ""))] = parse_resource_list(raw)
    only_given = actual or resize_pending(pod_status) == "Infeasible"

    def container_requests(container: Mapping[str, Any], kind: str = "containers") -> ResourceList:
        res = container.get("resources") or {}
        requests = parse_resource_list(res.get("requests"))
        for name, q in parse_resource_list(res.get("limits")).items():
            requests.setdefault(name, q)
        status = given.get((kind, str(container.get("name") or ""))) if given else None
        if status:
            for name, q in status.items():
                requests[name] = q if only_given else max(q, requests.get(name, Decimal(0)))
        return requests

    running = total(container_requests(c) for c in pod_spec.get("containers") or [])
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for init in pod_spec.get("initContainers") or []:
        requests = container_requests(init, "initContainers")
        if init.get("restartPolicy") == "Always":
            running = add(running, requests)
            sidecars = add(sidecars, requests)
            during = sidecars
        else:
            during = add(requests, sidecars)
        for name, q in during.items():
            if q > init_peak.get(name, Decimal(0)):
                init_peak[name] = q
    for name, q in init_peak.items():
        if q > running.get(name, Decimal(0)):
            running[name] = q
    return add(running, parse_resource_list(pod_spec.get("overhead")))


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of GPUs.

    `whole` devices come from `nvidia.com/gpu`; a shared request is `num_devices` devices each with `portion`
    (gpu-fraction) or `memory_mib` (gpu-memory). At most one of the two kinds is set on a valid pod.
    """

    whole: int = 0
    portion: float | None = None
    memory_mib: int | None = None
    num_devices: int = 1
    # Derived once: the scheduler reads it for every pod at session open and at every placement, where a
    # property call would cost more than the test itself.
    is_shared: bool = field(default=False, init=False, compare=False, repr=False)
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_shared", self.portion is not None or self.memory_mib is not None)
        object.__setattr__(self, "_hash", hash((self.whole, self.portion, self.memory_mib, self.num_devices)))

    def __hash__(self) -> int:  # part of every fit signature, hashed per placement attempt: computed once
        return self._hash

    def __reduce__(self) -> tuple[type[GpuRequest], tuple[int, float | None, int | None, int]]:
        # Rebuilt through __init__ in a copy or an unpickling process, whose string and None hashes differ.
        return GpuRequest, (self.whole, self.portion, self.memory_mib, self.num_devices)

    @property
    def is_empty(self) -> bool:
        return self.whole == 0 and not self.is_shared


# Requests are immutable and few distinct ones exist, so pods asking the same share one object: comparing two
# pods' fit signatures then stops at identity instead of comparing field by field.
_shared_request = functools.lru_cache(maxsize=1024)(GpuRequest)


class GpuRequestError(ValueError):
    """An invalid GPU-sharing annotation; the message is user-facing."""


def gpu_request(annotations: Mapping[str, str] | None, requests: Mapping[str, Decimal]) -> GpuRequest:
    """The GPU request of a pod from its annotations and effective requests.

    Accepts what the scheduler accepts (0 < gpu-fraction <= 1); the admission webhook is stricter.
    """
    annotations = annotations or {}
    whole_q = requests.get(keys.GPU_RESOURCE, Decimal(0))
    whole = int(whole_q)
    num_devices = 1
    raw_devices = annotations.get(keys.GPU_FRACTION_NUM_DEVICES)
    if raw_devices is not None:
        try:
            num_devices = int(raw_devices)
        except ValueError as exc:
            raise GpuRequestError(
                "fraction count annotation value must be a positive integer greater than 0") from exc
        if num_devices <= 0:
            raise GpuRequestError("fraction count annotation value must be a positive integer greater than 0")
    raw_fraction = annotations.get(keys.GPU_FRACTION)
    if raw_fraction is not None:
        portion = go_parse_float(raw_fraction)  # the admission webhook's grammar: what it admits is read here
        if portion is None or not 0 < portion <= 1:
            raise GpuRequestError("gpu-fraction annotation value must be a positive number smaller than 1.0")
        return _shared_request(0, portion, None, num_devices)
    raw_memory = annotations.get(keys.GPU_MEMORY)
    if raw_memory is not None:
        try:
            memory = int(raw_memory)
        except ValueError as exc:
            raise GpuRequestError("gpu-memory annotation value must be a positive integer greater than 0") from exc
        if memory <= 0:
            raise GpuRequestError("gpu-memory annotation value must be a positive integer greater than 0")
        return _shared_request(0, None, memory, num_devices)
    return _shared_request(whole, None, None, 1)


def node_gpu_memory_mib(labels: Mapping[str, str] | None) -> int | None:
    """Per-GPU memory of a node from `nvidia.com/gpu.memory`.

    KAI treats values of 1 TiB-in-MiB or more as bytes, and floors to a multiple of 100 MiB.
    """
    raw = (labels or {}).get(keys.NODE_GPU_MEMORY)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    if value >= MIB:  # a TiB in MiB: the label is in bytes
        value //= MIB
    value -= value % 100
    return value if value > 0 else None
