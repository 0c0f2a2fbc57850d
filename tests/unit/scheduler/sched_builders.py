"""Small builders of Kubernetes objects (plain dicts) for scheduler tests."""

from __future__ import annotations

import random
from typing import Any

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.snapshot import snapshot_from_objects

T0 = "2025-01-01T00:00:00Z"


def node(name: str, gpus: int = 8, cpu: str = "64", memory: str = "512Gi", *, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, ready: bool = True, unschedulable: bool = False,
         gpu_memory: int | None = 40960, pods: int = 110) -> dict[str, Any]:
    lab = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpus and gpu_memory:
        lab["nvidia.com/gpu.memory"] = str(gpu_memory)
        lab["nvidia.com/gpu.count"] = str(gpus)
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"unschedulable": unschedulable}
    if taints:
        spec["taints"] = taints
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab}, "spec": spec,
            "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def queue(name: str, parent: str = "", *, gpu: tuple[float, float, float] = (-1, -1, 1),
          cpu: tuple[float, float, float] = (-1, -1, 1), memory: tuple[float, float, float] = (-1, -1, 1),
          priority: int | None = None, created: str = T0, display: str = "") -> dict[str, Any]:
    """Resource tuples are (quota, limit, overQuotaWeight)."""
    def res(t: tuple[float, float, float]) -> dict[str, float]:
        return {"quota": t[0], "limit": t[1], "overQuotaWeight": t[2]}
    spec: dict[str, Any] = {"resources": {"gpu": res(gpu), "cpu": res(cpu), "memory": res(memory)}}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    if display:
        spec["displayName"] = display
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def podgroup(name: str, queue_name: str = "q", min_member: int = 1, *, priority_class: str = "train",
             subgroups: list[dict[str, Any]] | None = None, namespace: str = "ns", created: str = T0,
             preemptibility: str = "", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue_name, "priorityClassName": priority_class}
    if subgroups:
        spec["subGroups"] = subgroups
    if preemptibility:
        spec["preemptibility"] = preemptibility
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created, "uid": f"uid-{name}",
                         "annotations": annotations or {}}, "spec": spec}


def pod(name: str, group: str | None, *, gpus: int = 0, cpu: str = "1", memory: str = "1Gi", namespace: str = "ns",
        node_name: str = "", phase: str = "Pending", fraction: str | None = None, gpu_memory: str | None = None,
        devices: int | None = None, subgroup: str | None = None, labels: dict[str, str] | None = None,
        created: str = T0, scheduler: str = "kai-scheduler", gpu_group: str | None = None,
        spec_extra: dict[str, Any] | None = None, deleting: bool = False) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if group:
        annotations["pod-group-name"] = group
    if fraction:
        annotations["gpu-fraction"] = fraction
    if gpu_memory:
        annotations["gpu-memory"] = gpu_memory
    if devices:
        annotations["gpu-fraction-num-devices"] = str(devices)
    lab = dict(labels or {})
    if subgroup:
        lab["kai.scheduler/subgroup-name"] = subgroup
    if gpu_group:
        lab["runai-gpu-group"] = gpu_group
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"schedulerName": scheduler,
                            "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    spec.update(spec_extra or {})
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": annotations, "labels": lab,
                            "creationTimestamp": created, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = T0
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def gang(name: str, n: int, *, queue_name: str = "q", min_member: int | None = None, **pod_kwargs: Any
         ) -> list[dict[str, Any]]:
    objs = [podgroup(name, queue_name, n if min_member is None else min_member,
                     namespace=pod_kwargs.get("namespace", "ns"))]
    objs += [pod(f"{name}-{i}", name, **pod_kwargs) for i in range(n)]
    return objs


def preemptible_fill(rng: random.Random, queue_name: str, n_nodes: int, least: int, prefix: str
                     ) -> list[dict[str, Any]]:
    """Nodes n0.. (8 GPUs each) each filled with `least`-8 GPUs of Running preemptible single-pod jobs of 1, 2 or 4
    GPUs, named `prefix` and a running number: the victims of the disruptive actions' tests."""
    objs: list[dict[str, Any]] = []
    job = 0
    for i in range(n_nodes):
        used = rng.randint(least, 8)
        while used > 0:
            gpus = min(used, rng.choice([1, 2, 4]))
            used -= gpus
            name = f"{prefix}{job}"
            job += 1
            objs += [podgroup(name, queue_name, priority_class="build-preemptible",
                              created=f"2025-01-01T00:{job:02d}:00Z"),
                     pod(f"{name}-0", name, gpus=gpus, cpu=str(rng.choice([1, 2])), node_name=f"n{i}",
                         phase="Running")]
    return objs


PRIORITY_CLASSES = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
    for n, v in (("train", 50), ("build-preemptible", 75), ("build", 100), ("inference", 125))
]


def cycle(objects: list[dict[str, Any]], config: SchedulerConfig | None = None, now: float = 1e9) -> Decisions:
    return run_cycle(snapshot_from_objects(objects), config or SchedulerConfig(), now)


def bound(d: Decisions) -> dict[str, str]:
    return {b.pod: b.node for b in d.binds}
