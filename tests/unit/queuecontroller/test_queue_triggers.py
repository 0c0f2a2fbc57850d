"""What a Queue informer event enqueues in the queue-controller: a new queue, a spec change and another
writer's status do; the echo of the controller's own status write (the status its last PATCH returned) does not.
Informer events only, no API server: the write and its echo are counted live in the integration tests."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from operators.queuecontroller import main


@pytest.fixture
def controller(monkeypatch: pytest.MonkeyPatch) -> main.QueueController:
    monkeypatch.setattr(main, "REGISTRY", CollectorRegistry())
    return main.QueueController(None, argparse.Namespace(metrics_namespace="kai"))


def queue(version: int, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": "team-a", "uid": "uid-team-a", "resourceVersion": str(version),
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"resources": {}, **spec}, "status": status or {}}


def queued(c: main.QueueController) -> set[Any]:
    keys = set(c.work._queued)
    c.work._queued.clear()
    while not c.work._queue.empty():
        c.work._queue.get_nowait()
    return keys


def test_only_a_change_the_reconcile_reads_enqueues_the_queue(controller: main.QueueController) -> None:
    c = controller
    c.queues._put("team-a", main._queue(queue(1)), "ADDED")
    assert queued(c) == {"team-a"}
    assert "managedFields" not in c.queues.get("team-a")["metadata"]  # type: ignore[index]
    # Its own write coming back: the status as the PATCH returned it.
    written = {"allocated": {"cpu": "2"}, "requested": {"cpu": "2"}}
    c._written["team-a"] = copy.deepcopy(written)
    c.queues._put("team-a", main._queue(queue(2, written)), "MODIFIED")
    assert queued(c) == set()
    # Somebody else's status write is corrected; a spec change is reconciled.
    c.queues._put("team-a", main._queue(queue(3, {**written, "allocated": {"cpu": "7"}})), "MODIFIED")
    assert queued(c) == {"team-a"}
    c.queues._put("team-a", main._queue(queue(4, written, priority=5)), "MODIFIED")
    assert queued(c) == {"team-a"}
    c.queues._put("team-a", None, "DELETED")
    assert "team-a" not in c._written
