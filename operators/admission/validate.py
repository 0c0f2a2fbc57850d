"""Pod validation of the admission webhook (CREATE and UPDATE): pure functions of the pod.

The denial strings are wire contract: users see them verbatim after
`admission webhook "admission.kai-scheduler.svc" denied the request: `. The checks run in KAI's order and the
first failing one wins, so a pod with several problems gets the same message as from KAI.

The numeric checks follow Go's `strconv.ParseUint(s, 10, 64)` / `strconv.ParseFloat(s, 64)` rather than
Python's `int()` / `float()`: Python accepts " 5", "+5", "1_0" and "0.1_5", which KAI rejects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from operators.core import keys
from operators.core.durations import delay_error, metadata_delay
from operators.core.gpusharing import (
    CONTAINER_REF_ERROR,
    ContainerRefError,
    fraction_container_ref,
)
from operators.core.numbers import go_parse_float, go_parse_uint

SHARING_DISABLED: Final = (
    "attempting to create a pod %s/%s with gpu sharing request, while GPU sharing is disabled"
)
MPS_WITHOUT_FRACTION: Final = "MPS is only supported with GPU fraction request"
FRACTION_AND_WHOLE_GPU: Final = "cannot have both GPU fraction request and whole GPU resource request/limit"
MEMORY_AND_GPU: Final = "cannot request both GPU and GPU memory"
NUM_DEVICES_WITHOUT_PORTION: Final = (
    "cannot request multiple fractional devices without specifying fraction portion or gpu-memory"
)
INVALID_GPU_MEMORY: Final = "gpu-memory annotation value must be a positive integer greater than 0"
INVALID_GPU_FRACTION: Final = "gpu-fraction annotation value must be a positive number smaller than 1.0"
INVALID_NUM_DEVICES: Final = "fraction count annotation value must be a positive integer greater than 0"

def requests_gpu_sharing(pod: Mapping[str, Any]) -> bool:
    """KAI's `RequestsGPUFraction`: the presence (any value) of `gpu-fraction` or `gpu-memory`."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return keys.GPU_FRACTION in annotations or keys.GPU_MEMORY in annotations


def _has_whole_gpu_limit(spec: Mapping[str, Any]) -> bool:
    # KAI looks only at limits (an nvidia.com/gpu request without a limit is refused by the API server for
    # extended resources), in regular then init containers, and counts the key whatever its value.
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            if keys.GPU_RESOURCE in limits:
                return True
    return False


def validate_gpu_request(pod: Mapping[str, Any]) -> str | None:
    """KAI's GPU-sharing request rules, without the scheduler-name and feature-flag gates."""
    annotations: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    spec = pod.get("spec") or {}
    fraction = annotations.get(keys.GPU_FRACTION)
    memory = annotations.get(keys.GPU_MEMORY)
    num_devices = annotations.get(keys.GPU_FRACTION_NUM_DEVICES)
    has_fraction, has_memory = fraction is not None, memory is not None
    is_shared = has_fraction or has_memory
    whole_limit = _has_whole_gpu_limit(spec)

    if not is_shared and annotations.get(keys.MPS) == "true":
        return MPS_WITHOUT_FRACTION
    if has_fraction and whole_limit:
        return FRACTION_AND_WHOLE_GPU
    if has_memory and (has_fraction or whole_limit):
        return MEMORY_AND_GPU
    if num_devices is not None and not is_shared:
        return NUM_DEVICES_WITHOUT_PORTION
    if memory is not None and (go_parse_uint(memory) or 0) == 0:
        return INVALID_GPU_MEMORY
    if fraction is not None:
        value = go_parse_float(fraction)
        # KAI lets NaN through (every comparison with it is false); we refuse it on purpose, since no
        # scheduler arithmetic can place a NaN portion.
        if value is None or math.isnan(value) or not 0 < value < 1:
            return INVALID_GPU_FRACTION
    if num_devices is not None and (go_parse_uint(num_devices) or 0) == 0:
        return INVALID_NUM_DEVICES
    if is_shared and spec.get("containers"):
        try:
            fraction_container_ref(pod)
        except ContainerRefError as exc:
            return CONTAINER_REF_ERROR % exc
    return None


def validate_pod(
    pod: Mapping[str, Any], *, gpu_sharing_enabled: bool, scheduler_name: str = keys.SCHEDULER_NAME,
    old: Mapping[str, Any] | None = None,
) -> str | None:
    """The denial message for a pod on CREATE or UPDATE (`old`: the stored pod), or None when it is admitted.

    Pods of other schedulers always pass: the webhook's matchCondition filters them already, and the handler
    checks again in case the configuration lacks it.
    """
    if (pod.get("spec") or {}).get("schedulerName") != scheduler_name:
        return None
    if not gpu_sharing_enabled and requests_gpu_sharing(pod):
        metadata = pod.get("metadata") or {}
        return SHARING_DISABLED % (metadata.get("namespace") or "", metadata.get("name") or "")
    return validate_gpu_request(pod) or validate_preemption_delay(pod, old)


def validate_preemption_delay(pod: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> str | None:
    """The denial for a malformed `kai.scheduler/preemption-delay` (label or annotation) on a kai-scheduler pod.

    On UPDATE (`old` given) a value the stored pod already carried is not judged again, so a pod admitted before
    this check stays writable.
    """
    found = metadata_delay(pod.get("metadata") or {})
    if found is None:
        return None
    where, value = found
    if old is not None and metadata_delay(old.get("metadata") or {}) == found:
        return None
    return delay_error(where, value)
