"""Reclaim takes over consolidation's victim orders (`OrderHandover`) only where they are exactly its own: the
decisions equal those of reclaim building every order itself, on clusters where consolidation builds its orders
and fails (no commit between) or commits, with elastic and semi-preemptible victims."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.actions.victims import JobOrder, OrderHandover
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import Job, QueueState

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
    for j in range(rng.randint(1, 3)):
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

    def counted(self: OrderHandover, queue: QueueState, jobs: list[Job], runtime: float) -> JobOrder | None:
        nonlocal taken
        out = take(self, queue, jobs, runtime)
        taken += out is not None
        return out

    evicted = 0
    for seed in range(80):
        objs = stuck_cluster(seed)
        with monkeypatch.context() as m:
            m.setattr(OrderHandover, "take", counted)
            handed = decided(objs, actions)
        with monkeypatch.context() as m:
            m.setattr(OrderHandover, "take", lambda *a: None)
            assert decided(objs, actions) == handed, seed
        evicted += bool(handed[0]["evictions"])
    assert taken >= 20 and evicted >= 10, (taken, evicted)
