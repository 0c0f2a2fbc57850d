"""A leader that finds another holder on its Lease stops at once, not after its renew deadline: for those seconds
two replicas would both write. Against the scripted Lease API of `leaseserver`."""

from __future__ import annotations

import asyncio
import time

import pytest

from operators.core import leader
from tests.runtime.leaseserver import Exited, exit_raises, leading, lease_api


async def test_another_holder_on_the_lease_ends_the_leadership_at_the_next_renewal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exit_raises(monkeypatch)
    cancelled_at: list[float] = []

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled_at.append(time.monotonic())
            raise

    async with lease_api() as (lease, api):
        # A long renew deadline: the library alone would keep leading for 6 s after the takeover.
        task = await leading(lease, api, work, lease_duration=8, renew_deadline=6, retry_period=1)
        assert leader.is_leading()
        stolen_at = time.monotonic()
        lease.steal()
        with pytest.raises(Exited):
            await asyncio.wait_for(task, timeout=10)
    assert cancelled_at
    assert cancelled_at[0] - stolen_at < 2.5, cancelled_at[0] - stolen_at
    assert not leader.is_leading()
