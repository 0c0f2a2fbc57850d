"""Placing a pod takes each resource from what is idle first, never below zero, the rest from what is releasing
(min(request, max(idle, 0)) idle, the remainder releasing), whatever the node's idle is (negative once a node is
over-committed by pipelined pods); the rollback gives back exactly what was taken."""

from __future__ import annotations

import random

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import PENDING, PIPELINED
from operators.scheduler.decide.placement.search import Placement
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def test_place_takes_idle_first_then_releasing() -> None:
    objects = [*PRIORITY_CLASSES, queue("q"), node("n1", gpus=8, cpu="64", memory="64Gi"), podgroup("pg"),
               pod("p", "pg", gpus=2, cpu="4", memory="8Gi")]
    s = Session(snapshot_from_objects(objects), SchedulerConfig(), 1e9)
    task = next(t for j in s.jobs for t in j.tasks if t.status == PENDING)
    n = s.nodes[0]
    rec = task.rec
    requests = (rec.cpu, rec.memory, rec.gpu.whole)
    rng = random.Random(7)
    cases = 0
    for _ in range(400):
        # Idle below zero, zero, short of the request, exactly it and above it, on each resource.
        idles = [rng.choice([-2 * r, -1, 0, r // 2, r - 1, r, r + 1, 3 * r]) for r in requests]
        rels = [rng.randrange(0, 4 * r + 2) for r in requests]
        n.idle_cpu, n.idle_mem, n.idle_gpu = idles
        n.rel_cpu, n.rel_mem, n.rel_gpu = rels
        stmt = s.statement()
        stmt.pipeline(task, Placement(0, True))
        want: list[int] = []
        for r, idle in zip(requests, idles, strict=True):
            from_idle = min(r, max(idle, 0))
            want += [from_idle, r - from_idle]
        assert stmt.ops[0].taken == tuple(want), (idles, rels)
        assert (n.idle_cpu, n.idle_mem, n.idle_gpu) == tuple(i - w for i, w in zip(idles, want[0::2], strict=True))
        assert (n.rel_cpu, n.rel_mem, n.rel_gpu) == tuple(r - w for r, w in zip(rels, want[1::2], strict=True))
        assert task.status == PIPELINED
        stmt.discard()
        assert [n.idle_cpu, n.idle_mem, n.idle_gpu] == idles and [n.rel_cpu, n.rel_mem, n.rel_gpu] == rels
        assert task.status == PENDING
        cases += 1
    assert cases == 400
