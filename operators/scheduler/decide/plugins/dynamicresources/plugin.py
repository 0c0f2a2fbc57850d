"""dynamicresources (KAI's plugin of that name): a pod's ResourceClaims are allocated from its node's devices.

- Pre-filter: every claim of the pod exists (a template's claim is created by the resource-claim controller first),
  has fewer than 256 consumers, and a shared GPU claim (named by the pod, not from a template) carries the
  `kai.scheduler/queue` label of the pod's queue (KAI's rule).
- Node filter: a claim already allocated (in the cluster, or to another pod of this session) pins the pod to its
  node; an unallocated one must be allocatable from the node's ResourceSlices (`allocator.allocate`), with devices
  held by other claims (allocated ones, and those of BindRequests the binder has not written yet) taken.
- Allocate / deallocate events: placing a pod allocates its unallocated claims (virtually, for the session) and
  records the allocations on the task, which the bind decision carries as the BindRequest's
  `resourceClaimAllocations`; evicting the last user of a claim makes its devices releasing (a reclaim or preempt
  simulation can give them to the preemptor, which is pipelined onto them as onto any GPU being released), and a
  rollback restores them.
- Devices of claims whose pods are all gone or going, or that no pod reserves any more (the resource-claim
  controller has not deallocated them yet; our binder writes an allocation and its reservation at once) are
  releasing too; where their pods are gone, their GPUs are moved from the node's idle GPUs to its releasing
  ones, so the next cycle pipelines onto them instead of evicting more pods.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from operators.core.dra import is_gpu_class
from operators.scheduler.decide.devices import (
    QUEUE_LABEL,
    RESERVED_FOR_MAX,
    ClaimRecord,
    Device,
    DeviceClassRecord,
    allocation_json,
)
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import ON_NODE, RELEASING, NodeState, Task
from operators.scheduler.decide.plugins.dynamicresources.allocator import Allocation, allocate

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

DeviceId = tuple[str, str, str]
_CLAIMS = attrgetter("claims")


class DynamicResources(Plugin):
    name = "dynamicresources"
    default_priority = 350

    def __init__(self, arguments: dict[str, object] | None = None) -> None:
        super().__init__(arguments)
        self.claims: dict[str, ClaimRecord] = {}
        self.classes: dict[str, DeviceClassRecord] = {}
        self.node_devices: dict[str, list[Device]] = {}
        self.alloc: dict[str, Allocation] = {}  # claim key -> its (virtual) allocation
        self.taken: dict[DeviceId, str] = {}  # device -> claim key ("" for a BindRequest not yet written)
        self.releasing: dict[DeviceId, str] = {}  # device -> claim key, of claims whose pods are all going
        self.users: dict[str, set[str]] = {}  # claim key -> uids of the placed pods using it
        self.made: set[str] = set()  # claims allocated in this session
        self.saved: dict[str, Allocation] = {}  # allocations freed by an eviction, for its rollback
        # Pod uid -> the devices its BindRequest allocates, while the pod waits for the bind (not yet in its claims).
        self.binding: dict[str, tuple[DeviceId, ...]] = {}
        self.any_claims = False  # some pod of the snapshot has claims (set at session open)

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, node_prefilter=self, node_filter=self, allocate_event=self,
                     deallocate_event=self)

    # --- session ------------------------------------------------------------------------------------
    def on_session_open(self, session: Session) -> None:
        snap = session.snapshot
        self.any_claims = session.any_pod("claims", _CLAIMS)
        if not self.any_claims and not snap.resource_claims:
            return  # no claim to account and no pod to place with one: in_use says so, every hook leaves
        self.claims = {c.key: c for c in snap.resource_claims}
        self.classes = {c.name: c for c in snap.device_classes}
        for s in sorted(snap.resource_slices, key=lambda s: s.name):
            if s.node:
                self.node_devices.setdefault(s.node, []).extend(s.devices)
        live: dict[str, str] = {}  # claim key -> "placed" if a non-releasing placed pod uses it, else "going"
        for job in session.jobs:
            for task in job.tasks:
                if task.rec.claims and task.status in ON_NODE:
                    going = task.status == RELEASING
                    for key in self._keys(task):
                        self.users.setdefault(key, set()).add(task.rec.uid)
                        if not going:
                            live[key] = "placed"
                        else:
                            live.setdefault(key, "going")
        # Pods that still hold what they reserve: not deleting, not finished (kwok and the kubelet mark a deleted
        # pod Failed, which holds no GPU on its node while its claim is still allocated).
        pods = {p.uid for p in snap.pods if not p.deleting and p.phase not in ("Succeeded", "Failed")}
        for claim in snap.resource_claims:
            if claim.allocated is None:
                continue
            allocation = Allocation(claim.allocated_node, claim.allocated)
            state = live.get(claim.key)
            if state == "placed" or any(uid in pods and state != "going" for uid in claim.reserved_for):
                self._take(claim.key, allocation)
            else:  # every consumer gone or going (or none left): the resource-claim controller deallocates it soon
                self.alloc[claim.key] = allocation
                for d in allocation.devices:
                    self.releasing[d.id] = claim.key
                if state is None:  # its pods are gone: their GPUs are still held, as releasing ones
                    self._release_gpus(session, allocation)
        # Devices of a decision the binder has not written to the claims yet: only while its pod waits for the bind.
        # The binder writes the claims before the binding, so once the pod is bound (or gone, or the request
        # failed) the claims say what is held; a finished request kept until its pod goes must not hold the devices
        # its pod's claim has since released (a preemptor would evict another victim for them).
        waiting = {(p.namespace, p.name): p.uid for p in snap.pods if p.phase == "Pending" and not p.node_name
                   and not p.deleting}
        for br in snap.bindrequests:
            uid = waiting.get((br.namespace, br.pod_name))
            if not br.failed and uid is not None and br.claim_devices:
                self.binding[uid] = br.claim_devices
                for device in br.claim_devices:
                    self.taken.setdefault(device, "")

    def in_use(self, session: Session) -> bool:
        return self.any_claims

    def _keys(self, task: Task) -> list[str]:
        return [f"{task.rec.namespace}/{name}" for _, name in task.rec.claims if name]

    def _take(self, key: str, allocation: Allocation) -> None:
        self.alloc[key] = allocation
        for d in allocation.devices:
            self.taken[d.id] = key

    def _release_gpus(self, session: Session, allocation: Allocation) -> None:
        node = session.node_by_name.get(allocation.node)
        gpus = sum(1 for d in allocation.devices if is_gpu_class(d.driver))
        if node is None or not gpus:
            return
        moved = min(gpus, max(node.idle_gpu, 0))
        node.idle_gpu -= moved
        node.rel_gpu += moved
        session._free_dirty.add(node.idx)
        session.index.update(node)

    def _soften(self, key: str) -> None:
        """The claim's pods are all evicted: its devices are releasing."""
        allocation = self.alloc.get(key)
        if allocation is not None:
            for d in allocation.devices:
                if self.taken.get(d.id) == key:
                    del self.taken[d.id]
                self.releasing[d.id] = key

    def _harden(self, key: str) -> None:
        allocation = self.alloc.get(key)
        if allocation is not None:
            for d in allocation.devices:
                if self.releasing.get(d.id) == key:
                    del self.releasing[d.id]
                self.taken[d.id] = key

    def _free(self, key: str) -> Allocation | None:
        allocation = self.alloc.pop(key, None)
        if allocation is not None:
            for d in allocation.devices:
                if self.taken.get(d.id) == key:
                    del self.taken[d.id]
        return allocation

    # --- filters ------------------------------------------------------------------------------------
    def prefilter(self, session: Session, task: Task) -> str | None:
        rec = task.rec
        queue = task.job.queue.name if task.job is not None and task.job.queue is not None else ""
        for pod_claim, name in rec.claims:
            if not name:
                return f"waiting for the ResourceClaim of pod claim {pod_claim!r} to be created from its template"
            claim = self.claims.get(f"{rec.namespace}/{name}")
            if claim is None:
                return f"ResourceClaim {rec.namespace}/{name} (pod claim {pod_claim!r}) does not exist"
            if rec.uid not in claim.reserved_for and len(claim.reserved_for) >= RESERVED_FOR_MAX:
                return f"ResourceClaim {rec.namespace}/{name} has reached its maximum of {RESERVED_FOR_MAX} consumers"
            if claim.is_gpu and claim.owner_pod != rec.uid and claim.labels.get(QUEUE_LABEL, "") != queue:
                label = claim.labels.get(QUEUE_LABEL, "")
                return (f"DRA claim {name} is a shared GPU claim " + (
                    f"with wrong queue label (expected queue: {queue}, claim queue label: {label})" if label
                    else f"but does not have a queue label ({QUEUE_LABEL})"))
        return None

    def filter_node(self, session: Session, task: Task, node: NodeState) -> str | None:
        result = self._allocations(task, node.name)
        return result if isinstance(result, str) else None

    def _allocations(self, task: Task, node: str) -> list[tuple[str, str, Allocation, bool]] | str:
        """(pod claim, claim key, allocation, new) per claim of the task on `node`, or why not."""
        rec = task.rec
        out: list[tuple[str, str, Allocation, bool]] = []
        held: dict[DeviceId, str] = {}
        for pod_claim, name in rec.claims:
            key = f"{rec.namespace}/{name}"
            claim = self.claims.get(key)
            if claim is None:
                return f"ResourceClaim {key} does not exist"
            existing = self.alloc.get(key)
            if existing is not None:
                if existing.node and existing.node != node:
                    return f"DRA claim {pod_claim!r} ({name}) is allocated on node {existing.node}"
                out.append((pod_claim, key, existing, False))
                continue
            taken = self.taken if not held else {**self.taken, **held}
            result = allocate(claim, node, self.node_devices.get(node, ()), taken, self.classes,
                              f"DRA claim {pod_claim!r}", self.releasing)
            if isinstance(result, str):
                return result
            for d in result.devices:
                held[d.id] = key
            out.append((pod_claim, key, result, True))
        return out

    # --- events -------------------------------------------------------------------------------------
    def on_allocate(self, session: Session, task: Task, kind: str) -> None:
        if not task.rec.claims or task.node < 0:
            return
        uid = task.rec.uid
        if kind == "rollback":  # an eviction undone: the pod uses its claims again
            for device in self.binding.get(uid, ()):
                if self.releasing.get(device) == "":
                    del self.releasing[device]
                    self.taken[device] = ""
            for key in self._keys(task):
                self.users.setdefault(key, set()).add(uid)
                if self.saved.pop(key, None) is not None:
                    self._harden(key)
            return
        node = session.nodes[task.node].name
        result = self._allocations(task, node)
        if isinstance(result, str):  # the placement was checked by filter_node; nothing to record
            return
        claims = []
        for pod_claim, key, allocation, new in result:
            if new:
                self._take(key, allocation)
                self.made.add(key)
            self.users.setdefault(key, set()).add(uid)
            claims.append((pod_claim, allocation_json(allocation.node or node, allocation.devices)))
        task.claims = tuple(claims)

    def on_deallocate(self, session: Session, task: Task, kind: str) -> None:
        if not task.rec.claims:
            return
        uid = task.rec.uid
        for key in self._keys(task):
            users = self.users.get(key)
            if users is not None:
                users.discard(uid)
            if users:
                continue
            if kind == "evict":
                if key in self.alloc and key not in self.saved:
                    self._soften(key)
                    self.saved[key] = self.alloc[key]
            elif key in self.made:
                self._free(key)
                self.made.discard(key)
        if kind == "evict":  # a pod evicted while waiting for its bind: its BindRequest's devices are releasing
            for device in self.binding.get(uid, ()):
                if self.taken.get(device) == "":
                    del self.taken[device]
                    self.releasing[device] = ""
        else:
            task.claims = ()


PLUGIN = DynamicResources
