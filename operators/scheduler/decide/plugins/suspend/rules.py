"""The pure rules of suspend-instead-of-kill: which owners can be suspended, what the scheduler remembers about a
suspended gang (a PodGroup annotation, as the pods are gone), and whether that gang fits whole now."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.model import NodeState, QueueState, Task
from operators.scheduler.decide.placement.predicates import static_reason
from operators.scheduler.decide.records import UNLIMITED, Constraints, NodeSelectorTerm, Requirement, Toleration
from operators.scheduler.decide.units import AXES, GB, GPU, MILLI

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

# gpu (micro-GPUs; a shared portion counts as one whole device on a node), cpu, memory, index into `shapes`
Pod = tuple[int, int, int, int]


def _shape(c: Constraints) -> list[Any]:
    """The node constraints a pod of the gang had (selector, required node affinity, tolerations), as JSON."""
    def reqs(rs: tuple[Requirement, ...]) -> list[Any]:
        return [[r.key, r.operator, list(r.values)] for r in rs]
    affinity = None if c.node_affinity is None else [[reqs(t.expressions), reqs(t.fields)] for t in c.node_affinity]
    return [[list(kv) for kv in c.node_selector], affinity,
            [[t.key, t.operator, t.value, t.effect] for t in c.tolerations]]


def _constraints(raw: Any) -> Constraints:
    def reqs(rs: Any) -> tuple[Requirement, ...]:
        return tuple(Requirement(str(k), str(op), tuple(str(v) for v in values)) for k, op, values in rs)
    selector, affinity, tolerations = raw
    return Constraints(tuple((str(k), str(v)) for k, v in selector),
                       None if affinity is None else tuple(NodeSelectorTerm(reqs(e), reqs(f)) for e, f in affinity),
                       tuple(Toleration(str(k), str(op), str(v), str(e)) for k, op, v, e in tolerations))


@dataclass(frozen=True, slots=True)
class SuspendedGang:
    pods: tuple[Pod, ...]  # largest first
    shapes: tuple[Constraints, ...]
    min_member: int
    action: str
    by: str
    at: float

    def encode(self) -> str:
        return json.dumps({"pods": [list(p) for p in self.pods], "shapes": [_shape(c) for c in self.shapes],
                           "minMember": self.min_member, "action": self.action, "by": self.by, "at": self.at},
                          separators=(",", ":"))

    @property
    def gang(self) -> tuple[Pod, ...]:
        """The pods that must fit at once: the minimum of the gang, its largest pods (the safe side)."""
        return self.pods[:max(self.min_member, 1)]


def decode(text: str | None) -> SuspendedGang | None:
    if not text:
        return None
    try:
        raw = json.loads(text)
        shapes = tuple(_constraints(c) for c in raw.get("shapes") or ())
        pods = tuple((int(p[0]), int(p[1]), int(p[2]), int(p[3])) for p in raw.get("pods") or ())
        if any(not 0 <= p[3] < len(shapes) for p in pods):
            return None
        return SuspendedGang(pods, shapes, int(raw.get("minMember") or 1), str(raw.get("action") or ""),
                             str(raw.get("by") or ""), float(raw.get("at") or 0.0))
    except (ValueError, TypeError, AttributeError, IndexError):
        return None


def remember(tasks: Iterable[Task], min_member: int, action: str, by: str, now: float) -> SuspendedGang:
    shapes: dict[Constraints, int] = {}
    pods: list[Pod] = []
    for t in tasks:
        gpu = t.rec.gpu
        index = shapes.setdefault(t.rec.constraints, len(shapes))
        pods.append((GPU if gpu.is_shared else gpu.whole * GPU, t.rec.cpu, t.rec.memory, index))
    return SuspendedGang(tuple(sorted(pods, reverse=True)), tuple(shapes), min_member, action, by, now)


def describe(gang: SuspendedGang) -> str:
    gpu = sum(gpu for gpu, _, _, _ in gang.gang) / GPU
    cpu = sum(cpu for _, cpu, _, _ in gang.gang) / MILLI
    mem = sum(mem for _, _, mem, _ in gang.gang) / GB
    return (f"{len(gang.gang)} pod(s) ({humanize(gpu)} GPUs, {humanize(cpu)} CPU cores, {humanize(mem)} GB "
            f"memory)")


def resume_condition(gang: SuspendedGang) -> str:
    by = f" for {gang.by}" if gang.by else ""
    return (f"Suspended by the scheduler ({gang.action}{by}); it resumes whole once its gang of {describe(gang)} "
            "fits at once on free resources of nodes it may run on, within its queue's limits")


# --- the resume fit ---------------------------------------------------------------------------------------------

Free = list[tuple[NodeState, list[int]]]  # per Ready node: [gpu devices, cpu, memory, pod slots] free


def free_nodes(nodes: Sequence[NodeState]) -> Free:
    """What is free now (releasing resources are not: they are promised to the pods pipelined onto them)."""
    return [(n, [n.idle_gpu, n.idle_cpu, n.idle_mem, n.max_pods - n.n_pods]) for n in nodes if n.ok]


def fits(gang: SuspendedGang, free: Free, queue: QueueState | None) -> str:
    """"" when the gang's minimum fits at once (and `free` is then reduced by it), else why not. Each pod needs a
    node its selector, required node affinity and tolerations admit (cordoned nodes only if tolerated)."""
    need = gang.gang
    total = [sum(p[r] for p in need) for r in AXES]
    q = queue
    while q is not None:
        for r, noun in enumerate(("GPU", "CPU", "memory")):
            limit = q.rec.limit[r]
            if limit != UNLIMITED and total[r] and q.allocated[r] + total[r] > limit:
                return f"its queue {q.rec.name} would exceed its {noun} limit"
        q = q.parent
    trial = [(n, list(f)) for n, f in free]
    admits: dict[int, list[bool]] = {}
    for gpu, cpu, mem, shape in need:
        if shape not in admits:
            admits[shape] = [static_reason(gang.shapes[shape], n, frozenset()) is None for n, _ in trial]
        devices = -(-gpu // GPU)
        for ok, (_, f) in zip(admits[shape], trial, strict=True):
            if ok and f[0] >= devices and f[1] >= cpu and f[2] >= mem and f[3] >= 1:
                f[0] -= devices
                f[1] -= cpu
                f[2] -= mem
                f[3] -= 1
                break
        else:
            return "the free resources of the nodes it may run on do not hold all of its pods at once"
    free[:] = trial
    return ""
