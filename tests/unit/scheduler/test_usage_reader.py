"""The usage database client: KAI's PromQL, and the background reader against a stand-in Prometheus HTTP API.

The stand-in answers `/api/v1/query` from a table keyed by the query text; the real Prometheus is exercised live
by tests/integration/test_usage_fairshare.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from operators.scheduler.decide.usageconfig import UsageDBSettings
from operators.scheduler.shell.usagedb import (
    CONDITION,
    UsageDBError,
    UsageReader,
    connection_url,
    fetch_usage,
    window_query,
)

SETTINGS = UsageDBSettings(connection_string="http://x", window_size=3600.0, query_resolution=60.0,
                           capacity_metrics=("vector(8)", "vector(64)", "vector(100)"))


def test_kai_queries() -> None:
    assert window_query("kai_queue_allocated_gpus", SETTINGS, 1000.0) == (
        "sum_over_time((kai_queue_allocated_gpus)[3600s:60s])")
    decayed = UsageDBSettings(half_life=600.0)
    assert window_query("m", decayed, 1000.9) == (
        "sum_over_time((((m) * (0.5^((1000 - time()) / 600.000000))))[604800s:60s])")
    tumbling = UsageDBSettings(window_size=300.0, tumbling_start=100.0)
    assert window_query("m", tumbling, 1000.0) == "sum_over_time((m)[300s:60s])"  # from the reset at 700
    assert window_query("m", UsageDBSettings(window_size=300.0, tumbling_start=5000.0), 1000.0) is None
    assert connection_url(UsageDBSettings(connection_string_env_var="PROM"), {"PROM": "http://p"}) == "http://p"


class StandIn:
    """Prometheus' query endpoint: each query text -> its result vector; `down` answers nothing."""

    def __init__(self) -> None:
        self.answers: dict[str, list[dict[str, Any]]] = {}
        self.down = False
        self.delay = 0.0

    async def handle(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        if self.down:
            return web.json_response({"status": "error", "error": "unavailable"}, status=503)
        result = self.answers.get(request.query["query"], [])
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[StandIn, str]]:
    stand_in = StandIn()
    app = web.Application()
    app.router.add_get("/api/v1/query", stand_in.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield stand_in, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def answer(stand_in: StandIn, settings: UsageDBSettings) -> None:
    cap = settings.capacity_metrics
    for metric, total in zip(cap, (480.0, 3840.0, 6000.0), strict=True):
        stand_in.answers[window_query(metric, settings, 0.0) or ""] = [{"metric": {}, "value": [0, str(total)]}]
    stand_in.answers[window_query(settings.allocation_metrics[0], settings, 0.0) or ""] = [
        {"metric": {"queue_name": "a"}, "value": [0, "192"]}, {"metric": {"queue_name": "b"}, "value": [0, "48"]}]


async def test_fetch_normalises_to_capacity(prometheus: tuple[StandIn, str]) -> None:
    stand_in, url = prometheus
    answer(stand_in, SETTINGS)
    async with aiohttp.ClientSession() as session:
        usage = await fetch_usage(session, SETTINGS, url, 0.0)
        assert usage == {"a": (0.4, 0.0, 0.0), "b": (0.1, 0.0, 0.0)}
        stand_in.answers.pop(window_query("vector(64)", SETTINGS, 0.0) or "")
        with pytest.raises(UsageDBError, match="no data returned for cluster capacity metric vector"):
            await fetch_usage(session, SETTINGS, url, 0.0)


async def test_reader_degrades_to_plain_fair_share_and_recovers(prometheus: tuple[StandIn, str]) -> None:
    stand_in, url = prometheus
    settings = UsageDBSettings(connection_string=url, window_size=3600.0, query_resolution=60.0,
                               capacity_metrics=SETTINGS.capacity_metrics, fetch_interval=0.05,
                               staleness_period=0.3)
    answer(stand_in, settings)
    reader = UsageReader()
    assert reader.conditions(1) == []  # never configured: no condition
    reader.configure(settings)
    try:
        await reader.wait_first()  # before the first cycle: the first answer is in
        assert reader.current()["a"][0] == pytest.approx(0.4)
        (cond,) = reader.conditions(3)
        assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
            CONDITION, "True", "UsageFetched", 3)
        stand_in.down = True
        await asyncio.sleep(0.6)  # past the staleness period
        assert reader.current() == {}  # plain fair share
        (cond,) = reader.conditions(3)
        assert (cond["status"], cond["reason"]) == ("False", "UsageDBUnavailable")
        assert "plain fair share" in cond["message"] and "unavailable" in cond["message"]
        stand_in.down = False
        for _ in range(100):
            if reader.current():
                break
            await asyncio.sleep(0.02)
        assert reader.conditions(3)[0]["status"] == "True"
        reader.configure(None)
        assert reader.current() == {} and reader.conditions(4)[0]["reason"] == "NotConfigured"
        # Unreachable at start: the wait ends with the failed attempt, not at waitTimeout.
        gone = UsageDBSettings(connection_string="http://127.0.0.1:9", wait_timeout=30.0)
        reader.configure(gone)
        await asyncio.wait_for(reader.wait_first(), 10)
        assert reader.current() == {} and "unreachable" in reader.error
    finally:
        await reader.stop()


async def test_a_slow_database_times_out_in_the_background(prometheus: tuple[StandIn, str]) -> None:
    stand_in, url = prometheus
    settings = UsageDBSettings(connection_string=url, capacity_metrics=SETTINGS.capacity_metrics,
                               query_timeout=0.2, fetch_interval=60.0)
    answer(stand_in, settings)
    stand_in.delay = 1.0
    reader = UsageReader()
    reader.configure(settings)
    try:
        assert reader.current() == {}  # configuring never waits for the database
        await asyncio.wait_for(reader.wait_first(), 5)
        assert reader.current() == {} and reader.error == "no answer within usageQueryTimeout (0.2s)"
    finally:
        await reader.stop()
