"""The node index's deferred re-keying: whatever evictions, placements and rollbacks happened since its last read,
every reader sees the order an index built afresh on the nodes' current state gives."""

from __future__ import annotations

import random
from typing import Any

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import VICTIM_STATUSES
from operators.scheduler.decide.placement.scoring import NodeIndex
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def cluster(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [queue("q"), *PRIORITY_CLASSES]
    objs += [node(f"n{i}", gpus=rng.choice([0, 4, 8]), cpu=str(rng.choice([16, 32, 64]))) for i in range(12)]
    for j in range(40):
        n = rng.randrange(12)
        kind = rng.choice(["gpu", "fraction", "cpu"])
        objs.append(podgroup(f"j{j}", "q"))
        objs.append(pod(f"j{j}-0", f"j{j}", node_name=f"n{n}", phase="Running", cpu=str(rng.choice([1, 2, 4])),
                        gpus=1 if kind == "gpu" else 0, fraction="0.5" if kind == "fraction" else None))
    return objs


def churn(stmt: Any, running: list[Any], marks: list[int], rng: random.Random) -> bool:
    """One random step of a statement: roll back to a random checkpoint, or evict one to three running tasks
    after a new one. False when nothing is left to evict."""
    if marks and rng.random() < 0.3:
        stmt.rollback(marks.pop(rng.randrange(len(marks))))
        marks[:] = [m for m in marks if m <= len(stmt.ops)]
        return True
    live = [t for t in running if t.status in VICTIM_STATUSES]
    if not live:
        return False
    marks.append(stmt.checkpoint())
    for t in rng.sample(live, min(len(live), rng.randint(1, 3))):
        stmt.evict(t, "reclaim", "ns/x", "test")
    return True


READERS = (
    lambda index: list(index.gpu_order(0)),
    lambda index: list(index.gpu_order(1)),
    lambda index: list(index.shared_order()),
    lambda index: list(index.cpu_order(1000, True)),
    lambda index: list(index.cpu_order(1000, False)),
    lambda index: sorted(index.releasing),
    lambda index: [index.sort_key(n, c) for n in index.nodes for c in (True, False) if n.ok],
)


def reads(index: NodeIndex) -> list[object]:
    return [read(index) for read in READERS]


def test_deferred_rekeying_reads_as_a_fresh_index() -> None:
    for seed in range(8):
        s = Session(snapshot_from_objects(cluster(seed)), SchedulerConfig(), 1e9)
        rng = random.Random(seed)
        stmt = s.statement()
        running = [t for j in s.jobs for t in j.tasks if t.status in VICTIM_STATUSES and t.node >= 0]
        marks = []
        for step in range(30):
            if not churn(stmt, running, marks, rng):
                break
            if step % 3 == 0:  # several changes between two reads: re-keyed once, at the read
                fresh = NodeIndex(s.nodes, s.config.gpu_placement, s.config.cpu_placement)
                first = READERS[step // 3 % len(READERS)]  # each reader in turn is the first after changes
                assert first(s.index) == first(fresh), (seed, step)
                assert reads(s.index) == reads(fresh), (seed, step)
        stmt.discard()
        fresh = NodeIndex(s.nodes, s.config.gpu_placement, s.config.cpu_placement)
        assert reads(s.index) == reads(fresh)
