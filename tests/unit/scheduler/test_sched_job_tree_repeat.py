"""The job tree's repeated pop (`JobTree._repeat`): a pop that follows a pop of the same leaf, with the leaf's next
job asking the same request and no allocation on the path changed, takes that job without comparing queues. The
pops must come in exactly the order of a full pick every time (issue 26, the cold cycle's job order)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import Job
from operators.scheduler.decide.ordering import JobTree
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects
from tests.unit.scheduler.sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue


def _objects(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, *(node(f"n{i}") for i in range(4))]
    leaves = []
    for d in range(2):
        objs.append(queue(f"dept{d}", gpu=(8, -1, 1)))
        for leaf in range(3):
            name = f"dept{d}-q{leaf}"
            leaves.append(name)
            objs.append(queue(name, f"dept{d}", gpu=(rng.choice([1, 2, 4]), -1, rng.choice([1, 2]))))
    for j in range(80):
        # Few shapes, so that consecutive jobs of a leaf often ask the same request (the repeat's case).
        size, gpus = rng.choice([(1, 1), (1, 1), (2, 1), (1, 2)])
        name = f"job-{j:03d}"
        objs.append(podgroup(name, rng.choice(leaves), size, priority_class=rng.choice(["train", "build"]),
                             created=f"2025-01-01T00:{j // 60:02d}:{j % 60:02d}Z"))
        objs += [pod(f"{name}-{i}", name, gpus=gpus) for i in range(size)]
    return objs


def _pops(seed: int, repeat: Callable[..., Job | None] | None) -> tuple[list[str], int]:
    """The pop order under random outcomes: a failed attempt (nothing changes), or a commit (the job's queue
    path gains its request, as allocate's commit does) with the job sometimes pushed back (elastic growth)."""
    session = Session(snapshot_from_objects(_objects(seed)), SchedulerConfig(), 1e9)
    tree = session.job_tree(session.schedulable_jobs(), "allocate")
    repeats = 0
    if repeat is not None:
        def counted(path: Any, request: Any) -> Job | None:
            nonlocal repeats
            out = repeat(tree, path, request)
            repeats += out is not None
            return out
        tree._repeat = counted  # type: ignore[method-assign]
    rng = random.Random(seed * 31 + 1)
    pushed: dict[str, int] = {}
    order = []
    while (job := tree.pop()) is not None:
        order.append(job.key)
        if rng.random() < 0.3:
            request = session.job_request(session.tasks_to_allocate(job))
            assert job.queue is not None
            for q in job.queue.lineage():
                for r in range(3):
                    q.allocated[r] += request[r]
            if pushed.get(job.key, 0) < 2 and rng.random() < 0.5:
                pushed[job.key] = pushed.get(job.key, 0) + 1
                tree.push(job)
    return order, repeats


def _no_allocation_check(tree: JobTree, path: Any, request: Any) -> Job | None:
    """A wrong rule: the repeat without checking that the path's allocations are unchanged."""
    saved = [(node, node.allocated[:]) for node, _ in path]
    return JobTree._repeat(tree, saved, request)


def test_repeated_pops_come_in_the_full_picks_order() -> None:
    total = 0
    for seed in range(12):
        full, _ = _pops(seed, lambda tree, path, request: None)
        fast, repeats = _pops(seed, JobTree._repeat)
        assert fast == full, seed
        total += repeats
    assert total > 100  # the repeat was taken, not only declined


def _no_request_check(tree: JobTree, path: Any, request: Any) -> Job | None:
    """A wrong rule: the repeat whatever the leaf's next job asks."""
    stack = tree._stacks.get(path[0][0])
    if not stack:
        return None
    tasks = tree._tasks_of(stack[-1][2])
    return JobTree._repeat(tree, path, tree._request_of(tasks))


def test_a_repeat_blind_to_allocation_or_request_changes_the_order() -> None:
    # The test above can fail: a commit on the path, or a next job asking another request, changes the queue's
    # facts, and a repeat that ignores either pops the same leaf again where the full pick may move on.
    for wrong in (_no_allocation_check, _no_request_check):
        differs = sum(_pops(seed, wrong)[0] != _pops(seed, lambda tree, path, request: None)[0]
                      for seed in range(12))
        assert differs > 0, wrong.__name__
