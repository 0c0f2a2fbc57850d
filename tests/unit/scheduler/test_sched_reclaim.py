"""reclaim: a queue below its fair share takes back from queues above theirs, down to their share, no further."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"
RECLAIM_ONLY = SchedulerConfig(actions=("allocate", "reclaim"))

# Queue layouts: (queues, queue of A's jobs, queue of B's jobs). Every leaf: GPU quota 2, over-quota weight 1.
FLAT = ([queue("qa", gpu=(2, -1, 1)), queue("qb", gpu=(2, -1, 1))], "qa", "qb")
NESTED = ([queue("da", gpu=(2, -1, 1)), queue("db", gpu=(2, -1, 1)), queue("qa", "da", gpu=(2, -1, 1)),
           queue("qb", "db", gpu=(2, -1, 1))], "qa", "qb")
SIBLINGS = ([queue("d", gpu=(4, -1, 1)), queue("qa", "d", gpu=(2, -1, 1)), queue("qb", "d", gpu=(2, -1, 1))],
            "qa", "qb")


def scenario(layout: tuple[list[dict[str, Any]], str, str], pending_b: int, a_class: str = "train",
             a_jobs: int = 8) -> list[dict[str, Any]]:
    """A runs `a_jobs` one-GPU jobs on the only node (8 GPUs); B submits `pending_b` one-GPU jobs."""
    queues, qa, qb = layout
    objs: list[dict[str, Any]] = [node("n1", gpus=8), *queues, *PRIORITY_CLASSES]
    for i in range(a_jobs):
        objs += [podgroup(f"a{i}", qa, priority_class=a_class, created=f"2025-01-01T00:0{i}:00Z"),
                 pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n1", phase="Running")]
    for i in range(pending_b):
        objs += [podgroup(f"b{i}", qb, created=LATER), pod(f"b{i}-0", f"b{i}", gpus=1, created=LATER)]
    return objs


@pytest.mark.parametrize("layout", [FLAT, NESTED, SIBLINGS], ids=["flat", "nested", "siblings"])
@pytest.mark.parametrize(("pending_b", "reclaimed"), [
    (1, 1),
    (4, 4),  # B's fair share is 4: A goes down from 8 to its own fair share of 4 and B runs
    (6, 4),  # the 5th and 6th job would push B over its fair share: no reclaim for them
])
def test_reclaim_down_to_fair_share(layout: tuple[list[dict[str, Any]], str, str], pending_b: int,
                                    reclaimed: int) -> None:
    d = cycle(scenario(layout, pending_b), RECLAIM_ONLY)
    assert len(d.evictions) == reclaimed
    assert {e.action for e in d.evictions} <= {"reclaim"}
    assert sorted(p.pod for p in d.pipelined) == [f"b{i}-0" for i in range(reclaimed)]
    # Newest victims first (a7, a6, ...).
    assert sorted(e.pod for e in d.evictions) == sorted(f"a{7 - i}-0" for i in range(reclaimed))
    shares = {q.name: q for q in d.queues}
    b_share = min(pending_b, 4)  # fair shares follow requests: B asks for at most its half
    assert shares["qb"].fair_share["gpu"] == b_share and shares["qa"].fair_share["gpu"] == 8 - b_share
    assert shares["qa"].allocated["gpu"] == 8 - reclaimed == shares["qa"].fair_share["gpu"]
    assert [u.pod_group for u in d.unschedulable] == [f"b{i}" for i in range(reclaimed, pending_b)]


def test_eviction_message_names_preemptor_queue_and_fair_share() -> None:
    d = cycle(scenario(FLAT, 4), RECLAIM_ONLY)
    e = d.evictions[0]
    assert e.for_pod_group == "ns/b0"
    assert e.message.startswith("Pod ns/a7-0 was preempted by workload ns/b0. ")  # KAI's text first
    assert "Reclaimed by ns/b0 (queue qb): queue qa uses 8 GPUs, above its fair share of 4 GPUs." in e.message


def test_non_preemptible_work_is_never_reclaimed() -> None:
    # A's jobs are `build` (non-preemptible); give A the quota they need to be running legitimately.
    queues = [queue("qa", gpu=(8, -1, 1)), queue("qb", gpu=(0, -1, 1))]
    d = cycle(scenario((queues, "qa", "qb"), 2, a_class="build"), RECLAIM_ONLY)
    assert not d.evictions and not d.pipelined


def test_queue_at_its_fair_share_is_not_reclaimed() -> None:
    # A runs 4 of 8 GPUs (its fair share), B runs 4 and wants one more: B would exceed its share.
    objs = scenario(FLAT, 1, a_jobs=4)
    for i in range(4):
        objs += [podgroup(f"r{i}", "qb"), pod(f"r{i}-0", f"r{i}", gpus=1, node_name="n1", phase="Running")]
    d = cycle(objs, RECLAIM_ONLY)
    assert not d.evictions


def test_reclaimer_within_quota_takes_from_queue_above_quota() -> None:
    # C holds nothing and has quota 3; A (quota 2) holds everything: "guarantee deserved quota" applies.
    queues = [queue("qa", gpu=(2, -1, 1)), queue("qc", gpu=(3, -1, 0))]
    d = cycle(scenario((queues, "qa", "qc"), 3), RECLAIM_ONLY)
    assert len(d.evictions) == 3 and len(d.pipelined) == 3


def test_reclaim_and_preempt_together_by_default() -> None:
    d = cycle(scenario(FLAT, 4))
    assert len(d.evictions) == 4 and {e.action for e in d.evictions} == {"reclaim"}
