"""GPU-sharing wire rules shared by the admission webhook (which wires a pod) and the binder (which fills what
was wired): which container receives the GPU environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from operators.core import keys

CONTAINER_REF_ERROR: Final = "failed to get fraction container ref: %s"
CONTAINER_NOT_FOUND: Final = "container with name %s not found for fraction request"


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """The container that receives the GPU-sharing env: its list and index in that list."""

    kind: Literal["initContainers", "containers"]
    index: int
    container: Mapping[str, Any]

    @property
    def is_init(self) -> bool:
        return self.kind == "initContainers"


class ContainerRefError(ValueError):
    """`gpu-fraction-container-name` names no container of the pod; `CONTAINER_REF_ERROR % exc` is KAI's text."""


def fraction_container_ref(pod: Mapping[str, Any]) -> ContainerRef:
    """The container named by `gpu-fraction-container-name` (init containers searched first), else containers[0].

    Raises ContainerRefError when the name matches nothing, and when the pod has no container at all (KAI would
    index out of range there; the API server rejects such pods anyway).
    """
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(keys.GPU_FRACTION_CONTAINER_NAME)
    if name is None:
        containers = spec.get("containers") or []
        if not containers:
            raise ContainerRefError("pod has no containers")
        return ContainerRef("containers", 0, containers[0])
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            if container.get("name") == name:
                return ContainerRef(kind, index, container)
    raise ContainerRefError(CONTAINER_NOT_FOUND % name)
