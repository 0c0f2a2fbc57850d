"""A whole-GPU pod's scan walks the node index's sorted list in place (`Placer._scan_whole` from `gpu_from`): it
answers as the scan by its definition over `gpu_order`'s nodes (the first node in the mask the fit takes in idle
resources), in binpack and spread, on clusters with releasing, shared and exactly-fitting nodes, under random masks
and after random placements."""

from __future__ import annotations

import random

from test_sched_scan_resources import cluster, scan_every_fit

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def test_whole_gpu_scan_answers_as_the_scan_over_the_order() -> None:
    # Fails when the walk starts one place off, ignores the mask, lets the pre-test refuse a node holding exactly
    # the pod's CPU or memory, or calls the fit with released resources counted.
    found = missed = 0
    for seed in range(60):
        spread = seed % 2 == 1
        config = SchedulerConfig(gpu_placement="spread" if spread else "binpack")
        s = Session(snapshot_from_objects(cluster(seed)), config, 1e9)
        placer, index = s.placer, s.index
        rng = random.Random(seed)
        stmt = s.statement()
        pending = [t for j in s.jobs for t in j.tasks if t.node < 0]
        for _ in range(6):
            for task in pending:
                whole = task.rec.gpu.whole
                if not whole or task.node >= 0:
                    continue
                lst, start = index.gpu_from(whole)
                assert [i for _, i in lst[start:]] == list(index.gpu_order(whole))
                full = placer.mask(task)
                for mask in (full, bytearray(m and rng.random() < 0.6 for m in full)):
                    got = placer._scan_whole(task, lst, start, mask)
                    assert got == scan_every_fit(placer, task, list(index.gpu_order(whole)), mask, True, False)
                    found += got is not None
                    missed += got is None
            # Place one pending pod where the search puts it, so the next round reads another state.
            rest = [t for t in pending if t.node < 0]
            if not rest:
                break
            task = rng.choice(rest)
            placement = placer.find(task)
            if placement is not None:
                (stmt.pipeline if placement.pipeline else stmt.allocate)(task, placement)
    assert found > 200 and missed > 200, (found, missed)
