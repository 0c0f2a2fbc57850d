"""A rotated token: the API server answers 401, and the process exits with a clear line instead of retrying
forever (the kubelet restarts it with the current token). Against the scripted watch server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from operators.core import kube
from operators.core.cache import PODS, Informer
from tests.runtime.watchserver import Session, pod, serving


class Exited(BaseException):  # not an Exception: the informer's retry loop must not swallow it
    pass


def fake_exit(code: int) -> None:
    raise Exited(code)


async def test_a_401_on_the_watch_exits_the_process_instead_of_retrying(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(kube.os, "_exit", fake_exit)
    monkeypatch.setattr(kube.logging, "shutdown", lambda: None)  # pytest's log capture stays usable
    async with serving() as (server, api):
        kube.exit_on_unauthorized(api)
        server.lists = [([pod("a", 1)], 1)]
        server.sessions = [Session(end=500), Session(end=401), Session(end="hang")]
        informer: Informer[dict[str, object]] = Informer(api, PODS, lambda o: o)
        with caplog.at_level(logging.CRITICAL, logger=kube.log.name), pytest.raises(Exited) as exited:
            await asyncio.wait_for(informer.run(), timeout=10)
    assert exited.value.args == (kube.UNAUTHORIZED_EXIT,)
    # A 500 is retried (one more watch), the 401 ends it: no watch after it.
    assert len(server.watches()) == 2
    assert informer.synced.is_set()
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert "401 Unauthorized" in line and "GET" in line and "/api/v1/pods" in line and "?" not in line


async def test_other_errors_are_still_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.os, "_exit", fake_exit)
    async with serving() as (server, api):
        kube.exit_on_unauthorized(api)
        server.lists = [([pod("a", 1)], 1)]
        server.sessions = [Session(end=403), Session(end=500), Session(end="hang")]
        informer: Informer[dict[str, object]] = Informer(api, PODS, lambda o: o)
        task = asyncio.create_task(informer.run())
        try:
            await server.wait_requests("watch", 3, timeout=15)
            assert not task.done(), "the informer stopped on a 403 or 500"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
