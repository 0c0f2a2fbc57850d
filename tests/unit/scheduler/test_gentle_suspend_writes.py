"""The writes of suspend-instead-of-kill (shell/suspension.py): one merge patch of the owner's suspend field with
its uid as precondition, an event on the owner, the evictions back when the owner cannot be suspended. What the
live loop writes against a real API server (one PATCH, no eviction) is in tests/integration/test_gentle_suspend.py;
here the API client is a recorder, to show the request bodies and the fallback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from operators.core import events as events_module
from operators.core.events import EventRecorder
from operators.scheduler.decide.decisions import Eviction, Resume, Suspension
from operators.scheduler.shell import suspension as suspension_module
from operators.scheduler.shell.suspension import Suspender

VICTIMS = (Eviction("ns", "train-0", "pg", "reclaim", "ns/big", "m"),
           Eviction("ns", "train-1", "pg", "reclaim", "ns/big", "m"))


class Recorder:
    def __init__(self, live: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.live = live or {}

    async def raw(self, api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path, kwargs.get("body")))
        return self.live if method == "GET" else {}

    def owner_calls(self) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if "/events" not in c[1]]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    fake = Recorder()
    monkeypatch.setattr(suspension_module, "raw", fake.raw)
    monkeypatch.setattr(events_module, "raw", fake.raw)
    return fake


def suspension(api_version: str, kind: str, path: tuple[str, ...] = ("spec", "suspend"), verify: bool = False
               ) -> Suspension:
    return Suspension("ns", "pg", (api_version, kind, "train", "uid-1"), path, verify, "reclaim", "ns/big",
                      "why", VICTIMS)


def test_one_patch_per_owner_and_an_event_on_it(recorder: Recorder) -> None:
    writer = Suspender(None, EventRecorder(None, "kai-scheduler"))
    assert asyncio.run(writer.suspend(suspension("batch/v1", "Job"))) == ()
    assert recorder.owner_calls() == [("PATCH", "/apis/batch/v1/namespaces/ns/jobs/train",
                                       {"spec": {"suspend": True}, "metadata": {"uid": "uid-1"}})]
    [event] = [body for method, path, body in recorder.calls if "/events" in path]
    assert event["reason"] == "SuspendedByScheduler" and event["involvedObject"]["kind"] == "Job"
    # Decided again while its pods are still going: not written again.
    assert asyncio.run(writer.suspend(suspension("batch/v1", "Job"))) == ()
    assert len(recorder.owner_calls()) == 1
    asyncio.run(writer.resume(Resume("ns", "pg", ("batch/v1", "Job", "train", "uid-1"), ("spec", "suspend"), "fits")))
    assert recorder.owner_calls()[-1][2] == {"spec": {"suspend": False}, "metadata": {"uid": "uid-1"}}


def test_kubeflow_jobs_suspend_through_their_run_policy(recorder: Recorder) -> None:
    writer = Suspender(None, EventRecorder(None, "kai-scheduler"))
    asyncio.run(writer.suspend(suspension("kubeflow.org/v1", "PyTorchJob", ("spec", "runPolicy", "suspend"))))
    assert recorder.owner_calls() == [("PATCH", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/train",
                                       {"spec": {"runPolicy": {"suspend": True}}, "metadata": {"uid": "uid-1"}})]


def test_an_unknown_kind_is_read_first_and_without_the_field_its_pods_are_evicted(recorder: Recorder) -> None:
    writer = Suspender(None, EventRecorder(None, "kai-scheduler"))
    assert asyncio.run(writer.suspend(suspension("example.com/v1", "Training", verify=True))) == VICTIMS
    assert recorder.owner_calls() == [("GET", "/apis/example.com/v1/namespaces/ns/trainings/train", None)]
    recorder.live = {"spec": {"suspend": False}}
    assert asyncio.run(writer.suspend(suspension("example.com/v1", "Training", verify=True))) == ()
    assert recorder.owner_calls()[-1][0] == "PATCH"


def test_a_refused_patch_falls_back_to_the_evictions(monkeypatch: pytest.MonkeyPatch) -> None:
    async def forbidden(api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(suspension_module, "raw", forbidden)
    writer = Suspender(None, EventRecorder(None, "kai-scheduler"))
    assert asyncio.run(writer.suspend(suspension("batch/v1", "Job"))) == VICTIMS
