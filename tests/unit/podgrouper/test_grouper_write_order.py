"""An owner-less pod is annotated only once its PodGroup exists: with the annotation it counts as grouped by its
user and is never looked at again, so a grouper stopped between the two writes must not leave it ungrouped."""

from __future__ import annotations

from typing import Any

import pytest

from operators.podgrouper import main as grouper_main


def _pod(owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"kai.scheduler/queue": "q"},
                         "ownerReferences": owners},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}


async def _group(pod: dict[str, Any], write_fails: bool) -> list[str]:
    args = grouper_main.parser().parse_args([])
    grouper = grouper_main.PodGrouper(api=None, args=args)
    calls: list[str] = []

    async def write(_: Any) -> None:
        calls.append("podgroup")
        if write_fails:
            raise RuntimeError("the PodGroup webhook is not reachable")

    async def patch(*_: Any) -> None:
        calls.append("pod")

    async def chain(_: Any) -> list[dict[str, Any]]:
        return []

    grouper._write_podgroup_locked = write  # type: ignore[method-assign]
    grouper._patch_pod = patch  # type: ignore[method-assign]
    grouper.owner_chain = chain  # type: ignore[method-assign]
    try:
        await grouper._group(pod)
    except RuntimeError:
        pass
    return calls


async def test_an_owner_less_pod_is_annotated_after_its_podgroup_was_written() -> None:
    assert await _group(_pod([]), write_fails=False) == ["podgroup", "pod"]
    assert await _group(_pod([]), write_fails=True) == ["podgroup"], "no annotation without its PodGroup"


@pytest.mark.parametrize("write_fails", [False, True])
async def test_an_owned_pod_writes_both_at_once(write_fails: bool) -> None:
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-1", "controller": True}]
    assert sorted(await _group(_pod(owner), write_fails=write_fails)) == ["pod", "podgroup"]
