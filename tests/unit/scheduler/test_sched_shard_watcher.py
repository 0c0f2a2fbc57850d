"""The shard watcher's decisions on its caches: which settings a cycle gets, what wakes the loop, which status
writes are due. How often it writes against a real API server is tested live."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.shardconfig import status_conditions
from operators.scheduler.shell import shard as shard_module
from operators.scheduler.shell.shard import ShardWatcher


def shard_obj(generation: int, spec: dict[str, Any], conditions: list[dict[str, Any]] | None = None,
              name: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation}, "spec": spec,
            "status": {"conditions": conditions or []}}


async def stop_writing(watcher: ShardWatcher) -> None:
    """The watcher has no API client here: a due status write is dropped, not sent."""
    if watcher._writing is not None:
        watcher._writing.cancel()
        await asyncio.gather(watcher._writing, return_exceptions=True)
        watcher._writing = None


async def test_settings_follow_the_shard_and_its_own_status_does_not_wake_the_loop() -> None:
    watcher = ShardWatcher(None, "default", SchedulerConfig())
    woken: list[bool] = []
    watcher.on_change(lambda: woken.append(True))
    assert watcher.refresh() == SchedulerConfig() and watcher._writing is None  # no objects: flags and file alone

    watcher.shards._put("default", shard_module.kai_object(shard_obj(1, {"placementStrategy": {"gpu": "spread"}})),
                        "ADDED")
    assert woken and watcher.refresh().gpu_placement == "spread"
    assert watcher._writing is not None, "the new generation's conditions are due"
    await stop_writing(watcher)
    wanted = status_conditions(1, "", [])
    woken.clear()
    watcher.shards._put("default", shard_module.kai_object(shard_obj(
        1, {"placementStrategy": {"gpu": "spread"}}, wanted)), "MODIFIED")
    assert not woken, "a status write of our own does not wake the loop"
    watcher.refresh()
    assert watcher._writing is None, "the shown conditions are the wanted ones"

    watcher.shards._put("default", shard_module.kai_object(shard_obj(
        2, {"placementStrategy": {"gpu": "spread"}, "queueDepthPerAction": {"backfill": 1}}, wanted)), "MODIFIED")
    assert watcher.refresh().gpu_placement == "spread", "the last valid settings stay"
    assert watcher.effective.error and "backfill isn't one of them" in watcher.effective.error
    assert watcher._writing is not None
    await stop_writing(watcher)


async def test_only_the_default_shard_reports_on_the_config_and_explains_unserved_pools() -> None:
    config = {"metadata": {"name": "kai-config", "generation": 1},
              "spec": {"global": {"nodePoolLabelKey": "example.com/pool"}}}
    for name, partition in (("default", ""), ("a", "a")):
        watcher = ShardWatcher(None, name, SchedulerConfig(partition=partition))
        watcher.installed = True
        watcher.configs._put("kai-config", shard_module.kai_object(config), "ADDED")
        assert watcher.refresh().node_pool_label == "example.com/pool"
        assert (watcher._writing is not None) == (not partition)
        await stop_writing(watcher)
        assert watcher.unserved([], []) == []
