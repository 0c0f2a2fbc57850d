"""Steady-state cycles at KAI's envelope or twice it: what a cycle costs once the backlog has been placed.

Builds an envelope profile (`envelope_cluster`), runs the cold cycle, then `--cycles` warm cycles, each on the
cluster the previous cycle left (its binds running, its evictions pending again: `apply_decisions`, as `kai
simulate --cycles` does) with `--churn` of the pods replaced by equal records that are new objects (as a watch
update or a re-parse gives them), or with `--real-churn`: that share of the pods really changes, half of it running
single-pod jobs that finish (pod and PodGroup gone) and half new single-pod jobs that arrive pending (copies of the
finished ones), on top of the binds that land. Each cycle gets the previous cycle's carry, as the live loop runs
it (`--fresh`: none, as before the carry replayed allocate's repeated failures). Prints each cycle's CPU seconds and
its phases (wall ms, the cycle's own phase timer: on a loaded box they exceed the CPU), what it replayed and the
explanations it reused from the carry.
`--profile N` profiles each warm cycle (CPU then includes the profiler's overhead).
Run: python bench/warm_cycle_bench.py [--envelope2x] [--cycles 3] [--churn 0.01] [--real-churn] [--live-binds]
     [--fresh] [--check] [--no-removed] [--profile N] [--ab CUT]
`--ab CUT` runs each cycle with a short cut of the disruptive searches and without it (`CUTS`) and compares them.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import heapq
import inspect
import json
import os
import pstats
import random
import resource
import sys
import time
from bisect import insort
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, overload

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envelope_cluster import ENVELOPE, ENVELOPE_2X, generate_envelope

from operators.core import keys
from operators.core.api.bindrequest import BindRequestRecord
from operators.scheduler.decide import explain, model
from operators.scheduler.decide.actions import reclaim as reclaim_action
from operators.scheduler.decide.actions import victims as victims_module
from operators.scheduler.decide.actions.solver import Solver
from operators.scheduler.decide.actions.victims import (
    OrderHandover,
    VictimLists,
    protected,
    releasable,
    victim_chunks,
)
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
from operators.scheduler.decide.decisions import Bind, Decisions, Eviction, Pipelined
from operators.scheduler.decide.model import Chunk
from operators.scheduler.decide.placement import scoring, search
from operators.scheduler.decide.placement.gpus import (
    format_portion,
    fraction_units,
    has_sharing_fit,
    portion_on_node,
)
from operators.scheduler.decide.placement.search import Placer
from operators.scheduler.decide.plugins.predicates import fit as predicates_fit
from operators.scheduler.decide.plugins.predicates.plugin import Predicates
from operators.scheduler.decide.plugins.topology import plugin as topology_plugin
from operators.scheduler.decide.plugins.topology.domains import plan_domains, with_free
from operators.scheduler.decide.plugins.topology.plugin import Topology
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.session.accounting import status_move
from operators.scheduler.decide.session.operations import Operations
from operators.scheduler.decide.simulation import apply_decisions, with_implicit_podgroups
from operators.scheduler.decide.snapshot import Removed, Snapshot, snapshot_from_objects
from operators.scheduler.decide.units import GPU

NOW = 1.7e9


def _text(d: Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _opened(carry: object) -> str:
    """How the cycle's session open went: from the previous session's objects (jobs and nodes rebuilt) or in full."""
    opened = getattr(carry, "opened", None)
    if opened is None or opened.rebuilt_jobs < 0:
        return "opened in full"
    return f"opened carried: {opened.rebuilt_jobs} jobs and {opened.rebuilt_nodes} nodes rebuilt"


def with_removed(before: Snapshot, after: Snapshot) -> Snapshot:
    """`after` saying which pod and PodGroup records of `before` it no longer holds, as the live loop's informers
    hand them (computed here, outside the timed cycle)."""
    pods, pgs = set(map(id, after.pods)), set(map(id, after.podgroups))
    return replace(after, removed=Removed(before.pods, tuple(p for p in before.pods if id(p) not in pods),
                                          before.podgroups, tuple(g for g in before.podgroups if id(g) not in pgs)))


def real_churn(snapshot: Snapshot, share: float, n: int) -> Snapshot:
    """`share` of the pods really changed: half finish (running single-pod jobs, their PodGroups deleted), half
    arrive (new pending single-pod jobs, copies of those that finished, with new names)."""
    rng = random.Random(n)
    members: dict[tuple[str, str], int] = {}
    for p in snapshot.pods:
        members[(p.namespace, p.pod_group)] = members.get((p.namespace, p.pod_group), 0) + 1
    alone = [p for p in snapshot.pods if p.node_name and p.phase == "Running" and not p.is_reservation
             and p.pod_group and members[(p.namespace, p.pod_group)] == 1]
    finished = rng.sample(alone, min(len(alone), int(len(snapshot.pods) * share / 2)))
    gone = {(p.namespace, p.name) for p in finished}
    groups = {(p.namespace, p.pod_group) for p in finished}
    podgroups = {(g.namespace, g.name): g for g in snapshot.podgroups}
    pods = [p for p in snapshot.pods if (p.namespace, p.name) not in gone]
    kept = [g for g in snapshot.podgroups if (g.namespace, g.name) not in groups]
    for p in finished:
        suffix = f"-a{n}"
        pods.append(replace(p, name=p.name + suffix, uid=p.uid + suffix, created=NOW + 10 * n, phase="Pending",
                            node_name="", gpu_groups=(), pod_group=p.pod_group + suffix))
        g = podgroups[(p.namespace, p.pod_group)]
        kept.append(replace(g, name=g.name + suffix, uid=g.uid + suffix))
    return replace(snapshot, pods=tuple(pods), podgroups=tuple(kept))


def lagged_binds(snapshot: Snapshot, decisions: Decisions, landing: list[Bind]) -> Snapshot:
    """The next snapshot as a live cluster gives it, the binder a cycle behind: `landing` (the previous cycle's
    binds) land (their pods run, their BindRequests deleted), this cycle's binds are BindRequests whose pods are
    still pending (the same records), and the rest of the decisions apply as `apply_decisions` applies them."""
    landed = apply_decisions(replace(snapshot, bindrequests=()), Decisions(binds=landing))
    applied = apply_decisions(landed, replace(decisions, binds=[]))
    return replace(applied, bindrequests=tuple(
        BindRequestRecord(b.namespace, b.pod, b.pod, b.node, b.resource_type, b.gpu_groups, b.gpu_count,
                          b.gpu_portion) for b in decisions.binds))


_room_for = Solver._room_for


def _resummed(self: Topology, session: Any, resolved: Any, level: int, free: Any) -> Any:
    """`Topology._domains_free` as it was before the differences: a domain holding a changed node summed again."""
    key = (resolved.topology.name, level)
    hit = self._domain_free.get(key)
    if hit is None:
        domains = list(with_free(self._domains(session, resolved, level), free))
        where = {n: i for i, d in enumerate(domains) for n in d.nodes}
        self._domain_free[key] = (domains, where, len(self._changes), sorted([(d.free, d.values, d) for d in domains]))
        self._generation += 1
        self._generations[key] = self._generation
        return domains
    domains, where, seen, ordered = hit
    if seen < len(self._changes):
        changed = False
        for i in {i for name, _, _ in self._changes[seen:] if (i := where.get(name)) is not None}:
            summed = with_free((domains[i],), free)[0]
            changed = changed or summed.free != domains[i].free
            domains[i] = summed
        if changed:
            ordered = sorted([(d.free, d.values, d) for d in domains])
        self._domain_free[key] = (domains, where, len(self._changes), ordered)
        if changed:
            self._generation += 1
            self._generations[key] = self._generation
    return domains


def _scanned_plan(resolved: Any, domains_at: Any, request: Any, placed: Any = (), ordered_at: Any = None) -> Any:
    """`plan_domains` as it was before the sorted levels: every domain of a level filtered, then sorted."""
    return plan_domains(resolved, domains_at, request, placed)


def _removed_then_inserted(lst: Any, old: float, new: float, idx: int) -> None:
    """The node index's move as it was before the in-place shift: remove the old entry, insert the new one."""
    scoring._remove(lst, old, idx)
    insort(lst, (new, idx))


_flush_gpu_side = scoring.NodeIndex._flush_gpu


def _flushed_both(index: Any) -> None:
    """The node index's GPU-side flush as every flush was before the sides were split: the CPU side with it."""
    _flush_gpu_side(index)
    index._flush_cpu()


def _rekey_gpu_by_calls(index: Any, node: Any) -> None:
    """The node index's GPU re-key as it was before the inlining: the key, shareable and releasing tests through
    their methods, the groups scanned even when there are none."""
    if not node.ok:
        return
    i = node.idx
    gk = index._gpu_key(node)
    old_gk = index.gpu_key[i]
    if node.cap_gpu > 0 and gk != old_gk:
        scoring._move(index.gpu_list, old_gk, gk, i)
    was_shared, shareable = bool(index.in_shared[i]), index._shareable(node)
    if was_shared and shareable:
        if gk != old_gk:
            scoring._move(index.shared_list, old_gk, gk, i)
    elif was_shared:
        scoring._remove(index.shared_list, old_gk, i)
    elif shareable:
        insort(index.shared_list, (gk, i))
    index.in_shared[i] = shareable
    index.gpu_key[i] = gk
    if index._is_releasing(node):
        index._releasing.add(i)
    else:
        index._releasing.discard(i)


def _rekey_cpu_by_call(index: Any, node: Any) -> None:
    """The node index's CPU re-key as it was before the inlining: the key through `_cpu_key`."""
    if not node.ok:
        return
    i = node.idx
    ck = index._cpu_key(node)
    if ck != index.cpu_key[i]:
        scoring._move(index.cpu_gpu_list if node.cap_gpu > 0 else index.cpu_only_list, index.cpu_key[i], ck, i)
        index.cpu_key[i] = ck


def _move_counts(ps: Any, move: Any) -> None:
    """The podset counters of one status move, as the session applied them before `_set_status` inlined them."""
    a, p, u, al, g, _ = move
    ps.active_allocated += a
    ps.pipelined += p
    ps.active_used += u
    ps.alive += al
    ps.gated += g


def _add_queue(queue: Any, vec: Any, preemptible: bool, sign: int) -> None:
    """A task's signed vector added to its queue and every ancestor, as the session did before `_set_status`
    inlined it."""
    gpu, cpu, mem = (sign * x for x in vec)
    q = queue
    while q is not None:
        for acc in (q.allocated, q.allocated_np) if not preemptible else (q.allocated,):
            acc[0] += gpu
            acc[1] += cpu
            acc[2] += mem
        q = q.parent


def _status_by_sets(session: Any, task: Any, status: str) -> None:
    """A task's status move with each status tested against every counted set (before the moves' table)."""
    if task.job is not None:
        session._touched.add(task.job)
    old = task.status
    if old == status:
        return
    ps, job = task.podset, task.job
    if ps is not None:
        session._count(ps, old, -1)
        session._count(ps, status, +1)
        if old == model.PENDING:
            ps.pending.remove(task)
        if status == model.PENDING:
            ps.pending.append(task)
            ps.pending.sort(key=session.framework.task_order_key)
    if job is not None and job.queue is not None:
        was = old in model.QUEUE_ALLOCATED or old == model.PIPELINED
        now = status in model.QUEUE_ALLOCATED or status == model.PIPELINED
        if was != now:
            _add_queue(job.queue, session.task_vector(task), job.preemptible, +1 if now else -1)
    task.status = status


def _status_by_calls(session: Any, task: Any, status: str) -> None:
    """A task's status move as before the inlining: the move through `status_move`, the podset counters through
    `_move_counts`, the queues through `_add_queue`."""
    job = task.job
    if job is not None:
        session._touched.add(job)
    old = task.status
    if old == status:
        return
    move = status_move(old, status)
    ps = task.podset
    if ps is not None:
        _move_counts(ps, move)
        if old == model.PENDING:
            ps.pending.remove(task)
        if status == model.PENDING:
            ps.pending.append(task)
            ps.pending.sort(key=session.framework.task_order_key)
    sign = move[5]
    if sign and job is not None and job.queue is not None:
        rec = task.rec
        vec = session.task_vector(task) if rec.gpu.is_shared else (rec.gpu.whole * GPU, rec.cpu, rec.memory)
        _add_queue(job.queue, vec, job.preemptible, sign)
    task.status = status


def _find_by_generator(self: Any, task: Any) -> Any:
    """The placer's search as before the whole-GPU walk: a whole-GPU pod's scan over `gpu_order`'s generator."""
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
        hit = self._scan(task, index.gpu_order(gpu.whole) if within is None
                         else index.gpu_order_within(gpu.whole, within), mask, True)
    elif within is None:
        hit = (self._scan(task, index.cpu_order(rec.cpu, True), mask, True)
               or self._scan(task, index.cpu_order(rec.cpu, False), mask, True))
    else:
        hit = (self._scan(task, index.cpu_order_within(rec.cpu, True, within), mask, True)
               or self._scan(task, index.cpu_order_within(rec.cpu, False, within), mask, True))
    if hit is None and index.releasing:
        hit = self._releasing(task, mask, sharing_only=False)
    return hit


@dataclass(frozen=True, slots=True)
class _FrozenPlacement:
    """The placement as it was before the NamedTuple (`--ab placement-tuple`'s identity)."""

    node: int
    pipeline: bool
    gpu: Any = None
    portion: int = 0


def _committed_in_two_passes(session: Any, ops: list[Any]) -> None:
    """A statement's commit as before the one pass: names through the task's and node's properties, the ops' jobs
    collected in a second pass."""
    started: set[str] = set()
    pipelined_jobs: set[str] = set()
    for op in ops:
        task, job = op.task, op.task.job
        pg = job.name if job else ""
        node = session.nodes[task.node].name if task.node >= 0 else ""
        if op.kind == "allocate":
            session.decisions.binds.append(session._bind(task, node, pg))
            if job is not None:
                started.add(job.key)
        elif op.kind == "pipeline":
            session.decisions.pipelined.append(Pipelined(
                task.namespace, task.name, pg, node, explain.pipelined_message(task.namespace, task.name, node),
                task.groups))
            if job is not None:
                pipelined_jobs.add(job.key)
        else:
            session.decisions.evictions.append(Eviction(task.namespace, task.name, pg, op.action, op.for_job,
                                                        op.message))
    for job in {op.task.job.key: op.task.job for op in ops if op.task.job is not None}.values():
        if job.key in started and job.key not in pipelined_jobs and job.allocated_at_open == 0 \
                and not job.bound_in_session:
            session.last_start[job.key] = session.now_text
        if job.key in started:
            job.bound_in_session = True


def _bind_formatted(session: Any, task: Any, node: str, pod_group: str) -> Bind:
    """A bind record with its portion text formatted at every bind."""
    rec = task.rec
    if rec.gpu.is_shared:
        return Bind(task.namespace, task.name, pod_group, node, keys.RESOURCE_TYPE_FRACTION, task.groups,
                    format_portion(task.portion), rec.gpu.num_devices, task.claims)
    return Bind(task.namespace, task.name, pod_group, node, keys.RESOURCE_TYPE_REGULAR, (),
                format_portion(GPU if rec.gpu.whole else 0), rec.gpu.whole, task.claims)


@dataclass(frozen=True, slots=True)
class _FrozenBind:
    """The bind record as a frozen slotted dataclass (before the NamedTuple), with the same fields and output."""

    namespace: str
    pod: str
    pod_group: str
    node: str
    resource_type: str
    gpu_groups: tuple[str, ...] = ()
    gpu_portion: str = "0.00"
    gpu_count: int = 0
    claim_allocations: tuple[tuple[str, str], ...] = ()

    to_dict = Bind.to_dict


_PORTIONS = {True: format_portion(GPU), False: format_portion(0)}


def _bind_frozen(session: Any, task: Any, node: str, pod_group: str) -> Any:
    """A bind built as a frozen dataclass (each field set through object.__setattr__)."""
    rec = task.rec
    gpu = rec.gpu
    if gpu.is_shared:
        return _FrozenBind(rec.namespace, rec.name, pod_group, node, keys.RESOURCE_TYPE_FRACTION, task.groups,
                           format_portion(task.portion), gpu.num_devices, task.claims)
    return _FrozenBind(rec.namespace, rec.name, pod_group, node, keys.RESOURCE_TYPE_REGULAR, (),
                       _PORTIONS[bool(gpu.whole)], gpu.whole, task.claims)


def _scan_every_fit(self: Any, task: Any, order: Any, mask: Any, idle_only: bool, sharing: bool = False) -> Any:
    """Placer._scan as before the resource pre-test: the fit called on every node of the order in the mask."""
    nodes = self.nodes
    fraction = task.rec.gpu.portion
    portion = fraction_units(fraction) if fraction is not None else None
    for i in order:
        if not mask[i]:
            continue
        node = nodes[i]
        if sharing:
            p = portion if portion is not None else portion_on_node(task.rec.gpu, node)
            if p is None or not has_sharing_fit(node, p):
                continue
        hit = self.fit(self, task, node, idle_only)
        if hit is not None:
            return hit
    return None


def _place_min_max(self: Any, task: Any, placement: Any, status: str) -> tuple[int, ...]:
    """A placement as before the comparisons: its take from idle through min/max calls."""
    node = self.nodes[placement.node]
    rec = task.rec
    ic = min(rec.cpu, max(node.idle_cpu, 0))
    im = min(rec.memory, max(node.idle_mem, 0))
    whole = rec.gpu.whole
    ig = min(whole, max(node.idle_gpu, 0))
    rc, rm, rg = rec.cpu - ic, rec.memory - im, whole - ig  # the rest comes out of what is releasing
    taken = (ic, rc, im, rm, ig, rg)
    node.idle_cpu -= ic
    node.rel_cpu -= rc
    node.idle_mem -= im
    node.rel_mem -= rm
    node.idle_gpu -= ig
    node.rel_gpu -= rg
    node.n_pods += 1
    if rec.scalars and node.scalars:
        for name, qty in rec.scalars:
            s = node.scalars[name]
            s[model.SCALAR_IDLE] -= qty
    choice = placement.gpu
    if choice is not None:
        for gid, new, from_rel in zip(choice.groups, choice.new, choice.from_releasing, strict=True):
            if new:
                if from_rel:
                    node.rel_gpu -= 1
                else:
                    node.idle_gpu -= 1
                node.groups[gid] = model.GpuGroup(gid)
            g = node.groups[gid]
            g.used += placement.portion
            g.pods += 1
        task.groups = choice.groups
        task.portion = placement.portion
    if rec.constraints.host_ports:
        ports = node.ports if node.ports is not None else {}
        for p in rec.constraints.host_ports:
            ports[p] = ports.get(p, 0) + 1
        node.ports = ports
    task.node = node.idx
    self._set_status(task, status)
    if self.pod_index is not None:
        self.pod_index.add(rec, node.idx)
    self._free_dirty.add(node.idx)
    self.index.update(node)
    return taken


# Short cuts of the disruptive searches, each with its identity (the search without it), for `--ab`.
def _fit_on_every_node(placer: Any, task: Any, nodes: Any) -> dict[tuple[str, ...], int]:
    """The fit summary's histogram with the full fit on every node (as before the predicates plugin's `histogram`)."""
    counts: dict[tuple[str, ...], int] = {}
    for n in nodes:
        why: list[str] = []
        predicates_fit.fit(placer, task, n, False, why)
        reasons = tuple(why)
        counts[reasons] = counts.get(reasons, 0) + 1
    return counts


class QueueOrder(Sequence[Chunk]):
    """within_queue_order() of one queue's chunks, ordered only as far as it is read (the order reclaim and
    consolidation read before the lazy victim lists, `--ab victims-lazy`'s identity).

    A heap of the keyed chunks, popped into a sorted prefix on demand: the keys are unique, so the pops come in
    the sort's order. A search that stops early (reclaim at 5,000 nodes reads a few hundred of each queue's
    thousands of chunks) pays a heapify and its prefix's pops instead of a full sort.
    """

    __slots__ = ("_done", "_heap", "_len")

    def __init__(self, chunks: Iterable[Chunk], session: Session | None = None) -> None:
        self._heap = victims_module._keyed(chunks, session)
        heapq.heapify(self._heap)
        self._len = len(self._heap)
        self._done: list[Chunk] = []

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Chunk: ...

    @overload
    def __getitem__(self, index: slice) -> list[Chunk]: ...

    def __getitem__(self, index: int | slice) -> Chunk | list[Chunk]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        done, heap = self._done, self._heap
        while len(done) <= index:
            done.append(heapq.heappop(heap)[1])
        return done[index]

    def __iter__(self) -> Iterator[Chunk]:
        for i in range(self._len):
            yield self[i]


def _eager_order(lists: Any, jobs: Any, runtime: float, drop_protected: bool) -> QueueOrder:
    """A queue's victim order as before the lazy lists: every job's chunks made and keyed when the order is built."""
    session = lists.session
    chunks = []
    for job in jobs:
        guarded = protected(session, job, runtime)
        if not (guarded and drop_protected):
            chunks += victim_chunks(job, guarded)
    return QueueOrder(chunks, session)


CUTS: dict[str, tuple[object, str, object]] = {
    # every search (consolidation, and gangs' reclaim and preempt): a scenario whose evictions leave the nodes too few
    # slots for the job is not simulated
    "room": (Solver, "_room_for", lambda self, job, tasks: None),
    # the same for jobs asking for an optional feature (identity: the guard that kept every attempt of theirs)
    "room-features": (Solver, "_room_for",
                      lambda self, job, tasks: None if job.rec.optional_features else _room_for(self, job, tasks)),
    # reclaim and preempt: a scenario whose evictions leave the nodes too few slots for the job is not simulated
    # (identity: the short cut on consolidation's scenarios only)
    "room-reclaim": (Solver, "_room_for", lambda self, job, tasks:
                     _room_for(self, job, tasks) if self.action == "consolidation" else None),
    # topology: domain totals moved by the changed nodes' differences (identity: the domains summed again)
    "topology-deltas": (Topology, "_domains_free", _resummed),
    # placer: a small node subset (a topology domain) searched by its own nodes (identity: the whole order walked)
    "placer-within": (search, "SMALL_SUBSET", 10**9),
    # topology: plans over each level's domains kept sorted (identity: every domain filtered and sorted; the
    # sorted copies are still kept up to date on that side)
    "topology-ordered": (topology_plugin, "plan_domains", _scanned_plan),
    # reclaim: no candidate's live pods summed when no queue has a limit (identity: always summed)
    "reclaim-bound": (reclaim_action, "reclaimable_bound", releasable),
    # fit summaries: nodes short of GPUs, CPU or memory counted from those tests (identity: the full fit on each)
    "fit-histogram": (Predicates, "histogram", staticmethod(_fit_on_every_node)),
    # consolidation and reclaim: a job's victim chunks made when a search reads that far (identity: every
    # candidate's chunks made and keyed when a queue's order is built)
    "victims-lazy": (VictimLists, "order", _eager_order),
    # reclaim: consolidation's victim orders taken over while no commit came between (identity: reclaim builds
    # every order itself)
    "victims-handover": (OrderHandover, "lists", lambda self, session: None),
    # node index: a re-keyed node's entry shifted in place by the distance it moves (identity: removed, inserted)
    "index-move": (scoring, "_move", _removed_then_inserted),
    # node index: the CPU-key lists re-keyed only when a CPU-only task reads them (identity: at every read, as the
    # GPU side still is)
    "index-cpu-side": (scoring.NodeIndex, "_flush_gpu", _flushed_both),
    # node index: a GPU re-key with the key and the shareable / releasing tests inlined, the groups' scans skipped
    # on a node without shared devices (identity: through the methods, the groups scanned)
    "rekey-gpu-inline": (scoring.NodeIndex, "_rekey_gpu", _rekey_gpu_by_calls),
    # node index: a CPU re-key with the key inlined (identity: through `_cpu_key`)
    "rekey-cpu-inline": (scoring.NodeIndex, "_rekey_cpu", _rekey_cpu_by_call),
    # statement: a status move's podset and queue differences looked up per pair of statuses (identity: both
    # statuses tested against every set, the queue vector through task_vector())
    "status-moves": (Operations, "_set_status", _status_by_sets),
    # statement: a status move with the table's look-up, the podset counters and the queue lineage's sums inlined
    # (identity: through `status_move`, `_move_counts` and `_add_queue`)
    "status-inline": (Operations, "_set_status", _status_by_calls),
    # placer: a whole-GPU pod's scan walks the sorted list in place (identity: the scan over `gpu_order`'s generator)
    "scan-whole": (Placer, "find", _find_by_generator),
    # placer: the fit's placement built as a NamedTuple (identity: a frozen slotted dataclass)
    "placement-tuple": (predicates_fit, "Placement", _FrozenPlacement),
    # statement: a commit in one pass over its ops, names read from the records (identity: two passes, properties)
    "commit-pass": (Operations, "_commit", _committed_in_two_passes),
    # statement: a whole-GPU / CPU-only bind's portion text formatted once (identity: at every bind)
    "bind-portion": (Operations, "_bind", _bind_formatted),
    # statement: a bind record built as a NamedTuple (identity: a frozen slotted dataclass)
    "bind-tuple": (Operations, "_bind", _bind_frozen),
    # statement: a placement's take from idle by comparisons (identity: min/max calls)
    "place-compare": (Operations, "_place", _place_min_max),
    # placer: a scan skips nodes short of the pod's CPU or memory before the fit call (identity: the fit on every
    # node of the order)
    "scan-resources": (Placer, "_scan", _scan_every_fit),
    # fit summaries: the reason histogram counted per reason times its nodes (identity: one flat list of every
    # node's reasons, counted by explain.fit_summary)
    "fit-summary-counts": (explain, "fit_summary_of_histogram",
                           lambda per_node: explain.fit_summary([[r for rs, k in per_node.items() for r in rs * k]])),
}


class _Calls:
    """Counts the consolidation simulations' placement work and the placer's searches in the whole cycle (the
    wrapped calls cost the same on both sides)."""

    def __init__(self) -> None:
        self.counts = {"place_all": 0, "move": 0, "find": 0}
        for owner, name in ((Solver, "_place_all"), (Solver, "_move"), (Placer, "find")):
            original = getattr(owner, name)

            def counted(*a: object, _name: str = name.lstrip("_"), _original: object = original) -> object:
                self.counts[_name] += 1
                return _original(*a)  # type: ignore[operator]

            setattr(owner, name, counted)

    def take(self) -> dict[str, int]:
        out = dict(self.counts)
        for name in self.counts:
            self.counts[name] = 0
        return out


def _ab(snapshot: Snapshot, config: SchedulerConfig, now: float, cut: str, carries: dict[bool, object],
        first_with: bool, calls: _Calls) -> Decisions:
    """One cycle run twice on the same snapshot, with the short cut and with its identity (each side with its own
    carry chain; `first_with` says which goes first); prints both sides' CPU, consolidation wall time and counts."""
    owner, attr, identity = CUTS[cut]
    kept = inspect.getattr_static(owner, attr)  # as stored: a staticmethod stays one when put back
    # Untimed, without a carry: whichever side ran first would otherwise pay for what the new snapshot's records
    # compute once and keep (the two sides share them).
    run_cycle(snapshot, config, now)
    calls.take()
    out: dict[bool, tuple[Decisions, float, dict[str, int]]] = {}
    for with_cut in (first_with, not first_with):
        setattr(owner, attr, kept if with_cut else identity)
        try:
            gc.collect()  # the garbage of the run before is not this side's
            c0 = time.process_time()
            decisions, carry = run_carried_cycle(snapshot, config, now, carries.get(with_cut))  # type: ignore[arg-type]
            out[with_cut] = (decisions, time.process_time() - c0, calls.take())
            carries[with_cut] = carry
        finally:
            setattr(owner, attr, kept)
    (d_with, cpu_with, n_with), (d_without, cpu_without, n_without) = out[True], out[False]
    print(f"  A/B {cut}: CPU with / without {cpu_with:.3f} / {cpu_without:.3f} s ({cpu_with / cpu_without:.2f}), "
          f"consolidation {d_with.timings.get('consolidation', 0):.0f} / "
          f"{d_without.timings.get('consolidation', 0):.0f} ms, "
          + ", ".join(f"{k} {n_with[k]} / {n_without[k]}" for k in n_with)
          + "; " + " ".join(f"{k}={v:.0f}/{d_without.timings.get(k, 0):.0f}" for k, v in d_with.timings.items()
                            if not k.startswith("plugin/") and k != "consolidation") + " ms"
          + f", {'with' if first_with else 'without'} first, identical: "
          f"{'yes' if _text(d_with) == _text(d_without) else 'NO'}; load1={os.getloadavg()[0]:.2f}", flush=True)
    return d_with


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelope2x", action="store_true", help="10,000 nodes / 150,000 pods (else the envelope)")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--churn", type=float, default=0.01, help="share of the pods re-made between cycles")
    parser.add_argument("--real-churn", action="store_true",
                        help="the churned pods really change (jobs finish and arrive) instead of being re-made equal")
    parser.add_argument("--fresh", action="store_true", help="no carry between cycles")
    parser.add_argument("--freeze", action="store_true",
                        help="freeze what each cycle leaves before the collector is on again (gc.freeze): the cycle "
                             "runs with the collector off as before, but its survivors are never traversed; at the end "
                             "the frozen objects are unfrozen and collected, to count the garbage that was frozen")
    parser.add_argument("--live-binds", action="store_true",
                        help="binds land a cycle late, as in a live cluster: each cycle's binds are BindRequests of "
                             "still pending pods in the next snapshot, bound (their BindRequests deleted) in the one "
                             "after")
    parser.add_argument("--no-removed", action="store_true",
                        help="the snapshots do not say which records left (the carried open diffs them in full)")
    parser.add_argument("--check", action="store_true",
                        help="also run each cycle fresh (no carry) and compare the decisions, byte for byte")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="cProfile the warm cycles and print their N most expensive functions (own and cumulative "
                             "time) and the search counters")
    parser.add_argument("--ab", choices=sorted(CUTS),
                        help="run every cycle with the short cut and with its identity, alternating which goes first, "
                             "and compare the decisions (in place of the carried run)")
    parser.add_argument("--ab-swap", action="store_true", help="with --ab: the side without the cut goes first in the "
                        "cold cycle (and so in every other cycle)")
    args = parser.parse_args()
    profile = ENVELOPE_2X if args.envelope2x else ENVELOPE
    snapshot = snapshot_from_objects(with_implicit_podgroups(generate_envelope(profile)))
    config = SchedulerConfig()
    gc.collect()
    gc.freeze()  # the generated objects are not the cycle's garbage
    print(f"{profile.name}: {len(snapshot.nodes)} nodes, {len(snapshot.pods)} pods; load1={os.getloadavg()[0]:.2f}")
    carry = None
    landing: list[Bind] = []
    if args.ab:
        carries: dict[bool, object] = {}
        calls = _Calls()
        for n in range(args.cycles + 1):
            print(f"{'cold' if n == 0 else f'warm {n}'}:", flush=True)
            decisions = _ab(snapshot, config, NOW + 10 * n, args.ab, carries, (n + args.ab_swap) % 2 == 0, calls)
            snapshot = apply_decisions(snapshot, decisions)
            snapshot = real_churn(snapshot, args.churn, n + 1) if args.real_churn else snapshot
        return 0
    for n in range(args.cycles + 1):
        profiler = cProfile.Profile() if args.profile and n > 0 else None
        c0 = time.process_time()
        if profiler is not None:
            profiler.enable()
        if args.freeze:
            gc.disable()  # the cycle leaves it off: what it made is frozen before the first collection sees it
        decisions, carry = run_carried_cycle(snapshot, config, NOW + 10 * n, None if args.fresh else carry)
        if args.freeze:
            gc.freeze()
            gc.enable()
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - c0
        # The cycle runs with the collector off: what it leaves unfreed is collected right after, on the
        # scheduler's CPU all the same.
        g0 = time.process_time()
        gc.collect(0)
        garbage = time.process_time() - g0
        same = ""
        if args.check:
            fresh = run_cycle(snapshot, config, NOW + 10 * n)
            same = f", identical to fresh: {'yes' if _text(fresh) == _text(decisions) else 'NO'}"
        phases = " ".join(f"{k}={v:.0f}" for k, v in decisions.timings.items() if not k.startswith("plugin/"))
        print(f"{'cold' if n == 0 else f'warm {n}'}: {cpu:.3f} s CPU (+{garbage:.3f} s collecting what it left), "
              f"{len(decisions.binds)} binds, "
              f"{len(decisions.evictions)} evictions, {len(decisions.unschedulable)} unschedulable, "
              f"{carry.replayed} attempts and {carry.replayed_actions} actions replayed, {carry.reused} explanations "
              f"reused{same}; {_opened(carry)}; {phases}; "
              f"load1={os.getloadavg()[0]:.2f}", flush=True)
        if profiler is not None:
            print("  counters:", " ".join(f"{k}={v}" for k, v in sorted(decisions.counters.items())))
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.sort_stats("tottime").print_stats(args.profile)
            stats.sort_stats("cumulative").print_stats(args.profile)
        before = snapshot
        if args.live_binds:
            snapshot, landing = lagged_binds(snapshot, decisions, landing), decisions.binds
        else:
            snapshot = apply_decisions(snapshot, decisions)
        if args.real_churn:
            snapshot = real_churn(snapshot, args.churn, n + 1)
        else:
            pods = list(snapshot.pods)
            for k in random.Random(n).sample(range(len(pods)), int(len(pods) * args.churn)):
                pods[k] = replace(pods[k])  # equal, a new object
            snapshot = replace(snapshot, pods=tuple(pods))
        if not args.no_removed:
            snapshot = with_removed(before, snapshot)
    g0 = time.process_time()
    young = gc.collect(1)  # what the last cycle left, as the next allocations would collect it
    g1 = time.process_time()
    if args.freeze:
        gc.unfreeze()
    garbage = gc.collect()
    print(f"after the cycles: young collection {g1 - g0:.3f} s ({young} unreachable); full collection "
          f"{time.process_time() - g1:.3f} s, {garbage} unreachable{' (frozen meanwhile)' if args.freeze else ''}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB; load1={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
