"""The scheduler's cycle loop: informers -> snapshot -> `run_cycle` -> the writer (`writer.py`).

Watch-driven: every object is parsed once into a frozen record when its watch event arrives; a cycle runs every
period and soon after a relevant change (a record that really changed), on a snapshot assembled from the
records. The decision code runs in a worker thread so the event loop keeps reading watches and renewing the
lease; each job the allocate action commits is handed to the event loop at once, so its BindRequests are being
created while the cycle goes on. The informer transforms and the assume cache are in `assume.py`, the metrics in
`metrics.py`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from operators.core.api.bindrequest import parse_decision
from operators.core.cache import (
    BINDREQUESTS,
    CONFIGMAPS,
    NODES,
    PDBS,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    TOPOLOGIES,
    Informer,
)
from operators.core.events import EventRecorder
from operators.core.kube import raw, status_of
from operators.core.units import MS_PER_SECOND
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle
from operators.scheduler.decide.decisions import Bind, Decisions
from operators.scheduler.decide.plugins.proportion.usage import usage_pairs
from operators.scheduler.decide.searchbackoff import Backoff
from operators.scheduler.decide.session.carry import Carry
from operators.scheduler.decide.snapshot import (
    configmap_record,
    node_record,
    pdb_record,
    priorityclass_record,
    queue_record,
    topology_record,
)
from operators.scheduler.shell import metrics
from operators.scheduler.shell.assume import PodGroupOverlay, pod_transform
from operators.scheduler.shell.dra import DraShell
from operators.scheduler.shell.explained import REFRESH
from operators.scheduler.shell.provisioning_shell import ProvisioningShell
from operators.scheduler.shell.shard import ShardWatcher
from operators.scheduler.shell.snapshotview import SnapshotViews
from operators.scheduler.shell.usagedb import UsageReader
from operators.scheduler.shell.writer import Writer

T = TypeVar("T")
log = logging.getLogger("scheduler")

# Every this many cycles, what was frozen since is unfrozen and collected once (`frozen`).
THAW_EVERY = 100


def frozen(thaw: bool, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call` (a cycle) with the cyclic collector off, then what it leaves frozen (`gc.freeze`) before the collector
    is on again. A cycle leaves no cyclic garbage of its own, and what it keeps (the carried session's objects, about
    300,000 at envelope2x) is long-lived: otherwise the first collection after the cycle walks all of it (0.14-0.16 s
    CPU after a full open, 0.03-0.09 s after a carried one, bench/README.md). The collector is off process-wide, so
    cyclic garbage the event loop makes meanwhile is frozen too: `thaw` first unfreezes and collects everything
    once, which frees it (`THAW_EVERY`), and logs how much was frozen and how much of it was garbage, so the
    freeze's cost in a live process is visible."""
    if thaw:
        held = gc.get_freeze_count()
        gc.unfreeze()
        freed = gc.collect()
        log.info("collector thawed: %d objects had been frozen, %d of them unreachable and freed", held, freed)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return call(*args, **kwargs)
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


class SchedulerLoop(Writer):
    """Informers -> snapshot -> `run_cycle` in a worker thread -> the writer, every period and on change."""

    def __init__(self, api: Any, config: SchedulerConfig, *, concurrency: int = 32,
                 shard: ShardWatcher | None = None, explanation_refresh: float = REFRESH) -> None:
        self.api = api
        self.explanation_refresh = explanation_refresh
        self.config = config
        self.shard = shard  # when set, `config` follows the instance's SchedulingShard at every cycle
        name = config.scheduler_name
        self.overlay = PodGroupOverlay()
        self._assumed_annotations = self.overlay.assumed  # the PodGroup annotations being written

        self.nodes = Informer(api, NODES, node_record)
        self.pods = Informer(api, PODS, partial(pod_transform, name))
        self.podgroups = Informer(api, PODGROUPS, self.overlay.parse)
        self.queues = Informer(api, QUEUES, queue_record)
        self.bindrequests = Informer(api, BINDREQUESTS, parse_decision)
        self.priority_classes = Informer(api, PRIORITY_CLASSES, priorityclass_record)
        self.configmaps = Informer(api, CONFIGMAPS, configmap_record)
        self.pdbs = Informer(api, PDBS, pdb_record)  # PDB-aware victim choice; the writer evicts guarded pods first
        self.informers: list[Informer[Any]] = [self.nodes, self.pods, self.podgroups, self.queues,
                                               self.bindrequests, self.priority_classes, self.configmaps, self.pdbs]
        for informer in self.informers:
            informer.add_listener(self._on_change)
        # Topologies are optional: a cluster without their CRD schedules as if none existed (see _run_topologies).
        self.topologies = Informer(api, TOPOLOGIES, topology_record)
        self.topologies.add_listener(self._on_change)
        self._topologies_known = asyncio.Event()
        self.events = EventRecorder(api, name, min_interval=30)
        self.wake = asyncio.Event()
        self.synced = False
        self._init_writes(concurrency)
        self.pods.add_listener(self._on_pod)
        # Time-based fair share: historical usage fetched in the background (the shard's usageDBConfig).
        self.usage = UsageReader()
        if shard is not None:
            shard.on_change(self.wake.set)
            shard.extra_conditions = self.usage.conditions
        # Autoscaler provisioning for gangs that opted in (a no-op while the API server lacks the CRD).
        self.provisioning = ProvisioningShell(api, self.events, self.wake.set, config.node_pool_name)
        # The failed-search back-offs (`decide.searchbackoff`), carried from one cycle to the next in memory.
        self.search_backoff: dict[tuple[str, str], Backoff] = {}
        self.carry: Carry | None = None  # what the last cycle derived that the next may reuse (decide/session/carry)
        self.cycles = 0
        self.podgroups.add_listener(self._on_podgroup)
        self.dra = DraShell(api, self.wake.set)  # DRA objects, once the API server serves resource.k8s.io/v1
        self.views = SnapshotViews(self.nodes, self.pods, self.podgroups)

    # --- triggers --------------------------------------------------------------------------------
    def _on_change(self, event: str, old: Any, new: Any) -> None:
        # What this process assumed (binds, annotations) was decided by the cycle that assumed it: no news.
        if old != new and event != "ASSUMED":
            self.wake.set()

    def _on_podgroup(self, _: str, old: Any, new: Any) -> None:
        if new is None and old is not None:
            self.overlay.gone(f"{old.namespace}/{old.name}")

    def _on_pod(self, _: str, old: Any, new: Any) -> None:
        if new is not None and new.node_name and (old is None or not old.node_name):
            started = self._binding.pop(new.key, None)
            if started is not None:
                metrics.BIND_LATENCY.observe((time.monotonic() - started) * MS_PER_SECOND)

    # --- the loop --------------------------------------------------------------------------------
    async def run_informers(self) -> None:
        await asyncio.gather(*(i.run() for i in self.informers), self.provisioning.run(), self._run_topologies(),
                             self.dra.run(), *([self.shard.run()] if self.shard else []))

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
                             self.dra.known.wait(), *([self.shard.wait_synced()] if self.shard else []))
        self.synced = True
        gc.freeze()  # the records heap is long-lived; keep it out of every collection

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            await self.usage.stop()
            await self._stop_writing()
            raise

    async def _run(self) -> None:
        await self.wait_synced()
        log.info("informers synced: %d nodes, %d pods, %d podgroups, %d queues", len(self.nodes.store),
                 len(self.pods.store), len(self.podgroups.store), len(self.queues.store))
        self.usage.configure((self.shard.refresh() if self.shard is not None else self.config).usage_db)
        await self.usage.wait_first()
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
            metrics.LOOP_LAG.set(max(time.monotonic() - before - 1, 0))

    def snapshot(self) -> Any:
        """The cycle's snapshot: records shared with the previous cycles' where their store did not change."""
        return self.views.snapshot(
            queues=list(self.queues.store.values()), bindrequests=list(self.bindrequests.store.values()),
            priority_classes=list(self.priority_classes.store.values()),
            configmaps=list(self.configmaps.store.values()), topologies=list(self.topologies.store.values()),
            **self.dra.records(), node_pool_label=self.config.node_pool_label, partition=self.config.partition,
            pdbs=list(self.pdbs.store.values()), refused_evictions=self.refused_evictions())

    async def cycle(self) -> Decisions:
        t0 = time.monotonic()
        if self.shard is not None:
            self.config = self.shard.refresh()
        self.usage.configure(self.config.usage_db)
        await self.cleanup_bindrequests()
        snapshot = self.provisioning.prefer(self.snapshot())
        if usage := self.usage.current():  # the last fetched answer: a cycle never waits for the database
            snapshot = replace(snapshot, queue_usage=usage_pairs(usage))
        if self.search_backoff:
            snapshot = replace(snapshot, search_backoff=self.search_backoff)
        t1 = time.monotonic()
        loop = asyncio.get_running_loop()
        streamed: set[str] = set()

        def on_bind(bind: Bind) -> None:  # called in the cycle's thread
            try:
                loop.call_soon_threadsafe(self._stream, bind, streamed)
            except RuntimeError:
                pass  # the event loop is closed (shutting down): nothing is written any more

        self.cycles += 1
        decisions, self.carry = await asyncio.to_thread(frozen, self.cycles % THAW_EVERY == 0, run_carried_cycle,
                                                        snapshot, self.config, time.time(), self.carry,
                                                        on_bind=on_bind)
        self.search_backoff = decisions.search_backoff
        if self.shard is not None:
            decisions.unschedulable += self.shard.unserved(self.podgroups.store.values(), self.pods.store.values())
        decisions = self.provisioning.hold(snapshot, decisions, time.time())
        t2 = time.monotonic()
        await self.commit(decisions, streamed)
        await self.provisioning.write()
        t3 = time.monotonic()
        metrics.record_cycle(decisions, t1 - t0, t3 - t2, t3 - t0)
        metrics.record_queue_usage(dict(snapshot.queue_usage))
        if decisions.binds or decisions.evictions:
            log.info("cycle: %d binds, %d evictions, %d pipelined, %d unschedulable in %.0f ms",
                     len(decisions.binds), len(decisions.evictions), len(decisions.pipelined),
                     len(decisions.unschedulable), (t3 - t0) * MS_PER_SECOND)
        return decisions
