"""The binder's GPU-sharing bookkeeping for fractional BindRequests: pure helpers, the binder's handlers do the I/O.

For a fractional BindRequest the binder labels the pod with its GPU groups and writes two ConfigMaps next to
it, named from the pod's `runai/shared-gpu-configmap` annotation set by the admission webhook:
`C = <prefix>-<idx>` (`<prefix>-i<idx>` for an init container), read through configMapKeyRef env vars, and
`E = C-evar`, loaded whole with envFrom. Both are owned by the pod so they go away with it.

Multi-device pods. KAI labels a pod with `gpu-fraction-num-devices` > 1 only with
`runai-gpu-group/<g>=<g>`, one per group, and no plain `runai-gpu-group`. We keep exactly these labels: they
are on the wire (kubectl columns, the scheduler's accounting of shared GPUs) and adding a plain label would
make such a pod look like a single-device sharer of one arbitrary group. The fragility upstream is on the
reading side (its sync lists only pods having the plain label, so multi-device pods can be missed); here every
reader goes through `pod_gpu_groups`, which understands both forms, so reservation GC never misses them.

Fake GPUs. Nodes without a device plugin (kwok nodes labelled `run.ai/fake.gpu=true`, or every node with the
binder's `--fake-gpu-nodes`) have nobody to report which physical GPU a reservation pod holds. The binder then
derives a stable id from the node and the GPU group, shaped like an NVIDIA UUID, so everything downstream
(ConfigMaps, env, GC) runs the real code path.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from operators.core import keys
from operators.core.gpusharing import CONTAINER_REF_ERROR, ContainerRef, ContainerRefError
from operators.core.gpusharing import fraction_container_ref as core_fraction_container_ref

JsonPatch = list[dict[str, Any]]

NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
RUNAI_NUM_OF_GPUS: Final = "RUNAI_NUM_OF_GPUS"
GPU_PORTION: Final = "GPU_PORTION"
LEGACY_VISIBLE_DEVICES: Final = "RUNAI-VISIBLE-DEVICES"
CDI_DEVICE_FORMAT: Final = "k8s.device-plugin.nvidia.com/gpu=%s"
MULTI_GROUP_LABEL_PREFIX: Final = keys.GPU_GROUP_LABEL + "/"

# Fixed forever: changing it would change every fake device id of a running cluster.
_FAKE_GPU_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "fake-gpu.kai.scheduler")


class GpuSharingError(ValueError):
    """The pod cannot be wired for GPU sharing; the message is KAI's."""


# --- the target container and the ConfigMap names -------------------------------------------------------


def fraction_container_ref(pod: Mapping[str, Any]) -> ContainerRef:
    """The container that receives the GPU env (the admission webhook already refused pods where this fails)."""
    try:
        return core_fraction_container_ref(pod)
    except ContainerRefError as exc:
        raise GpuSharingError(CONTAINER_REF_ERROR % exc) from exc


@dataclass(frozen=True, slots=True)
class SharingConfigMaps:
    """Names of the two GPU-sharing ConfigMaps of a pod."""

    capabilities: str  # C: NVIDIA_VISIBLE_DEVICES (usually), RUNAI_NUM_OF_GPUS, GPU_PORTION
    direct_env: str  # E: loaded with envFrom; NVIDIA_VISIBLE_DEVICES for pods admitted without the env ref


def configmap_names(pod: Mapping[str, Any]) -> SharingConfigMaps:
    metadata = pod.get("metadata") or {}
    prefix = (metadata.get("annotations") or {}).get(keys.SHARED_GPU_CONFIGMAP)
    if not prefix:
        raise GpuSharingError(
            f"no desired configmap name found in pod {metadata.get('namespace')}/{metadata.get('name')} "
            "annotations")
    ref = fraction_container_ref(pod)
    capabilities = f"{prefix}-{'i' if ref.is_init else ''}{ref.index}"
    return SharingConfigMaps(capabilities=capabilities, direct_env=capabilities + "-evar")


# --- ConfigMap contents ----------------------------------------------------------------------------------


def visible_devices(device_ids: Sequence[str], *, cdi: bool = False) -> str:
    """The NVIDIA_VISIBLE_DEVICES value: comma-joined GPU UUIDs, or CDI device names with `--cdi-enabled`."""
    return ",".join(CDI_DEVICE_FORMAT % device if cdi else device for device in device_ids)


def has_visible_devices_env_ref(container: Mapping[str, Any]) -> bool:
    """Whether NVIDIA_VISIBLE_DEVICES comes from a configMapKeyRef, as the admission webhook sets it.

    Pods admitted without it (older webhooks) read the value from E through envFrom instead.
    """
    return any(env.get("name") == NVIDIA_VISIBLE_DEVICES
               and ((env.get("valueFrom") or {}).get("configMapKeyRef") is not None)
               for env in container.get("env") or [])


def _configmap(pod: Mapping[str, Any], name: str, data: dict[str, str]) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": metadata.get("namespace"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": metadata.get("name"),
                                 "uid": metadata.get("uid")}],
        },
        "data": data,
    }


def configmap_bodies(
    pod: Mapping[str, Any], *, device_ids: Sequence[str], portion: str, cdi: bool = False,
) -> list[dict[str, Any]]:
    """The desired ConfigMaps `[C, E]` for a pod being bound.

    `portion` is the BindRequest's `spec.receivedGPU.portion` verbatim (e.g. "0.50"); it is both GPU_PORTION
    and, for backward compatibility, RUNAI_NUM_OF_GPUS.
    """
    names = configmap_names(pod)
    devices = visible_devices(device_ids, cdi=cdi)
    capabilities: dict[str, str] = {}
    direct_env: dict[str, str] = {}
    if has_visible_devices_env_ref(fraction_container_ref(pod).container):
        capabilities[NVIDIA_VISIBLE_DEVICES] = devices
    else:
        direct_env[NVIDIA_VISIBLE_DEVICES] = devices
    capabilities[RUNAI_NUM_OF_GPUS] = portion
    capabilities[GPU_PORTION] = portion
    # E exists even when empty: envFrom refers to it with optional=false, so the container waits for it.
    return [_configmap(pod, names.capabilities, capabilities), _configmap(pod, names.direct_env, direct_env)]


def _owner_keys(configmap: Mapping[str, Any]) -> set[tuple[Any, ...]]:
    return {(o.get("apiVersion"), o.get("kind"), o.get("name"), o.get("uid"))
            for o in (configmap.get("metadata") or {}).get("ownerReferences") or []}


def configmap_merge_patch(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that brings an existing ConfigMap to `desired`, or None when it already is.

    Data keys not in `desired` are kept (a user may have added some); empty desired values never erase; the
    legacy key RUNAI-VISIBLE-DEVICES follows NVIDIA_VISIBLE_DEVICES only where it already exists. A ConfigMap
    left behind by an earlier pod of the same name gets the new owner, so it is collected with this pod.
    """
    patch: dict[str, Any] = {}
    if _owner_keys(existing) != _owner_keys(desired):
        patch["metadata"] = {"ownerReferences": (desired.get("metadata") or {}).get("ownerReferences")}
    current: Mapping[str, str] = existing.get("data") or {}
    wanted = dict(desired.get("data") or {})
    if LEGACY_VISIBLE_DEVICES in current and wanted.get(NVIDIA_VISIBLE_DEVICES):
        wanted[LEGACY_VISIBLE_DEVICES] = wanted[NVIDIA_VISIBLE_DEVICES]
    data = {key: value for key, value in wanted.items() if value and current.get(key) != value}
    if data:
        patch["data"] = data
    return patch or None


# --- GPU group labels ------------------------------------------------------------------------------------


def is_multi_fraction(pod: Mapping[str, Any]) -> bool:
    """A pod asking for several fractional devices (`gpu-fraction-num-devices` > 1)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.GPU_FRACTION_NUM_DEVICES)
    if raw is None:
        return False
    try:
        return int(raw) > 1
    except ValueError as exc:
        raise GpuSharingError(
            f"failed to parse {keys.GPU_FRACTION_NUM_DEVICES} annotation value {raw!r}") from exc


def multi_group_label_key(group: str) -> str:
    return MULTI_GROUP_LABEL_PREFIX + group


def gpu_group_labels(pod: Mapping[str, Any], groups: Sequence[str]) -> dict[str, str]:
    """Labels naming the pod's GPU groups: `runai-gpu-group=<g>`, or `runai-gpu-group/<g>=<g>` per group."""
    if is_multi_fraction(pod):
        return {multi_group_label_key(group): group for group in groups}
    if len(groups) != 1:
        raise GpuSharingError(
            f"a single-device fractional pod needs exactly one GPU group, got {list(groups)}")
    return {keys.GPU_GROUP_LABEL: groups[0]}


def gpu_group_labels_patch(pod: Mapping[str, Any], groups: Sequence[str]) -> dict[str, Any]:
    """Merge patch adding the GPU group labels to a pod."""
    return {"metadata": {"labels": gpu_group_labels(pod, groups)}}


def pod_gpu_groups(pod: Mapping[str, Any]) -> list[str]:
    """Every GPU group a pod belongs to, from the plain label and from the per-group labels."""
    labels: Mapping[str, str] = (pod.get("metadata") or {}).get("labels") or {}
    groups: list[str] = []
    if labels.get(keys.GPU_GROUP_LABEL):
        groups.append(labels[keys.GPU_GROUP_LABEL])
    for key in sorted(labels):
        group = key.removeprefix(MULTI_GROUP_LABEL_PREFIX)
        if key.startswith(MULTI_GROUP_LABEL_PREFIX) and group and group not in groups:
            groups.append(group)
    return groups


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def gpu_group_labels_removal_patch(pod: Mapping[str, Any], groups: Iterable[str] | None = None) -> JsonPatch:
    """JSON patch removing the pod's GPU group labels (rollback of a failed bind).

    Built from the labels the pod has, because a JSON patch `remove` of a missing path fails the whole patch.
    `groups` limits it to those groups; by default every group label goes.
    """
    labels: Mapping[str, str] = (pod.get("metadata") or {}).get("labels") or {}
    wanted = None if groups is None else set(groups)
    ops: JsonPatch = []
    for key in sorted(labels):
        if key == keys.GPU_GROUP_LABEL:
            group = labels[key]
        elif key.startswith(MULTI_GROUP_LABEL_PREFIX):
            group = key.removeprefix(MULTI_GROUP_LABEL_PREFIX)
        else:
            continue
        if wanted is None or group in wanted:
            ops.append({"op": "remove", "path": "/metadata/labels/" + _escape(key)})
    return ops


# --- fake GPUs -------------------------------------------------------------------------------------------


def is_fake_gpu_node(node: Mapping[str, Any] | None, *, fake_gpu_nodes: bool = False) -> bool:
    """Whether nobody will report real GPU ids on this node: the binder flag, or the node's label."""
    if fake_gpu_nodes:
        return True
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return str(labels.get(keys.FAKE_GPU_NODE_LABEL, "")).lower() == "true"


def fake_gpu_device_id(node_name: str, gpu: str | int) -> str:
    """A stable GPU id for a fake node: `GPU-` + a UUID derived from the node and the group (or GPU index).

    The same inputs give the same id in every binder replica and after restarts, as a physical GPU would.
    """
    return f"GPU-{uuid.uuid5(_FAKE_GPU_NAMESPACE, f'{node_name}/{gpu}')}"
