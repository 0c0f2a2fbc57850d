"""Find the best node for one task, in KAI's score order, without scanning every node.

Tiers (highest first): a shared GPU that can hold a fractional pod (binpack only) > fits in idle resources
(bind) > fits only with resources still being released (pipeline). Inside a tier the sorted `NodeIndex`
gives binpack/spread order with name tie-breaks, so the first node passing all checks is KAI's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from operators.scheduler.decide.model import NodeState, Task
from operators.scheduler.decide.placement import predicates as pred
from operators.scheduler.decide.placement.gpus import (
    GpuChoice,
    fraction_units,
    has_sharing_fit,
    portion_on_node,
)
from operators.scheduler.decide.placement.scoring import (
    BINPACK_SCORE_RANGE,
    IDLE_FIT_SCORE,
    RESOURCE_TYPE_SCORE,
    SHARED_GPU_SCORE,
    NodeIndex,
)
from operators.scheduler.decide.units import GPU


class Placement(NamedTuple):
    """Where the search puts a task. A NamedTuple, immutable and hashable as the frozen dataclass it was: one is
    built for every node the fit takes (each placement of a backlog), and a frozen dataclass's constructor sets each
    field through `object.__setattr__`."""

    node: int
    pipeline: bool
    gpu: GpuChoice | None = None
    portion: int = 0  # micro-GPUs per device


class NodeFitFunction(Protocol):
    """Does a task fit a node. It refuses a node short of the pod's CPU or memory (idle, or idle + releasing when
    not idle_only): the placer's scans skip such nodes without calling it."""

    def __call__(self, placer: Placer, task: Task, node: NodeState, idle_only: bool,
                 why: list[str] | None = None) -> Placement | None: ...


# A subset of at most 1/SMALL_SUBSET of the nodes is searched by its own nodes (`Placer.within`).
SMALL_SUBSET = 8


class Placer:
    def __init__(self, nodes: Sequence[NodeState], index: NodeIndex, configmaps: frozenset[str],
                 pod_index: pred.PodIndex | None, group_id: Callable[[str, str, str, int], str],
                 gpu_spread: bool, fit: NodeFitFunction) -> None:
        self.nodes = nodes
        self.index = index
        self.configmaps = configmaps
        self.pod_index = pod_index
        self.group_id = group_id
        self.gpu_spread = gpu_spread
        # Does a task fit a node (the predicates plugin's fit): called as fit(placer, task, node, idle_only[, why]).
        self.fit = fit
        self.base = bytearray(len(nodes))
        for node in nodes:
            taints = node.rec.taints  # most nodes have none: no any() over an empty generator for them
            hard = any(t.effect in ("NoSchedule", "NoExecute") for t in taints) if taints else False
            self.base[node.idx] = node.ok and not hard and not node.rec.unschedulable
        self._masks: dict[object, bytearray] = {}
        self.failed: set[tuple[object, ...]] = set()
        # Plugin hooks (none by default: the indexed search alone).
        self.session: Any = None
        self.prefilters: Sequence[Callable[[Any, Task], str | None]] = ()
        self.node_filters: Sequence[Callable[[Any, Task, NodeState], str | None]] = ()
        self.scorers: Sequence[tuple[Callable[[Any, Task], bool], Callable[[Any, Task, NodeState], float],
                                     float]] = ()
        # A job's node subset (plugin `node_subsets`): the nodes outside it are refused while it is set. Each
        # distinct subset gets one id, so the masks combined with it are computed once per session.
        self.subset: bytearray | None = None
        # The subset's node indexes when it is a small part of the cluster (a topology domain): the search then
        # walks them in the index's order instead of the whole order past the nodes outside.
        self.within: Sequence[int] | frozenset[int] | None = None
        self._subset_id = 0
        self._subset_ids: dict[range | frozenset[int], tuple[int, bytearray]] = {}
        self._subset_objects: dict[int, tuple[object, tuple[int, bytearray]]] = {}

    def extend(self, session: Any, prefilters: Sequence[Callable[[Any, Task], str | None]],
               node_filters: Sequence[Callable[[Any, Task, NodeState], str | None]],
               scorers: Sequence[tuple[Callable[[Any, Task], bool], Callable[[Any, Task, NodeState], float],
                                       float]]) -> None:
        """Plugin pre-filters, node filters and extra scorers (with their weights) of this session."""
        self.session = session
        self.prefilters, self.node_filters, self.scorers = prefilters, node_filters, scorers

    def restrict(self, nodes: Iterable[int] | None) -> None:
        """Search only these node indexes (None: every node) until the next call."""
        if nodes is None:
            self.subset = self.within = None
            return
        # A node-wide bytearray is built once per distinct subset of the session (a plugin asks for the same few
        # domains' nodes at every attempt). An immutable tuple given again is the same subset: found by identity
        # (the object is held, so its id is not reused) without reading its indexes; a range by its value.
        immutable = type(nodes) is tuple
        if immutable:
            seen = self._subset_objects.get(id(nodes))
            if seen is not None and seen[0] is nodes:
                assert isinstance(nodes, tuple)
                self._subset_id, self.subset = seen[1]
                self.within = nodes if len(nodes) * SMALL_SUBSET <= len(self.nodes) else None
                return
        members: range | frozenset[int] = nodes if isinstance(nodes, range) else frozenset(nodes)
        self.within = members if len(members) * SMALL_SUBSET <= len(self.nodes) else None
        known = self._subset_ids.get(members)
        if known is None:
            subset = bytearray(len(self.nodes))
            for i in members:
                subset[i] = 1
            known = self._subset_ids[members] = (len(self._subset_ids), subset)
        if immutable:
            self._subset_objects[id(nodes)] = (nodes, known)
        self._subset_id, self.subset = known

    def mask(self, task: Task) -> bytearray:
        c = task.rec.constraints.hard
        mask = self._masks.get(c)
        if mask is None:
            mask = pred.feasible_mask(c, self.nodes, self.configmaps, self.base)
            self._masks[c] = mask
        subset = self.subset
        if subset is not None:
            key = (c, self._subset_id)
            both = self._masks.get(key)
            if both is None:
                # One C-level AND over the node-wide masks, read as integers.
                n = len(mask)
                both = self._masks[key] = bytearray((int.from_bytes(mask, "little") & int.from_bytes(subset, "little"))
                                                    .to_bytes(n, "little"))
            return both
        return mask

    # --- search ---------------------------------------------------------------------------------

    def find(self, task: Task) -> Placement | None:
        if task.fit_key in self.failed:
            return None
        rec = task.rec
        if rec.gpu_error:
            return None
        if self.prefilters:
            for prefilter in self.prefilters:
                if prefilter(self.session, task) is not None:
                    return None
        mask = self.mask(task)
        if self.scorers and any(wants(self.session, task) for wants, _, _ in self.scorers):
            return self._scored(task, mask)
        if rec.nominated_node:
            for node in self.nodes:
                if node.name == rec.nominated_node and mask[node.idx]:
                    hit = self.fit(self, task, node, True) or self.fit(self, task, node, False)
                    if hit:
                        return hit
        gpu = rec.gpu
        index = self.index
        within = self.within
        if gpu.is_shared:
            if not self.gpu_spread:
                order = index.shared_order() if within is None else index.shared_order_within(within)
                hit = self._scan(task, order, mask, True, sharing=True)
                if hit or (index.releasing and (hit := self._releasing(task, mask, sharing_only=True))):
                    return hit
            least = 0 if self.gpu_spread else 1
            hit = self._scan(task, index.gpu_order(least) if within is None else index.gpu_order_within(least, within),
                             mask, True)
        elif gpu.whole:
            if within is None:
                lst, start = index.gpu_from(gpu.whole)
                hit = self._scan_whole(task, lst, start, mask)
            else:
                hit = self._scan(task, index.gpu_order_within(gpu.whole, within), mask, True)
        elif within is None:
            hit = (self._scan(task, index.cpu_order(rec.cpu, True), mask, True)
                   or self._scan(task, index.cpu_order(rec.cpu, False), mask, True))
        else:
            hit = (self._scan(task, index.cpu_order_within(rec.cpu, True, within), mask, True)
                   or self._scan(task, index.cpu_order_within(rec.cpu, False, within), mask, True))
        if hit is None and index.releasing:
            hit = self._releasing(task, mask, sharing_only=False)
        return hit

    def _scan(self, task: Task, order: Iterable[int], mask: bytearray, idle_only: bool,
              sharing: bool = False) -> Placement | None:
        nodes = self.nodes
        rec = task.rec
        cpu, mem = rec.cpu, rec.memory
        fraction = rec.gpu.portion
        portion = fraction_units(fraction) if fraction is not None else None
        for i in order:
            if not mask[i]:
                continue
            node = nodes[i]
            # The fit's resource tests refuse a node short of the pod's CPU or memory whatever its devices (a
            # NodeFitFunction's contract). A GPU order walks past many such nodes (GPUs idle, CPU
            # taken): they are refused here without the call, and for a shared pod without counting its devices.
            if idle_only:
                if cpu > node.idle_cpu or mem > node.idle_mem:
                    continue
            elif cpu > node.idle_cpu + node.rel_cpu or mem > node.idle_mem + node.rel_mem:
                continue
            if sharing:
                p = portion if portion is not None else portion_on_node(task.rec.gpu, node)
                if p is None or not has_sharing_fit(node, p):
                    continue
            hit = self.fit(self, task, node, idle_only)
            if hit is not None:
                return hit
        return None

    def _scan_whole(self, task: Task, lst: list[tuple[float, int]], start: int, mask: bytearray) -> Placement | None:
        """`_scan(task, index.gpu_order(whole), mask, True)` for a whole-GPU pod (most of a backlog's searches): the
        sorted list walked from its start in place, without the order's generator (the fit does not change the
        index, so the list is the same throughout the walk)."""
        nodes = self.nodes
        rec = task.rec
        cpu, mem = rec.cpu, rec.memory
        fit = self.fit
        for pos in range(start, len(lst)):
            i = lst[pos][1]
            if not mask[i]:
                continue
            node = nodes[i]
            if cpu > node.idle_cpu or mem > node.idle_mem:  # refused by the fit's resource tests (see `_scan`)
                continue
            hit = fit(self, task, node, True)
            if hit is not None:
                return hit
        return None

    def _releasing(self, task: Task, mask: bytearray, sharing_only: bool) -> Placement | None:
        """Nodes that fit only with releasing resources, in full score order (rare: evictions in flight)."""
        rec = task.rec
        cpu_task = rec.gpu.is_empty
        gpu = rec.gpu
        cpu, mem, whole = rec.cpu, rec.memory, gpu.whole
        nodes = self.nodes
        releasing = self.index.releasing  # brings the index's keys up to date (read below)
        keys = self.index.cpu_key if cpu_task else self.index.gpu_key
        tiered: list[tuple[int, int, float, int]] = []
        for i in releasing:
            if not mask[i]:
                continue
            node = nodes[i]
            # the fit's first tests (idle_only=False): a node failing them is refused whatever its rank.
            if (cpu > node.idle_cpu + node.rel_cpu or mem > node.idle_mem + node.rel_mem
                    or node.n_pods >= node.max_pods or (whole and whole > node.idle_gpu + node.rel_gpu)):
                continue
            sharing = 0
            if gpu.is_shared and not self.gpu_spread:
                p = portion_on_node(gpu, node)
                sharing = int(p is not None and any(
                    not g.fully_releasing and GPU - g.used >= p for g in node.groups.values()))
                if sharing_only and not sharing:
                    continue
            restype = int(cpu_task and node.cap_gpu == 0)
            tiered.append((-sharing, -restype, keys[i], i))  # index.sort_key(node, cpu_task)
        tiered.sort()
        for _, _, _, i in tiered:
            hit = self.fit(self, task, nodes[i], False)
            if hit is not None:
                return hit
        return None

    # --- full scoring (an extra score plugin has something to score for the task) -----------------

    def builtin_score(self, task: Task, node: NodeState, placement: Placement) -> float:
        """The built-in plugins' score of a feasible node, the order the indexed search walks (the tiers of
        `scoring.py`: gpusharing > node availability > resource type > nodeplacement)."""
        rec = task.rec
        gpu = rec.gpu
        score = 0.0
        if not placement.pipeline:
            score += IDLE_FIT_SCORE
            if gpu.is_shared and not self.gpu_spread and placement.gpu is not None and not any(placement.gpu.new):
                score += SHARED_GPU_SCORE
        cpu_task = gpu.is_empty
        if cpu_task and node.cap_gpu == 0:
            score += RESOURCE_TYPE_SCORE
        if cpu_task:
            total, free, spread = node.cap_cpu, node.free_cpu, self.index.cpu_spread
        else:
            total, free, spread = node.gpu_total or node.cap_gpu, node.free_gpu, self.index.gpu_spread
        ratio = min(max(free / total, 0.0), 1.0) if total > 0 else 0.0
        return score + (ratio if spread else BINPACK_SCORE_RANGE * (1.0 - ratio))

    def _scored(self, task: Task, mask: bytearray) -> Placement | None:
        """Score every feasible node: built-in score plus the weighted extra scores; ties go by node name."""
        session = self.session
        active = [(score, weight) for wants, score, weight in self.scorers if wants(session, task)]
        best: tuple[float, int] | None = None
        best_placement: Placement | None = None
        for node in self.nodes:
            if not mask[node.idx]:
                continue
            placement = self.fit(self, task, node, True) or self.fit(self, task, node, False)
            if placement is None:
                continue
            total = self.builtin_score(task, node, placement) + sum(w * f(session, task, node) for f, w in active)
            key = (-total, node.idx)
            if best is None or key < best:
                best, best_placement = key, placement
        return best_placement

    # --- explanation ----------------------------------------------------------------------------

    def prefilter_reason(self, task: Task) -> str | None:
        """Why no node can take `task` whatever its state (the first plugin pre-filter refusing it), or None."""
        for prefilter in self.prefilters:
            reason = prefilter(self.session, task)
            if reason:
                return reason
        return None

    def fit_reasons(self, task: Task, node: NodeState) -> list[str]:
        """Why `task` cannot go to `node` (short forms, KAI order); empty when it fits."""
        reason = self.prefilter_reason(task)
        if reason:
            return [reason]
        reasons: list[str] = []
        self.fit(self, task, node, False, reasons)
        return reasons
