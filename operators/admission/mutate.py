"""Pod mutation of the admission webhook (CREATE only): a pure function from a pod to RFC 6902 operations.

Plugins run in KAI's order: namespace fill-in, GPU sharing wiring, runtime-class enforcement; then, opt-in, the
quota gate (beyond KAI). The operations
are relative to the pod as received, because that is what an AdmissionReview response patches; they never
regenerate what is already there, so a reinvoked webhook (`reinvocationPolicy: IfNeeded`) adds nothing.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from operators.admission.validate import requests_gpu_sharing
from operators.core import keys
from operators.core.gpusharing import CONTAINER_REF_ERROR, ContainerRef, ContainerRefError, fraction_container_ref
from operators.core.resources import QuantityError, parse_quantity

JsonPatch = list[dict[str, Any]]

NAMESPACE_MISMATCH: Final = "error: the namespace from the provided object %s does not match the namespace %s"

NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
RUNAI_NUM_OF_GPUS: Final = "RUNAI_NUM_OF_GPUS"
GPU_PORTION: Final = "GPU_PORTION"
SHARING_ENV_VARS: Final = (NVIDIA_VISIBLE_DEVICES, RUNAI_NUM_OF_GPUS, GPU_PORTION)

SHARED_GPU_SUFFIX: Final = "shared-gpu"
RANDOM_CHARS: Final = 7
RESERVATION_POD_PREFIX: Final = "gpu-reservation"
# Kubernetes' own random-name alphabet (k8s.io/apimachinery util/rand): lowercase, digits, no vowels, so
# generated names never spell words.
_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_MAX_VOLUME_NAME: Final = 63


class AdmissionDenied(Exception):
    """The pod must be refused; `message` is the user-facing denial text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def make_random_suffix(length: int = RANDOM_CHARS) -> str:
    """A random lowercase alphanumeric string for generated names (the shell passes this to mutate_pod)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


# --- names --------------------------------------------------------------------------------------------------


def configmap_prefix(pod: Mapping[str, Any], container_index: int, suffix: str) -> str:
    """`<base>-<suffix>-shared-gpu`, the value of `runai/shared-gpu-configmap`.

    base = first owner's name, else the pod name, else its generateName (the name is not generated yet
    when the mutating webhook runs). It is cut so that every derived name still fits 63 characters: the
    volume `<prefix>-<idx>-vol` must be a DNS label and we keep KAI's extra room for `-evar`.
    """
    metadata = pod.get("metadata") or {}
    owners = metadata.get("ownerReferences") or []
    base = (owners[0].get("name") if owners else None) or metadata.get("name") or ""
    if not base:
        base = (metadata.get("generateName") or "").rstrip("-")
    # Owner names are DNS subdomains and may contain dots, which a volume name (a DNS label) may not.
    base = base.replace(".", "-") or "pod"
    fixed = len(f"-{suffix}-{SHARED_GPU_SUFFIX}") + len(f"-{container_index}") + len("-evar") + len("-vol")
    return f"{base[: _MAX_VOLUME_NAME - fixed]}-{suffix}-{SHARED_GPU_SUFFIX}"


def capabilities_configmap_name(prefix: str, ref: ContainerRef) -> str:
    """ConfigMap `C`: `<prefix>-<idx>`, `<prefix>-i<idx>` for an init container."""
    return f"{prefix}-{'i' if ref.is_init else ''}{ref.index}"


def env_configmap_name(prefix: str, ref: ContainerRef) -> str:
    """ConfigMap `E` (loaded with envFrom): `C-evar`."""
    return capabilities_configmap_name(prefix, ref) + "-evar"


def volume_name(configmap_name: str) -> str:
    return f"{configmap_name}-vol"


# --- a JSON patch built alongside the change it describes --------------------------------------------------


def _pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + str(token).replace("~", "~0").replace("/", "~1") for token in path)


class _Patch:
    """Applies changes to a copy-on-write view of the pod and records them as JSON patch operations.

    Keeping the view current lets later steps see earlier ones (as KAI's plugins share one pod object), and
    lets every operation target a path that exists at that point of the sequence. Only the objects and lists
    on a written path are copied (shallowly, once): most pods get one operation or none, and a deep copy of
    the whole pod was most of a review's cost. The caller's pod is never changed.
    """

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self.doc: dict[str, Any] = dict(pod)
        self.ops: JsonPatch = []
        self._private: list[Any] = [self.doc]  # the copies made so far (kept alive: ids stay unique)
        self._ids = {id(self.doc)}

    def get(self, path: Sequence[str | int]) -> Any:
        node: Any = self.doc
        for token in path:
            if isinstance(node, dict):
                node = node.get(str(token))
            elif isinstance(node, list) and isinstance(token, int) and token < len(node):
                node = node[token]
            else:
                return None
        return node

    def _own(self, value: Any) -> Any:
        """`value` itself when it is one of our copies, else a shallow copy of it that is."""
        if id(value) in self._ids or not isinstance(value, dict | list):
            return value
        copied = dict(value) if isinstance(value, dict) else list(value)
        self._private.append(copied)
        self._ids.add(id(copied))
        return copied

    def _object(self, path: Sequence[str | int]) -> dict[str, Any]:
        """The object at `path`, made writable, adding empty objects for missing (or null) members on the way."""
        node: Any = self.doc
        for depth, token in enumerate(path):
            if isinstance(node, list):  # list items are never created here, only walked through
                index = int(token)
                node[index] = child = self._own(node[index])
                node = child
                continue
            child = node.get(token)
            if child is None:
                child = self._own({})
                self.ops.append({"op": "add", "path": _pointer(path[: depth + 1]), "value": {}})
            else:
                child = self._own(child)
            node[token] = child
            node = child
        if not isinstance(node, dict):
            raise TypeError(f"{_pointer(path)} is not an object")
        return node

    def set(self, path: Sequence[str | int], value: Any) -> None:
        parent = self._object(path[:-1])
        key = str(path[-1])
        if parent.get(key) == value:
            return
        parent[key] = copy.deepcopy(value)
        # `add` on an existing member replaces it (RFC 6902 4.1), so one op covers both cases.
        self.ops.append({"op": "add", "path": _pointer(path), "value": value})

    def append(self, path: Sequence[str | int], value: Any) -> None:
        parent = self._object(path[:-1])
        key = str(path[-1])
        items = parent.get(key)
        if items is None:
            parent[key] = [copy.deepcopy(value)]
            self.ops.append({"op": "add", "path": _pointer(path), "value": [value]})
        else:
            parent[key] = items = self._own(items)
            items.append(copy.deepcopy(value))
            self.ops.append({"op": "add", "path": _pointer([*path, "-"]), "value": value})

    def replace(self, path: Sequence[str | int], index: int, value: Any) -> None:
        parent = self._object(path[:-1])
        key = str(path[-1])
        parent[key] = items = self._own(parent[key])
        items[index] = copy.deepcopy(value)
        self.ops.append({"op": "replace", "path": _pointer([*path, index]), "value": value})


# --- plugins ---------------------------------------------------------------------------------------------


def _fill_namespace(patch: _Patch, namespace: str) -> None:
    own = patch.get(["metadata", "namespace"]) or ""
    if own and namespace and own != namespace:
        raise AdmissionDenied(NAMESPACE_MISMATCH % (own, namespace))
    if not own and namespace:
        patch.set(["metadata", "namespace"], namespace)


def _env_ref(name: str, configmap: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": name}}}


def _is_env_ref(env: Mapping[str, Any], name: str, configmap: str) -> bool:
    # Compare meaning, not bytes: the stored pod may carry defaulted or reordered fields.
    value_from = env.get("valueFrom") or {}
    ref = value_from.get("configMapKeyRef") or {}
    return (not env.get("value") and set(value_from) == {"configMapKeyRef"}
            and ref.get("name") == configmap and ref.get("key") == name and not ref.get("optional"))


def _is_configmap_volume(volume: Mapping[str, Any], configmap: str) -> bool:
    sources = set(volume) - {"name"}
    return sources == {"configMap"} and (volume.get("configMap") or {}).get("name") == configmap


def _wire_gpu_sharing(patch: _Patch, random_suffix: Callable[[], str]) -> None:
    pod = patch.doc
    if not (pod.get("spec") or {}).get("containers") or not requests_gpu_sharing(pod):
        return
    try:
        ref = fraction_container_ref(pod)
    except ContainerRefError as exc:
        raise AdmissionDenied(CONTAINER_REF_ERROR % exc) from exc

    annotation_path = ["metadata", "annotations", keys.SHARED_GPU_CONFIGMAP]
    prefix = patch.get(annotation_path)
    if not prefix:  # never regenerate a set one: the binder derives the ConfigMap names from it
        prefix = configmap_prefix(pod, ref.index, random_suffix())
        patch.set(annotation_path, prefix)
    capabilities = capabilities_configmap_name(prefix, ref)
    direct_env = env_configmap_name(prefix, ref)
    container_path: list[str | int] = ["spec", ref.kind, ref.index]

    for var in SHARING_ENV_VARS:
        env = patch.get([*container_path, "env"]) or []
        same_name = [i for i, item in enumerate(env) if item.get("name") == var]
        if not same_name:
            patch.append([*container_path, "env"], _env_ref(var, capabilities))
        for i in same_name:
            if not _is_env_ref(env[i], var, capabilities):
                patch.replace([*container_path, "env"], i, _env_ref(var, capabilities))

    # The volume is never mounted: it makes the kubelet wait for ConfigMap C, which the binder creates just
    # before binding, and lets the scheduler's configmap predicate see the dependency.
    volume = {"name": volume_name(capabilities), "configMap": {"name": capabilities}}
    volumes = patch.get(["spec", "volumes"]) or []
    same_volume = [i for i, item in enumerate(volumes) if item.get("name") == volume["name"]]
    if not same_volume:
        patch.append(["spec", "volumes"], volume)
    elif not _is_configmap_volume(volumes[same_volume[0]], capabilities):
        patch.replace(["spec", "volumes"], same_volume[0], volume)

    env_from = patch.get([*container_path, "envFrom"]) or []
    if not any((item.get("configMapRef") or {}).get("name") == direct_env for item in env_from):
        patch.append([*container_path, "envFrom"], {"configMapRef": {"name": direct_env, "optional": False}})


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """A GPU pod for runtime-class enforcement: a sharing annotation or `nvidia.com/gpu` on a container."""
    if requests_gpu_sharing(pod):
        return True
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            quantity = (resources.get(section) or {}).get(keys.GPU_RESOURCE)
            if quantity is None:
                continue
            try:
                if parse_quantity(quantity) > 0:
                    return True
            except QuantityError:
                return True  # malformed: the API server refuses it anyway; do not hide it behind us
    return False


def _enforce_runtime_class(patch: _Patch, runtime_class_name: str | None,
                           fraction_runtime_class_name: str | None = None) -> None:
    # `runtime_class_name` goes to every GPU pod (KAI up to v0.15, gpuPodRuntimeClassName); the fraction one
    # only to GPU-sharing pods (KAI v0.16+, gpuFractionRuntimeClassName) and wins for them.
    metadata = patch.doc.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or ""
    if name.startswith(RESERVATION_POD_PREFIX) or (patch.doc.get("spec") or {}).get("runtimeClassName"):
        return
    if fraction_runtime_class_name and requests_gpu_sharing(patch.doc):
        patch.set(["spec", "runtimeClassName"], fraction_runtime_class_name)
    elif runtime_class_name and requests_gpu(patch.doc):
        patch.set(["spec", "runtimeClassName"], runtime_class_name)


def mutate_pod(
    pod: Mapping[str, Any],
    namespace: str,
    *,
    runtime_class_name: str | None,
    random_suffix: Callable[[], str] = make_random_suffix,
    scheduler_name: str = keys.SCHEDULER_NAME,
    fraction_runtime_class_name: str | None = None,
    quota_gate: bool = False,
) -> JsonPatch:
    """JSON patch operations that mutate a pod on CREATE.

    `namespace` is the AdmissionRequest's namespace. Raises AdmissionDenied with KAI's message when the pod
    must be refused (namespace mismatch, unknown `gpu-fraction-container-name`). Pods of other schedulers get
    no operation.
    """
    if (pod.get("spec") or {}).get("schedulerName") != scheduler_name:
        return []
    patch = _Patch(pod)
    _fill_namespace(patch, namespace)
    _wire_gpu_sharing(patch, random_suffix)
    _enforce_runtime_class(patch, runtime_class_name, fraction_runtime_class_name)
    if quota_gate:
        _add_quota_gate(patch)
    return patch.ops


def _add_quota_gate(patch: _Patch) -> None:
    """Quota gates (beyond KAI, `--quota-gates`): the pod waits behind keys.QUOTA_GATE until the scheduler's
    quotagates plugin lifts it, so the autoscaler never sees a pod that only quota holds back. A pod already
    bound (spec.nodeName) cannot be gated; a reinvocation adds nothing."""
    if patch.get(["spec", "nodeName"]):
        return
    gates = patch.get(["spec", "schedulingGates"]) or []
    if any(g.get("name") == keys.QUOTA_GATE for g in gates if isinstance(g, dict)):
        return
    patch.append(["spec", "schedulingGates"], {"name": keys.QUOTA_GATE})
