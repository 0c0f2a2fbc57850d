"""What makes the podgroup-controller reconcile a PodGroup: its one PodGroup informer's events, minus the echo of
its own status write and minus writes to fields it does not read (the scheduler's schedulingConditions)."""

from __future__ import annotations

import argparse
import copy
from typing import Any

from operators.podgroupcontroller import main


def podgroup(version: int, *, queue: str = "team-a", allocated: str | None = None,
             conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"schedulingConditions": conditions or []}
    if allocated:
        status["resourcesStatus"] = {"allocated": {"cpu": allocated}}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ns", "uid": "u", "resourceVersion": str(version)},
            "spec": {"queue": queue, "minMember": 1}, "status": status}


def pending(c: main.PodGroupController) -> set[Any]:
    keys = set(c.work._timers)
    for timer in c.work._timers.values():
        timer.cancel()
    c.work._timers.clear()
    return keys


async def test_only_a_change_of_what_the_reconcile_reads_enqueues_the_podgroup() -> None:
    c = main.PodGroupController(None, argparse.Namespace(scheduler_name="kai-scheduler"))
    key = ("ns", "pg")
    c.podgroups._put("ns/pg", main._slim_podgroup(podgroup(1)), "ADDED")
    assert pending(c) == {key}
    # The scheduler explains the PodGroup: a field this controller does not keep.
    c.podgroups._put("ns/pg", main._slim_podgroup(podgroup(2, conditions=[{"type": "X"}])), "MODIFIED")
    assert pending(c) == set()
    # Its own write coming back (the status as the PATCH returned it).
    written = podgroup(3, allocated="1")
    c._written[key] = main._slim_podgroup(copy.deepcopy(written))["status"]
    c.podgroups._put("ns/pg", main._slim_podgroup(written), "MODIFIED")
    assert pending(c) == set()
    # Another writer's status, and a spec change, are reconciled.
    c.podgroups._put("ns/pg", main._slim_podgroup(podgroup(4, allocated="5")), "MODIFIED")
    assert pending(c) == {key}
    c.podgroups._put("ns/pg", main._slim_podgroup(podgroup(5, queue="team-b", allocated="5")), "MODIFIED")
    assert pending(c) == {key}
    c.podgroups._put("ns/pg", None, "DELETED")
    assert key not in c._written
