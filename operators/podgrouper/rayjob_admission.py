"""Kueue-style admission of suspended RayJobs, as a pure decision.

A RayJob with the queue label that was created with `spec.suspend: true` stays suspended until its whole gang (the
head plus the minimum of every worker group, as the pod-grouper counts it) fits in its queue: within the limit of
the queue and of every ancestor, given what they have allocated. Or until the ProvisioningRequest of its gang
reports `Provisioned=True`. Then it is un-suspended and marked admitted, so that it is never un-suspended again
by us (a user who suspends it later keeps it suspended). A RayJob created unsuspended is marked the same way
when first seen. Every decision carries the message of an event on the
RayJob.

Capacity is not checked here: once admitted, the scheduler holds the gang as a whole (no pod binds alone) and, for
a workload that opted into provisioning, asks the cluster autoscaler for the nodes; no head pod holds resources
while the workers cannot start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from operators.core import keys
from operators.core.api.queue import queue_record, queue_status_record
from operators.core.resources import QuantityError, pod_container_requests
from operators.core.units import GPU, MILLI
from operators.podgrouper.grouping.model import GroupingFailure
from operators.podgrouper.grouping.ray import cluster_gang

ADMITTED_ANNOTATION = "kai.scheduler/admitted"
REASON_ADMITTED = "Admitted"
REASON_WAITING = "WaitingForQuota"
REASON_INVALID = "InvalidRayJob"
UNLIMITED = -1.0
_RESOURCES = (("gpu", "GPUs", 1.0), ("cpu", "CPU cores", 1e-3), ("memory", "GB memory", 1e-9))


@dataclass(frozen=True, slots=True)
class QueueView:
    """Per resource (gpu devices, cpu millicores, memory bytes): the limit (-1 = none) and what is allocated."""

    name: str
    parent: str
    limit: tuple[float, float, float]
    allocated: tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class Decision:
    admit: bool
    reason: str
    message: str


def humanize(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def queue_view(obj: Mapping[str, Any]) -> QueueView:
    """A Queue's limits (its record's, in core units) and its status.allocated."""
    rec, allocated = queue_record(obj), queue_status_record(obj).allocated
    gpu, cpu, memory = rec.limit
    return QueueView(
        name=rec.name, parent=rec.parent,
        # Micro-GPUs back to devices by division: the quotient is the decimal the spec wrote.
        limit=(gpu if gpu == UNLIMITED else gpu / GPU, float(cpu), float(memory)),
        allocated=(float(allocated.get(keys.GPU_RESOURCE, Decimal(0))),
                   float(allocated.get("cpu", Decimal(0))) * MILLI, float(allocated.get("memory", Decimal(0)))))


def is_candidate(job: Mapping[str, Any], queue_label: str = keys.QUEUE_LABEL) -> bool:
    """Ours to admit: queue label, suspended, not marked admitted (see `needs_mark`)."""
    meta = job.get("metadata") or {}
    return (bool((meta.get("labels") or {}).get(queue_label)) and (job.get("spec") or {}).get("suspend") is True
            and ADMITTED_ANNOTATION not in (meta.get("annotations") or {}) and not meta.get("deletionTimestamp"))


def needs_mark(job: Mapping[str, Any], queue_label: str = keys.QUEUE_LABEL) -> bool:
    """A RayJob with the queue label seen running without our mark was created unsuspended: marking it admitted
    keeps a later suspension by its user in place (we only ever un-suspend what was created suspended)."""
    meta = job.get("metadata") or {}
    return (bool((meta.get("labels") or {}).get(queue_label)) and (job.get("spec") or {}).get("suspend") is not True
            and ADMITTED_ANNOTATION not in (meta.get("annotations") or {}) and not meta.get("deletionTimestamp"))


def _pod_requests(template: Any) -> tuple[float, float, float]:
    spec = template.get("spec") if isinstance(template, Mapping) else None
    requests = pod_container_requests(spec if isinstance(spec, Mapping) else {})
    gpu = requests.get(keys.GPU_RESOURCE, Decimal(0))
    return float(gpu), float(requests.get("cpu", Decimal(0))) * MILLI, float(requests.get("memory", Decimal(0)))


def gang_request(job: Mapping[str, Any]) -> tuple[int, tuple[float, float, float]]:
    """Pods and resources of the RayJob's gang: the head and the minimum of every worker group."""
    cluster_spec = (job.get("spec") or {}).get("rayClusterSpec") or {}
    pods, subgroups = cluster_gang({"spec": cluster_spec})
    counts = {s.name: s.min_member for s in subgroups}
    total = list(_pod_requests((cluster_spec.get("headGroupSpec") or {}).get("template")))
    for index, group in enumerate(cluster_spec.get("workerGroupSpecs") or []):
        if not isinstance(group, Mapping):
            continue
        count = counts.get(str(group.get("groupName") or f"worker-group-{index}"), 0)
        each = _pod_requests(group.get("template"))
        for r in range(3):
            total[r] += each[r] * count
    return pods, (total[0], total[1], total[2])


def _lineage(queue: str, queues: Mapping[str, QueueView]) -> list[QueueView] | None:
    out: list[QueueView] = []
    seen: set[str] = set()
    name = queue
    while name and name not in seen:
        seen.add(name)
        view = queues.get(name)
        if view is None:
            return out or None
        out.append(view)
        name = view.parent
    return out


def decide(job: Mapping[str, Any], queues: Mapping[str, QueueView], provisioned: str = "",
           queue_label: str = keys.QUEUE_LABEL) -> Decision:
    """Admit or wait. `provisioned`: the name of the gang's provisioned ProvisioningRequest, if any."""
    queue = str(((job.get("metadata") or {}).get("labels") or {}).get(queue_label) or "")
    try:
        pods, request = gang_request(job)
    except (GroupingFailure, QuantityError, ValueError) as exc:
        return Decision(False, REASON_INVALID, f"RayJob stays suspended: {exc}")
    if provisioned:
        return Decision(True, REASON_ADMITTED, f"Admitted: ProvisioningRequest {provisioned} is provisioned for "
                                               f"the gang of {pods} pods")
    lineage = _lineage(queue, queues)
    if lineage is None:
        return Decision(False, REASON_WAITING, f"RayJob stays suspended: queue '{queue}' does not exist")
    for q in lineage:
        for r, (_, noun, scale) in enumerate(_RESOURCES):
            limit = q.limit[r]
            if limit != UNLIMITED and request[r] > 0 and q.allocated[r] + request[r] > limit + 1e-9:
                return Decision(False, REASON_WAITING, (
                    f"RayJob stays suspended: its gang of {pods} pods needs {humanize(request[r] * scale)} {noun}; "
                    f"queue '{q.name}' has {humanize(q.allocated[r] * scale)} allocated of a limit of "
                    f"{humanize(limit * scale)}"))
    wanted = ", ".join(f"{humanize(request[r] * scale)} {noun}" for r, (_, noun, scale) in enumerate(_RESOURCES)
                       if request[r] > 0)
    return Decision(True, REASON_ADMITTED, f"Admitted: the gang of {pods} pods ({wanted}) fits in queue '{queue}'")
