"""Reclaim takes over consolidation's victim orders (`OrderHandover`) only where they are exactly its own: the
decisions equal those of reclaim building every order itself, on clusters where consolidation builds its orders
and fails (no commit between) or commits, with elastic and semi-preemptible victims."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.actions.victims import (
    JobOrder,
    OrderHandover,
    VictimLists,
    commit_count,
    protected,
    victim_chunks,
    within_queue_order,
)
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import Chunk, Job, QueueState
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects

QUEUES = ("qa", "qb", "qc", "qd")


def stuck_cluster(seed: int) -> list[dict[str, Any]]:
    """8-GPU nodes each holding 3- and 4-GPU pods of preemptible jobs with 1 GPU free (some jobs elastic, across
    nodes; on odd seeds some semi-preemptible), and pending 2-GPU pods: the cluster's free total covers them, so
    consolidation builds its victim orders, but no move makes room (a moved 3- or 4-GPU pod fits nowhere), so it
    commits nothing unless a seed adds a pending 1-GPU pod; reclaim then evicts."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES,
                                  *(queue(q, gpu=(rng.choice([0, 4, 8, 16]), -1, 1)) for q in QUEUES)]
    n_nodes = rng.randint(3, 6)
    objs += [node(f"n{i}", gpus=8) for i in range(n_nodes)]
    slots = [(i, g) for i in range(n_nodes) for g in rng.sample([3, 4], 2)]
    job = 0
    while slots:
        name, size = f"r{job}", min(len(slots), rng.choice([1, 1, 2]))
        job += 1
        semi = seed % 2 == 1 and rng.random() < 0.3
        objs.append(podgroup(name, rng.choice(QUEUES), rng.randint(1, size),
                             priority_class=rng.choice(["train", "build-preemptible"]),
                             created=f"2025-01-01T00:{job:02d}:00Z",
                             preemptibility="semi-preemptible" if semi else ""))
        for k in range(size):
            i, gpus = slots.pop(rng.randrange(len(slots)))
            objs.append(pod(f"{name}-{k}", name, gpus=gpus, node_name=f"n{i}", phase="Running"))
    for j in range(rng.randint(2, 5)):
        name = f"p{j}"
        small = seed % 5 == 0 and j == 0  # consolidation places it: a commit after its orders were built
        objs.append(podgroup(name, rng.choice(QUEUES), 1, priority_class="train",
                             created=f"2025-01-01T01:{j:02d}:00Z"))
        objs.append(pod(f"{name}-0", name, gpus=1 if small else 2, created=f"2025-01-01T01:{j:02d}:00Z"))
    return objs


def decided(objs: list[dict[str, Any]], actions: tuple[str, ...]) -> tuple[Any, ...]:
    d = cycle(objs, SchedulerConfig(actions=actions))
    return d.to_dict(), sorted(d.counters.items())


@pytest.mark.parametrize("actions", [("consolidation", "reclaim"), ("allocate", "consolidation", "reclaim", "preempt")])
def test_handed_over_orders_change_no_decision(monkeypatch: pytest.MonkeyPatch, actions: tuple[str, ...]) -> None:
    taken = 0
    take = OrderHandover.take

    def counted(self: OrderHandover, lists: VictimLists, queue: QueueState, jobs: list[Job],
                runtime: float) -> JobOrder | None:
        nonlocal taken
        out = take(self, lists, queue, jobs, runtime)
        taken += out is not None
        return out

    evicted = 0
    for seed in range(160):
        objs = stuck_cluster(seed)
        with monkeypatch.context() as m:
            m.setattr(OrderHandover, "take", counted)
            handed = decided(objs, actions)
        with monkeypatch.context() as m:
            m.setattr(OrderHandover, "take", lambda *a: None)
            assert decided(objs, actions) == handed, seed
        evicted += bool(handed[0]["evictions"])
    assert taken >= 20 and evicted >= 10, (taken, evicted)


def _described(chunks: Any) -> list[tuple[str, list[str], bool]]:
    return [(c.job.name, [t.name for t in c.tasks], c.core) for c in chunks]


def test_an_order_taken_over_is_exact_until_a_commit_and_kept_across_the_taker_s_commits() -> None:
    """An order handed over is taken only while no commit came since its build, only for the same jobs and a
    protection of 0, and the taking lists fix it at their commits: it keeps the touched job's chunks of its build."""
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("qa", gpu=(0, -1, 1)),
                                  *(node(f"n{i}", gpus=8) for i in range(10))]
    for i in range(40):  # elastic: two pods, minMember 1 (one elastic chunk and the core each)
        objs += [podgroup(f"v{i}", "qa", 1, priority_class=["train", "build-preemptible"][i % 2],
                          created=f"2025-01-01T00:{i:02d}:00Z"),
                 pod(f"v{i}-0", f"v{i}", gpus=1, node_name=f"n{i % 10}", phase="Running"),
                 pod(f"v{i}-1", f"v{i}", gpus=1, node_name=f"n{(i + 1) % 10}", phase="Running")]
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    jobs = s.victim_candidates()
    q = jobs[0].queue
    assert q is not None

    def eager() -> list[Chunk]:
        return within_queue_order([c for j in jobs for c in victim_chunks(j, protected(s, j, 0.0))], s)

    before = _described(eager())
    first = VictimLists(s)
    order = first.order(jobs, 0.0, True)
    assert not order.any_protected and order.has(2)
    handover = OrderHandover(commit_count(s), first._made, {q: (jobs, order)})
    lists = handover.lists(s)
    assert lists is not None
    assert handover.take(lists, q, jobs, 5.0) is None  # another protection
    assert handover.take(lists, q, jobs[1:], 0.0) is None  # other jobs
    taken = handover.take(lists, q, list(jobs), 0.0)
    assert taken is order
    victim = next(j for j in jobs if j.name == "v7")  # not read yet: it comes late
    assert "v7" not in {c.job.name for c in order[:3]}
    lists.chunks(victim)  # read by the search that evicts from it
    stmt = s.statement()
    stmt.evict(victim.tasks[1], "reclaim", "ns/x", "")
    lists.committing([victim])
    stmt.commit()
    assert _described(taken) == before  # fixed at the taker's commit
    assert _described(lists.order(jobs, 0.0, False)) == _described(eager()) != before
    assert handover.lists(s) is None  # a commit came since the build
