"""GPU reservation pods of fractional binds and their garbage collection, as pure functions.

A reservation pod asks the kubelet for one whole `nvidia.com/gpu` on the chosen node and reports which
physical GPU it got in its `run.ai/reserve_for_gpu_index` annotation; the fractional pods of that GPU group
then share that device. The pod is bound directly (`spec.nodeName`), bypassing every scheduler, and lives
exactly as long as the group has live fractional pods.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from operators.binder.gpusharing import fake_gpu_device_id, pod_gpu_groups
from operators.core import keys

RESERVATION_POD_PREFIX: Final = "gpu-reservation"
RESERVATION_CONTAINER: Final = "resource-reservation"
RESERVATION_RANDOM_CHARS: Final = 5
FAKE_GPU_IMAGE: Final = "ubuntu"
FOUND_POD_WITHOUT_RESERVATION: Final = "Found pod without reservation"
APP_LABEL: Final = "app"
_MAX_NAME: Final = 253  # a pod name is a DNS subdomain
_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' random-name alphabet


def make_random_suffix(length: int = RESERVATION_RANDOM_CHARS) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def reservation_pod_name(node_name: str, suffix: str) -> str:
    """`gpu-reservation-<node>-<suffix>`, the node part cut so the whole stays a valid pod name."""
    room = _MAX_NAME - len(RESERVATION_POD_PREFIX) - len(suffix) - 2
    # A cut may leave a trailing '.' or '-', which a DNS subdomain forbids before the next '-'.
    node_part = node_name[:room].rstrip(".-")
    return f"{RESERVATION_POD_PREFIX}-{node_part}-{suffix}"


def _resources(extra: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    resources: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for section in ("requests", "limits"):
        resources[section].update(((extra or {}).get(section)) or {})
        resources[section][keys.GPU_RESOURCE] = "1"  # the one thing the pod is for; not overridable
    return resources


def reservation_pod_manifest(
    node_name: str,
    gpu_group: str,
    *,
    suffix: str,
    image: str,
    namespace: str = keys.RESERVATION_NAMESPACE,
    service_account: str = keys.RESERVATION_SERVICE_ACCOUNT,
    app_label_value: str = keys.RESERVATION_APP_LABEL_VALUE,
    runtime_class_name: str | None = None,
    extra_resources: Mapping[str, Any] | None = None,
    fake_gpu: bool = False,
) -> dict[str, Any]:
    """The reservation pod for `gpu_group` on `node_name`.

    `extra_resources` is the `--resource-reservation-pod-resources` ResourceRequirements (requests/limits
    of cpu, memory, ...). With `fake_gpu`, nothing on the node would ever report a device, so the pod is born
    with its deterministic device id already annotated and runs an idle image; the binder's wait for the
    annotation then returns at once.
    """
    annotations = {keys.DO_NOT_DISRUPT: "true"}
    container: dict[str, Any] = {
        "name": RESERVATION_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "resources": _resources(extra_resources),
    }
    if fake_gpu:
        annotations[keys.RESERVE_FOR_GPU_INDEX] = fake_gpu_device_id(node_name, gpu_group)
        container["image"] = FAKE_GPU_IMAGE
        container["args"] = ["sleep", "infinity"]
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "serviceAccountName": service_account,
        "containers": [container],
    }
    if runtime_class_name:
        spec["runtimeClassName"] = runtime_class_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_pod_name(node_name, suffix),
            "namespace": namespace,
            "labels": {APP_LABEL: app_label_value, keys.GPU_GROUP_LABEL: gpu_group},
            "annotations": annotations,
        },
        "spec": spec,
    }


def is_reservation_pod(pod: Mapping[str, Any], namespace: str = keys.RESERVATION_NAMESPACE) -> bool:
    """KAI tells reservation pods apart by namespace alone."""
    return (pod.get("metadata") or {}).get("namespace") == namespace


def reserved_device_id(reservation_pod: Mapping[str, Any]) -> str | None:
    """The GPU id a reservation pod reported, or None while it has not (yet)."""
    annotations = (reservation_pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(keys.RESERVE_FOR_GPU_INDEX) or None


# --- garbage collection --------------------------------------------------------------------------------


def pods_by_gpu_group(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Group pods by GPU group, reading single-device and per-group (multi-device) labels alike.

    A multi-device pod appears under each of its groups.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        for group in pod_gpu_groups(pod):
            groups.setdefault(group, []).append(pod)
    return groups


class SyncDecision(NamedTuple):
    reservation_pods_to_delete: list[Mapping[str, Any]]
    fraction_pods_to_delete: list[Mapping[str, Any]]  # delete with reason FOUND_POD_WITHOUT_RESERVATION


def _phase(pod: Mapping[str, Any]) -> str:
    # A pod not yet given a status is as alive as a Pending one.
    return str((pod.get("status") or {}).get("phase") or "Pending")


def sync_decisions(
    pods_of_group: Sequence[Mapping[str, Any]], *, reservation_namespace: str = keys.RESERVATION_NAMESPACE,
) -> SyncDecision:
    """What to delete for one GPU group, given every pod labelled with it.

    Fractional pods that are Running without a reservation lose their GPU isolation and are deleted (their
    controllers recreate them); Pending ones are left, as their bind may be creating the reservation right
    now. A reservation with no Running or Pending fractional pod holds a GPU for nobody and is deleted
    (grace period 0). Duplicate reservation pods are kept while the group lives: the fractional pods may use
    the device of either, and KAI does not pick one either.
    """
    reservations = [pod for pod in pods_of_group if is_reservation_pod(pod, reservation_namespace)]
    live_fractions = [pod for pod in pods_of_group if not is_reservation_pod(pod, reservation_namespace)
                      and _phase(pod) in ("Running", "Pending")]
    if live_fractions and not reservations:
        return SyncDecision([], [pod for pod in live_fractions if _phase(pod) == "Running"])
    if reservations and not live_fractions:
        return SyncDecision(reservations, [])
    return SyncDecision([], [])


def _identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    metadata = pod.get("metadata") or {}
    return (str(metadata.get("namespace")), str(metadata.get("name")), str(metadata.get("uid")))


def sync_all(
    pods: Iterable[Mapping[str, Any]], *, reservation_namespace: str = keys.RESERVATION_NAMESPACE,
) -> SyncDecision:
    """`sync_decisions` over every group of `pods` (binder start-up, a node's groups), each pod once.

    `pods` must hold every pod of each group it mentions (the reservation pods too, which live in their own
    namespace), or a group would be judged on part of its members.
    """
    reservations: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    fractions: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for group_pods in pods_by_gpu_group(pods).values():
        decision = sync_decisions(group_pods, reservation_namespace=reservation_namespace)
        reservations.update((_identity(pod), pod) for pod in decision.reservation_pods_to_delete)
        fractions.update((_identity(pod), pod) for pod in decision.fraction_pods_to_delete)
    return SyncDecision(list(reservations.values()), list(fractions.values()))
