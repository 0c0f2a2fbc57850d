"""Losing the lease mid-reconcile: the loss is noticed within the renew deadline, the work is cancelled and the
process exits (Kubernetes restarts it as a standby). The Lease endpoints are a scripted aiohttp double."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.runtime.leaseserver import Exited, exit_raises, leading, lease_api


async def test_losing_the_lease_mid_reconcile_cancels_the_work_and_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    exit_raises(monkeypatch)
    ticks: list[float] = []
    cancelled_at: list[float] = []

    async def work() -> None:  # a reconcile loop that writes as long as it runs
        try:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled_at.append(time.monotonic())
            raise

    async with lease_api() as (lease, api):
        # Leading, and renewing: the work must keep going meanwhile.
        task = await leading(lease, api, work, lease_duration=3, renew_deadline=1.5, retry_period=1)
        assert ticks and not cancelled_at
        assert lease.lease is not None
        holder = lease.lease["spec"]["holderIdentity"]
        assert holder and holder != "other-replica"

        stolen_at = time.monotonic()
        lease.steal()
        with pytest.raises(Exited) as exited:
            await asyncio.wait_for(task, timeout=10)
        exited_at = time.monotonic()

    assert exited.value.args == (1,)
    assert cancelled_at, "the reconcile in flight was not cancelled"
    # Noticed within renew deadline plus a retry period or two, not after the other replica's 15 s lease.
    assert cancelled_at[0] - stolen_at < 5, cancelled_at[0] - stolen_at
    assert cancelled_at[0] <= exited_at
    assert max(ticks) <= cancelled_at[0], "the work went on after it was cancelled"
    count = len(ticks)
    await asyncio.sleep(0.2)
    assert len(ticks) == count
