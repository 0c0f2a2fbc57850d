"""PodGroup `status.resourcesStatus` summed over the group's pods. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from operators.core import keys, resources
from operators.core.api.podgroup import PodGroupRecord, podgroup_record, podgroup_status_record, resources_status_patch
from operators.core.api.podgroup import counts_patch as stored_counts_patch
from operators.core.resources import ResourceList

Obj = Mapping[str, Any]
# A pod's DRA GPUs by device class (KAI's ExtractDRAGPUResources), counted in requested and allocated as KAI does.
DraGpus = Callable[[Obj], Mapping[str, int]]


def _no_dra(_: Obj) -> Mapping[str, int]:
    return {}


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pods_of(podgroup: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The pods pointing at the PodGroup through their `pod-group-name` annotation, in its namespace."""
    return _pods_of(podgroup_record(podgroup), pods)


def _pods_of(record: PodGroupRecord, pods: Iterable[Obj]) -> list[Obj]:
    name, namespace = record.name, record.namespace
    return [pod for pod in pods
            if _meta(pod).get("namespace") == namespace
            and (_meta(pod).get("annotations") or {}).get(keys.POD_GROUP_NAME) == name]


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def is_active(pod: Obj) -> bool:
    return _phase(pod) in ("Pending", "Running")


def is_allocated(pod: Obj) -> bool:
    """Running, or bound but not started yet (Pending with PodScheduled=True)."""
    phase = _phase(pod)
    if phase == "Running":
        return True
    if phase != "Pending":
        return False
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == keys.CONDITION_POD_SCHEDULED:
            return bool(condition.get("status") == "True")
    return False


def _container_requests(pod: Obj) -> ResourceList:
    # What Kubernetes reserves for the pod (KAI v0.18 counts it so too): the init peak or the main containers plus
    # the sidecars, whichever is larger, and the overhead.
    # An in-place resize counts at the larger of what the containers were given and what their spec asks now.
    return resources.pod_container_requests(pod.get("spec") or {}, pod.get("status"))


def _gpu_request(pod: Obj, requests: ResourceList) -> resources.GpuRequest:
    try:
        return resources.gpu_request(_meta(pod).get("annotations"), requests)
    except resources.GpuRequestError:
        return resources.GpuRequest()  # admission rejects these; count the plain requests only


def requested(pod: Obj) -> ResourceList:
    out = _container_requests(pod)
    gpu = _gpu_request(pod, out)
    if gpu.portion is not None:
        out = resources.add(out, {keys.GPU_RESOURCE: Decimal(repr(gpu.portion)) * gpu.num_devices})
    if gpu.memory_mib is not None:
        out = resources.add(out, {keys.GPU_MEMORY_RESOURCE: Decimal(gpu.memory_mib * gpu.num_devices)})
    return out


def allocated(pod: Obj, nodes_by_name: Mapping[str, Obj]) -> ResourceList:
    out = _container_requests(pod)
    if (_meta(pod).get("annotations") or {}).get(keys.RECEIVED_RESOURCE_TYPE) != keys.RESOURCE_TYPE_FRACTION:
        return out
    gpu = _gpu_request(pod, out)
    portion: Decimal | None = None
    if gpu.portion is not None:
        portion = Decimal(repr(gpu.portion))
    elif gpu.memory_mib is not None:
        node = nodes_by_name.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        node_memory = resources.node_gpu_memory_mib(_meta(node).get("labels")) if node else None
        if node_memory:
            # A memory share is rarely a short decimal: keep statuses readable at a micro-GPU resolution.
            portion = (Decimal(gpu.memory_mib) / Decimal(node_memory)).quantize(Decimal("0.000001"))
    if portion is None:
        return out
    return resources.add(out, {keys.GPU_RESOURCE: portion * gpu.num_devices})


def priority_value(podgroup: Obj, priority_classes: Mapping[str, Obj]) -> int:
    """The PodGroup's PriorityClass value, else the cluster's globalDefault, else 50."""
    return _priority_value(podgroup_record(podgroup), priority_classes)


def _priority_value(record: PodGroupRecord, priority_classes: Mapping[str, Obj]) -> int:
    name = record.priority_class
    if name and name in priority_classes:
        return int(priority_classes[name].get("value") or 0)
    for priority_class in priority_classes.values():
        if priority_class.get("globalDefault"):
            return int(priority_class.get("value") or 0)
    return keys.DEFAULT_PODGROUP_PRIORITY


def is_preemptible(podgroup: Obj, priority_classes: Mapping[str, Obj]) -> bool:
    return _is_preemptible(podgroup_record(podgroup), priority_classes)


def _is_preemptible(record: PodGroupRecord, priority_classes: Mapping[str, Obj]) -> bool:
    if record.preemptibility in (keys.PREEMPTIBLE, keys.NON_PREEMPTIBLE):
        return record.preemptibility == keys.PREEMPTIBLE
    return _priority_value(record, priority_classes) < keys.NON_PREEMPTIBLE_PRIORITY_THRESHOLD


def resources_status(podgroup: Obj, pods: Iterable[Obj], nodes_by_name: Mapping[str, Obj],
                     priority_classes: Mapping[str, Obj], dra_gpus: DraGpus = _no_dra) -> dict[str, dict[str, str]]:
    """`status.resourcesStatus` of a PodGroup from its pods (callers may pass all pods: they are filtered).

    `priority_classes` maps PriorityClass name to object. allocatedNonPreemptible is empty for a preemptible
    group, so a group that turns preemptible stops counting against in-quota-only accounting.
    """
    record = podgroup_record(podgroup)
    members = _pods_of(record, pods)

    def with_dra(pod: Obj, amounts: ResourceList) -> ResourceList:
        extra = dra_gpus(pod)
        return resources.add(amounts, {k: Decimal(v) for k, v in extra.items()}) if extra else amounts

    total_requested = resources.total(with_dra(pod, requested(pod)) for pod in members if is_active(pod))
    total_allocated = resources.total(with_dra(pod, allocated(pod, nodes_by_name)) for pod in members
                                      if is_allocated(pod))
    if record.preemptibility == keys.SEMI_PREEMPTIBLE:
        core = _semi_preemptible_core(record, [pod for pod in members if is_allocated(pod)])
        non_preemptible = resources.total(with_dra(pod, allocated(pod, nodes_by_name)) for pod in core)
    else:
        non_preemptible = {} if _is_preemptible(record, priority_classes) else total_allocated
    return {
        "allocated": resources.format_resource_list(total_allocated),
        "allocatedNonPreemptible": resources.format_resource_list(non_preemptible),
        "requested": resources.format_resource_list(total_requested),
    }


def semi_preemptible_core(podgroup: Obj, allocated_pods: list[Obj]) -> list[Obj]:
    """The allocated pods of a semi-preemptible PodGroup that are its non-preemptible core: per leaf SubGroup its
    minMember pods, else max(minMember, minNonPreemptible) pods; the oldest first (the scheduler's task order
    for pods without a leader or a task priority)."""
    return _semi_preemptible_core(podgroup_record(podgroup), allocated_pods)


def _semi_preemptible_core(record: PodGroupRecord, allocated_pods: list[Obj]) -> list[Obj]:
    subgroups = record.subgroups
    if subgroups:
        # Pods belong to leaves: a parent SubGroup (named as some SubGroup's parent) holds none of its own.
        parents = {s.parent for s in subgroups}
        limits = {s.name: 0 if s.name in parents else s.min_member for s in subgroups}
    else:
        limits = {"": max(record.min_member, record.min_non_preemptible or 0)}
    by_leaf: dict[str, list[Obj]] = {}
    for pod in allocated_pods:
        leaf = ((pod.get("metadata") or {}).get("labels") or {}).get(keys.SUBGROUP_LABEL, "") if subgroups else ""
        by_leaf.setdefault(leaf, []).append(pod)
    core: list[Obj] = []
    for leaf, members in by_leaf.items():
        members.sort(key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), str(p["metadata"]["name"])))
        core.extend(members[:limits.get(leaf, 0)])
    return core


def status_patch(podgroup: Obj, computed: Mapping[str, Mapping[str, str]]) -> dict[str, Any] | None:
    """A JSON merge patch of `status.resourcesStatus`, or None when the stored one is already equal (by value)."""
    return resources_status_patch(podgroup_status_record(podgroup), computed)


def pod_counts(podgroup: Obj, pods: Iterable[Obj]) -> dict[str, int]:
    """`status.running` / `status.pending`: the group's pods in phase Running / Pending (for `kubectl get pg`)."""
    phases = [_phase(pod) for pod in pods_of(podgroup, pods)]
    return {"running": phases.count("Running"), "pending": phases.count("Pending")}


def counts_patch(podgroup: Obj, counts: Mapping[str, int]) -> dict[str, int]:
    """The counts that differ from the stored ones (a missing stored count differs from every value)."""
    return stored_counts_patch(podgroup_status_record(podgroup), counts)
