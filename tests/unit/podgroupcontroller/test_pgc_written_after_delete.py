"""The podgroup-controller's `_written` (the status of its last write per PodGroup, to recognise the watch's echo)
keeps nothing for a PodGroup deleted while its status write was out: the DELETED event had already dropped the
entry, so one set after it would be kept for good (one per PodGroup of a steady churn)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from operators.core.kube import RawError
from operators.podgroupcontroller import main


def podgroup(name: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"queue": "q", "minMember": 1},
            "status": {"resourcesStatus": {"allocated": {"cpu": "3"}}}}


def controller(monkeypatch: pytest.MonkeyPatch, answer: str) -> main.PodGroupController:
    """A controller whose PodGroups' DELETED events arrive while their status PATCH is out; the PATCH then
    answers with the patched object ("ok") or 404 ("gone")."""
    c = main.PodGroupController(None, argparse.Namespace(scheduler_name="kai-scheduler"))

    async def patch_while_deleted(api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert method == "PATCH"
        name = path.split("/")[-2]
        c.podgroups._put(f"ns/{name}", None, "DELETED")
        if answer == "gone":
            raise RawError(404, "Not Found", "")
        return {**podgroup(name), "status": kwargs["body"]["status"]}

    monkeypatch.setattr(main, "raw", patch_while_deleted)
    return c


@pytest.mark.parametrize("answer", ["ok", "gone"])
async def test_a_podgroup_deleted_during_its_status_write_leaves_no_entry(monkeypatch: pytest.MonkeyPatch,
                                                                          answer: str) -> None:
    c = controller(monkeypatch, answer)
    for n in range(50):
        name = f"pg-{n}"
        c.podgroups._put(f"ns/{name}", main._slim_podgroup(podgroup(name)), "ADDED")
        c._written[("ns", name)] = {"resourcesStatus": {}}  # an earlier write of this controller
        # Its pods are gone: the status drops to nothing, and is written (no pod is left undecided).
        await c.reconcile(("ns", name))
    for timer in c.work._timers.values():
        timer.cancel()
    assert c._written == {}
    assert c._waiting == {}


async def test_a_write_to_a_live_podgroup_is_still_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    c = main.PodGroupController(None, argparse.Namespace(scheduler_name="kai-scheduler"))

    async def patched(api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return {**podgroup("pg"), "status": kwargs["body"]["status"]}

    monkeypatch.setattr(main, "raw", patched)
    c.podgroups._put("ns/pg", main._slim_podgroup(podgroup("pg")), "ADDED")
    await c.reconcile(("ns", "pg"))
    for timer in c.work._timers.values():
        timer.cancel()
    assert ("ns", "pg") in c._written  # its echo will be recognised


async def test_a_reconcile_of_a_deleted_podgroup_drops_its_entry() -> None:
    # Left by a status write that failed (not with 404) while the PodGroup was being deleted: its retry drops it.
    c = main.PodGroupController(None, argparse.Namespace(scheduler_name="kai-scheduler"))
    c._written[("ns", "gone")] = {"resourcesStatus": {}}
    await c.reconcile(("ns", "gone"))
    assert c._written == {}
