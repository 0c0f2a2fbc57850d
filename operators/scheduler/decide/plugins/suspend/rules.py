"""The pure rules of suspend-instead-of-kill: which owners can be suspended, what the scheduler remembers about a
suspended gang (a PodGroup annotation, as the pods are gone), and whether that gang fits whole now."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.model import NodeState, QueueState, Task
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.units import GPU

SPEC_SUSPEND = ("spec", "suspend")
RUN_POLICY_SUSPEND = ("spec", "runPolicy", "suspend")
_KUBEFLOW = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
# (API group, kind) -> (plural, path of the boolean that suspends it). Other kinds are suspended only if the owner
# has a boolean `spec.suspend` (the shell reads it first).
KNOWN: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    ("batch", "Job"): ("jobs", SPEC_SUSPEND),
    ("jobset.x-k8s.io", "JobSet"): ("jobsets", SPEC_SUSPEND),
    ("ray.io", "RayJob"): ("rayjobs", SPEC_SUSPEND),
    ("trainer.kubeflow.org", "TrainJob"): ("trainjobs", SPEC_SUSPEND),
    **{("kubeflow.org", kind): (f"{kind.lower()}s", RUN_POLICY_SUSPEND) for kind in _KUBEFLOW},
}
# Their `spec.suspend` does not stop the pods they already own (a CronJob's only stops new Jobs).
NEVER: frozenset[tuple[str, str]] = frozenset({("batch", "CronJob"), ("", "Pod")})


@dataclass(frozen=True, slots=True)
class OwnerKind:
    plural: str
    field_path: tuple[str, ...]
    verify: bool  # not in KNOWN: the owner must show a boolean at field_path first


def owner_kind(api_version: str, kind: str) -> OwnerKind | None:
    """How to suspend an owner of this kind; None when it cannot be."""
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    if (group, kind) in NEVER or not kind:
        return None
    known = KNOWN.get((group, kind))
    if known is not None:
        return OwnerKind(known[0], known[1], False)
    return OwnerKind(f"{kind.lower()}s", SPEC_SUSPEND, True)


def owner_path(api_version: str, plural: str, namespace: str, name: str) -> str:
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}/{name}"


def opted_in(own: str, queue: QueueState | None) -> bool:
    """The workload's `true`/`false` wins; else the nearest queue up its lineage that says either."""
    if own in ("true", "false"):
        return own == "true"
    q = queue
    while q is not None:
        if q.rec.suspend_on_preemption in ("true", "false"):
            return q.rec.suspend_on_preemption == "true"
        q = q.parent
    return False


# --- the remembered gang ----------------------------------------------------------------------------------------

Pod = tuple[int, int, int]  # gpu (micro-GPUs; a shared portion counts as one whole device on a node), cpu, memory


@dataclass(frozen=True, slots=True)
class SuspendedGang:
    pods: tuple[Pod, ...]  # largest first
    min_member: int
    action: str
    by: str
    at: float

    def encode(self) -> str:
        return json.dumps({"pods": [list(p) for p in self.pods], "minMember": self.min_member,
                           "action": self.action, "by": self.by, "at": self.at}, separators=(",", ":"))

    @property
    def gang(self) -> tuple[Pod, ...]:
        """The pods that must fit at once: the minimum of the gang, its largest pods (the safe side)."""
        return self.pods[:max(self.min_member, 1)]


def decode(text: str | None) -> SuspendedGang | None:
    if not text:
        return None
    try:
        raw = json.loads(text)
        pods = tuple((int(p[0]), int(p[1]), int(p[2])) for p in raw.get("pods") or ())
        return SuspendedGang(pods, int(raw.get("minMember") or 1), str(raw.get("action") or ""),
                             str(raw.get("by") or ""), float(raw.get("at") or 0.0))
    except (ValueError, TypeError, AttributeError, IndexError):
        return None


def remember(tasks: Iterable[Task], min_member: int, action: str, by: str, now: float) -> SuspendedGang:
    pods = sorted(((t.rec.gpu.whole * GPU * max(t.rec.gpu.num_devices, 1) if not t.rec.gpu.is_shared else GPU,
                    t.rec.cpu, t.rec.memory) for t in tasks), reverse=True)
    return SuspendedGang(tuple(pods), min_member, action, by, now)


def describe(gang: SuspendedGang) -> str:
    gpu = sum(p[0] for p in gang.gang) / GPU
    cpu = sum(p[1] for p in gang.gang) / 1000
    mem = sum(p[2] for p in gang.gang) / 1e9
    return (f"{len(gang.gang)} pod(s) ({humanize(gpu)} GPUs, {humanize(cpu)} CPU cores, {humanize(mem)} GB "
            f"memory)")


def resume_condition(gang: SuspendedGang) -> str:
    by = f" for {gang.by}" if gang.by else ""
    return (f"Suspended by the scheduler ({gang.action}{by}); it resumes whole once its gang of {describe(gang)} "
            "fits at once on free node resources, within its queue's limits")


# --- the resume fit ---------------------------------------------------------------------------------------------

Free = list[list[int]]  # per usable node: [gpu devices, cpu, memory, pod slots]


def free_nodes(nodes: Sequence[NodeState]) -> Free:
    """What is free now (releasing resources are not: they are promised to the pods pipelined onto them)."""
    return [[n.idle_gpu, n.idle_cpu, n.idle_mem, n.max_pods - n.n_pods] for n in nodes
            if n.ok and not n.rec.unschedulable]


def fits(gang: SuspendedGang, free: Free, queue: QueueState | None) -> str:
    """"" when the gang's minimum fits at once (and `free` is then reduced by it), else why not."""
    need = gang.gang
    total = [sum(p[r] for p in need) for r in range(3)]
    q = queue
    while q is not None:
        for r, noun in enumerate(("GPU", "CPU", "memory")):
            limit = q.rec.limit[r]
            if limit != UNLIMITED and total[r] and q.allocated[r] + total[r] > limit:
                return f"its queue {q.rec.name} would exceed its {noun} limit"
        q = q.parent
    trial = [list(n) for n in free]
    for gpu, cpu, mem in need:
        devices = -(-gpu // GPU)
        for n in trial:
            if n[0] >= devices and n[1] >= cpu and n[2] >= mem and n[3] >= 1:
                n[0] -= devices
                n[1] -= cpu
                n[2] -= mem
                n[3] -= 1
                break
        else:
            return "the free node resources do not hold all of its pods at once"
    free[:] = trial
    return ""
