"""A request's timeout is a deadline for the server's answer, not for the wait for a pooled connection: a client
with more requests than connections (the binder's workers) must not fail requests the server answers in time.

The server here is a local aiohttp endpoint that answers after a fixed delay (the client's timing is under test,
not the API server's)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from operators.core import kube

ANSWER_AFTER = 0.4


@pytest.fixture
async def slow_server() -> object:
    done = asyncio.Event()

    async def answer(_: web.Request) -> web.Response:
        await asyncio.sleep(ANSWER_AFTER)
        return web.json_response({"kind": "Status"})

    async def hang(_: web.Request) -> web.Response:
        await done.wait()  # until the test is over
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/slow", answer)
    app.router.add_get("/hang", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    done.set()
    await runner.cleanup()


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def pool_waits() -> float:
    return float(next(s.value for family in kube.POOL_WAIT.collect() for s in family.samples
                      if s.name == "kai_client_connection_wait_seconds_count"))


async def test_the_wait_for_a_connection_does_not_count_against_the_timeout(tmp_path: Path, slow_server: str) -> None:
    # One connection, four requests: the last waits ~3 answers for it, longer than its 1 s timeout.
    api = await kube.api_client(kubeconfig(tmp_path, slow_server), pool=1)
    waits = pool_waits()
    async with api:
        started = time.monotonic()
        answers = await asyncio.gather(*(kube.raw(api, "GET", "/slow", timeout=1) for _ in range(4)))
        took = time.monotonic() - started
    assert answers == [{"kind": "Status"}] * 4
    assert took >= 4 * ANSWER_AFTER, "the requests went one at a time over the one connection"
    assert pool_waits() - waits == 3, "the three that found the connection taken waited for it, and were counted"


async def test_a_server_that_does_not_answer_in_time_still_times_out(tmp_path: Path, slow_server: str) -> None:
    api = await kube.api_client(kubeconfig(tmp_path, slow_server))
    async with api:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await kube.raw(api, "GET", "/hang", timeout=0.5)
        assert time.monotonic() - started < 5


def test_the_deadline_forms() -> None:
    assert kube.server_deadline(None) is None
    number = kube.server_deadline(30)
    assert number is not None
    assert (number.total, number.connect, number.sock_connect, number.sock_read) == (None, None, 30, 30)
    pair = kube.server_deadline((10, 330))
    assert pair is not None
    assert (pair.total, pair.connect, pair.sock_connect, pair.sock_read) == (None, None, 10, 330)
