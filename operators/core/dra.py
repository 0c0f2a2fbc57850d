"""KAI's rule for which DRA claims are GPUs (pkg/common/resources/dra.go), shared by the scheduler and the
controllers that report GPUs in PodGroup and Queue status.

A device class whose name contains "gpu" (any case) is a GPU class. A claim's GPUs are its GPU-class requests'
counts (ExactCount: `count`, 1 when unset; All: 1, for bookkeeping), reported under the name of the claim's first
GPU class (KAI's ExtractDRAGPUResources: a PodGroup's status lists `gpu.nvidia.com: "2"` beside `nvidia.com/gpu`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

EXACT_COUNT = "ExactCount"
ALL = "All"


def is_gpu_class(name: str) -> bool:
    """KAI's IsGPUDeviceClass: the device class (or a slice's driver) names a GPU."""
    return "gpu" in name.lower()


def is_dra_gpu_resource(name: str) -> bool:
    """A status resource name that is a GPU device class (device class names have no "/", extended resources do)."""
    return "/" not in name and is_gpu_class(name)


def request_gpus(mode: str, count: int | None) -> int:
    """The GPUs one GPU-class request counts: ExactCount its count (1 when unset), All 1."""
    if mode == ALL:
        return 1
    return count if count is not None and count > 0 else 1


def claim_gpus(claim: Mapping[str, Any]) -> tuple[str, int]:
    """(first GPU device class, GPU count) of a ResourceClaim object; ("", 0) when it asks for no GPU."""
    name, total = "", 0
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        exactly = request.get("exactly") if isinstance(request, Mapping) else None
        if not isinstance(exactly, Mapping):
            continue
        device_class = str(exactly.get("deviceClassName") or "")
        if not is_gpu_class(device_class):
            continue
        count = exactly.get("count")
        total += request_gpus(str(exactly.get("allocationMode") or EXACT_COUNT), count if isinstance(count, int)
                              else None)
        name = name or device_class
    return name, total


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaim names of a pod's `spec.resourceClaims` (a template's claim from
    `status.resourceClaimStatuses`; not yet created ones are left out), and its KEP-5004 special claim."""
    status = pod.get("status") or {}
    generated = {str(s.get("name")): str(s.get("resourceClaimName") or "")
                 for s in status.get("resourceClaimStatuses") or () if isinstance(s, Mapping)}
    special = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    out = [str(special)] if special else []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if isinstance(ref, Mapping):
            name = str(ref.get("resourceClaimName") or generated.get(str(ref.get("name") or ""), ""))
            if name:
                out.append(name)
    return out


def gpus_by_class(claims: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Device class -> GPUs, summed over (class, count) of a pod's claims."""
    out: dict[str, int] = {}
    for name, count in claims:
        if name and count > 0:
            out[name] = out.get(name, 0) + count
    return out


# --- KEP-5004: extended resources backed by DRA ---------------------------------------------------------------

# Every DeviceClass is also reachable as the extended resource DEVICE_CLASS_PREFIX + its name (the implicit name).
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
# The annotation ("true") of the special ResourceClaim made for a pod's extended resources; also the pod claim name a
# BindRequest gives that claim (a pod's own claim names are DNS labels, so they never contain a "/").
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"


def extended_resource_classes(classes: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Extended resource name -> device class, from (class name, spec.extendedResourceName) pairs: each class under
    its implicit name, and under its explicit one (several classes naming one: the first by class name)."""
    out: dict[str, str] = {}
    for name, extended in sorted(classes):
        out[DEVICE_CLASS_PREFIX + name] = name
        if extended:
            out.setdefault(extended, name)
    return out


def extended_requests(spec: Mapping[str, Any]) -> tuple[tuple[str, str, str, int], ...]:
    """(container, resource, device request name, count) of each extended resource (a name with a "/" outside
    kubernetes.io) a container of the pod requests. KEP-5004 names the special claim's request
    `container-<i>-request-<j>`: i the index among initContainers then containers, j the index of the resource
    among the container's request names (limits' included, as the API server defaults them), sorted."""
    out = []
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    for i, container in enumerate(containers):
        resources = (container.get("resources") or {}) if isinstance(container, Mapping) else {}
        # The API server defaults a request to its limit: the names it stores are those of both.
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for j, name in enumerate(sorted(str(k) for k in requests)):
            native = name.split("/", 1)[0].endswith("kubernetes.io") and not name.startswith(DEVICE_CLASS_PREFIX)
            if "/" not in name or native:
                continue
            try:
                count = int(str(requests[name]))
            except ValueError:
                continue
            if count > 0:
                out.append((str(container.get("name") or ""), name, f"container-{i}-request-{j}", count))
    return tuple(out)
