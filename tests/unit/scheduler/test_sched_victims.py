"""Victim chunks and victim order (algorithms 4.6, 5.4), and invariants over every disruptive action."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.actions.victims import order_chunks, victim_chunks
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def running_job(name: str, q: str, n: int, min_member: int, created: str, pclass: str = "train",
                node_name: str = "n1") -> list[dict[str, Any]]:
    return [podgroup(name, q, min_member, priority_class=pclass, created=created),
            *[pod(f"{name}-{i}", name, gpus=1, node_name=node_name, phase="Running") for i in range(n)]]


def session_of(objs: list[dict[str, Any]]) -> Session:
    return Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)


def test_elastic_chunks_one_pod_above_min_then_the_core() -> None:
    s = session_of([node("n1", gpus=8), queue("q"), *running_job("e", "q", 4, 2, "2025-01-01T00:00:00Z")])
    [job] = s.jobs
    chunks = victim_chunks(job, protected=False)
    assert [[t.name for t in c.tasks] for c in chunks] == [["e-3"], ["e-2"], ["e-0", "e-1"]]
    assert [c.core for c in chunks] == [False, False, True]
    assert [[t.name for t in c.tasks] for c in victim_chunks(job, protected=True)] == [["e-3"], ["e-2"]]
    assert [len(c.tasks) for c in victim_chunks(job, protected=False, whole=True)] == [4]


def test_order_within_a_queue_lowest_priority_then_elastic_then_newest() -> None:
    objs = [node("n1", gpus=16), queue("q"), *PRIORITY_CLASSES,
            *running_job("old", "q", 1, 1, "2025-01-01T00:00:00Z"),
            *running_job("new", "q", 1, 1, "2025-01-01T05:00:00Z"),
            *running_job("bp", "q", 1, 1, "2025-01-01T09:00:00Z", pclass="build-preemptible"),
            *running_job("el", "q", 2, 1, "2025-01-01T01:00:00Z")]
    s = session_of(objs)
    chunks = [c for j in s.jobs for c in victim_chunks(j, protected=False)]
    order = [(c.job.name, c.core) for c in order_chunks(s, chunks)]
    assert order == [("el", False), ("new", True), ("el", True), ("old", True), ("bp", True)]


def test_victims_spread_over_over_served_queues() -> None:
    # Two queues over their share by the same amount: victims alternate rather than draining one queue.
    objs = [node("n1", gpus=8), queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(0, -1, 1)), *PRIORITY_CLASSES]
    for q in ("qa", "qb"):
        for i in range(3):
            objs += running_job(f"{q}{i}", q, 1, 1, f"2025-01-01T0{i}:00:00Z")
    s = session_of(objs)
    chunks = [c for j in s.jobs for c in victim_chunks(j, protected=False)]
    queues = [c.job.queue.name for c in order_chunks(s, chunks) if c.job.queue]
    assert queues[:4] in (["qa", "qb", "qa", "qb"], ["qb", "qa", "qb", "qa"])


def busy_cluster() -> list[dict[str, Any]]:
    """Every kind of work on a full cluster plus pending jobs of every kind, in two queues."""
    objs: list[dict[str, Any]] = [node("n1", gpus=4), node("n2", gpus=4), queue("qa", gpu=(2, -1, 1)),
                                  queue("qb", gpu=(4, -1, 1)), *PRIORITY_CLASSES]
    objs += running_job("np", "qa", 2, 2, "2025-01-01T00:00:00Z", pclass="build")
    objs += running_job("tr", "qa", 2, 2, "2025-01-01T00:01:00Z", node_name="n1")
    objs += running_job("el", "qa", 4, 1, "2025-01-01T00:02:00Z", node_name="n2")
    for name, q, pclass, gpus in (("pi", "qa", "inference", 1), ("pb", "qb", "train", 2), ("pt", "qa", "train", 4)):
        objs += [podgroup(name, q, priority_class=pclass, created="2025-01-01T02:00:00Z"),
                 pod(f"{name}-0", name, gpus=gpus, created="2025-01-01T02:00:00Z")]
    return objs


@pytest.mark.parametrize("actions", [("allocate", "consolidation"), ("allocate", "reclaim"),
                                     ("allocate", "preempt"), None])
def test_invariants(actions: tuple[str, ...] | None) -> None:
    objs = busy_cluster()
    snapshot = snapshot_from_objects(objs)
    d = run_cycle(snapshot, SchedulerConfig(), 1e9, actions)
    evicted = {e.pod for e in d.evictions}
    assert not evicted & {"np-0", "np-1"}  # non-preemptible work is never a victim
    for e in d.evictions:  # every eviction is explained, names its action and preemptor
        assert e.action in ("consolidation", "reclaim", "preempt") and e.for_pod_group and e.message
    by_group: dict[str, set[str]] = {}
    for e in d.evictions:
        by_group.setdefault(e.pod_group, set()).add(e.pod)
    if "tr" in by_group:
        assert by_group["tr"] == {"tr-0", "tr-1"}  # gangs go whole
    if "el" in by_group:
        assert "el-0" not in by_group["el"] or len(by_group["el"]) == 4
    preemptors = {e.for_pod_group for e in d.evictions}
    pipelined = {f"ns/{p.pod_group}" for p in d.pipelined}
    assert preemptors <= pipelined  # nothing is evicted unless the preemptor is then placed
    for e in d.evictions:
        if e.action == "preempt":
            assert e.for_pod_group == "ns/pi"  # within qa, higher priority
        if e.action == "reclaim":
            assert e.for_pod_group == "ns/pb"  # across queues


def test_a_task_order_plugin_decides_which_pods_of_a_victim_go_first() -> None:
    # An elastic job (min 2) with 4 pods: by default the newest-ordered pods (e-3, e-2) go first; with a task
    # order ranking e-0 and e-1 last, they are the pods above the minimum the job loses first.
    from operators.scheduler.decide.config import config_from_mapping

    ranks = {"e-0": "9", "e-1": "8", "e-2": "1", "e-3": "2"}
    objs: list[dict[str, Any]] = [node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES,
                                  podgroup("e", "q", 2, created="2025-01-01T00:00:00Z"),
                                  *[pod(n, "e", gpus=1, node_name="n1", phase="Running", labels={"rank": r})
                                    for n, r in ranks.items()]]
    cfg = config_from_mapping({"plugins": {"rank": {"class": "sched_extra_plugins:RankOrder", "priority": 900}}})
    s = Session(snapshot_from_objects(objs), cfg, 1e9)
    [job] = s.jobs
    assert [[t.name for t in c.tasks] for c in victim_chunks(job, protected=False)] == [
        ["e-0"], ["e-1"], ["e-2", "e-3"]]
    # Through a whole cycle: a higher-priority pod of the same queue preempts one elastic pod, the one ranked last.
    objs += [podgroup("hi", "q", 1, priority_class="inference"), pod("hi-0", "hi", gpus=1)]
    assert [e.pod for e in run_cycle(snapshot_from_objects(objs), SchedulerConfig(), 1e9).evictions] == ["e-3"]
    assert [e.pod for e in run_cycle(snapshot_from_objects(objs), cfg, 1e9).evictions] == ["e-0"]
