"""Human messages with KAI's exact wording: fit summaries, job errors, events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators.core import keys
from operators.scheduler.decide.decisions import Reason
from operators.scheduler.decide.model import PENDING
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.units import CPU_AXIS, GB, GPU_AXIS, MEMORY_AXIS, MILLI, to_gpus

if TYPE_CHECKING:
    from operators.scheduler.decide.model import Job
    from operators.scheduler.decide.session import Session

NO_NODES = "no nodes with enough resources were found"
DEFAULT_POD_ERROR = "Unable to schedule pod"
DEFAULT_PODGROUP_ERROR = "Unable to schedule podgroup"

_UNITS = {
    # resource axis -> (limit noun, unit noun, NP request noun)
    GPU_AXIS: ("GPUs", "GPUs", "GPUs"),
    CPU_AXIS: ("CPU cores", "cores", "CPU cores"),
    MEMORY_AXIS: ("memory", "GB", "GB memory"),
}
_PER_CORE, _PER_GB = 1 / MILLI, 1 / GB  # multipliers: the same floats as 1e-3 and 1e-9


def _shown(resource: int, value: int) -> float:
    """A core amount (micro-GPUs, millicores, bytes) in the unit KAI prints (GPUs, cores, GB)."""
    if resource == GPU_AXIS:
        return to_gpus(value)
    return value * (_PER_CORE if resource == CPU_AXIS else _PER_GB)


def humanize(value: float) -> str:
    """Like go-humanize FtoaWithDigits(v, 3): at most 3 decimals, trailing zeros dropped; -1 is Unlimited."""
    if value == -1:
        return "Unlimited"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def fit_summary(node_reasons: Iterable[Sequence[str]], task_error: str = "") -> str:
    """`<err>: <count> <reason>. \\n<count> <reason>.` over all nodes (histogram sorted as strings)."""
    counts: Counter[str] = Counter()
    for reasons in node_reasons:
        counts.update(reasons)
    return _summary(task_error or NO_NODES, counts)


def fit_summary_of_histogram(per_node: Mapping[tuple[str, ...], int]) -> str:
    """`fit_summary()` of the nodes' reasons given as a histogram (reasons -> how many nodes gave them): each
    reason counted times its nodes, without one entry per node."""
    counts: dict[str, int] = {}
    for reasons, k in per_node.items():
        for r in reasons:
            counts[r] = counts.get(r, 0) + k
    return _summary(NO_NODES, counts)


def _summary(head: str, counts: Mapping[str, int]) -> str:
    if not counts:
        return head
    return head + ": " + ". \n".join(sorted(f"{n} {r}" for r, n in counts.items())) + "."


def pod_not_found(namespace: str, pod: str, summary: str) -> str:
    return f"Resources were not found for pod {namespace}/{pod} due to: {summary}"


def gang_not_found(found: int, required: int, summary: str) -> str:
    return (f"Resources were found for {found} pods while {required} are required for gang scheduling. "
            f"Additional pods cannot be scheduled due to: {summary}")


def subgroup_gang_not_found(found: int, subgroup: str, required: int, summary: str) -> str:
    return (f"Resources were found for {found} pods from all sub-groups while sub-group {subgroup} requires "
            f"{required} pods for gang scheduling. Additional pods cannot be scheduled in this sub-group due to: "
            f"{summary}")


def queue_does_not_exist(queue: str) -> str:
    return f"Queue '{queue}' does not exist"


def unusable_queue(queue: str, parents: Mapping[str, str]) -> JobError:
    """Why a PodGroup's queue is not in the session: it does not exist, or its chain of parents is broken.

    `parents`: every stored queue's name -> its parentQueue. KAI drops such queues with their subtree and
    reports QueueDoesNotExist; the message names the queue actually missing (or the loop).
    """
    if queue not in parents:
        return JobError(keys.REASON_QUEUE_DOES_NOT_EXIST, (queue_does_not_exist(queue),))
    path, current = [queue], parents[queue]
    while current in parents and current not in path:
        path.append(current)
        current = parents[current]
    if current in path:
        loop = " -> ".join([*path[path.index(current):], current])
        message = f"Queue '{queue}' cannot be scheduled: its parent queues form a loop ({loop})"
    elif len(path) == 1:
        message = f"Queue '{queue}' cannot be scheduled: its parent queue '{current}' does not exist"
    else:
        message = (f"Queue '{queue}' cannot be scheduled: its ancestor queue '{current}' (parent of "
                   f"'{path[-1]}') does not exist")
    return JobError(keys.REASON_QUEUE_DOES_NOT_EXIST, (message,))


def over_limit(queue_title: str, resource: int, limit: int, allocated: int, requested: int) -> str:
    """Amounts in core units (micro-GPUs, millicores, bytes); -1 limit is unlimited."""
    noun, unit, _ = _UNITS[resource]
    lim = humanize(_shown(resource, limit) if limit != -1 else -1)
    alloc, req = humanize(_shown(resource, allocated)), humanize(_shown(resource, requested))
    if resource == CPU_AXIS:
        return (f"{queue_title} quota has reached the allowable limit of CPU cores. Limit is {lim} cores, "
                f"currently {alloc} cores allocated and workload requested {req} cores")
    if resource == MEMORY_AXIS:
        return (f"{queue_title} quota has reached the allowable limit of memory. Limit is {lim} GB, "
                f"currently {alloc} GB allocated and workload requested {req} GB")
    return (f"{queue_title} quota has reached the allowable limit of {noun}. Limit is {lim} {unit}, "
            f"currently {alloc} {unit} allocated and workload requested {req} {unit}")


def non_preemptible_over_quota(queue_title: str, resource: int, quota: int, allocated_np: int,
                               requested: int) -> str:
    """Amounts in core units (micro-GPUs, millicores, bytes)."""
    _, unit, noun = _UNITS[resource]
    return (f"Non-preemptible workload is over quota. Workload requested {humanize(_shown(resource, requested))} "
            f"{noun}, but {queue_title} quota is {humanize(_shown(resource, quota))} {unit}, while "
            f"{humanize(_shown(resource, allocated_np))} {unit} are already allocated for non-preemptible pods. "
            f"Use a preemptible workload to go over quota.")


@dataclass(frozen=True, slots=True)
class JobError:
    """A job-level fit error (KAI JobFitError): reason plus short messages."""

    reason: str
    messages: tuple[str, ...]
    details: dict[str, Any] | None = None

    def to_reason(self) -> Reason:
        return Reason(self.reason, ", ".join(self.messages), self.details)


def job_message(errors: Sequence[JobError]) -> str:
    """`<reason>: <msgs>.` with repeated messages counted, or the default podgroup error."""
    if not errors:
        return DEFAULT_PODGROUP_ERROR
    if len(errors) == 1 and len(errors[0].messages) == 1:
        return f"{errors[0].reason}: {errors[0].messages[0]}."
    reason = errors[0].reason if len(errors) == 1 else DEFAULT_PODGROUP_ERROR
    counts: Counter[str] = Counter(m for e in errors for m in e.messages)
    parts = sorted(f"{n} {m}" if n > 1 else m for m, n in counts.items())
    return f"{reason}: " + ". \n".join(parts) + "." if parts else reason


def pod_message(task_summary: str | None, errors: Sequence[JobError]) -> str:
    if task_summary:
        return task_summary
    if errors:
        return job_message(errors)
    return DEFAULT_POD_ERROR


def with_pool_prefix(message: str, pool: str, backoff: int) -> str:
    return f"Node-Pool '{pool}': {message}" if backoff == 1 else message


def not_ready_message(podsets: Sequence[tuple[str, int, int, int]], has_subgroups: bool) -> str:
    """podsets: (name, minAvailable, alive, gated) of every podset that is not ready."""
    out = "Job is not ready for scheduling."
    for name, need, alive, gated in podsets:
        if not has_subgroups or name == "default":
            out += f" Waiting for {need} pods, currently {alive} exist, {gated} are gated"
        else:
            out += f" Waiting for {need} pods for SubGroup {name}, currently {alive} exist, {gated} are gated."
    return out


def pipelined_message(namespace: str, pod: str, node: str) -> str:
    return f"Pod {namespace}/{pod} was pipelined to node {node}"


def scheduled_message(namespace: str, pod: str, node: str, pool: str) -> str:
    return f"Successfully assigned pod {namespace}/{pod} to node {node} at node-pool {pool}"


def stale_message(active: int, min_member: int, subgroups: Sequence[tuple[str, int, int]]) -> str:
    out = f"Job is stale. {active} pods are active, minMember is {min_member}"
    for name, need, have in subgroups:
        out += f", subGroup {name} minMember is {need} and {have} pods are active"
    return out


def queue_details(name: str, requested: Sequence[int], deserved: Sequence[int], allocated: Sequence[int],
                  allocated_np: Sequence[int], limits: Sequence[int], job_request: Sequence[int],
                  job_np_request: Sequence[int]) -> dict[str, Any]:
    """`details.queueDetails` of OverLimit / NonPreemptibleOverQuota reasons, as Kubernetes resource lists
    (vectors in core units: micro-GPUs, millicores, bytes)."""
    def rl(vec: Sequence[int]) -> dict[str, str]:
        gpu, cpu, mem = vec
        return {"cpu": humanize(cpu / MILLI) if cpu != -1 else "-1",
                "memory": str(int(mem)) if mem != -1 else "-1",
                keys.GPU_RESOURCE: humanize(to_gpus(gpu)) if gpu != -1 else "-1"}
    return {"queueDetails": {
        "name": name, "queueRequestedResources": rl(requested), "queueDeservedResources": rl(deserved),
        "queueAllocatedResources": rl(allocated), "queueAllocatedNonPreemptibleResources": rl(allocated_np),
        "queueResourceLimits": rl(limits), "podGroupRequestedResources": rl(job_request),
        "podGroupRequestedNonPreemptibleResources": rl(job_np_request)}}


def amount(vec: Sequence[int], r: int) -> str:
    """One resource of a core-unit vector (micro-GPUs, millicores, bytes) as KAI prints it."""
    gpu, cpu, mem = vec
    if r == GPU_AXIS:
        return f"{humanize(to_gpus(gpu))} GPUs" if gpu != UNLIMITED else "unlimited GPUs"
    if r == CPU_AXIS:
        return f"{humanize(cpu / MILLI)} CPU cores" if cpu != UNLIMITED else "unlimited CPU cores"
    return f"{humanize(mem / GB)} GB memory" if mem != UNLIMITED else "unlimited memory"


def main_resource(request: Sequence[int]) -> int:
    """The resource a message talks about: GPUs when requested, else CPU, else memory."""
    gpu, cpu, _ = request
    if gpu > 0:
        return GPU_AXIS
    return CPU_AXIS if cpu > 0 else MEMORY_AXIS


def explain_gated(session: Session, gated: Iterable[Job], reason: str, message: Callable[[Job], str]) -> None:
    """At session close: each job a gate kept out of the disruptive actions that still has pending pods gets the
    gate's reason (in key order)."""
    for job in sorted(gated, key=lambda j: j.key):
        if any(t.status == PENDING for t in job.tasks):
            session.outcome(job).errors.append(JobError(reason, (message(job),)))
