"""The informer's failure paths against a scripted watch server: 410 Gone, bookmarks, broken streams, backoff."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from operators.core.cache import PODS, Informer
from tests.runtime.watchserver import Session, WatchServer, bookmark, event, gone, pod, serving

Record = tuple[str, tuple[tuple[str, str], ...]]
Seen = list[tuple[str, Record | None, Record | None]]


def parse(obj: dict[str, Any]) -> Record:
    """A slim record without the resourceVersion, as the components keep them."""
    meta = obj["metadata"]
    return meta["name"], tuple(sorted((meta.get("labels") or {}).items()))


def rec(name: str, **labels: str) -> Record:
    return name, tuple(sorted(labels.items()))


@contextlib.asynccontextmanager
async def informing(script: Callable[[WatchServer], None]) -> AsyncIterator[tuple[WatchServer, Informer[Record], Seen]]:
    async with serving() as (server, api):
        script(server)
        informer: Informer[Record] = Informer(api, PODS, parse)
        seen: Seen = []
        informer.add_listener(lambda kind, old, new: seen.append((kind, old, new)))
        task = asyncio.create_task(informer.run())
        try:
            yield server, informer, seen
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.parametrize("how", ["error event", "http 410"])
async def test_410_gone_relists_without_losing_or_repeating_an_event(how: str) -> None:
    def script(server: WatchServer) -> None:
        server.lists = [([pod("a", 1, v="1"), pod("b", 2)], 2),
                        # the relist: a and c as already delivered, b deleted and d added while we were away
                        ([pod("a", 3, v="2"), pod("c", 4), pod("d", 5)], 5)]
        first = [event("MODIFIED", pod("a", 3, v="2")), event("ADDED", pod("c", 4))]
        if how == "error event":
            server.sessions = [Session([*first, gone()], "close")]
        else:
            server.sessions = [Session(first, "close"), Session(end=410)]

    async with informing(script) as (server, informer, seen):
        await server.wait_requests("watch", 2 if how == "error event" else 3)
        await server.wait_requests("list", 2)
        assert seen == [
            ("ADDED", None, rec("a", v="1")),
            ("ADDED", None, rec("b")),
            ("MODIFIED", rec("a", v="1"), rec("a", v="2")),
            ("ADDED", None, rec("c")),
            # from the relist: only what changed while the watch was gone
            ("DELETED", rec("b"), None),
            ("ADDED", None, rec("d")),
        ]
        assert dict(informer.store) == {"ns/a": rec("a", v="2"), "ns/c": rec("c"), "ns/d": rec("d")}
        assert server.watches()[-1].query["resourceVersion"] == "5"
        assert len(server.list_calls()) == 2


async def test_bookmarks_advance_the_resource_version_and_deliver_nothing() -> None:
    def script(server: WatchServer) -> None:
        server.lists = [([pod("a", 1)], 1)]
        server.sessions = [Session([bookmark(7)], "close"),
                           Session([event("ADDED", pod("b", 8))], "close"),
                           Session([bookmark(12)], "close")]

    async with informing(script) as (server, informer, seen):
        await server.wait_requests("watch", 4)
        watches = server.watches()
        assert [w.query["resourceVersion"] for w in watches] == ["1", "7", "8", "12"]
        assert all(w.query["allowWatchBookmarks"] == "true" for w in watches)
        assert informer.resource_version == "12"
        assert seen == [("ADDED", None, rec("a")), ("ADDED", None, rec("b"))]
        assert len(server.list_calls()) == 1, "a bookmark or a closed stream must not cause a relist"


async def test_a_broken_stream_resumes_from_the_last_resource_version() -> None:
    def script(server: WatchServer) -> None:
        server.lists = [([pod("a", 1)], 1)]
        server.sessions = [Session([event("ADDED", pod("b", 2)), event("MODIFIED", pod("a", 3, v="2"))], "break"),
                           Session([event("DELETED", pod("b", 4))], "hang")]

    async with informing(script) as (server, informer, seen):
        await server.wait_requests("watch", 2)
        await asyncio.sleep(0.2)  # let the resumed watch deliver its event
        assert server.watches()[1].query["resourceVersion"] == "3"
        assert len(server.list_calls()) == 1, "a broken stream resumes; it does not relist"
        assert seen == [("ADDED", None, rec("a")), ("ADDED", None, rec("b")),
                        ("MODIFIED", rec("a"), rec("a", v="2")), ("DELETED", rec("b"), None)]
        assert dict(informer.store) == {"ns/a": rec("a", v="2")}


async def test_errors_back_off_exponentially_and_a_good_watch_resets_the_delay() -> None:
    def script(server: WatchServer) -> None:
        server.lists = [([], 1)]
        server.sessions = [Session(end=500), Session(end=500), Session(end=500),
                           Session([event("ADDED", pod("a", 2))], "close"), Session(end=500)]

    async with informing(script) as (server, informer, seen):
        await server.wait_requests("watch", 6, timeout=20)
        at = [w.at for w in server.watches()]
        gaps = [later - earlier for earlier, later in itertools.pairwise(at)]
        # 0.5 s, then doubling; a watch that ended cleanly is followed at once and resets the delay.
        assert gaps[0] >= 0.45 and gaps[1] >= 0.95 and gaps[2] >= 1.95, gaps
        assert gaps[1] > gaps[0] * 1.5 and gaps[2] > gaps[1] * 1.5, gaps
        assert gaps[3] < 0.4, gaps
        assert 0.45 <= gaps[4] < 1.5, gaps
        assert [w.query["resourceVersion"] for w in server.watches()] == ["1", "1", "1", "1", "2", "2"]
        assert len(server.list_calls()) == 1
        assert seen == [("ADDED", None, rec("a"))]
        assert informer.synced.is_set()


async def test_an_event_that_leaves_the_record_unchanged_reaches_no_listener() -> None:
    # A status write the record does not keep (e.g. a controller's own write, or another component's conditions)
    # arrives as MODIFIED with a new resourceVersion; the parsed record is the same, so nobody is woken.
    def script(server: WatchServer) -> None:
        server.lists = [([pod("a", 1, v="1")], 1)]
        server.sessions = [Session([event("MODIFIED", pod("a", 2, v="1")), event("MODIFIED", pod("a", 3, v="2")),
                                    event("MODIFIED", pod("a", 4, v="2"))], "hang")]

    async with informing(script) as (server, informer, seen):
        await server.wait_requests("watch", 1)
        for _ in range(50):
            if informer.resource_version == "4":
                break
            await asyncio.sleep(0.02)
        assert informer.resource_version == "4"
        assert seen == [("ADDED", None, rec("a", v="1")), ("MODIFIED", rec("a", v="1"), rec("a", v="2"))]
