"""What makes the queue-controller reconcile a Queue: its one Queue informer's events, minus the echo of the
controller's own status write (the API server is a fake that applies the merge patch)."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from operators.queuecontroller import main


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


@pytest.fixture
def controller(monkeypatch: pytest.MonkeyPatch) -> main.QueueController:
    monkeypatch.setattr(main, "REGISTRY", CollectorRegistry())
    c = main.QueueController(None, argparse.Namespace(metrics_namespace="kai"))
    c.writes = []  # type: ignore[attr-defined]

    async def api(_api: Any, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        name = path.split("/")[-2]
        c.writes.append((method, path, body))  # type: ignore[attr-defined]
        stored = copy.deepcopy(c.queues.get(name))
        assert stored is not None
        updated = merge(stored, body)
        updated["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
        return updated

    monkeypatch.setattr(main, "raw", api)
    return c


def queue(name: str, version: int = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(version),
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"resources": {}, **spec}, "status": {}}


def podgroup(queue_name: str, cpu: str) -> dict[str, Any]:
    return {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"queue": queue_name},
            "status": {"resourcesStatus": {"allocated": {"cpu": cpu}, "requested": {"cpu": cpu}}}}


def queued(c: main.QueueController) -> set[Any]:
    keys = set(c.work._queued)
    c.work._queued.clear()
    while not c.work._queue.empty():
        c.work._queue.get_nowait()
    return keys


async def test_its_own_status_write_coming_back_reconciles_nothing(controller: main.QueueController) -> None:
    c = controller
    c.podgroups._put("ns/pg", main._slim_podgroup(podgroup("team-a", "2")), "ADDED")
    for timer in c.work._timers.values():
        timer.cancel()
    c.work._timers.clear()
    c.queues._put("team-a", main._queue(queue("team-a")), "ADDED")
    assert queued(c) == {"team-a"}
    assert "managedFields" not in c.queues.get("team-a")["metadata"]  # type: ignore[index]

    await c.reconcile("team-a")
    [(method, path, body)] = c.writes  # type: ignore[attr-defined]
    assert (method, path) == ("PATCH", "/apis/scheduling.run.ai/v2/queues/team-a/status")
    written = merge(c.queues.get("team-a"), body)
    written["metadata"]["resourceVersion"] = "2"
    c.queues._put("team-a", main._queue(written), "MODIFIED")  # the watch's echo of that write
    assert queued(c) == set()

    # Somebody else's status write is corrected; a spec change is reconciled.
    clobbered = copy.deepcopy(written)
    clobbered["status"]["allocated"] = {"cpu": "7"}
    clobbered["metadata"]["resourceVersion"] = "3"
    c.queues._put("team-a", main._queue(clobbered), "MODIFIED")
    assert queued(c) == {"team-a"}
    moved = copy.deepcopy(clobbered)
    moved["spec"]["priority"] = 5
    moved["metadata"]["resourceVersion"] = "4"
    c.queues._put("team-a", main._queue(moved), "MODIFIED")
    assert queued(c) == {"team-a"}
