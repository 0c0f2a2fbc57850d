"""The job tree's sorted leaves pop in a heap's order, and a topology shortfall names the same domain as the full
least-lacking scan: the two shortcuts allocate takes at the envelope (issue 26) decide exactly as before."""

from __future__ import annotations

import heapq
import random
from typing import Any

from operators.scheduler.decide.ordering import _insert_descending
from operators.scheduler.decide.plugins.topology.domains import Domain, Resources, shortfall


def test_sorted_leaf_pops_in_heap_order_with_pushes_between() -> None:
    rng = random.Random(26)
    heap: list[Any] = []  # entries (key, seq, name): the name stands in for the job, never compared
    entries: list[Any] = sorted(((rng.randint(0, 5), rng.random()), seq, f"job-{seq}") for seq in range(200))
    stack = list(reversed(entries))
    for e in entries:
        heapq.heappush(heap, e)
    seq = 200
    popped_heap, popped_stack = [], []
    while heap:
        popped_heap.append(heapq.heappop(heap)[2])
        popped_stack.append(stack.pop()[2])
        if rng.random() < 0.3:  # elastic growth: the job comes back with a new key (equal keys included)
            entry: Any = ((rng.randint(0, 5), rng.choice([0.5, rng.random()])), seq, f"job-{seq}")
            seq += 1
            heapq.heappush(heap, entry)
            _insert_descending(stack, entry)
    assert popped_stack == popped_heap
    assert not stack


def _lack_best(domains: list[Domain], request: Resources) -> Domain:
    gpu, cpu, memory = request
    return min(domains, key=lambda d: ((max(gpu - d.free[0], 0), max(cpu - d.free[1], 0),
                                        max(memory - d.free[2], 0)), d.values))


def test_shortfall_names_the_least_lacking_domain() -> None:
    rng = random.Random(7)
    for _ in range(300):
        domains = [Domain(1, "rack", ("z", f"r{i}"), frozenset({f"n{i}"}),
                          Resources(rng.choice([0, 1, 2, 4]) * 1_000_000, rng.choice([0, 500, 4000]),
                                    rng.choice([0, 10**9, 8 * 10**9])))
                   for i in rng.sample(range(40), rng.randint(1, 12))]
        request = Resources(rng.choice([1, 2, 4, 8]) * 1_000_000, rng.choice([0, 1000, 8000]),
                            rng.choice([0, 2 * 10**9]))
        if any(d.free.covers(request) for d in domains):
            continue  # a shortfall is only asked when no domain fits
        best = _lack_best(domains, request)
        text = shortfall("rack", domains, request)
        assert f"best {best.describe()} lacks {best.free.lacking(request).describe()}" in text
