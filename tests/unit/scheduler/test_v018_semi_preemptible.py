"""semi-preemptible PodGroups (KAI v0.18, alpha): non-preemptible and in quota up to the gang minimum (or
minNonPreemptible), preemptible and over quota above it, the surplus reclaimed first."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"
SEMI = "semi-preemptible"


def semi_gang(n: int, min_member: int, *, queue_name: str = "qa", running: bool = True,
              min_non_preemptible: int | None = None, priority_class: str = "inference") -> list[dict[str, Any]]:
    pg = podgroup("semi", queue_name, min_member, priority_class=priority_class, preemptibility=SEMI)
    if min_non_preemptible is not None:
        pg["spec"]["minNonPreemptible"] = min_non_preemptible
    return [pg, *[pod(f"semi-{i}", "semi", gpus=1, node_name="n1" if running else "",
                      phase="Running" if running else "Pending") for i in range(n)]]


def claimants(n: int, queue_name: str = "qb", priority_class: str = "train") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out += [podgroup(f"b{i}", queue_name, priority_class=priority_class, created=LATER),
                pod(f"b{i}-0", f"b{i}", gpus=1, created=LATER)]
    return out


def two_queues() -> list[dict[str, Any]]:
    return [node("n1", gpus=4), queue("qa", gpu=(2, -1, 1)), queue("qb", gpu=(2, -1, 1)), *PRIORITY_CLASSES]


@pytest.mark.parametrize("wanted", [2, 4])
def test_reclaim_takes_only_the_surplus_above_min_member(wanted: int) -> None:
    # qa runs a semi-preemptible gang of minMember 2 with 4 pods (inference: non-preemptible were it not semi);
    # qb, entitled to 2 GPUs, wants `wanted`: the 2 pods above the minimum go, the core stays.
    d = cycle([*two_queues(), *semi_gang(4, 2), *claimants(wanted)])
    assert sorted(e.pod for e in d.evictions) == ["semi-2", "semi-3"]  # last in task order first
    assert {e.action for e in d.evictions} == {"reclaim"}
    assert sorted(p.pod for p in d.pipelined) == ["b0-0", "b1-0"]


def test_min_non_preemptible_raises_the_core() -> None:
    d = cycle([*two_queues(), *semi_gang(4, 2, min_non_preemptible=3), *claimants(2)])
    assert [e.pod for e in d.evictions] == ["semi-3"]


def test_a_gang_at_its_minimum_is_not_a_victim() -> None:
    d = cycle([*two_queues(), *semi_gang(2, 2), *[o for i in range(2) for o in [
        podgroup(f"x{i}", "qa", priority_class="inference"),
        pod(f"x{i}-0", f"x{i}", gpus=1, node_name="n1", phase="Running")]], *claimants(2)])
    assert not d.evictions  # the non-preemptible x jobs and the semi core: nothing to reclaim


def test_preempt_in_the_queue_takes_only_the_surplus() -> None:
    # A higher-priority job in the same queue preempts the pods above the minimum only.
    objs = [node("n1", gpus=4), queue("qa", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            *semi_gang(4, 2, priority_class="train"), *claimants(3, "qa", "build")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")))
    assert sorted(e.pod for e in d.evictions) == ["semi-2", "semi-3"]
    assert {e.action for e in d.evictions} == {"preempt"}


@pytest.mark.parametrize(("quota", "bound"), [(1, 0), (2, 4)])
def test_the_core_must_fit_in_quota_the_surplus_need_not(quota: int, bound: int) -> None:
    # 4 pending pods, minMember 2: the 2 core GPUs must be within the queue's quota; the other 2 run over quota.
    objs = [node("n1", gpus=4), queue("qa", gpu=(quota, -1, 1)), *PRIORITY_CLASSES,
            *semi_gang(4, 2, running=False)]
    d = cycle(objs)
    assert len(d.binds) == bound
    if not bound:
        reasons = [r.reason for u in d.unschedulable for r in u.reasons]
        assert reasons == ["NonPreemptibleOverQuota"], d.unschedulable


def test_the_core_counts_in_the_queue_non_preemptible_allocation() -> None:
    # qa's quota is 2: the semi gang's core (2 running) fills it, so a non-preemptible job of qa does not fit
    # in quota even though 4 GPUs of the node are free.
    objs = [node("n1", gpus=8), queue("qa", gpu=(2, -1, 1)), *PRIORITY_CLASSES, *semi_gang(4, 2),
            podgroup("np", "qa", priority_class="inference", created=LATER), pod("np-0", "np", gpus=1, created=LATER)]
    d = cycle(objs)
    assert not d.binds
    assert [r.reason for u in d.unschedulable for r in u.reasons] == ["NonPreemptibleOverQuota"]
