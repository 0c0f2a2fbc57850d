"""Running the decision core on (edited) snapshots, and the small views the reports share. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.records import PodRecord
from operators.scheduler.decide.simulation import apply_decisions
from operators.scheduler.decide.snapshot import Snapshot
from operators.scheduler.decide.units import GB, GPU, MB, MILLI, queue_amount

# Queue units of the three queue resources: GPUs, millicores, megabytes; the core's queue vectors are in
# micro-GPUs, millicores and bytes (`operators.scheduler.decide.units`).
RESOURCES = ("gpu", "cpu", "memory")
_QUEUE_SCALE = (GPU, 1, MB)  # core units per queue unit
FINISHED = ("Succeeded", "Failed")


def to_queue_units(value: float, resource: int) -> float:
    """A core queue amount (micro-GPUs, millicores, bytes) in Queue units (GPUs, millicores, MB)."""
    if value == -1:
        return value
    return value / _QUEUE_SCALE[resource]  # correctly rounded: an exact amount prints as written


def from_queue_units(value: float, resource: int) -> int:
    """A Queue-unit amount in core units (the nearest integer); -1 stays -1 (unlimited)."""
    return -1 if value == -1 else queue_amount(value, _QUEUE_SCALE[resource])


def fmt_amount(value: float, resource: int) -> str:
    """An amount for people: GPU devices, millicores -> cores, bytes -> GB."""
    if value == -1:
        return "unlimited"
    if resource == 0:
        return f"{humanize(value)} GPU" + ("" if value == 1 else "s")
    if resource == 1:
        return f"{humanize(value / MILLI)} core" + ("" if value == MILLI else "s")
    return f"{humanize(value / GB)} GB"


def fmt_queue_value(value: float, resource: int) -> str:
    """A core queue amount as written in a Queue spec (GPUs, millicores, MB)."""
    return "-1" if value == -1 else humanize(to_queue_units(value, resource))


def one_line(message: str) -> str:
    """A core message on one line (KAI's fit summaries end in ".." when the last reason has its own period)."""
    message = message.replace("\n", "")
    return message[:-1] if message.endswith("..") else message


def is_placed(pod: PodRecord) -> bool:
    return bool(pod.node_name) and pod.phase not in FINISHED


def is_pending(pod: PodRecord) -> bool:
    return not pod.node_name and pod.phase == "Pending" and not pod.deleting


def pods_of(snapshot: Snapshot, namespace: str, pod_group: str) -> list[PodRecord]:
    return [p for p in snapshot.pods if p.namespace == namespace and p.pod_group == pod_group]


def pod_vector(pod: PodRecord, node_gpu_memory_mib: int | None = None) -> tuple[float, float, float]:
    """(GPU devices, millicores, bytes) a pod asks for; shares count as their portion of a device."""
    gpu = float(pod.gpu.whole)
    if pod.gpu.portion is not None:
        gpu += pod.gpu.portion * pod.gpu.num_devices
    elif pod.gpu.memory_mib is not None and node_gpu_memory_mib:
        gpu += pod.gpu.memory_mib / node_gpu_memory_mib * pod.gpu.num_devices
    return gpu, pod.cpu, pod.memory


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the core does with one PodGroup within a few cycles."""

    bound: tuple[tuple[str, str], ...]  # (pod, node)
    pipelined: tuple[tuple[str, str], ...]
    cycle: int  # the cycle in which it was bound (0 = not bound)
    decisions: Decisions  # of the first cycle

    @property
    def scheduled(self) -> bool:
        return bool(self.bound) or bool(self.pipelined)


def outcome(snapshot: Snapshot, config: SchedulerConfig, now: float, namespace: str, pod_group: str,
            cycles: int = 2) -> Outcome:
    """Run up to `cycles` cycles (binds and evictions applied in between) until the group gets pods bound."""
    first: Decisions | None = None
    pipelined: tuple[tuple[str, str], ...] = ()
    for cycle in range(1, cycles + 1):
        d = run_cycle(snapshot, config, now + (cycle - 1) * config.schedule_period)
        first = first or d
        bound = tuple(sorted((b.pod, b.node) for b in d.binds
                             if b.namespace == namespace and b.pod_group == pod_group))
        if bound:  # the core binds a gang only once its minimum fits
            return Outcome(bound, (), cycle, first)
        pipelined = pipelined or tuple(sorted((p.pod, p.node) for p in d.pipelined
                                              if p.namespace == namespace and p.pod_group == pod_group))
        if not d.binds and not d.evictions and not d.ungates:
            break  # nothing changes any more
        snapshot = apply_decisions(snapshot, d)
    assert first is not None
    return Outcome((), pipelined, 0, first)


def without_pods(snapshot: Snapshot, keys: Iterable[str]) -> Snapshot:
    """The snapshot as if these pods ("namespace/name") had finished."""
    gone = set(keys)
    return replace(snapshot, pods=tuple(p for p in snapshot.pods if p.key not in gone),
                   bindrequests=tuple(b for b in snapshot.bindrequests if f"{b.namespace}/{b.pod_name}" not in gone))


def edit_pods(snapshot: Snapshot, change: Callable[[PodRecord], PodRecord]) -> Snapshot:
    return replace(snapshot, pods=tuple(change(p) for p in snapshot.pods))
