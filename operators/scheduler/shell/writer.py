"""The scheduler's writer: a cycle's decisions as API writes (BindRequests, evictions, PodGroup annotations,
pod and PodGroup conditions, events), bounded in concurrency and idempotent.

BindRequests are named after their pod (a second create is AlreadyExists), pod conditions and PodGroup status are
written only when they change, and evictions are issued once per pod. What is being written is assumed at once
(`assume.py`), so the next cycle decides on it before the watch delivers it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from operators.core import keys
from operators.core.api.bindrequest import BindRequestRecord, parse_decision
from operators.core.api.podgroup import unschedulable_condition_body
from operators.core.cache import BINDREQUESTS, PODGROUPS, PODS, Informer
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import APPLY_PATCH, MERGE_PATCH, is_conflict, is_not_found, raw, status_of
from operators.core.times import rfc3339
from operators.core.units import MS_PER_SECOND
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Bind, Decisions, Eviction, Unschedulable
from operators.scheduler.decide.records import RefusedEviction
from operators.scheduler.shell import metrics
from operators.scheduler.shell.assume import Assumed, PodGroupOverlay
from operators.scheduler.shell.eviction import Refusals, guarded_by, per_preemptor, refusal_message
from operators.scheduler.shell.explained import Written, chosen
from operators.scheduler.shell.provisioning_shell import ProvisioningShell
from operators.scheduler.shell.suspension import Suspender

log = logging.getLogger("scheduler")

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
FIELD_MANAGER = "kai-scheduler"
EVENT_EVICTION_REFUSED = "EvictionRefused"


class Writer:
    """The write half of the scheduler loop (`SchedulerLoop` derives from it and owns the informers it reads)."""

    STOP_GRACE = 3.0  # seconds the writes in flight get to finish when the loop is stopped


    api: Any
    config: SchedulerConfig
    explanation_refresh: float  # seconds (explained.py)
    nodes: Informer[Any]
    pods: Informer[Any]
    podgroups: Informer[Any]
    bindrequests: Informer[Any]
    pdbs: Informer[Any]
    events: EventRecorder
    provisioning: ProvisioningShell
    overlay: PodGroupOverlay

    def _init_writes(self, concurrency: int) -> None:
        """The write budgets and caches (after the informers exist)."""
        # Separate budgets, so that a burst of BindRequest creates never waits behind explanations and events, and
        # the next cycle's awaited writes (evictions) never wait behind the previous cycle's binds.
        self.gate = asyncio.Semaphore(concurrency)
        self.bind_gate = asyncio.Semaphore(concurrency)
        self.event_gate = asyncio.Semaphore(max(concurrency // 2, 1))
        # What this process wrote last, so unchanged explanations cost no API call.
        self._pod_condition: dict[str, str] = {}
        self._pg_condition: dict[str, tuple[Any, ...]] = {}
        # The explanation last shown per pending pod and PodGroup (events and conditions): a change of its numbers
        # alone is shown at most once per `explanation_refresh` seconds (explained.py; 0: every change, as KAI).
        self._pod_explained: dict[str, Written] = {}
        self._pg_explained: dict[str, Written] = {}
        self._evicted: dict[str, float] = {}
        self._deleted_bindrequests: dict[str, float] = {}
        self._explaining: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Task[None]] = set()  # background writes still going out (binds, annotations)
        # BindRequests created and not yet seen bound (pod key -> monotonic creation time), for BIND_LATENCY.
        self._binding: dict[str, float] = {}
        self.assumed_bindrequests = Assumed(self.bindrequests)
        self.assumed_podgroups = Assumed(self.podgroups)
        self._refusals = Refusals()
        self.assumed_pods = Assumed(self.pods)
        self._ungated: dict[str, float] = {}  # pod key -> monotonic time its quota gate was lifted (quotagates)
        self.suspender = Suspender(self.api, self.events)

    async def _stop_writing(self) -> None:
        """Stopped (a clean stop before the lease is released): the writes still going out finish within
        STOP_GRACE, the rest are cancelled, so nothing of this process is written once `run` has ended."""
        deadline = time.monotonic() + self.STOP_GRACE
        while self._writing:  # a write may start another (a bind's event)
            pending = set(self._writing)
            left = deadline - time.monotonic()
            if left <= 0:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
            await asyncio.wait(pending, timeout=left)

    async def _bounded(self, calls: Iterable[Callable[[], Awaitable[object]]],
                       gate: asyncio.Semaphore | None = None) -> None:
        async def one(call: Callable[[], Awaitable[object]]) -> None:
            async with gate or self.gate:
                try:
                    await call()
                except Exception as exc:
                    log.warning("write failed: %s", exc)

        await asyncio.gather(*(one(c) for c in calls))

    def _stream(self, b: Bind, streamed: set[str]) -> None:
        """A bind the running cycle has committed: assume it and create its BindRequest now, unless the gang may
        be held for its ProvisioningRequest (decided after the cycle; `commit` writes those)."""
        if self.provisioning.requests.by_index("gang", (b.namespace, b.pod_group)):
            return
        streamed.add(f"{b.namespace}/{b.pod}")
        if self._assume(b):
            self._background(self._bounded([partial(self.bind, b)], self.bind_gate))

    async def commit(self, d: Decisions, streamed: set[str] | frozenset[str] = frozenset()) -> None:
        """Write what changes the cluster now; explanations go to a background writer.

        Binds are assumed at once (the BindRequest is in the cache before it is created) and their creates go
        out in the background (those in `streamed` went out while the cycle ran), so the next cycle may start
        while they are still being written and sees those pods as Binding. PodGroup annotations (min-runtime reads
        last-start) are assumed the same way: the cached PodGroup carries them at once and the patches go out in
        the background. Evictions are awaited. Events and conditions explaining pending work are written in the
        background so that thousands of them never delay the next cycle; while a previous batch is still being
        written, this cycle's is skipped (the next cycle re-derives the same explanations, and unchanged ones cost
        nothing).
        """
        binds = [b for b in d.binds if f"{b.namespace}/{b.pod}" not in streamed and self._assume(b)]
        if binds:
            self._background(self._bounded([partial(self.bind, b) for b in binds], self.bind_gate))
        by_pg: dict[tuple[str, str], dict[str, str | None]] = {}
        for a in d.annotations:
            by_pg.setdefault((a.namespace, a.pod_group), {})[a.key] = a.value
        annotations = [partial(self.annotate, k[0], k[1], v) for k, v in by_pg.items() if self._assume_annotations(
            k[0], k[1], v)]
        if annotations:
            self._background(self._bounded(annotations))
        if self._ungated:
            now = time.monotonic()
            self._ungated = {k: t for k, t in self._ungated.items() if now - t < self.UNGATE_RETRY}
        ungates = [partial(self.ungate, u.namespace, u.pod) for u in d.ungates
                   if self._first_ungate(u.namespace, u.pod)]
        if ungates:
            self._background(self._bounded(ungates, self.bind_gate))
        fallback: list[Eviction] = []
        if d.suspensions or d.resumes:  # the suspend plugin's (opt-in): one owner patch instead of the evictions
            for suspension in d.suspensions:
                fallback += await self.suspender.suspend(suspension)
            await self._bounded([partial(self.suspender.resume, r) for r in d.resumes])
        await self._evict_all([*d.evictions, *fallback])
        explanations: list[Callable[[], Awaitable[None]]] = [partial(self.explain, u) for u in d.unschedulable]
        for p in d.pipelined:
            explanations.append(partial(self.events.emit, self._pod_ref(p.namespace, p.pod), "Normal",
                                        keys.EVENT_PIPELINED, p.message))
        for n in d.not_ready:
            explanations.append(partial(self.events.emit, self._pg_ref(n.namespace, n.pod_group), "Normal",
                                        keys.EVENT_NOT_READY, n.message))
        for s in d.stale:
            explanations.append(partial(self.events.emit, self._pg_ref(s.namespace, s.pod_group), "Normal",
                                        keys.EVENT_STALE_JOB, s.message))
        if explanations and (self._explaining is None or self._explaining.done()):
            self._explaining = asyncio.create_task(self._bounded(explanations))
        metrics.record_queues(d.queues)
        metrics.SCHEDULED.labels("allocate").inc(len({b.pod_group for b in d.binds}))
        self._forget_gone()

    def _background(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    def _assume_annotations(self, namespace: str, name: str, values: dict[str, str | None]) -> bool:
        """Put the annotations about to be written onto the cached PodGroup (and onto every copy its watch
        delivers until one carries them), so that the next cycles decide on them; False if the PodGroup is gone."""
        key = f"{namespace}/{name}"
        record = self.podgroups.get(key)
        if record is None:
            return False
        self.overlay.assumed[key] = {**self.overlay.assumed.get(key, {}), **values}
        if record.last_start is None and record.created and values.get(keys.LAST_START_TIMESTAMP):
            metrics.record_first_start(record.queue, record.created, time.time())
        updated = replace(record, last_start=values.get(keys.LAST_START_TIMESTAMP, record.last_start),
                          stale_since=values.get(keys.STALE_PODGROUP_TIMESTAMP, record.stale_since),
                          suspended=values.get(keys.SUSPENDED_BY_SCHEDULER, record.suspended))
        self.assumed_podgroups.assume(key, updated)
        return True

    def _forget_gone(self) -> None:
        """Drop write caches of pods and PodGroups that no longer exist (every ~minute, not every cycle)."""
        self._cycles = getattr(self, "_cycles", 0) + 1
        if self._cycles % 60:
            return
        self._pod_condition = {k: v for k, v in self._pod_condition.items() if k in self.pods.store}
        self._pg_condition = {k: v for k, v in self._pg_condition.items() if k in self.podgroups.store}
        self._pod_explained = {k: v for k, v in self._pod_explained.items() if k in self.pods.store}
        self._pg_explained = {k: v for k, v in self._pg_explained.items() if k in self.podgroups.store}
        horizon = time.monotonic() - 300
        self._evicted = {k: t for k, t in self._evicted.items() if t > horizon}
        self._deleted_bindrequests = {k: t for k, t in self._deleted_bindrequests.items() if t > horizon}
        self._binding = {k: t for k, t in self._binding.items() if t > horizon}

    def _pod_ref(self, namespace: str, name: str) -> ObjectRef:
        record = self.pods.get(f"{namespace}/{name}")
        return ObjectRef("v1", "Pod", namespace, name, record.uid if record else "")

    def _pg_ref(self, namespace: str, name: str) -> ObjectRef:
        record = self.podgroups.get(f"{namespace}/{name}")
        return ObjectRef(f"{keys.GROUP}/{keys.PODGROUP_VERSION}", "PodGroup", namespace, name,
                         record.uid if record else "")

    def _request_body(self, b: Bind, uid: str) -> dict[str, Any]:
        """The BindRequest of one bind, as the binder reads it (core.api.bindrequest), labelled with the shard's
        node pool when it has a partition value."""
        partition = self.config.partition
        record = BindRequestRecord.decided(b.namespace, b.pod, uid, b.node, b.resource_type, b.gpu_groups,
                                           b.gpu_count, b.gpu_portion, b.claim_allocations)
        return record.body({self.config.node_pool_label: partition} if partition else None)

    def _assume(self, b: Bind) -> bool:
        """Put the BindRequest about to be created into the cache, so every later cycle sees the pod Binding."""
        key = f"{b.namespace}/{b.pod}"
        pod = self.pods.get(key)
        if pod is None or key in self.bindrequests.store:
            return False  # gone, or a BindRequest arrived after the snapshot was taken
        self.assumed_bindrequests.assume(key, parse_decision(self._request_body(b, pod.uid)))
        return True

    async def bind(self, b: Bind) -> None:
        key = f"{b.namespace}/{b.pod}"
        pod = self.pods.get(key)
        if pod is None:
            self.assumed_bindrequests.forget(key)
            return
        self._binding[key] = time.monotonic()
        try:
            await raw(self.api, "POST", BINDREQUESTS.path(b.namespace), body=self._request_body(b, pod.uid))
        except Exception as exc:
            self._binding.pop(key, None)
            if is_conflict(exc):
                # One exists already: the cache must hold that one, not the assumption.
                await self._reread_bindrequest(b.namespace, b.pod)
                return
            self.assumed_bindrequests.forget(key)
            message = f"Failed to bind pod {b.namespace}/{b.pod} to node {b.node}. {getattr(exc, 'body', exc)}"
            await self.events.emit(self._pod_ref(b.namespace, b.pod), "Warning", "FailedBinding", message)
            await self.pod_condition(b.namespace, b.pod, "BindingError", message)
            self._pod_explained.pop(key, None)  # the next Unschedulable is news, not a recount
            return
        metrics.TASK_LATENCY.observe(max(time.time() - pod.created, 0) * MS_PER_SECOND)
        pool = self.config.node_pool_name
        # The event has its own budget: the bind slot is free for the next BindRequest at once.
        writes: list[Callable[[], Awaitable[None]]] = [partial(
            self.events.emit, self._pod_ref(b.namespace, b.pod), "Normal", keys.EVENT_SCHEDULED,
            f"Successfully assigned pod {b.namespace}/{b.pod} to node {b.node} at node-pool {pool}")]
        label, partition = self.config.node_pool_label, self.config.partition
        if partition and pod.labels.get(label) != partition:
            # A shard with a partition value stamps its node pool on the pods it binds (one merge-patch).
            async def stamp() -> None:
                await raw(self.api, "PATCH", f"{PODS.path(b.namespace)}/{b.pod}",
                          body={"metadata": {"labels": {label: partition}}}, content_type=MERGE_PATCH)
            writes.append(stamp)
        self._background(self._bounded(writes, self.event_gate))

    async def _reread_bindrequest(self, namespace: str, name: str) -> None:
        try:
            live = await raw(self.api, "GET", f"{BINDREQUESTS.path(namespace)}/{name}")
        except Exception as exc:
            if not is_not_found(exc):
                raise
            live = None
        self.assumed_bindrequests.correct(f"{namespace}/{name}", None if live is None else parse_decision(live),
                                          "REREAD")

    def refused_evictions(self) -> tuple[RefusedEviction, ...]:
        """The evictions the API server refused lately (the next cycles plan without those victims)."""
        return self._refusals.current()

    async def _evict_all(self, evictions: list[Eviction]) -> None:
        """Each preemptor's evictions, PDB-covered victims first and one at a time: a refusal ends that
        preemptor's evictions for this cycle. Preemptors go concurrently, as do the victims no budget covers."""
        if not evictions:
            return
        pdbs = list(self.pdbs.store.values())
        guarded = {f"{e.namespace}/{e.pod}" for e in evictions
                   if guarded_by(self.pods.get(f"{e.namespace}/{e.pod}"), pdbs)} if pdbs else set()

        async def one_preemptor(group: list[Eviction]) -> None:
            first = [e for e in group if f"{e.namespace}/{e.pod}" in guarded]
            for e in first:
                async with self.gate:
                    if not await self.evict(e):
                        return
            await self._bounded([partial(self.evict, e) for e in group[len(first):]])

        await asyncio.gather(*(one_preemptor(g) for g in per_preemptor(evictions, guarded)))

    async def _refused(self, e: Eviction, exc: BaseException) -> None:
        message = refusal_message(exc)
        self._refusals.add(e, message)
        self._evicted.pop(f"{e.namespace}/{e.pod}", None)
        log.info("eviction of %s/%s for %s refused: %s", e.namespace, e.pod, e.for_pod_group or "-", message)
        text = (f"Eviction of pod {e.namespace}/{e.pod} ({e.action}) refused by the API server: {message}. "
                "Nothing else is evicted for this workload in this cycle; the next cycles plan without that pod.")
        if e.for_pod_group:
            namespace, name = e.for_pod_group.split("/", 1)
            await self.events.emit(self._pg_ref(namespace, name), "Warning", EVENT_EVICTION_REFUSED, text)
        await self.events.emit(self._pod_ref(e.namespace, e.pod), "Warning", EVENT_EVICTION_REFUSED, text)

    async def _disruption_target(self, e: Eviction) -> None:
        condition = {"type": keys.CONDITION_DISRUPTION_TARGET, "status": "True",
                     "reason": keys.REASON_PREEMPTION_BY_SCHEDULER, "message": e.message,
                     "lastTransitionTime": rfc3339()}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(e.namespace)}/{e.pod}/status",
                      body={"status": {"conditions": [condition]}}, content_type=STRATEGIC_MERGE)
        except Exception as exc:
            log.debug("DisruptionTarget on %s/%s not written: %s", e.namespace, e.pod, exc)

    async def evict(self, e: Eviction) -> bool:
        """Make the victim leave (one write: the eviction, or the delete); False when the API server refused.
        The DisruptionTarget condition goes before a delete, and after an eviction (a refused one leaves the pod
        untouched; an accepted one is still there, terminating)."""
        key = f"{e.namespace}/{e.pod}"
        if time.monotonic() - self._evicted.get(key, -1e9) < 60:
            return True
        self._evicted[key] = time.monotonic()
        pod = self.pods.get(key)
        if pod is None or pod.deleting:
            return True
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod.uid}}
        try:
            if self.config.eviction_method == "delete":
                await self._disruption_target(e)
                await raw(self.api, "DELETE", f"{PODS.path(e.namespace)}/{e.pod}", body=options)
            else:
                await raw(self.api, "POST", f"{PODS.path(e.namespace)}/{e.pod}/eviction",
                          body={"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": e.pod, "namespace": e.namespace}, "deleteOptions": options})
                await self._disruption_target(e)
        except Exception as exc:
            if status_of(exc) == 429:
                await self._refused(e, exc)
                return False
            if not is_not_found(exc) and status_of(exc) != 409:
                raise
        else:
            counter = metrics.ACTION_EVICTIONS.get(e.action)
            if counter is not None:
                counter.inc()
        # The pod is going from now on: a cycle that runs before its watch event arrives (e.g. woken by a claim
        # change) must see its resources releasing, not evict another pod for the same preemptor. Only while the
        # store still holds that pod: its DELETED event may have arrived during the request (a fast kubelet), and
        # an assumption put after it would keep a ghost pod holding its resources for good.
        current = self.pods.get(key)
        if current is not None and current.uid == pod.uid and not current.deleting:
            self.assumed_pods.assume(key, replace(current, deleting=True))
        metrics.EVICTIONS.inc()
        metrics.ACTED_ON.labels(e.action).inc()
        group = self.podgroups.get(f"{e.namespace}/{e.pod_group}")
        metrics.EVICTED_PODS.labels(e.pod_group, e.namespace, group.uid if group else "", self.config.node_pool_name,
                            e.action).inc()  # per pod: a gang's count grows by its size
        forpg = e.for_pod_group.split("/")
        annotations = {"num-evicted-pods": "1", "evictor-action-type": e.action,
                       "evictor-pod-group-name": forpg[-1] if e.for_pod_group else "",
                       "evictor-pod-group-namespace": forpg[0] if len(forpg) == 2 else ""}
        await self.events.emit(self._pg_ref(e.namespace, e.pod_group), "Normal", keys.EVENT_EVICT, e.message,
                               annotations)
        await self.events.emit(self._pod_ref(e.namespace, e.pod), "Normal", keys.EVENT_EVICT, e.message)
        return True

    UNGATE_RETRY = 30.0  # seconds before a lift the cache does not show yet is written again

    def _first_ungate(self, namespace: str, pod: str) -> bool:
        """True once per pod (again after UNGATE_RETRY): the cache may show the gate until the patch is seen."""
        key = f"{namespace}/{pod}"
        if key in self._ungated:
            return False
        self._ungated[key] = time.monotonic()
        return True

    async def ungate(self, namespace: str, pod: str) -> None:
        """Lift the quota gate: one strategic-merge patch deleting that entry of spec.schedulingGates."""
        body = {"spec": {"schedulingGates": [{"$patch": "delete", "name": keys.QUOTA_GATE}]}}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(namespace)}/{pod}", body=body, content_type=STRATEGIC_MERGE)
        except Exception as exc:
            if not is_not_found(exc):
                self._ungated.pop(f"{namespace}/{pod}", None)
                log.warning("lifting the quota gate of %s/%s failed: %s", namespace, pod, exc)

    async def explain(self, u: Unschedulable) -> None:
        """The PodGroup's and each pending pod's event and condition, as last shown when only their numbers
        changed since (explained.py)."""
        now = time.monotonic()
        key = f"{u.namespace}/{u.pod_group}"
        shown = self._pg_explained[key] = chosen(
            self._pg_explained.get(key), repr((u.node_pool, u.message, [r.to_dict() for r in u.reasons])), now,
            (u.message, u.reasons), self.explanation_refresh)
        if shown.value != (u.message, u.reasons):
            u = replace(u, message=shown.value[0], reasons=shown.value[1])
        await self.events.emit(self._pg_ref(u.namespace, u.pod_group), "Normal", keys.EVENT_UNSCHEDULABLE,
                               u.message)
        for pod, new in u.pod_messages.items():
            pod_key = f"{u.namespace}/{pod}"
            record = self.pods.get(pod_key)
            uid = record.uid if record else ""
            last = self._pod_explained.get(pod_key)  # a pod of the same name created since is news
            said = self._pod_explained[pod_key] = chosen(last if last and last.value == uid else None, new, now, uid,
                                                         self.explanation_refresh)
            message = said.text
            await self.events.emit(self._pod_ref(u.namespace, pod), "Warning", keys.EVENT_UNSCHEDULABLE, message)
            if u.mark_unschedulable:
                await self.pod_condition(u.namespace, pod, keys.REASON_UNSCHEDULABLE, message)
        if not u.has_allocated_pods:
            await self.podgroup_condition(u)

    async def pod_condition(self, namespace: str, pod: str, reason: str, message: str) -> None:
        key = f"{namespace}/{pod}"
        record = self.pods.get(key)
        written = f"{record.uid if record else ''}:{reason}:{message}"  # per pod uid: a recreated pod is written
        if self._pod_condition.get(key) == written:
            return
        if reason == keys.REASON_UNSCHEDULABLE and (
                record is None or record.node_name or key in self.bindrequests.store):
            return  # bound or being bound since the cycle decided: an explanation written late would be wrong
        condition = {"type": keys.CONDITION_POD_SCHEDULED, "status": "False", "reason": reason,
                     "message": message, "lastTransitionTime": rfc3339()}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(namespace)}/{pod}/status",
                      body={"status": {"conditions": [condition]}}, content_type=STRATEGIC_MERGE)
            self._pod_condition[key] = written
        except Exception as exc:
            if not is_not_found(exc):
                raise

    async def podgroup_condition(self, u: Unschedulable) -> None:
        key = f"{u.namespace}/{u.pod_group}"
        reasons = [r.to_dict() for r in u.reasons]
        signature = (u.node_pool, u.message, str(reasons))
        if self._pg_condition.get(key) == signature:
            return
        path = f"{PODGROUPS.path(u.namespace)}/{u.pod_group}"
        if key not in self.podgroups.store:
            return
        body = unschedulable_condition_body(u.namespace, u.pod_group, self.overlay.conditions.get(key) or [],
                                            u.node_pool, u.message, reasons, rfc3339())
        if body is not None:
            await raw(self.api, "PATCH", f"{path}/status", query={"fieldManager": FIELD_MANAGER, "force": "true"},
                      body=body, content_type=APPLY_PATCH)
        self._pg_condition[key] = signature

    async def annotate(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        try:
            await raw(self.api, "PATCH", f"{PODGROUPS.path(namespace)}/{name}",
                      body={"metadata": {"annotations": values}}, content_type=MERGE_PATCH)
        except Exception as exc:
            # Not written: later copies of the PodGroup are taken as they are (the cached one keeps the values
            # until its next watch event, as a write that failed after the cycle had decided on it would).
            self.overlay.assumed.pop(f"{namespace}/{name}", None)
            if not is_not_found(exc):
                raise

    async def cleanup_bindrequests(self) -> None:
        """Delete failed BindRequests (the pod is scheduled again) and those pointing at vanished nodes."""
        now = time.monotonic()
        doomed = [br for br in self.bindrequests.store.values()
                  if (br.failed or br.selected_node not in self.nodes.store)
                  and now - self._deleted_bindrequests.get(f"{br.namespace}/{br.name}", -1e9) > 10]
        for br in doomed:
            self._deleted_bindrequests[f"{br.namespace}/{br.name}"] = now

        async def delete(ns: str, name: str) -> None:
            try:
                await raw(self.api, "DELETE", f"{BINDREQUESTS.path(ns)}/{name}")
            except Exception as exc:
                if not is_not_found(exc):
                    raise
            self.assumed_bindrequests.correct(f"{ns}/{name}", None, "DELETED")

        await self._bounded([partial(delete, b.namespace, b.name) for b in doomed])
