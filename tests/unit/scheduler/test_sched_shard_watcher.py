"""The shard watcher's shell logic on in-memory stores: settings per cycle, status writes only on change."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.scheduler import shard as shard_module
from operators.scheduler.config import SchedulerConfig
from operators.scheduler.shard import ShardWatcher


def shard_obj(generation: int, spec: dict[str, Any], conditions: list[dict[str, Any]] | None = None,
              name: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation}, "spec": spec,
            "status": {"conditions": conditions or []}}


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []

    async def fake_raw(api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        calls.append((path, kwargs["body"]))
        return {}

    monkeypatch.setattr(shard_module, "raw", fake_raw)
    return calls


async def settle(watcher: ShardWatcher) -> None:
    if watcher._writing is not None:
        await watcher._writing
    await asyncio.sleep(0)


async def test_settings_follow_the_shard_and_status_is_written_once_per_change(
        writes: list[tuple[str, dict[str, Any]]]) -> None:
    watcher = ShardWatcher(None, "default", SchedulerConfig())
    woken: list[bool] = []
    watcher.on_change(lambda: woken.append(True))
    assert watcher.refresh() == SchedulerConfig() and writes == []  # no objects: flags and file alone

    watcher.shards._put("default", shard_module.kai_object(shard_obj(1, {"placementStrategy": {"gpu": "spread"}})),
                        "ADDED")
    assert woken and watcher.refresh().gpu_placement == "spread"
    await settle(watcher)
    ((path, body),) = writes
    assert path == "/apis/kai.scheduler/v1/schedulingshards/default/status"
    written = body["status"]["conditions"]
    assert [(c["type"], c["status"], c["observedGeneration"]) for c in written] == [
        ("Deployed", "True", 1), ("Available", "True", 1), ("FieldsNotHonoured", "False", 1)]

    watcher.refresh()  # the watch has not shown the write yet: nothing is written twice
    await settle(watcher)
    assert len(writes) == 1
    woken.clear()
    watcher.shards._put("default", shard_module.kai_object(shard_obj(
        1, {"placementStrategy": {"gpu": "spread"}}, written)), "MODIFIED")
    assert not woken, "a status write of our own does not wake the loop"
    watcher.refresh()
    await settle(watcher)
    assert len(writes) == 1, "the shown conditions are the wanted ones"

    watcher.shards._put("default", shard_module.kai_object(shard_obj(
        2, {"placementStrategy": {"gpu": "spread"}, "queueDepthPerAction": {"backfill": 1}}, written)), "MODIFIED")
    cfg = watcher.refresh()
    assert cfg.gpu_placement == "spread", "the last valid settings stay"
    await settle(watcher)
    available = {c["type"]: c for c in writes[-1][1]["status"]["conditions"]}["Available"]
    assert (available["status"], available["observedGeneration"]) == ("False", 2)
    assert "backfill isn't one of them" in available["message"]


async def test_only_the_default_shard_reports_on_the_config_and_explains_unserved_pools(
        writes: list[tuple[str, dict[str, Any]]]) -> None:
    config = {"metadata": {"name": "kai-config", "generation": 1},
              "spec": {"global": {"nodePoolLabelKey": "example.com/pool"}}}
    for name, partition in (("default", ""), ("a", "a")):
        writes.clear()
        watcher = ShardWatcher(None, name, SchedulerConfig(partition=partition))
        watcher.installed = True
        watcher.configs._put("kai-config", shard_module.kai_object(config), "ADDED")
        assert watcher.refresh().node_pool_label == "example.com/pool"
        await settle(watcher)
        assert [p for p, _ in writes] == (["/apis/kai.scheduler/v1/configs/kai-config/status"] if not partition
                                          else [])
        assert watcher.unserved([], []) == []
