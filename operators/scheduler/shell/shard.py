"""The scheduler instance's SchedulingShard and the Config `kai-config`, read live.

One watch on SchedulingShards (all of them: the default shard also needs to know which node pools are served)
and one on the Config named `kai-config`. The loop calls `refresh()` at the start of every cycle, so a
`kubectl patch schedulingshard` takes effect at the next cycle without a restart. The instance reports on its
own shard (and the default shard also on the Config) the conditions KAI's operator writes, `Deployed` and
`Available` with `observedGeneration`, plus `FieldsNotHonoured` naming fields that are accepted but change
nothing here. Without the CRDs installed the instance runs on its flags and config file alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from operators.core.api.schedulingshard import CONFIG_NAME, GROUP, VERSION
from operators.core.cache import Informer, Resource
from operators.core.conditions import merge_conditions
from operators.core.kube import MERGE_PATCH, RawError, is_not_found, raw
from operators.core.times import rfc3339
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Unschedulable
from operators.scheduler.decide.records import PodGroupRecord, PodRecord
from operators.scheduler.decide.shardconfig import (
    Effective,
    effective_config,
    served_pools,
    status_conditions,
    unhonoured_config_fields,
    unhonoured_fields,
    unserved_pools,
)

log = logging.getLogger("scheduler.shard")

SHARDS = Resource(GROUP, VERSION, "schedulingshards")
CONFIGS = Resource(GROUP, VERSION, "configs")
SHARD_INFO = Gauge("kai_scheduler_shard_info", "The SchedulingShard and node pool this scheduler instance serves",
                   ["shard", "node_pool"])
_CRD_RECHECK = 60.0
_SYNC_TIMEOUT = 30.0


@dataclass(frozen=True)
class KaiObject:
    """The slim record of a SchedulingShard or Config."""

    name: str
    generation: int
    spec: Mapping[str, Any]
    conditions: tuple[Mapping[str, Any], ...]


def kai_object(obj: dict[str, Any]) -> KaiObject:
    meta = obj.get("metadata") or {}
    return KaiObject(name=meta["name"], generation=int(meta.get("generation") or 0), spec=obj.get("spec") or {},
                     conditions=tuple((obj.get("status") or {}).get("conditions") or ()))


def _own(obj: KaiObject, wanted: list[dict[str, Any]], config: bool = False) -> list[dict[str, Any]]:
    """One writer per condition type: on an object the kai-operator reconciles (it writes `Reconciling`), the
    operator owns `Deployed` and `Available`, and on the Config also `FieldsNotHonoured` (it renders the Config);
    the instance keeps `FieldsNotHonoured` on its shard."""
    if any(c.get("type") == "Reconciling" for c in obj.conditions):
        return [] if config else [c for c in wanted if c["type"] not in ("Deployed", "Available")]
    return wanted


class ShardWatcher:
    def __init__(self, api: Any, shard_name: str, base: SchedulerConfig) -> None:
        self.api = api
        self.name = shard_name
        self.base = base
        self.shards: Informer[KaiObject] = Informer(api, SHARDS, kai_object)
        self.configs: Informer[KaiObject] = Informer(api, CONFIGS, kai_object,
                                                     field_selector=f"metadata.name={CONFIG_NAME}")
        self.synced = asyncio.Event()
        self.installed = False  # the SchedulingShard CRD exists
        self.effective = Effective(base)
        self._applied: tuple[KaiObject | None, KaiObject | None] | None = None
        self._reported: dict[str, Any] = {}  # object path -> (conditions seen, conditions written)
        self._writing: asyncio.Task[None] | None = None
        # More conditions for the instance's own shard (the usage database's), by generation.
        self.extra_conditions: Callable[[int], list[dict[str, Any]]] | None = None
        SHARD_INFO.labels(shard_name, base.node_pool_name).set(1)

    @property
    def config(self) -> SchedulerConfig:
        return self.effective.config

    def on_change(self, wake: Callable[[], None]) -> None:
        """Call `wake` when a spec changes (not for status writes, ours included)."""
        def listener(_: str, old: KaiObject | None, new: KaiObject | None) -> None:
            if (old and (old.generation, old.spec)) != (new and (new.generation, new.spec)):
                wake()

        self.shards.add_listener(listener)
        self.configs.add_listener(listener)

    async def run(self) -> None:
        while not await self._crds_installed():
            self.synced.set()  # nothing to wait for: run on flags and file
            await asyncio.sleep(_CRD_RECHECK)
        self.installed = True
        informers = asyncio.gather(self.shards.run(), self.configs.run())
        try:
            await asyncio.wait_for(asyncio.gather(self.shards.synced.wait(), self.configs.synced.wait()),
                                   _SYNC_TIMEOUT)
        except TimeoutError:
            log.warning("SchedulingShards/Configs not listed within %.0fs: scheduling on flags and --config until "
                        "they are", _SYNC_TIMEOUT)
        self.synced.set()  # scheduling never waits on these objects for long
        await informers

    async def _crds_installed(self) -> bool:
        """Whether both kinds can be read; if not (no CRD, no RBAC), say why once and run without them."""
        for resource in (SHARDS, CONFIGS):
            try:
                await raw(self.api, "GET", resource.path(), query={"limit": 1})
            except Exception as exc:
                if not self.synced.is_set():
                    why = "is not installed" if isinstance(exc, RawError) and exc.status == 404 else (
                        f"cannot be read ({getattr(exc, 'status', None) or exc})")
                    log.warning("%s.%s %s: running on flags and --config only, checking again every %.0fs",
                                resource.plural, GROUP, why, _CRD_RECHECK)
                return False
        return True

    async def wait_synced(self) -> None:
        await self.synced.wait()

    # --- once per cycle ------------------------------------------------------------------------------
    def refresh(self) -> SchedulerConfig:
        """The settings for this cycle; reports on the shard and Config when what they show changed."""
        shard = self.shards.get(self.name)
        config = self.configs.get(CONFIG_NAME)
        if self._applied != (shard, config):
            before = self.effective.config
            self.effective = effective_config(self.base, shard.spec if shard else None,
                                              config.spec if config else None, last_good=before)
            self._applied = (shard, config)
            after = self.effective.config
            if self.effective.error:
                log.warning("SchedulingShard %s: %s", self.name, self.effective.error)
            elif after != before:
                log.info("SchedulingShard %s applied: actions=%s placement gpu=%s cpu=%s partition=%r",
                         self.name, ",".join(after.effective_actions), after.gpu_placement, after.cpu_placement,
                         after.partition)
            if after.node_pool_name != before.node_pool_name:
                SHARD_INFO.remove(self.name, before.node_pool_name)
                SHARD_INFO.labels(self.name, after.node_pool_name).set(1)
        self._report(shard, config)
        return self.effective.config

    def unserved(self, podgroups: Iterable[PodGroupRecord], pods: Iterable[PodRecord]) -> list[Unschedulable]:
        """Explanations for PodGroups of node pools no shard serves; written by the default shard only."""
        cfg = self.effective.config
        if cfg.partition or not self.installed:
            return []
        served = served_pools(s.spec for s in self.shards.store.values())
        return unserved_pools(podgroups, pods, cfg.node_pool_label, served)

    # --- status --------------------------------------------------------------------------------------
    def _report(self, shard: KaiObject | None, config: KaiObject | None) -> None:
        writes: list[tuple[str, Sequence[Mapping[str, Any]], list[dict[str, Any]]]] = []
        if shard is not None:
            wanted = status_conditions(shard.generation, self.effective.error, unhonoured_fields(shard.spec))
            if self.extra_conditions is not None:
                wanted += self.extra_conditions(shard.generation)
            writes.append((f"{SHARDS.path()}/{shard.name}", shard.conditions, _own(shard, wanted)))
        if config is not None and not self.effective.config.partition:
            wanted = status_conditions(config.generation, "", unhonoured_config_fields(config.spec))
            writes.append((f"{CONFIGS.path()}/{config.name}", config.conditions, _own(config, wanted, config=True)))
        now = rfc3339()
        due = [(path, existing, wanted) for path, existing, wanted in writes
               if merge_conditions(existing, wanted, now) is not None
               and self._reported.get(path) != (tuple(existing), wanted)]
        if due and (self._writing is None or self._writing.done()):
            self._writing = asyncio.create_task(self._write(due))

    async def _write(self, due: list[tuple[str, Sequence[Mapping[str, Any]], list[dict[str, Any]]]]) -> None:
        for path, existing, wanted in due:
            merged = merge_conditions(existing, wanted, rfc3339())
            try:
                if merged is not None:
                    await raw(self.api, "PATCH", f"{path}/status", body={"status": {"conditions": merged}},
                              content_type=MERGE_PATCH)
                # Until the watch shows the write, the same conditions are not written again.
                self._reported[path] = (tuple(existing), wanted)
            except Exception as exc:
                if not is_not_found(exc):
                    log.warning("status of %s not written: %s", path, exc)
