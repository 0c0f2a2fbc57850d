"""The live loop's Topology watch: optional CRD (the scheduler never waits for a kind the API server lacks).

These replace the API client: the dev cluster always serves the Topology CRD (its admission webhook and the
other components need it) and lets the scheduler list Topologies, so neither an absent kind nor a list that never
succeeds can be arranged against it. With the CRD served, a Topology created after the scheduler started feeding
its decisions is tested live.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.core.kube import RawError
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.shell import loop as loop_module


@pytest.mark.asyncio
async def test_without_the_crd_topologies_count_as_known_and_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    rechecked = asyncio.Event()

    async def absent(api: Any, method: str, path: str, **_: Any) -> Any:
        calls.append(path)
        if len(calls) > 1:
            rechecked.set()  # discovery is repeated, so a CRD installed later is picked up
        raise RawError(404, "Not Found", "")

    monkeypatch.setattr(loop_module, "raw", absent)
    loop = loop_module.SchedulerLoop(object(), SchedulerConfig())
    task = asyncio.create_task(loop._run_topologies(recheck=0.01))
    await asyncio.wait_for(loop._topologies_known.wait(), 5)
    await asyncio.wait_for(rechecked.wait(), 5)
    task.cancel()
    assert all(p == "/apis/kai.scheduler/v1alpha1" for p in calls)
    assert loop.snapshot().topologies == ()


async def test_a_list_that_never_succeeds_does_not_hold_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    async def served(api: Any, method: str, path: str, **_: Any) -> Any:
        return {"resources": [{"name": "topologies"}]}

    monkeypatch.setattr(loop_module, "raw", served)
    loop = loop_module.SchedulerLoop(object(), SchedulerConfig())

    async def forbidden() -> None:  # the informer keeps retrying a 403 and never syncs
        await asyncio.Event().wait()

    monkeypatch.setattr(loop.topologies, "run", forbidden)
    task = asyncio.create_task(loop._run_topologies(list_timeout=0.01))
    await asyncio.wait_for(loop._topologies_known.wait(), 5)
    task.cancel()
    assert not loop.topologies.synced.is_set() and loop.snapshot().topologies == ()
