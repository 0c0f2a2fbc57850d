"""A stopped scheduler loop (SIGTERM: its lease is released next) ends only once its writes in flight have finished
(or, stuck past the grace, been cancelled): the next leader never races a write of this one."""

from __future__ import annotations

import asyncio

import pytest

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.shell.loop import SchedulerLoop


async def test_a_stopped_loop_lets_its_writes_finish_and_cancels_the_stuck_ones() -> None:
    loop = SchedulerLoop(None, SchedulerConfig())
    loop.STOP_GRACE = 0.5
    finished: list[str] = []
    cancelled: list[str] = []

    async def bind() -> None:  # a write that starts another (its event) as it ends
        await asyncio.sleep(0.05)
        finished.append("bind")
        loop._background(event())

    async def event() -> None:
        await asyncio.sleep(0.05)
        finished.append("event")

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("stuck")
            raise

    async def cycles() -> None:
        loop._background(bind())
        loop._background(stuck())
        await asyncio.Event().wait()

    loop._run = cycles  # type: ignore[method-assign]
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["bind", "event"]
    assert cancelled == ["stuck"]
    assert not loop._writing
