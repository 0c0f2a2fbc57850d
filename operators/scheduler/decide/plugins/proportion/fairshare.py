"""Hierarchical fair-share division (KAI proportion plugin), one resource at a time, top-down per level.

Pure functions over integer amounts in the core units (micro-GPUs, millicores, bytes). -1 means unlimited for
deserved (quota) and limit. Over-quota shares are handed out in whole units per round (one GPU, one millicore,
one byte: `WHOLE`), leftovers one unit at a time, so every share is an exact integer.

The one genuinely fractional quantity is a queue's weighted part of a round (`remaining * weight / total
weight`, with the time-based usage term): it is a float in whole units, and it is compared with whole units
under the core's one tolerance, `units.RATIO_EPS` (a part within it of a whole number counts as that number:
the weights' float rounding must not lose a whole GPU). Everything added and subtracted stays an integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.units import AXES, RATIO_EPS, WHOLE, Vector

RESOURCES: tuple[str, ...] = ("gpu", "cpu", "memory")
_EPS = RATIO_EPS


@dataclass(frozen=True, slots=True)
class ShareInput:
    """One queue among siblings, for one resource."""

    name: str
    deserved: int
    limit: int
    weight: float
    request: int
    priority: int = 100
    created: float = 0.0
    uid: str = ""
    usage: float = 0.0

    @property
    def requestable(self) -> int:
        return self.request if self.limit == UNLIMITED else min(self.request, self.limit)


def divide(amount: int, queues: Sequence[ShareInput], k_value: float = 1.0, unit: int = 1, *,
           priority_ordered: bool = False) -> dict[str, int]:
    """Divide `amount` of one resource among sibling queues: deserved, over-quota by priority, remainder.

    `unit`: one whole unit of the resource in the amounts' units (over-quota rounds give whole units).
    `priority_ordered` (queuePriorityInQuotaReclaim): the deserved band too is granted highest priority first
    and capped by what is left, so quotas that add up to more than `amount` go to the higher priorities."""
    fair = {q.name: 0 for q in queues}
    remaining = amount
    in_order = sorted(queues, key=lambda q: -q.priority) if priority_ordered else queues
    for q in in_order:
        deserved = amount if q.deserved == UNLIMITED else q.deserved
        give = max(0, min(deserved, q.requestable))
        if priority_ordered:
            give = max(0, min(give, remaining))
        fair[q.name] += give
        remaining -= give
    if remaining <= 0:
        return fair
    fractions: dict[str, float] = {}
    priorities = sorted({q.priority for q in queues}, reverse=True)
    for priority in priorities:
        bucket = [q for q in queues if q.priority == priority]
        remaining = _over_quota(remaining, bucket, fair, fractions, k_value, unit)
        if remaining <= 0:
            return fair
    # Remainder phase: one unit each, largest remembered fraction first, bucket by bucket.
    for priority in priorities:
        bucket = sorted((q for q in queues if q.priority == priority and q.name in fractions),
                        key=lambda q: (-fractions[q.name], q.created, q.uid, q.name))
        for q in bucket:
            if remaining <= 0:
                return fair
            give = min(unit, remaining, max(0, q.requestable - fair[q.name]))
            fair[q.name] += give
            remaining -= give
    return fair


def _over_quota(remaining: int, bucket: Sequence[ShareInput], fair: dict[str, int],
                fractions: dict[str, float], k_value: float, unit: int) -> int:
    while remaining > 0:
        unsatisfied = [q for q in bucket if q.requestable - fair[q.name] > 0]
        total_weight = sum(max(q.weight, 0.0) for q in unsatisfied)
        if total_weight <= 0:
            break
        # Time-based fairshare hook: with no usage data p is (1+k)·w' and normalises back to w'.
        weights = {q.name: max(0.0, w + k_value * (w - q.usage))
                   for q in unsatisfied for w in (max(q.weight, 0.0) / total_weight,)}
        norm = sum(weights.values())
        if norm <= 0:
            break
        round_amount = remaining / unit  # in whole units (correctly rounded: exact amounts stay exact)
        capped = False
        for q in unsatisfied:
            if q.weight <= 0:
                continue
            share = round_amount * weights[q.name] / norm  # whole units, fractional
            wanted = q.requestable - fair[q.name]
            if wanted / unit <= share + _EPS:
                fair[q.name] += wanted
                remaining -= wanted
                fractions.pop(q.name, None)
                capped = True
            else:
                whole = math.floor(share + _EPS)
                fair[q.name] += whole * unit
                remaining -= whole * unit
                fractions[q.name] = share - whole
        if not capped:
            break
    return remaining


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue of the hierarchy with its per-resource vectors (gpu, cpu, memory)."""

    name: str
    parent: str
    deserved: Vector
    limit: Vector
    weight: tuple[float, float, float]
    request: Vector
    priority: int = 100
    created: float = 0.0
    uid: str = ""
    usage: tuple[float, float, float] = (0.0, 0.0, 0.0)


def fair_shares(queues: Mapping[str, QueueSpec], total: Vector, k_value: float = 1.0, *,
                priority_ordered: bool = False) -> dict[str, Vector]:
    """Fair share of every queue: top-level queues divide `total`, children divide their parent's share."""
    children: dict[str, list[QueueSpec]] = {}
    for q in queues.values():
        parent = q.parent if q.parent in queues else ""
        children.setdefault(parent, []).append(q)
    for kids in children.values():
        kids.sort(key=lambda q: (q.created, q.uid, q.name))
    result: dict[str, list[int]] = {name: [0, 0, 0] for name in queues}
    for r in AXES:
        stack: list[tuple[str, int]] = [("", total[r])]
        while stack:
            parent, amount = stack.pop()
            kids = children.get(parent, [])
            if not kids:
                continue
            shares = divide(amount, [
                ShareInput(q.name, q.deserved[r], q.limit[r], q.weight[r], q.request[r], q.priority, q.created,
                           q.uid, q.usage[r]) for q in kids], k_value, WHOLE[r], priority_ordered=priority_ordered)
            for q in kids:
                result[q.name][r] = shares[q.name]
                stack.append((q.name, shares[q.name]))
    return {name: (v[0], v[1], v[2]) for name, v in result.items()}


def allocatable_share(deserved: int, fair_share: int, limit: int, total: int) -> int:
    """Share used by DRF and reclaim: max(deserved, fair share) capped by limit; unlimited deserved -> limit."""
    if deserved == UNLIMITED:
        return total if limit == UNLIMITED else limit
    share = max(deserved, fair_share)
    return share if limit == UNLIMITED else min(share, limit)


def dominant_share(allocated: Sequence[int], shares: Sequence[int]) -> float:
    """DRF dominant resource share; a zero allocatable share is penalised (allocated in whole units x 1000)."""
    best = 0.0
    for alloc, share, unit in zip(allocated, shares, WHOLE, strict=True):
        value = alloc / share if share > 0 else alloc / unit * 1000.0
        best = max(best, value)
    return best
