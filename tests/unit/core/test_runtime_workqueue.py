"""The work queue: de-duplication, one worker per key, and per-key retry backoff."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable

import pytest

from operators.core.workqueue import WorkQueue


@contextlib.asynccontextmanager
async def running(reconcile: Callable[[Hashable], Awaitable[None]], **kwargs: float) -> AsyncIterator[WorkQueue]:
    queue = WorkQueue(reconcile, workers=4, name="test", **kwargs)  # type: ignore[arg-type]
    task = asyncio.create_task(queue.run())
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(predicate: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_keys_added_before_a_worker_runs_are_reconciled_once() -> None:
    calls: list[Hashable] = []

    async def reconcile(key: Hashable) -> None:
        calls.append(key)

    queue = WorkQueue(reconcile, workers=4, name="test")
    for _ in range(5):
        queue.add("a")
        queue.add(("ns", "b"))
    assert len(queue) == 2
    task = asyncio.create_task(queue.run())
    await until(lambda: len(calls) == 2)
    await asyncio.sleep(0.1)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert sorted(map(str, calls)) == sorted(map(str, ["a", ("ns", "b")]))


async def test_a_key_added_while_reconciled_runs_once_more_afterwards_never_concurrently() -> None:
    active, most, calls = 0, 0, 0
    release = asyncio.Event()

    async def reconcile(key: Hashable) -> None:
        nonlocal active, most, calls
        active += 1
        most = max(most, active)
        calls += 1
        if calls == 1:
            await release.wait()
        active -= 1

    async with running(reconcile) as queue:
        queue.add("a")
        await until(lambda: calls == 1)
        for _ in range(10):  # many changes during one reconcile collapse into one more
            queue.add("a")
        await asyncio.sleep(0.1)
        assert calls == 1, "a busy key must not be handed to a second worker"
        release.set()
        await until(lambda: calls == 2)
        await asyncio.sleep(0.2)
    assert calls == 2 and most == 1


async def test_failures_retry_with_doubling_delay_capped_and_reset_by_success() -> None:
    attempts: list[float] = []
    failures_left = 4

    async def reconcile(key: Hashable) -> None:
        nonlocal failures_left
        attempts.append(time.monotonic())
        if failures_left:
            failures_left -= 1
            raise RuntimeError("conflict")

    async with running(reconcile, base_delay=0.2, max_delay=0.6) as queue:
        queue.add("a")
        await until(lambda: len(attempts) == 5, timeout=10)
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        # 0.2, 0.4, then capped at 0.6 (uncapped, the fourth would be 1.6)
        assert gaps[0] >= 0.19 and gaps[1] >= 0.39 and gaps[2] >= 0.59 and gaps[3] >= 0.59, gaps
        assert gaps[0] < gaps[1] < gaps[2] and gaps[3] < 1.2, gaps
        # after a success, the next failure starts again from the base delay (not the capped 0.6)
        failures_left = 1
        queue.add("a")
        await until(lambda: len(attempts) == 7, timeout=10)
        assert 0.19 <= attempts[6] - attempts[5] < 0.5, attempts[6] - attempts[5]


async def test_one_failing_key_does_not_hold_up_the_others() -> None:
    done: list[Hashable] = []
    bad_attempts = 0

    async def reconcile(key: Hashable) -> None:
        nonlocal bad_attempts
        if key == "bad":
            bad_attempts += 1
            raise ValueError("always")
        done.append(key)

    async with running(reconcile, base_delay=0.05, max_delay=0.05) as queue:
        queue.add("bad")
        for i in range(20):
            queue.add(i)
        await until(lambda: len(done) == 20)
        await until(lambda: bad_attempts >= 3)


async def test_each_reconcile_logs_its_object_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    # What the status controllers' integration tests count per object (the reconcile counter has no object label).
    async def reconcile(key: Hashable) -> None:
        if key == "bad":
            raise RuntimeError("refused")

    caplog.set_level(logging.DEBUG, logger="operators.core.workqueue")
    async with running(reconcile) as queue:
        queue.add(("ns", "pg"))
        queue.add("q")
        queue.add("bad")
        await until(lambda: sum("reconcil" in r.getMessage() for r in caplog.records) >= 3)
    lines = {r.getMessage() for r in caplog.records}
    assert {"test: reconciled ns/pg", "test: reconciled q"} <= lines, lines
    assert any(line.startswith("test: reconciling bad failed (refused)") for line in lines), lines
