"""Fewer gangs disturbed (the opt-in `fewergangs` plugin): among victims of equal priority (and equally elastic),
the one that moves the fewest pods goes first, so a single-pod job is taken before a gang is broken, whatever their
ages (KAI's newest-first order only breaks the tie that remains). Off, KAI's order holds."""

from __future__ import annotations

from typing import Any

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.framework import PluginSetting

LATER = "2025-01-01T01:00:00Z"
FEWER_GANGS = SchedulerConfig(actions=("allocate", "preempt"), plugins=(PluginSetting("fewergangs", enabled=True),))


def full_cluster(single_created: str) -> list[dict[str, Any]]:
    """Two 2-GPU nodes: a 2-pod training gang (one GPU on each node) and a single-pod training job, the gang
    newer; the cluster is full. An inference pod of the same queue needs 1 GPU."""
    objs: list[dict[str, Any]] = [node("n1", gpus=2), node("n2", gpus=2), queue("q"), *PRIORITY_CLASSES,
                                  podgroup("gang", "q", 2, created="2025-01-01T00:30:00Z"),
                                  pod("gang-0", "gang", gpus=1, node_name="n1", phase="Running"),
                                  pod("gang-1", "gang", gpus=1, node_name="n2", phase="Running"),
                                  podgroup("solo", "q", created=single_created),
                                  pod("solo-0", "solo", gpus=1, node_name="n1", phase="Running"),
                                  podgroup("other", "q", priority_class="build", created="2024-12-01T00:00:00Z"),
                                  pod("other-0", "other", gpus=1, node_name="n2", phase="Running")]
    return [*objs, podgroup("urgent", "q", priority_class="inference", created=LATER),
            pod("urgent-0", "urgent", gpus=1, created=LATER)]


def test_a_single_pod_goes_before_a_newer_gang_is_broken() -> None:
    # KAI takes the newest victim first: the gang (both of its pods, for one GPU). Here the older single pod.
    d = cycle(full_cluster("2025-01-01T00:10:00Z"), FEWER_GANGS)
    assert [e.pod for e in d.evictions] == ["solo-0"]
    assert {p.pod: p.node for p in d.pipelined} == {"urgent-0": "n1"}


def test_priority_still_comes_first() -> None:
    objs = full_cluster("2025-01-01T00:10:00Z")
    for o in objs:
        if o["kind"] == "PodGroup" and o["metadata"]["name"] == "solo":
            o["spec"]["priorityClassName"] = "build-preemptible"  # above the gang's train: the gang goes
    d = cycle(objs, FEWER_GANGS)
    assert sorted(e.pod for e in d.evictions) == ["gang-0", "gang-1"]


def test_off_by_default_kai_takes_the_newest_victim() -> None:
    d = cycle(full_cluster("2025-01-01T00:10:00Z"), SchedulerConfig(actions=("allocate", "preempt")))
    assert sorted(e.pod for e in d.evictions) == ["gang-0", "gang-1"]
