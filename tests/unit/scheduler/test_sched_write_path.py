"""The live loop's write path on in-memory stores: what is assumed in the cache, what waits for what."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.core import events as events_module
from operators.core import keys
from operators.scheduler import loop as loop_module
from operators.scheduler.config import SchedulerConfig
from operators.scheduler.decisions import AnnotationUpdate, Bind, Decisions
from operators.scheduler.loop import SchedulerLoop

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


async def test_a_start_annotation_holds_in_the_cache_from_the_cycle_that_decided_it(api: FakeApi) -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    watched(loop, podgroup("pg-a"))
    release = api.hold("/podgroups/")
    decisions = Decisions(annotations=[AnnotationUpdate("ns", "pg-a", keys.LAST_START_TIMESTAMP, STAMP)])

    commit = asyncio.ensure_future(loop.commit(decisions))
    await settle()
    # The cycle is not held up by the patch, and the next one already sees the job as started.
    assert commit.done()
    assert api.made("PATCH", "/podgroups/pg-a") == [{"metadata": {"annotations": {
        keys.LAST_START_TIMESTAMP: STAMP}}}]
    assert loop.podgroups.store["ns/pg-a"].last_start == STAMP
    # A copy written before the patch landed (e.g. a status write) does not drop it from the cache...
    watched(loop, podgroup("pg-a", version="2"))
    assert loop.podgroups.store["ns/pg-a"].last_start == STAMP
    release.set()
    await settle()
    # ... the copy that carries it ends the assumption: what the server says from then on is what counts.
    watched(loop, podgroup("pg-a", {keys.LAST_START_TIMESTAMP: STAMP}, version="3"))
    assert loop._assumed_annotations == {}
    watched(loop, podgroup("pg-a", version="4"))
    assert loop.podgroups.store["ns/pg-a"].last_start is None


async def test_a_failed_annotation_write_is_no_longer_assumed(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    watched(loop, podgroup("pg-a"))

    async def refuse(*_: Any, **__: Any) -> dict[str, Any]:
        raise RuntimeError("refused")

    monkeypatch.setattr(loop_module, "raw", refuse)
    await loop.commit(Decisions(annotations=[AnnotationUpdate("ns", "pg-a", keys.LAST_START_TIMESTAMP, STAMP)]))
    await settle()
    assert loop._assumed_annotations == {}
    watched(loop, podgroup("pg-a", version="2"))
    assert loop.podgroups.store["ns/pg-a"].last_start is None


async def test_an_annotation_for_a_podgroup_gone_meanwhile_is_not_written(api: FakeApi) -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    await loop.commit(Decisions(annotations=[AnnotationUpdate("ns", "gone", keys.LAST_START_TIMESTAMP, STAMP)]))
    await settle()
    assert api.made("PATCH", "/podgroups/") == []
    assert loop._assumed_annotations == {}


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


async def test_a_deleted_podgroup_takes_its_assumed_annotations_with_it(api: FakeApi) -> None:
    loop = SchedulerLoop(object(), SchedulerConfig())
    watched(loop, podgroup("pg-a"))
    api.hold("/podgroups/")
    await loop.commit(Decisions(annotations=[AnnotationUpdate("ns", "pg-a", keys.LAST_START_TIMESTAMP, STAMP)]))
    loop.podgroups._put("ns/pg-a", None, "DELETED")
    # Recreated under the same name: a new job, not started.
    watched(loop, podgroup("pg-a", version="9"))
    assert loop.podgroups.store["ns/pg-a"].last_start is None
