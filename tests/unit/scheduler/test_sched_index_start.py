"""Where the node index's binpack orders start (`NodeIndex.gpu_from`, `cpu_order`), bisected on the keys alone: on
the rekey test's clusters after random placements, for every request from 0 to past the largest key, the start is
the number of entries whose key is below the request (what `bisect_left(list, (request, -1))` gives), and the
orders are the entries from there, every node with at least the request first included."""

from __future__ import annotations

import random
from bisect import bisect_left

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import PENDING
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def _cluster(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    objs: list[dict[str, object]] = [queue("q"), *PRIORITY_CLASSES]
    objs += [node(f"n{i}", gpus=rng.choice([0, 4, 8]), cpu=str(rng.choice([8, 16, 32]))) for i in range(12)]
    for j in range(60):
        running = j < 30
        gpus = rng.choice([0, 1, 2, 4])
        objs.append(podgroup(f"j{j}", "q"))
        objs.append(pod(f"j{j}-0", f"j{j}", node_name=f"n{rng.randrange(12)}" if running else "",
                        phase="Running" if running else "Pending", cpu=str(rng.choice([1, 2, 4])), gpus=gpus))
    return objs


def test_binpack_orders_start_at_the_first_key_of_at_least_the_request() -> None:
    ties = 0
    for seed in range(24):
        s = Session(snapshot_from_objects(_cluster(seed)), SchedulerConfig(), 1e9)
        rng = random.Random(seed)
        pending = [t for j in s.jobs for t in j.tasks if t.status == PENDING]
        for task in pending[: rng.randint(0, len(pending))]:
            stmt = s.statement()
            for_node = s.placer.find(task)
            if for_node is not None:
                stmt.allocate(task, for_node)
                stmt.commit()
        index = s.index
        index.flush()  # the lists as the orders read them (a placement re-keys its node at the next read)
        gpu_keys = [k for k, _ in index.gpu_list]
        for request in range(0, int(max(gpu_keys, default=0)) + 2):
            lst, start = index.gpu_from(request)
            assert start == sum(1 for k in gpu_keys if k < request) == bisect_left(lst, (request, -1))
            assert list(index.gpu_order(request)) == [i for k, i in lst if k >= request]
            ties += request in gpu_keys
        for cpu_only in (True, False):
            lst = index.cpu_only_list if cpu_only else index.cpu_gpu_list
            for request in sorted({k for k, _ in lst} | {0, 1, 10**9}):
                assert list(index.cpu_order(request, cpu_only)) == [i for k, i in lst if k >= request]
                ties += 1
    assert ties > 100  # requests equal to some node's key: where starting one place off would show
