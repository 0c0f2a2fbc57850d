"""reclaim sums what every candidate victim could release under each queue only when some queue has a limit:
that bound only lowers the allocation a limit is checked against, so without limits nothing reads it."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.actions import reclaim
from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"
RECLAIM_ONLY = SchedulerConfig(actions=("allocate", "reclaim"))


def cluster(parent_limit: float, gpus: int) -> list[dict[str, Any]]:
    """Parent GPU quota 4 (limit `parent_limit`); child A (quota 1) holds 4 GPUs of a `gpus`-GPU node; child B (quota
    0, priority 101) asks for 1. A queue outside the parent, without limits, holds nothing. With a limit of 4 and 8
    GPUs, only what A's pods would release keeps B's job under the limit; with 4 GPUs, only they make room."""
    objs = [node("n1", gpus=gpus), queue("dept", gpu=(4, parent_limit, 1)), queue("qa", "dept", gpu=(1, -1, 1)),
            queue("qb", "dept", gpu=(0, -1, 1), priority=101), queue("other", gpu=(0, -1, 1)), *PRIORITY_CLASSES]
    for i in range(4):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"),
                 pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n1", phase="Running")]
    objs += [podgroup("b", "qb", created=LATER), pod("b-0", "b", gpus=1, created=LATER)]
    return objs


def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = reclaim.releasable

    def wrapped(session: Any, candidates: Any) -> Any:
        calls.append(len(candidates))
        return original(session, candidates)

    monkeypatch.setattr(reclaim, "releasable", wrapped)
    return calls


def test_without_limits_no_candidate_is_summed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counted(monkeypatch)
    objs = cluster(-1, 4)
    d = cycle(objs, RECLAIM_ONLY)
    assert [e.pod for e in d.evictions] == ["a3-0"] and [p.pod for p in d.pipelined] == ["b-0"]
    assert calls == []


def test_a_limit_anywhere_sums_the_candidates_and_lets_them_make_room(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counted(monkeypatch)
    objs = cluster(4, 8)
    d = cycle(objs, RECLAIM_ONLY)
    # The parent is at its limit: B's job passes the capacity check only by what A's pods release.
    assert [e.pod for e in d.evictions] == ["a3-0"] and [p.pod for p in d.pipelined] == ["b-0"]
    assert calls == [4]
