"""The live loop streams BindRequests: a job's are created while the cycle that committed it still runs."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, gang, node, queue

from operators.core import events as events_module
from operators.scheduler import loop as loop_module
from operators.scheduler.config import SchedulerConfig
from operators.scheduler.cycle import run_cycle
from operators.scheduler.decisions import Decisions
from operators.scheduler.loop import SchedulerLoop
from operators.scheduler.provisioning import ProvisioningRequestRecord


class RecordingApi:
    def __init__(self) -> None:
        self.posts: list[str] = []  # BindRequest names, in the order they were created
        self.created = threading.Event()

    async def raw(self, api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        body = dict(kwargs.get("body") or {})
        if method == "POST" and path.endswith("/bindrequests"):
            self.posts.append(body["metadata"]["name"])
            self.created.set()
        return body


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> RecordingApi:
    fake = RecordingApi()
    monkeypatch.setattr(loop_module, "raw", fake.raw)
    monkeypatch.setattr(events_module, "raw", fake.raw)
    return fake


def scheduler(objects: list[dict[str, Any]]) -> SchedulerLoop:
    loop = SchedulerLoop(object(), SchedulerConfig())
    informers = {"Node": loop.nodes, "Pod": loop.pods, "PodGroup": loop.podgroups, "Queue": loop.queues,
                 "PriorityClass": loop.priority_classes}
    for obj in objects:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        informer: Any = informers[obj["kind"]]
        informer._put(key, informer.parse(obj), "ADDED")
    return loop


async def test_bindrequests_are_created_while_the_cycle_still_runs_and_only_once(
        api: RecordingApi, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = scheduler([node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES, *gang("a", 2, gpus=1),
                      *gang("b", 2, gpus=1), *gang("too-big", 2, gpus=4)])
    during: list[list[str]] = []

    def slow_cycle(*args: Any, **kwargs: Any) -> Decisions:
        decisions = run_cycle(*args, **kwargs)
        # Still inside the cycle's thread: the event loop has already sent the committed jobs' BindRequests.
        api.created.wait(timeout=10)
        during.append(list(api.posts))
        return decisions

    monkeypatch.setattr(loop_module, "run_cycle", slow_cycle)
    decisions = await loop.cycle()
    for _ in range(20):
        await asyncio.sleep(0)
    assert {b.pod for b in decisions.binds} == {"a-0", "a-1", "b-0", "b-1"}
    assert during and during[0]  # created before the cycle returned
    assert sorted(api.posts) == ["a-0", "a-1", "b-0", "b-1"]  # each exactly once: commit skipped the streamed
    assert set(loop.bindrequests.store) == {"ns/a-0", "ns/a-1", "ns/b-0", "ns/b-1"}


async def test_a_gang_with_a_provisioning_request_waits_for_the_cycles_end(api: RecordingApi,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    loop = scheduler([node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES, *gang("a", 2, gpus=1)])
    loop.provisioning.requests._put("ns/a-provisioning-1", ProvisioningRequestRecord(
        namespace="ns", name="a-provisioning-1", uid="u", pod_group="a", attempt=1, class_name="c",
        templates=()), "ADDED")
    during: list[list[str]] = []

    def watched_cycle(*args: Any, **kwargs: Any) -> Decisions:
        decisions = run_cycle(*args, **kwargs)
        api.created.wait(timeout=2)  # what a streamed bind would have had time to send (none may come)
        during.append(list(api.posts))
        return decisions

    monkeypatch.setattr(loop_module, "run_cycle", watched_cycle)
    await loop.cycle()
    for _ in range(20):
        await asyncio.sleep(0)
    assert during == [[]]  # nothing streamed: the provisioning plan may still hold the gang
    assert sorted(api.posts) == ["a-0", "a-1"]  # provisioning is off here, so the binds go out at commit
