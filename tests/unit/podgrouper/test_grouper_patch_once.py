"""The pod-grouper patches a pod once: a reconcile of a copy its pod watch has not brought up to date yet (the
periodic resync at a backlog, when the watch lags by minutes) does not send the same patch again."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from operators.podgrouper import main as grouper_main


def _pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"kai.scheduler/queue": "q"},
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "kai-scheduler"}}


def _grouper() -> tuple[grouper_main.PodGrouper, list[dict[str, Any]]]:
    grouper = grouper_main.PodGrouper(api=None, args=grouper_main.parser().parse_args([]))
    sent: list[dict[str, Any]] = []

    async def call(method: str, path: str, **kwargs: Any) -> Any:
        assert (method, path) == ("PATCH", "/api/v1/namespaces/ns/pods/p")
        sent.append(kwargs["body"])
        return {}

    grouper._call = call  # type: ignore[method-assign]
    return grouper, sent


async def test_a_stale_copy_is_not_patched_twice_and_a_real_change_is() -> None:
    grouper, sent = _grouper()
    stale = _pod()
    result = SimpleNamespace(name="pg-1", subgroup=None)
    await grouper._patch_pod(stale, result)
    await grouper._patch_pod(copy.deepcopy(stale), result)  # the resync, before the watch showed the patch
    assert sent == [{"metadata": {"annotations": {"pod-group-name": "pg-1"}}}]

    grouped = _pod({"pod-group-name": "pg-1"})
    grouper._on_pod("MODIFIED", stale, grouped)  # the watch catches up
    await grouper._patch_pod(grouped, result)
    assert len(sent) == 1, "already as wanted"

    grouper._on_pod("MODIFIED", grouped, _pod())  # someone removed the annotation: put back
    await grouper._patch_pod(_pod(), result)
    assert len(sent) == 2


async def test_another_group_is_patched_at_once() -> None:
    grouper, sent = _grouper()
    await grouper._patch_pod(_pod(), SimpleNamespace(name="pg-1", subgroup=None))
    await grouper._patch_pod(_pod(), SimpleNamespace(name="pg-2", subgroup=None))
    assert [b["metadata"]["annotations"]["pod-group-name"] for b in sent] == ["pg-1", "pg-2"]


async def test_a_deleted_pod_is_forgotten() -> None:
    grouper, _ = _grouper()
    await grouper._patch_pod(_pod(), SimpleNamespace(name="pg-1", subgroup=None))
    grouper._on_pod("DELETED", _pod(), None)
    assert grouper._patched == {}
