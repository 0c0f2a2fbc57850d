"""Session open's queue sums: each queue's allocated, allocated non-preemptible and requested amounts are the sums,
over the jobs of every queue below it and its own, of what each job's tasks use or ask by the definitions (summed
per queue, then added up the lineage once: the same integers as adding each job up its lineage). With them, what
the same loop derives per task: each podset's counters and each job's victim-candidate flag, by their definitions."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    ALIVE,
    GATED,
    PENDING,
    PIPELINED,
    QUEUE_ALLOCATED,
    RELEASING,
    RUNNING,
    VICTIM_STATUSES,
)
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects

LEAVES = ("l1", "l2", "l3", "deep")


def objects(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, *(node(f"n{i}") for i in range(4)), queue("d1"), queue("d2"),
                                  queue("l1", "d1"), queue("l2", "d1"), queue("l3", "d2"), queue("mid", "d2"),
                                  queue("deep", "mid")]
    for g in range(40):
        q = rng.choice((*LEAVES, "mid", "missing"))  # a job on an inner queue, one on no queue
        pre = rng.choice(("", "preemptible", "non-preemptible"))
        pc = rng.choice(("train", "build", "inference"))
        objs.append(podgroup(f"g{g}", q, rng.randint(1, 2), preemptibility=pre, priority_class=pc))
        for i in range(rng.randint(0, 3)):
            kind = rng.random()
            running = kind < 0.5
            kw: dict[str, Any] = {"cpu": str(rng.randint(1, 4)), "memory": f"{rng.randint(1, 8)}Gi"}
            if kind < 0.3:
                kw["gpus"] = rng.randint(1, 2)
            elif kind < 0.4:
                kw["fraction"] = "0.5"
            objs.append(pod(f"g{g}-{i}", f"g{g}", phase="Running" if running else "Pending",
                            node_name=f"n{rng.randrange(4)}" if running else "",
                            deleting=rng.random() < 0.1, **kw))
    return objs


@pytest.mark.parametrize("seed", range(8))
def test_queue_sums_at_open_are_the_lineage_sums_of_the_jobs(seed: int) -> None:
    s = Session(snapshot_from_objects(objects(seed)), SchedulerConfig(), 1e9)
    want: dict[str, list[list[int]]] = {name: [[0, 0, 0], [0, 0, 0], [0, 0, 0]] for name in s.queues}
    jobs_with_queue = 0
    for job in s.jobs:
        if job.queue is None:
            continue
        jobs_with_queue += 1
        for t in job.tasks:
            if not (t.status == PENDING or t.status in QUEUE_ALLOCATED or (t.status == GATED and t.rec.quota_gated)):
                continue
            vec = s.task_vector(t)
            for q in job.queue.lineage():
                sums = want[q.name]
                for r in range(3):
                    sums[2][r] += vec[r]
                    if t.status in QUEUE_ALLOCATED:
                        sums[0][r] += vec[r]
                        if not job.preemptible:
                            sums[1][r] += vec[r]
    assert jobs_with_queue and any(not j.preemptible for j in s.jobs)
    assert any(w[1] != [0, 0, 0] for w in want.values())  # some non-preemptible allocation to check
    for name, q in s.queues.items():
        assert [q.allocated, q.allocated_np, q.request] == want[name], name


@pytest.mark.parametrize("seed", range(8))
def test_podset_counters_and_victim_flags_at_open_by_definition(seed: int) -> None:
    s = Session(snapshot_from_objects(objects(seed)), SchedulerConfig(), 1e9)
    victims = 0
    for job in s.jobs:
        for ps in job.podsets:
            st = [t.status for t in ps.tasks]
            assert (ps.active_allocated, ps.pipelined, ps.active_used, ps.alive, ps.gated) == (
                sum(x in ACTIVE_ALLOCATED for x in st), st.count(PIPELINED), sum(x in ACTIVE_USED for x in st),
                sum(x in ALIVE for x in st), st.count(GATED)), job.key
            assert ps.pending == [t for t in ps.tasks if t.status == PENDING]
        on_node = any(t.status in VICTIM_STATUSES and t.node >= 0 for t in job.tasks)
        assert job.open_victim == (on_node and job.preemptible and job.queue is not None), job.key
        victims += job.open_victim
    seen = {t.status for job in s.jobs for t in job.tasks}
    assert victims and {RUNNING, PENDING, RELEASING} <= seen  # each branch of the loop taken
