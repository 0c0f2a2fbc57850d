"""The node index's re-key with the key and the shareable / releasing tests inlined, and the groups' scans skipped
on a node without shared devices: after random placements (binds and pipelines, whole-GPU, fractional and CPU-only
pods), evictions and rollbacks, in binpack and spread for either resource, every key, the shared-GPU membership,
the releasing set and every order equal an index built afresh from the nodes (whose construction computes them
through `_gpu_key`, `_cpu_key`, `_shareable` and `_is_releasing`)."""

from __future__ import annotations

import random

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import PENDING, VICTIM_STATUSES
from operators.scheduler.decide.placement.scoring import NodeIndex
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects

KINDS = ("gpu", "fraction", "cpu")


def cluster(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    objs: list[dict[str, object]] = [queue("q"), *PRIORITY_CLASSES]
    objs += [node(f"n{i}", gpus=rng.choice([0, 4, 8]), cpu=str(rng.choice([8, 16, 32]))) for i in range(10)]
    for j in range(70):
        kind = rng.choice(KINDS)
        running = j < 35
        # Some GPU pods ask for no CPU or memory: evicted, their node releases GPUs only.
        bare = kind == "gpu" and rng.random() < 0.3
        objs.append(podgroup(f"j{j}", "q"))
        objs.append(pod(f"j{j}-0", f"j{j}", node_name=f"n{rng.randrange(10)}" if running else "",
                        phase="Running" if running else "Pending", cpu="0" if bare else str(rng.choice([1, 2, 4])),
                        memory="0" if bare else "1Gi",
                        gpus=rng.choice([1, 2]) if kind == "gpu" else 0,
                        fraction=rng.choice(["0.25", "0.5"]) if kind == "fraction" else None))
    return objs


def state(index: NodeIndex) -> list[object]:
    return [list(index.gpu_key), list(index.cpu_key), bytes(index.in_shared), sorted(index.releasing),
            list(index.gpu_list), list(index.shared_list), list(index.cpu_gpu_list), list(index.cpu_only_list)]


def test_rekeyed_index_equals_a_fresh_one_after_placements_evictions_and_rollbacks() -> None:
    seen = {"placed_shared": 0, "placed_on_plain": 0, "evicted": 0, "rolled_back": 0, "releasing": 0,
            "releasing_gpus_only": 0}
    for seed in range(48):
        strategies = ("binpack", "spread")
        config = SchedulerConfig(gpu_placement=strategies[seed % 2], cpu_placement=strategies[seed // 2 % 2])
        s = Session(snapshot_from_objects(cluster(seed)), config, 1e9)
        rng = random.Random(seed)
        stmt = s.statement()
        tasks = [t for j in s.jobs for t in j.tasks]
        marks: list[int] = []
        for _ in range(40):
            step = rng.random()
            if step < 0.2 and marks:
                stmt.rollback(marks.pop(rng.randrange(len(marks))))
                marks[:] = [m for m in marks if m <= len(stmt.ops)]
                seen["rolled_back"] += 1
            elif step < 0.5:
                live = [t for t in tasks if t.status in VICTIM_STATUSES and t.node >= 0]
                if live:
                    marks.append(stmt.checkpoint())
                    stmt.evict(rng.choice(live), "reclaim", "ns/x", "test")
                    seen["evicted"] += 1
            else:
                pending = [t for t in tasks if t.status == PENDING]
                task = rng.choice(pending) if pending else None
                placement = s.placer.find(task) if task is not None else None
                if task is not None and placement is not None:
                    marks.append(stmt.checkpoint())
                    (stmt.pipeline if placement.pipeline else stmt.allocate)(task, placement)
                    seen["placed_shared" if s.nodes[placement.node].groups else "placed_on_plain"] += 1
            seen["releasing"] += bool(s.index.releasing)
            seen["releasing_gpus_only"] += any(n.rel_gpu > 0 and not n.rel_cpu and not n.rel_mem for n in s.nodes)
            fresh = NodeIndex(s.nodes, config.gpu_placement, config.cpu_placement)
            assert state(s.index) == state(fresh), seed
    assert all(n > 50 for n in seen.values()), seen
