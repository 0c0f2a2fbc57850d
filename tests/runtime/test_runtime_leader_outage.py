"""An API server that cannot be reached is a failed lease attempt, not the end of the process: a standby keeps
trying through the outage and takes the lease once the API server answers again; a leader steps down only after
its renew deadline. Against the scripted Lease API of `leaseserver`, closed and reopened on one port."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from operators.core import leader
from tests.runtime.leaseserver import Exited, LeaseServer, api_for, exit_raises, serve


async def test_a_standby_survives_an_unreachable_api_server_and_then_leads(monkeypatch: pytest.MonkeyPatch) -> None:
    exit_raises(monkeypatch)
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    lease = LeaseServer()
    runner, port = await serve(lease)
    await runner.cleanup()  # the API server is down: connections to its port are refused
    api = api_for(port)
    task: asyncio.Task[Any] = asyncio.create_task(leader.run_as_leader(
        api, name="controller", namespace="kai", work=work, lease_duration=3, renew_deadline=2, retry_period=1))
    try:
        await asyncio.sleep(2.5)  # refused attempts
        assert not task.done(), task.exception() if task.done() else None
        assert not started.is_set()
        runner, _ = await serve(lease, port)  # the API server is back
        await asyncio.wait_for(started.wait(), timeout=10)
        assert leader.is_leading()
        assert lease.lease is not None and lease.lease["spec"]["holderIdentity"]

        # Down again while leading: the leader keeps trying until its renew deadline, then exits to restart.
        await runner.cleanup()
        down_at = time.monotonic()
        with pytest.raises(Exited) as exited:
            await asyncio.wait_for(task, timeout=10)
        assert exited.value.args == (1,)
        assert 1.5 <= time.monotonic() - down_at < 5
        assert not leader.is_leading()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
        await runner.cleanup()
