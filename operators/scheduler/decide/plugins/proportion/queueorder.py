"""proportion's queue order: which queue an action serves next (KAI's proportion QueueOrderFn).

Rules, first decisive wins: a queue not over-utilised first, starved (within quota with the job) first, higher
priority first, no zero-share penalty first; then the lower DRF share with the job, then without it; then the
smaller allocatable share; then the older queue, then its UID.
"""

from __future__ import annotations

from collections.abc import Sequence

from operators.scheduler.decide.model import QueueState
from operators.scheduler.decide.ordering import QueueFacts
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.units import GPU, RATIO_EPS

# DRF shares are ratios (floats): two that differ by less than the core's one tolerance are equal. Everything
# else the comparator looks at is an exact integer comparison.
_EPS = RATIO_EPS


def _drf(x0: int, x1: int, x2: int, s0: int, s1: int, s2: int) -> float:
    # dominant_share() unrolled for the hot path; max(v0, v1, v2, 0.0) written out as max() evaluates it (a later
    # value replaces the one kept only when greater, so ties keep the first: -0.0 before 0.0), without the call.
    v = x0 / s0 if s0 > 0 else x0 / GPU * 1000.0
    v1 = x1 / s1 if s1 > 0 else x1 * 1000.0
    if v1 > v:
        v = v1
    v2 = x2 / s2 if s2 > 0 else x2 * 1000.0
    if v2 > v:
        v = v2
    if v < 0.0:
        v = 0.0
    return v


def queue_facts(q: QueueState, request: Sequence[int]) -> QueueFacts:
    # Unrolled over the three resources (gpu, cpu, memory): this runs on every pop of every action.
    a0, a1, a2 = q.allocated
    f0, f1, f2 = q.fair_share
    s0, s1, s2 = q.alloc_share
    d0, d1, d2 = q.rec.quota
    r_gpu, r_cpu, r_mem = request
    w0, w1, w2 = a0 + r_gpu, a1 + r_cpu, a2 + r_mem
    over_utilised = f0 < a0 and f1 < a1 and f2 < a2
    starved = ((d0 == UNLIMITED or w0 <= d0) and (d1 == UNLIMITED or w1 <= d1)
               and (d2 == UNLIMITED or w2 <= d2))
    zero_penalty = (s0 <= 0 and w0 > 0) or (s1 <= 0 and w1 > 0) or (s2 <= 0 and w2 > 0)
    # Rules 1-4: not over-utilised first, starved first, higher priority first, no zero-share penalty first.
    rank = (over_utilised, not starved, -q.rec.priority, zero_penalty)
    return (rank, _drf(w0, w1, w2, s0, s1, s2), _drf(a0, a1, a2, s0, s1, s2), q.alloc_share, q.rec.created,
            q.rec.uid or q.rec.name)


def queue_before(a: QueueFacts, b: QueueFacts) -> bool:
    """True when queue `a` should be served before `b` (first decisive rule wins)."""
    if a[0] != b[0]:
        return a[0] < b[0]
    d = a[1] - b[1]
    if d > _EPS or d < -_EPS:  # abs(d) > eps
        return d < 0
    d = a[2] - b[2]
    if d > _EPS or d < -_EPS:
        return d < 0
    x_gpu, x_cpu, x_mem = a[3]  # the allocatable shares, compared as a partial order
    y_gpu, y_cpu, y_mem = b[3]
    le = x_gpu <= y_gpu and x_cpu <= y_cpu and x_mem <= y_mem
    ge = x_gpu >= y_gpu and x_cpu >= y_cpu and x_mem >= y_mem
    if le != ge:
        return le
    return (a[4], a[5]) < (b[4], b[5])
