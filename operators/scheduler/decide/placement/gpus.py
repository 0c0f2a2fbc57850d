"""Fractional GPU placement: which shared GPU groups (or new whole GPUs) a gpu-fraction / gpu-memory pod gets.

Portions are fractions of one device, in micro-GPUs. A gpu-memory request is converted per node with the node's
`nvidia.com/gpu.memory` (ceil to 1/100 of a device, on integers); nodes with unknown GPU memory cannot take it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from operators.core.resources import GpuRequest
from operators.scheduler.decide.model import NodeState
from operators.scheduler.decide.units import GPU, gpu_fraction, gpu_memory_portion, portion_text

# A gpu-fraction's micro-GPUs, parsed once per distinct value.
fraction_units = lru_cache(maxsize=4096)(gpu_fraction)


def portion_on_node(gpu: GpuRequest, node: NodeState) -> int | None:
    """Per-device portion (micro-GPUs) of a shared request on this node; None if the node cannot express it."""
    if gpu.portion is not None:
        return fraction_units(gpu.portion)
    if gpu.memory_mib is None:
        return 0
    mem = node.rec.gpu_memory_mib
    if not mem:
        return None
    portion = gpu_memory_portion(gpu.memory_mib, mem)
    return portion if portion <= GPU else None


def format_portion(portion: int) -> str:
    return portion_text(portion)


def shared_capacity(node: NodeState, portion: int, idle_only: bool) -> int:
    """How many distinct devices on the node could host `portion` (existing groups + whole free GPUs)."""
    whole = node.idle_gpu if idle_only else node.idle_gpu + node.rel_gpu
    if whole < 0:  # over-committed: none (max(whole, 0) as a comparison)
        whole = 0
    fitting = 0
    for g in node.groups.values():
        if g.fully_releasing:
            continue
        free = g.free if idle_only else GPU - g.used
        if free >= portion:
            fitting += 1
    return whole + fitting


def has_sharing_fit(node: NodeState, portion: int) -> bool:
    return any(not g.fully_releasing and g.free >= portion for g in node.groups.values())


@dataclass(frozen=True, slots=True)
class GpuChoice:
    groups: tuple[str, ...]
    new: tuple[bool, ...]  # True = a whole GPU turned into a new group
    from_releasing: tuple[bool, ...]  # the device/portion comes from resources still being released
    pipeline: bool


def choose_groups(node: NodeState, portion: int, devices: int, spread: bool,
                  new_id: Callable[[int], str]) -> GpuChoice | None:
    """Pick `devices` distinct devices: gpupack = fullest shared GPU first, gpuspread = emptiest first.

    `new_id(i)` mints the id of a new group for the pod's i-th device. Ties: existing groups by id, then idle whole
    GPUs, then releasing whole GPUs, so the result is deterministic.
    """
    candidates: list[tuple[int, int, str, bool, bool]] = []
    for gid in sorted(node.groups):
        g = node.groups[gid]
        if g.fully_releasing or GPU - g.used < portion:
            continue
        used = g.used + g.releasing
        score = GPU - used if spread else used
        candidates.append((-score, 0, gid, False, g.free < portion))
    whole_score = GPU if spread else 0
    idle_whole = max(node.idle_gpu, 0)
    rel_whole = max(node.idle_gpu + node.rel_gpu, 0) - idle_whole
    for i in range(min(idle_whole, devices)):
        candidates.append((-whole_score, 1, f"~{i:04d}", True, False))
    for i in range(min(rel_whole, devices)):
        candidates.append((-whole_score, 2, f"~{i:04d}", True, True))
    if len(candidates) < devices:
        return None
    candidates.sort()
    chosen = candidates[:devices]
    groups: list[str] = []
    new: list[bool] = []
    rel: list[bool] = []
    for i, (_, _, gid, is_new, from_rel) in enumerate(chosen):
        if is_new:
            # A minted id never names a group the node still has: a pod moved to another GPU of its node would
            # otherwise mint the id of the group it is leaving (ids derive from node, pod and index), replace it,
            # and the rollback of the move would delete the group the pod still holds.
            j = i
            gid = new_id(j)
            while gid in node.groups:
                j += devices
                gid = new_id(j)
        groups.append(gid)
        new.append(is_new)
        rel.append(from_rel)
    return GpuChoice(tuple(groups), tuple(new), tuple(rel), any(rel))
