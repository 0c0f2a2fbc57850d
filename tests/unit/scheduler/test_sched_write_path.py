"""The live loop's write path: what is assumed in the cache (pure cache logic), and what waits for what.

The last test replaces the API client with a recorder that holds chosen requests in flight: it shows that one hung
request (an event) does not hold back the BindRequest creates queued behind it, which needs a request kept
unanswered on purpose; a real API server answers too fast for that order to be observed reliably. What the loop
writes against a real API server, and how often, is tested live.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.core import events as events_module
from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import AnnotationUpdate, Bind, Decisions
from operators.scheduler.shell import loop as loop_module
from operators.scheduler.shell import writer as writer_module
from operators.scheduler.shell.loop import SchedulerLoop

STAMP = "2026-01-02T03:04:05Z"


class FakeApi:
    """Answers every request; requests whose path contains a `held` string wait until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.held: dict[str, asyncio.Event] = {}

    async def raw(self, api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path, kwargs.get("body")))
        for part, gate in self.held.items():
            if part in path:
                await gate.wait()
        return dict(kwargs.get("body") or {})

    def hold(self, part: str) -> asyncio.Event:
        self.held[part] = asyncio.Event()
        return self.held[part]

    def made(self, method: str, part: str) -> list[Any]:
        return [body for m, p, body in self.calls if m == method and part in p]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()
    monkeypatch.setattr(loop_module, "raw", fake.raw)
    monkeypatch.setattr(writer_module, "raw", fake.raw)
    monkeypatch.setattr(events_module, "raw", fake.raw)
    return fake


def podgroup(name: str, annotations: dict[str, str] | None = None, version: str = "1") -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version,
                         "annotations": annotations or {}},
            "spec": {"minMember": 1, "queue": "q"}}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": {keys.POD_GROUP_NAME: f"pg-{name}"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"}}


def watched(loop: SchedulerLoop, obj: dict[str, Any]) -> None:
    """What the informer does with a watch event."""
    informer = loop.pods if obj["kind"] == "Pod" else loop.podgroups
    informer._put(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", informer.parse(obj), "MODIFIED")


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_an_assumed_annotation_holds_in_the_cache_until_a_copy_carries_it() -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    watched(loop, podgroup("pg-a"))
    # The cycle that decided it is followed by cycles that already see the job as started.
    assert loop._assume_annotations("ns", "pg-a", {keys.LAST_START_TIMESTAMP: STAMP})
    assert loop.podgroups.store["ns/pg-a"].last_start == STAMP
    # A copy written before the patch landed (e.g. a status write) does not drop it from the cache...
    watched(loop, podgroup("pg-a", version="2"))
    assert loop.podgroups.store["ns/pg-a"].last_start == STAMP
    # ... the copy that carries it ends the assumption: what the server says from then on is what counts.
    watched(loop, podgroup("pg-a", {keys.LAST_START_TIMESTAMP: STAMP}, version="3"))
    assert loop._assumed_annotations == {}
    watched(loop, podgroup("pg-a", version="4"))
    assert loop.podgroups.store["ns/pg-a"].last_start is None


def test_an_annotation_for_a_podgroup_gone_meanwhile_is_not_assumed() -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    assert not loop._assume_annotations("ns", "gone", {keys.LAST_START_TIMESTAMP: STAMP})
    assert loop._assumed_annotations == {} and "ns/gone" not in loop.podgroups.store


def test_a_deleted_podgroup_takes_its_assumed_annotations_with_it() -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    watched(loop, podgroup("pg-a"))
    assert loop._assume_annotations("ns", "pg-a", {keys.LAST_START_TIMESTAMP: STAMP})
    loop.podgroups._put("ns/pg-a", None, "DELETED")
    # Recreated under the same name: a new job, not started.
    watched(loop, podgroup("pg-a", version="9"))
    assert loop.podgroups.store["ns/pg-a"].last_start is None


async def test_bind_creates_wait_neither_for_their_events_nor_for_the_next_cycles_writes(api: FakeApi) -> None:
    loop = SchedulerLoop(object(), SchedulerConfig(), concurrency=1)
    for name in ("a", "b"):
        watched(loop, pod(name))
        watched(loop, podgroup(f"pg-{name}"))
    release_events = api.hold("/events")
    decisions = Decisions(binds=[Bind("ns", "a", "pg-a", "n1", keys.RESOURCE_TYPE_REGULAR),
                                 Bind("ns", "b", "pg-b", "n1", keys.RESOURCE_TYPE_REGULAR)],
                          annotations=[AnnotationUpdate("ns", "pg-a", keys.LAST_START_TIMESTAMP, STAMP)])
    await loop.commit(decisions)
    await settle()
    # With one write in flight per budget, both BindRequests are out while the first `Scheduled` event hangs,
    # and the annotation went out beside them.
    assert [b["metadata"]["name"] for b in api.made("POST", "/bindrequests")] == ["a", "b"]
    assert len(api.made("PATCH", "/podgroups/pg-a")) == 1
    assert set(loop.bindrequests.store) == {"ns/a", "ns/b"}
    release_events.set()
    await settle()
    assert sorted(e["involvedObject"]["name"] for e in api.made("POST", "/events")) == ["a", "b"]
