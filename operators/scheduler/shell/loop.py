"""The scheduler's shell: informers -> snapshot -> `run_cycle` -> writes.

Watch-driven: every object is parsed once into a frozen record when its watch event arrives; a cycle runs every
period and soon after a relevant change (a record that really changed), on a snapshot assembled from the
records. The decision code runs in a worker thread so the event loop keeps reading watches and renewing the
lease; each job the allocate action commits is handed to the event loop at once, so its BindRequests are being
created while the cycle goes on. Writes are bounded in concurrency and idempotent: BindRequests are named after
their pod (a second create is AlreadyExists), pod conditions and PodGroup status are written only when they change,
and evictions are issued once per pod.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from prometheus_client import Gauge, Histogram

from operators.core import keys
from operators.core.cache import (
    BINDREQUESTS,
    CONFIGMAPS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    TOPOLOGIES,
    Informer,
)
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import APPLY_PATCH, MERGE_PATCH, is_conflict, is_not_found, raw, status_of
from operators.core.metrics import Counter
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Bind, Decisions, Eviction, Unschedulable
from operators.scheduler.decide.snapshot import (
    bindrequest_record,
    build_snapshot,
    configmap_record,
    node_record,
    pod_record,
    podgroup_record,
    priorityclass_record,
    queue_record,
    topology_record,
)
from operators.scheduler.shell.provisioning_shell import ProvisioningShell
from operators.scheduler.shell.shard import ShardWatcher

log = logging.getLogger("scheduler")
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
FIELD_MANAGER = "kai-scheduler"
_BUCKETS = [5 * 2**k for k in range(10)]

E2E_LATENCY = Gauge("kai_e2e_scheduling_latency_milliseconds", "Duration of the last scheduling cycle")
OPEN_SESSION = Gauge("kai_open_session_latency_milliseconds", "Snapshot assembly time of the last cycle")
CLOSE_SESSION = Gauge("kai_close_session_latency_milliseconds", "Time spent writing the last cycle's decisions")
ACTION_LATENCY = Gauge("kai_action_scheduling_latency_milliseconds", "Decision time of the last cycle",
                       ["action"])
TASK_LATENCY = Histogram("kai_task_scheduling_latency_milliseconds", "Pod creation to BindRequest",
                         buckets=_BUCKETS)
BIND_LATENCY = Histogram("kai_task_bind_latency_milliseconds",
                         "BindRequest creation to the pod bound, as the pod informer sees it", buckets=_BUCKETS)
PLUGIN_LATENCY = Gauge("kai_plugin_scheduling_latency_milliseconds", "Plugin time of the last cycle",
                       ["plugin", "OnSession"])
SIMULATIONS = Counter("kai_scenarios_simulation_by_action", "Victim scenarios simulated", ["action"])
FILTERED = Counter("kai_scenarios_filtered_by_action", "Victim scenarios refused without simulation",
                   ["action"])
EVICTED_PODS = Counter("kai_pod_group_evicted_pods_total", "Pods evicted per PodGroup",
                       ["podgroup", "namespace", "uid", "nodepool", "action"])
DUPLICATES = Counter("kai_scenarios_duplicate_by_action",
                     "Victim scenarios skipped as equivalent to one that already failed for the same job", ["action"])
_COUNTERS = {"scenarios_simulation": SIMULATIONS, "scenarios_filtered": FILTERED, "scenarios_duplicate": DUPLICATES}
for _action in ("reclaim", "preempt", "consolidation"):  # the solver's actions: exposed from the start, at 0
    SIMULATIONS.labels(_action)
    FILTERED.labels(_action)
    DUPLICATES.labels(_action)
SCHEDULED = Counter("kai_podgroups_scheduled_by_action", "PodGroups that got pods bound", ["action"])
ACTED_ON = Counter("kai_podgroups_acted_on_by_action", "PodGroups evicted from", ["action"])
EVICTIONS = Counter("kai_total_preemption_attempts", "Pods evicted by the scheduler")
FAIR_SHARE = {r: Gauge(f"kai_queue_fair_share_{n}", f"Fair share of {r}", ["queue_name"])
              for r, n in (("gpu", "gpu"), ("cpu", "cpu_cores"), ("memory", "memory_gb"))}
USAGE = {r: Gauge(f"kai_queue_{r}_usage", f"Allocated {r}", ["queue_name"]) for r in ("gpu", "cpu", "memory")}
DESERVED = Gauge("kai_queue_deserved_gpus_scheduler", "Deserved GPUs as the scheduler computes them",
                 ["queue_name"])
# KAI times its usage-database queries here; without a usage database (time-based fair share is not
# supported) no query is made and the histogram stays at zero, as KAI's does without one.
USAGE_QUERY_LATENCY = Histogram("kai_usage_query_latency_milliseconds", "Usage database query latency",
                                buckets=_BUCKETS)
# Beyond KAI: pods left Pending by the last cycle, by the first reason of their PodGroup.
PENDING_PODS = Gauge("kai_pending_pods", "Pods left pending by the last cycle, by reason", ["reason"])
CYCLES = Counter("kai_scheduler_cycles_total", "Scheduling cycles run")
LOOP_LAG = Gauge("kai_scheduler_eventloop_lag_seconds", "Event loop lag")


def pending_pods_by_reason(unschedulable: Iterable[Unschedulable]) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in unschedulable:
        reason = u.reasons[0].reason if u.reasons else "Unschedulable"
        out[reason] = out.get(reason, 0) + max(len(u.pod_messages), 1)
    return out


def _set_pending(unschedulable: Iterable[Unschedulable]) -> None:
    PENDING_PODS.clear()
    for reason, count in pending_pods_by_reason(unschedulable).items():
        PENDING_PODS.labels(reason).set(count)


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SchedulerLoop:
    def __init__(self, api: Any, config: SchedulerConfig, *, concurrency: int = 32,
                 shard: ShardWatcher | None = None) -> None:
        self.api = api
        self.config = config
        self.shard = shard  # when set, `config` follows the instance's SchedulingShard at every cycle
        name = config.scheduler_name

        def pods(obj: dict[str, Any]) -> Any:
            phase = (obj.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed") and (obj.get("spec") or {}).get("schedulerName") != name:
                return None  # finished pods of other schedulers hold nothing
            return pod_record(obj)

        # The PodGroups' schedulingConditions as last watched, so a condition write needs no read first.
        self._live_conditions: dict[str, list[dict[str, Any]]] = {}

        # PodGroup annotations this process is writing (last-start, stale) and has not yet seen in a watched copy:
        # every copy parsed meanwhile carries them, so later cycles decide as if they had landed (min-runtime
        # protects a job from the cycle that started it, whether or not its annotation was written yet).
        self._assumed_annotations: dict[str, dict[str, str | None]] = {}

        def podgroups(obj: dict[str, Any]) -> Any:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            conditions = (obj.get("status") or {}).get("schedulingConditions")
            if conditions:
                self._live_conditions[key] = conditions
            else:
                self._live_conditions.pop(key, None)
            assumed = self._assumed_annotations.get(key)
            if assumed:
                live = meta.get("annotations") or {}
                if all(live.get(k) == v for k, v in assumed.items()):
                    del self._assumed_annotations[key]  # landed
                else:
                    merged = {k: v for k, v in {**live, **assumed}.items() if v is not None}
                    obj = {**obj, "metadata": {**meta, "annotations": merged}}
            return podgroup_record(obj)

        self.nodes = Informer(api, NODES, node_record)
        self.pods = Informer(api, PODS, pods)
        self.podgroups = Informer(api, PODGROUPS, podgroups)
        self.queues = Informer(api, QUEUES, queue_record)
        self.bindrequests = Informer(api, BINDREQUESTS, bindrequest_record)
        self.priority_classes = Informer(api, PRIORITY_CLASSES, priorityclass_record)
        self.configmaps = Informer(api, CONFIGMAPS, configmap_record)
        self.informers: list[Informer[Any]] = [self.nodes, self.pods, self.podgroups, self.queues,
                                               self.bindrequests, self.priority_classes, self.configmaps]
        for informer in self.informers:
            informer.add_listener(self._on_change)
        # Topologies are optional: a cluster without their CRD schedules as if none existed (see _run_topologies).
        self.topologies = Informer(api, TOPOLOGIES, topology_record)
        self.topologies.add_listener(self._on_change)
        self._topologies_known = asyncio.Event()
        self.events = EventRecorder(api, name, min_interval=30)
        # Separate budgets, so that a burst of BindRequest creates never waits behind explanations and events, and
        # the next cycle's awaited writes (evictions) never wait behind the previous cycle's binds.
        self.gate = asyncio.Semaphore(concurrency)
        self.bind_gate = asyncio.Semaphore(concurrency)
        self.event_gate = asyncio.Semaphore(max(concurrency // 2, 1))
        self.wake = asyncio.Event()
        self.synced = False
        # What this process wrote last, so unchanged explanations cost no API call.
        self._pod_condition: dict[str, str] = {}
        self._pg_condition: dict[str, tuple[Any, ...]] = {}
        self._evicted: dict[str, float] = {}
        self._deleted_bindrequests: dict[str, float] = {}
        self._explaining: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Task[None]] = set()  # background writes still going out (binds, annotations)
        # BindRequests created and not yet seen bound (pod key -> monotonic creation time), for BIND_LATENCY.
        self._binding: dict[str, float] = {}
        self.pods.add_listener(self._on_pod)
        if shard is not None:
            shard.on_change(self.wake.set)
        # Autoscaler provisioning for gangs that opted in (a no-op while the API server lacks the CRD).
        self.provisioning = ProvisioningShell(api, self.events, self.wake.set, config.node_pool_name)
        self.podgroups.add_listener(self._on_podgroup)

    # --- triggers --------------------------------------------------------------------------------
    def _on_change(self, event: str, old: Any, new: Any) -> None:
        # What this process assumed (binds, annotations) was decided by the cycle that assumed it: no news.
        if old != new and event != "ASSUMED":
            self.wake.set()

    def _on_podgroup(self, _: str, old: Any, new: Any) -> None:
        if new is None and old is not None:
            self._live_conditions.pop(f"{old.namespace}/{old.name}", None)
            self._assumed_annotations.pop(f"{old.namespace}/{old.name}", None)

    def _on_pod(self, _: str, old: Any, new: Any) -> None:
        if new is not None and new.node_name and (old is None or not old.node_name):
            started = self._binding.pop(new.key, None)
            if started is not None:
                BIND_LATENCY.observe((time.monotonic() - started) * 1000)

    # --- the loop --------------------------------------------------------------------------------
    async def run_informers(self) -> None:
        await asyncio.gather(*(i.run() for i in self.informers), self.provisioning.run(), self._run_topologies(),
                             *([self.shard.run()] if self.shard else []))

    async def _run_topologies(self, recheck: float = 60.0, list_timeout: float = 30.0) -> None:
        """Watch Topologies once the API server serves them; until then there are none (rechecked every minute)."""
        while True:
            try:
                doc = await raw(self.api, "GET", f"/apis/{TOPOLOGIES.group}/{TOPOLOGIES.version}")
                if any(r.get("name") == TOPOLOGIES.plural for r in doc.get("resources") or []):
                    break
            except Exception as exc:
                if status_of(exc) != 404:
                    log.warning("discovery of %s failed: %s", TOPOLOGIES.group, exc)
            if not self._topologies_known.is_set():
                log.warning("the API server does not serve %s/%s topologies: topology constraints name unknown "
                            "topologies until the CRD is installed", TOPOLOGIES.group, TOPOLOGIES.version)
            self._topologies_known.set()
            await asyncio.sleep(recheck)
        runner = asyncio.create_task(self.topologies.run())
        try:  # a scheduler without the right to list them (custom RBAC) must not wait for them forever
            await asyncio.wait_for(asyncio.shield(self.topologies.synced.wait()), timeout=list_timeout)
        except TimeoutError:
            log.warning("topologies not listed within %.0f s (does the scheduler's role allow list/watch of "
                        "%s topologies?): scheduling goes on without them until they are", list_timeout,
                        TOPOLOGIES.group)
        self._topologies_known.set()
        await runner

    async def wait_synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers), self._topologies_known.wait(),
                             *([self.shard.wait_synced()] if self.shard else []))
        self.synced = True
        gc.freeze()  # the records heap is long-lived; keep it out of every collection

    STOP_GRACE = 3.0  # seconds the writes in flight get to finish when the loop is stopped

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            await self._stop_writing()
            raise

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

    async def _run(self) -> None:
        await self.wait_synced()
        log.info("informers synced: %d nodes, %d pods, %d podgroups, %d queues", len(self.nodes.store),
                 len(self.pods.store), len(self.podgroups.store), len(self.queues.store))
        while True:
            period = self.config.schedule_period
            started = time.monotonic()
            # Cleared before the cycle: a change that arrives while it decides or writes starts the next one.
            self.wake.clear()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed")
            elapsed = time.monotonic() - started
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=max(period - elapsed, 0.05))
                await asyncio.sleep(0.1)  # let a burst of related events land in the same cycle
            except TimeoutError:
                pass

    async def measure_lag(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(1)
            LOOP_LAG.set(max(time.monotonic() - before - 1, 0))

    def snapshot(self) -> Any:
        return build_snapshot(
            nodes=list(self.nodes.store.values()), pods=list(self.pods.store.values()),
            podgroups=list(self.podgroups.store.values()), queues=list(self.queues.store.values()),
            bindrequests=list(self.bindrequests.store.values()),
            priority_classes=list(self.priority_classes.store.values()),
            configmaps=list(self.configmaps.store.values()), topologies=list(self.topologies.store.values()),
            node_pool_label=self.config.node_pool_label, partition=self.config.partition)

    async def cycle(self) -> Decisions:
        t0 = time.monotonic()
        if self.shard is not None:
            self.config = self.shard.refresh()
        await self.cleanup_bindrequests()
        snapshot = self.provisioning.prefer(self.snapshot())
        t1 = time.monotonic()
        loop = asyncio.get_running_loop()
        streamed: set[str] = set()

        def on_bind(bind: Bind) -> None:  # called in the cycle's thread
            try:
                loop.call_soon_threadsafe(self._stream, bind, streamed)
            except RuntimeError:
                pass  # the event loop is closed (shutting down): nothing is written any more

        decisions = await asyncio.to_thread(run_cycle, snapshot, self.config, time.time(), on_bind=on_bind)
        if self.shard is not None:
            decisions.unschedulable += self.shard.unserved(self.podgroups.store.values(), self.pods.store.values())
        decisions = self.provisioning.hold(snapshot, decisions, time.time())
        t2 = time.monotonic()
        await self.commit(decisions, streamed)
        await self.provisioning.write()
        t3 = time.monotonic()
        CYCLES.inc()
        OPEN_SESSION.set((t1 - t0) * 1000 + decisions.timings.get("open-session", 0.0))
        for phase, ms in decisions.timings.items():
            if phase.startswith("plugin/"):
                PLUGIN_LATENCY.labels(phase.removeprefix("plugin/"), "OnSessionOpen").set(ms)
            elif phase not in ("open-session", "close-session"):
                ACTION_LATENCY.labels(phase).set(ms)
        for name, count in decisions.counters.items():
            what, _, action = name.partition("/")
            if what in _COUNTERS:
                _COUNTERS[what].labels(action).inc(count)
        CLOSE_SESSION.set((t3 - t2) * 1000 + decisions.timings.get("close-session", 0.0))
        E2E_LATENCY.set((t3 - t0) * 1000)
        _set_pending(decisions.unschedulable)
        if decisions.binds or decisions.evictions:
            log.info("cycle: %d binds, %d evictions, %d pipelined, %d unschedulable in %.0f ms",
                     len(decisions.binds), len(decisions.evictions), len(decisions.pipelined),
                     len(decisions.unschedulable), (t3 - t0) * 1000)
        return decisions

    async def _bounded(self, calls: Iterable[Callable[[], Awaitable[None]]],
                       gate: asyncio.Semaphore | None = None) -> None:
        async def one(call: Callable[[], Awaitable[None]]) -> None:
            async with gate or self.gate:
                try:
                    await call()
                except Exception as exc:
                    log.warning("write failed: %s", exc)

        await asyncio.gather(*(one(c) for c in calls))

    # --- writes ----------------------------------------------------------------------------------
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
        await self._bounded([partial(self.evict, e) for e in d.evictions])
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
        for share in d.queues:
            for resource, gauge in FAIR_SHARE.items():
                value = share.fair_share.get(resource, 0.0)
                gauge.labels(share.name).set(value / 1000 if resource in ("cpu", "memory") else value)
            for resource, gauge in USAGE.items():
                value = share.allocated.get(resource, 0.0)
                gauge.labels(share.name).set(value / 1000 if resource in ("cpu", "memory") else value)
            DESERVED.labels(share.name).set(share.deserved.get("gpu", 0.0))
        SCHEDULED.labels("allocate").inc(len({b.pod_group for b in d.binds}))
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
        self._assumed_annotations[key] = {**self._assumed_annotations.get(key, {}), **values}
        updated = replace(record, last_start=values.get(keys.LAST_START_TIMESTAMP, record.last_start),
                          stale_since=values.get(keys.STALE_PODGROUP_TIMESTAMP, record.stale_since))
        self.podgroups._put(key, updated, "ASSUMED")
        return True

    def _forget_gone(self) -> None:
        """Drop write caches of pods and PodGroups that no longer exist (every ~minute, not every cycle)."""
        self._cycles = getattr(self, "_cycles", 0) + 1
        if self._cycles % 60:
            return
        self._pod_condition = {k: v for k, v in self._pod_condition.items() if k in self.pods.store}
        self._pg_condition = {k: v for k, v in self._pg_condition.items() if k in self.podgroups.store}
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
        return {
            "apiVersion": f"{keys.GROUP}/{keys.BINDREQUEST_VERSION}", "kind": "BindRequest",
            "metadata": {"name": b.pod, "namespace": b.namespace, "labels": {
                keys.SELECTED_NODE_LABEL: b.node,
                **({self.config.node_pool_label: self.config.partition} if self.config.partition else {})},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": b.pod, "uid": uid}]},
            "spec": {"podName": b.pod, "selectedNode": b.node, "receivedResourceType": b.resource_type,
                     "receivedGPU": {"count": b.gpu_count, "portion": b.gpu_portion},
                     "selectedGPUGroups": list(b.gpu_groups)},
        }

    def _assume(self, b: Bind) -> bool:
        """Put the BindRequest about to be created into the cache, so every later cycle sees the pod Binding."""
        key = f"{b.namespace}/{b.pod}"
        pod = self.pods.get(key)
        if pod is None or key in self.bindrequests.store:
            return False  # gone, or a BindRequest arrived after the snapshot was taken
        self.bindrequests._put(key, bindrequest_record(self._request_body(b, pod.uid)), "ASSUMED")
        return True

    async def bind(self, b: Bind) -> None:
        key = f"{b.namespace}/{b.pod}"
        pod = self.pods.get(key)
        if pod is None:
            self.bindrequests._put(key, None, "FORGOTTEN")
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
            self.bindrequests._put(key, None, "FORGOTTEN")
            message = f"Failed to bind pod {b.namespace}/{b.pod} to node {b.node}. {getattr(exc, 'body', exc)}"
            await self.events.emit(self._pod_ref(b.namespace, b.pod), "Warning", "FailedBinding", message)
            await self.pod_condition(b.namespace, b.pod, "BindingError", message)
            return
        TASK_LATENCY.observe(max(time.time() - pod.created, 0) * 1000)
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
        self.bindrequests._put(f"{namespace}/{name}", None if live is None else bindrequest_record(live),
                               "REREAD")

    async def evict(self, e: Eviction) -> None:
        key = f"{e.namespace}/{e.pod}"
        if time.monotonic() - self._evicted.get(key, -1e9) < 60:
            return
        self._evicted[key] = time.monotonic()
        pod = self.pods.get(key)
        if pod is None or pod.deleting:
            return
        condition = {"type": keys.CONDITION_DISRUPTION_TARGET, "status": "True",
                     "reason": keys.REASON_PREEMPTION_BY_SCHEDULER, "message": e.message,
                     "lastTransitionTime": _now_rfc3339()}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(e.namespace)}/{e.pod}/status",
                      body={"status": {"conditions": [condition]}}, content_type=STRATEGIC_MERGE)
        except Exception as exc:
            log.debug("DisruptionTarget on %s not written: %s", key, exc)
        try:
            await raw(self.api, "DELETE", f"{PODS.path(e.namespace)}/{e.pod}",
                      body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod.uid}})
        except Exception as exc:
            if not is_not_found(exc) and status_of(exc) != 409:
                raise
        EVICTIONS.inc()
        ACTED_ON.labels(e.action).inc()
        group = self.podgroups.get(f"{e.namespace}/{e.pod_group}")
        EVICTED_PODS.labels(e.pod_group, e.namespace, group.uid if group else "", self.config.node_pool_name,
                            e.action).inc()  # per pod: a gang's count grows by its size
        forpg = e.for_pod_group.split("/")
        annotations = {"num-evicted-pods": "1", "evictor-action-type": e.action,
                       "evictor-pod-group-name": forpg[-1] if e.for_pod_group else "",
                       "evictor-pod-group-namespace": forpg[0] if len(forpg) == 2 else ""}
        await self.events.emit(self._pg_ref(e.namespace, e.pod_group), "Normal", keys.EVENT_EVICT, e.message,
                               annotations)
        await self.events.emit(self._pod_ref(e.namespace, e.pod), "Normal", keys.EVENT_EVICT, e.message)

    async def explain(self, u: Unschedulable) -> None:
        await self.events.emit(self._pg_ref(u.namespace, u.pod_group), "Normal", keys.EVENT_UNSCHEDULABLE,
                               u.message)
        for pod, message in u.pod_messages.items():
            await self.events.emit(self._pod_ref(u.namespace, pod), "Warning", keys.EVENT_UNSCHEDULABLE, message)
            if u.mark_unschedulable:
                await self.pod_condition(u.namespace, pod, keys.REASON_UNSCHEDULABLE, message)
        if not u.has_allocated_pods:
            await self.podgroup_condition(u)

    async def pod_condition(self, namespace: str, pod: str, reason: str, message: str) -> None:
        key = f"{namespace}/{pod}"
        if self._pod_condition.get(key) == f"{reason}:{message}":
            return
        record = self.pods.get(key)
        if reason == keys.REASON_UNSCHEDULABLE and (
                record is None or record.node_name or key in self.bindrequests.store):
            return  # bound or being bound since the cycle decided: an explanation written late would be wrong
        condition = {"type": keys.CONDITION_POD_SCHEDULED, "status": "False", "reason": reason,
                     "message": message, "lastTransitionTime": _now_rfc3339()}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(namespace)}/{pod}/status",
                      body={"status": {"conditions": [condition]}}, content_type=STRATEGIC_MERGE)
            self._pod_condition[key] = f"{reason}:{message}"
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
        existing = self._live_conditions.get(key) or []
        last = existing[-1] if existing else {}
        same = (last.get("type") == keys.CONDITION_UNSCHEDULABLE_ON_NODE_POOL and last.get("nodePool") == u.node_pool
                and last.get("message") == u.message and last.get("reasons") == reasons)
        if not same:
            transition = max([int(c.get("transitionID") or 0) for c in existing] + [0]) + 1
            others = [c for c in existing if c.get("nodePool") != u.node_pool]
            condition = {"type": keys.CONDITION_UNSCHEDULABLE_ON_NODE_POOL, "nodePool": u.node_pool,
                         "reason": keys.REASON_UNSCHEDULABLE, "message": u.message, "reasons": reasons,
                         "transitionID": str(transition), "lastTransitionTime": _now_rfc3339(), "status": "True"}
            body = {"apiVersion": f"{keys.GROUP}/{keys.PODGROUP_VERSION}", "kind": "PodGroup",
                    "metadata": {"name": u.pod_group, "namespace": u.namespace},
                    "status": {"schedulingConditions": [*others, condition]}}
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
            self._assumed_annotations.pop(f"{namespace}/{name}", None)
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
            self.bindrequests._put(f"{ns}/{name}", None, "DELETED")

        await self._bounded([partial(delete, b.namespace, b.name) for b in doomed])
