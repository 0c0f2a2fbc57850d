"""Steady fair share (steadyFairShareReclaim, KAI v0.18 alpha): each queue's fair share if every queue with an
over-quota weight requested the whole cluster.

It is the ordinary division run a second time on copies of the queues with another demand: a leaf queue with an
over-quota weight and a finite quota, and each of its ancestors, requests the whole cluster; every other queue
keeps its real demand (a queue without weight keeps what it uses up to its quota; a queue with unlimited quota
keeps its demand, or it would get the whole cluster). It does not move with the weighted queues' demand, so it is a
stable reference between them, unlike the fair share, which is capped by demand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from operators.scheduler.decide.plugins.proportion.fairshare import QueueSpec, fair_shares
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.units import AXES, Vector


def steady_demand(queues: Mapping[str, QueueSpec], total: Vector) -> dict[str, QueueSpec]:
    """The queues with the steady division's demand (per resource)."""
    parents = {q.name: q.parent for q in queues.values()}
    children = {q.parent for q in queues.values()}
    wants_all: list[set[str]] = [set(), set(), set()]
    for q in queues.values():
        if q.name in children:
            continue  # not a leaf
        for r in AXES:
            if q.weight[r] > 0 and q.deserved[r] != UNLIMITED:
                name = q.name
                while name in queues and name not in wants_all[r]:
                    wants_all[r].add(name)
                    name = parents[name]
    out: dict[str, QueueSpec] = {}
    for q in queues.values():
        request = tuple(total[r] if q.name in wants_all[r] else q.request[r] for r in AXES)
        out[q.name] = replace(q, request=(request[0], request[1], request[2]))
    return out


def steady_shares(queues: Mapping[str, QueueSpec], total: Vector, k_value: float = 1.0, *,
                  priority_ordered: bool = False) -> dict[str, Vector]:
    """Every queue's steady fair share, level by level, with the fair share's priority, limits and kValue."""
    return fair_shares(steady_demand(queues, total), total, k_value, priority_ordered=priority_ordered)
