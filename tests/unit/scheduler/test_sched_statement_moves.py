"""The statement's cheaper bookkeeping, each giving what it gave before:
- a task's status move looked up per pair of statuses changes its podset's counters and its queues' allocation as
  testing both statuses against the status sets does, for every pair of statuses and every kind of pod;
- the fit summary of a histogram of node reasons is the summary of one entry per node."""

from __future__ import annotations

import itertools
import random

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide import explain
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    ALIVE,
    ALLOCATED,
    BINDING,
    BOUND,
    FAILED,
    GATED,
    PENDING,
    PIPELINED,
    QUEUE_ALLOCATED,
    RELEASING,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    PodSet,
    QueueState,
    Task,
)
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects

STATUSES = (PENDING, GATED, ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING, SUCCEEDED, FAILED, UNKNOWN)


def counters(ps: PodSet) -> tuple[int, ...]:
    return ps.active_allocated, ps.pipelined, ps.active_used, ps.alive, ps.gated


def expected_counters(tasks: list[Task]) -> tuple[int, ...]:
    """A podset's counters counted from its tasks' statuses by the definitions."""
    st = [t.status for t in tasks]
    return (sum(s in ACTIVE_ALLOCATED for s in st), st.count(PIPELINED), sum(s in ACTIVE_USED for s in st),
            sum(s in ALIVE for s in st), st.count(GATED))


def session() -> Session:
    objs: list[dict[str, object]] = [*PRIORITY_CLASSES, node("n1"), node("n2"), queue("parent"),
                                     queue("q", "parent")]
    objs.append(podgroup("g", "q", 2))
    objs += [pod("g-whole", "g", gpus=2, cpu="3"), pod("g-cpu", "g", cpu="5", memory="3Gi"),
             pod("g-frac", "g", fraction="0.5", devices=2), pod("g-mem", "g", gpu_memory="10240")]
    objs.append(podgroup("np", "q", 1, preemptibility="non-preemptible", priority_class="build"))
    objs += [pod("np-0", "np", gpus=1), pod("np-1", "np", cpu="2")]
    return Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)


def allocations(s: Session) -> dict[str, tuple[list[int], list[int]]]:
    return {name: (list(q.allocated), list(q.allocated_np)) for name, q in s.queues.items()}


def expected_allocations(s: Session, base: dict[str, tuple[list[int], list[int]]]) -> dict[str, tuple[list[int],
                                                                                                   list[int]]]:
    """The queues' allocation at open plus every task counted as allocated (pipelined included) now."""
    out = {name: (list(a), list(np)) for name, (a, np) in base.items()}
    for job in s.jobs:
        assert job.queue is not None
        for t in job.tasks:
            if t.status in QUEUE_ALLOCATED or t.status == PIPELINED:
                q: QueueState | None = job.queue
                while q is not None:
                    for acc in (out[q.name][0],) + ((out[q.name][1],) if not job.preemptible else ()):
                        for i, x in enumerate(s.task_vector(t)):
                            acc[i] += x
                    q = q.parent
    return out


def test_every_status_pair_moves_counters_and_queues_as_the_sets_say() -> None:
    s = session()
    tasks = [t for job in s.jobs for t in job.tasks]
    assert {job.preemptible for job in s.jobs} == {True, False}
    assert any(t.rec.gpu.is_shared for t in tasks) and any(not t.rec.gpu.is_shared for t in tasks)
    # Shared pods count their placed portion: give them one as if placed, so the queue vector has it.
    for t in tasks:
        if t.rec.gpu.is_shared:
            t.node, t.portion = 0, 250_000
    base = allocations(s)  # every task pending: what the queues hold of others
    moves = 0
    for task in tasks:
        for old, new in itertools.product(STATUSES, STATUSES):
            s._set_status(task, old)
            s._set_status(task, new)
            moves += 1
            assert task.status == new
            for job in s.jobs:
                for ps in job.podsets:
                    assert counters(ps) == expected_counters(ps.tasks), (task.name, old, new)
                    assert [t for t in ps.tasks if t.status == PENDING] == sorted(
                        ps.pending, key=lambda t: ps.tasks.index(t))
            assert allocations(s) == expected_allocations(s, base), (task.name, old, new)
        s._set_status(task, PENDING)
    assert moves == len(tasks) * len(STATUSES) ** 2


def test_random_walks_keep_the_counters() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        s = session()
        tasks = [t for job in s.jobs for t in job.tasks if not t.rec.gpu.is_shared]
        start = allocations(s)
        for _ in range(200):
            s._set_status(rng.choice(tasks), rng.choice(STATUSES))
        for job in s.jobs:
            for ps in job.podsets:
                assert counters(ps) == expected_counters(ps.tasks)
        assert allocations(s) == expected_allocations(s, start)


def test_histogram_summary_equals_one_entry_per_node() -> None:
    reasons = ["node(s) didn't have enough resources: GPUs", "node(s) didn't have enough resources: CPU",
               "node(s) had untolerated taint", "node(s) didn't match Pod's node affinity/selector"]
    rng = random.Random(7)
    cases: list[dict[tuple[str, ...], int]] = [{}, {(): 5}, {(reasons[0], reasons[0]): 2, (reasons[1],): 1}]
    for _ in range(200):
        hist: dict[tuple[str, ...], int] = {}
        for _ in range(rng.randrange(0, 6)):
            hist[tuple(rng.choices(reasons, k=rng.randrange(0, 4)))] = rng.randrange(1, 5000)
        cases.append(hist)
    for hist in cases:
        per_node = [list(r) for r, k in hist.items() for _ in range(k)]
        assert explain.fit_summary_of_histogram(hist) == explain.fit_summary(per_node)
    assert explain.fit_summary_of_histogram({(reasons[0], reasons[0]): 2, (reasons[1],): 1}) == (
        f"{explain.NO_NODES}: 1 {reasons[1]}. \n4 {reasons[0]}.")
