"""The one node fit of KAI's predicates plugin: does a task fit a node, and if not, why.

`fit(placer, task, node, idle_only)` is the placer's fast path: the placement, or None at the first failing
check. Given a `why` list it also says why not, in KAI's order (every missing resource, then the first failing
predicate), and checks the static predicates the placer's per-signature node masks otherwise answer in bulk.
The checks and their order are the same either way, so the answer to "does it fit" cannot differ from the
absence of a reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from operators.scheduler.decide.model import SCALAR_IDLE, SCALAR_RELEASING, NodeState, Task
from operators.scheduler.decide.placement import predicates as pred
from operators.scheduler.decide.placement.gpus import GpuChoice, choose_groups, portion_on_node, shared_capacity
from operators.scheduler.decide.placement.search import Placement, Placer

GPUS = "node(s) didn't have enough resources: GPUs"
GPU_MEMORY = "node(s) didn't have enough resources: GPU memory"
CPU = "node(s) didn't have enough resources: CPU cores"
MEMORY = "node(s) didn't have enough resources: memory"


def fit(placer: Placer, task: Task, node: NodeState, idle_only: bool,
        why: list[str] | None = None) -> Placement | None:
    """`task` on `node` in idle resources only (bind), or also in those being released (pipeline); None if it does
    not fit, with the reasons appended to `why` when given (the explanation counts released resources: pass
    idle_only=False with it)."""
    rec = task.rec
    gpu = rec.gpu
    # Resources. The fast path stops at the first shortage; the explanation names every one.
    pipeline = False
    if gpu.whole:
        free = node.idle_gpu if idle_only else node.idle_gpu + node.rel_gpu
        if gpu.whole > free:
            if why is None:
                return None
            why.append(GPUS)
        pipeline = gpu.whole > node.idle_gpu
    portion = 0
    if gpu.is_shared:
        if why is not None and gpu.memory_mib is not None and not node.rec.gpu_memory_mib and node.cap_gpu > 0:
            why[:] = [f"node is not a gpu node or the gpu memory count on the node was not synced yet, "
                      f"task: <{rec.namespace}/{rec.name}>, node: <{node.name}>"]
            return None
        p = portion_on_node(gpu, node)
        if p is None or shared_capacity(node, p, idle_only) < gpu.num_devices:
            if why is None:
                return None
            memory_short = gpu.memory_mib is not None and node.rec.gpu_memory_mib \
                and gpu.memory_mib > node.rec.gpu_memory_mib
            why.append(GPU_MEMORY if memory_short else GPUS)
        elif why is not None and gpu.memory_mib is not None and node.rec.gpu_memory_mib \
                and gpu.memory_mib > node.rec.gpu_memory_mib:
            why.append(GPU_MEMORY)
        portion = p or 0
    free_cpu, free_mem = node.idle_cpu, node.idle_mem
    if not idle_only:
        free_cpu += node.rel_cpu
        free_mem += node.rel_mem
    if rec.cpu > free_cpu:
        if why is None:
            return None
        why.append(CPU)
    if rec.memory > free_mem:
        if why is None:
            return None
        why.append(MEMORY)
    for name, qty in rec.scalars:
        have = node.scalars.get(name) if node.scalars else None
        if have is None or qty > have[SCALAR_IDLE] + (0 if idle_only else have[SCALAR_RELEASING]):
            if why is None:
                return None
            why.append(f"node(s) didn't have enough resources: {name}")
    if why:
        return None
    pipeline = pipeline or (not idle_only and (rec.cpu > node.idle_cpu or rec.memory > node.idle_mem))
    # Predicates: the first failing one is the reason.
    if node.n_pods >= node.max_pods:
        return _refused(why, pred.POD_NUMBER)
    c = rec.constraints
    if why is not None:  # the search answers these with its node masks
        static = pred.static_reason(c, node, placer.configmaps)
        if static:
            return _refused(why, static)
    if c.host_ports and not pred.ports_ok(c, node):
        return _refused(why, pred.HOST_PORTS)
    if placer.pod_index is not None:
        reason = pred.interpod_reason(rec, node, placer.nodes, placer.pod_index)
        if reason:
            return _refused(why, reason)
    if placer.node_filters:
        for node_filter in placer.node_filters:
            reason = node_filter(placer.session, task, node)
            if reason:
                return _refused(why, reason)
    choice: GpuChoice | None = None
    if gpu.is_shared:
        ns, name, node_name, group_id = rec.namespace, rec.name, node.name, placer.group_id
        choice = choose_groups(node, portion, gpu.num_devices, placer.gpu_spread,
                               lambda i: group_id(node_name, ns, name, i))
        # No choice, or a new shared GPU without a slot for its reservation pod: the pod count is what is short.
        if choice is None or (any(choice.new) and node.n_pods + 2 > node.max_pods):
            return _refused(why, pred.POD_NUMBER)
        if idle_only and choice.pipeline:
            return None
        pipeline = pipeline or choice.pipeline
    return Placement(node.idx, pipeline, choice, portion)


def histogram(placer: Placer, task: Task, nodes: Sequence[NodeState]) -> dict[tuple[str, ...], int]:
    """How many of `nodes` refuse `task` for each tuple of reasons (`fit` with a `why` list on every node, released
    resources counted); the empty tuple counts the nodes it fits.

    A task without scalar resources, gpu-memory or whole GPUs beside a fraction is refused on a node short of GPUs,
    CPU or memory with exactly those shortages as its reasons, in that order (`fit` names every missing resource and
    stops before the predicates): those nodes are counted from the three tests alone, only the others run the full
    fit.
    """
    rec = task.rec
    gpu = rec.gpu
    counts: dict[tuple[str, ...], int] = {}
    # A gpu-fraction request (no whole devices, no gpu-memory) is short of GPUs where fewer than its device count
    # could host its portion (whole free devices and shared ones with room, `shared_capacity`): the same one
    # reason, GPUs, first.
    fraction = gpu.is_shared and gpu.portion is not None and gpu.memory_mib is None and not gpu.whole
    if (gpu.is_shared and not fraction) or rec.scalars:
        for n in nodes:
            why: list[str] = []
            fit(placer, task, n, False, why)
            reasons = tuple(why)
            counts[reasons] = counts.get(reasons, 0) + 1
        return counts
    whole, cpu, memory = gpu.whole, rec.cpu, rec.memory
    devices = gpu.num_devices
    portion = portion_on_node(gpu, nodes[0]) if fraction and nodes else None  # the fraction's: the same everywhere
    short = [0] * 8  # by shortage bits: 4 GPUs, 2 CPU, 1 memory
    for n in nodes:
        if portion is not None:
            free = n.idle_gpu + n.rel_gpu
            gpus = 4 if free < devices and shared_capacity(n, portion, False) < devices else 0
        else:
            gpus = 4 if whole and whole > n.idle_gpu + n.rel_gpu else 0
        bits = gpus | (2 if cpu > n.idle_cpu + n.rel_cpu else 0) | (1 if memory > n.idle_mem + n.rel_mem else 0)
        if bits:
            short[bits] += 1
            continue
        why = []
        fit(placer, task, n, False, why)
        reasons = tuple(why)
        counts[reasons] = counts.get(reasons, 0) + 1
    for bits, k in enumerate(short):
        if k:
            reasons = _SHORTAGES[bits]
            counts[reasons] = counts.get(reasons, 0) + k
    return counts


# The reasons of each shortage bit set (4 whole GPUs, 2 CPU, 1 memory), in the order `fit` appends them.
_SHORTAGES = tuple(tuple(r for bit, r in ((4, GPUS), (2, CPU), (1, MEMORY)) if bits & bit) for bits in range(8))


def _refused(why: list[str] | None, reason: str) -> Placement | None:
    """None (refused), the reason appended to `why` when given."""
    if why is not None:
        why.append(reason)
    return None
