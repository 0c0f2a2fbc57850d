"""Steady fair-share reclaim (proportion argument `steadyFairShareReclaim`, KAI v0.18 alpha, off by default).

The fair share is capped by demand, so while GPUs are free (even ones a pending job cannot use, fragmented or
outside its topology) no queue is above it and reclaim finds no victim. This path compares queues in GPUs with
their *keep*: max(quota, steady fair share) capped by the limit (`QueueState.steady_keep`, set by the proportion
plugin). It is added to reclaim's other rules; a scenario is accepted when either accepts it:

1. reclaimer: the job requests GPUs and its queue (and, per victim, its side where the paths split) holds fewer
   GPUs than its keep;
2. victims: from sides holding more GPUs than their keep, in the usual victim order;
3. floor: a victim side is never taken below its keep (a chunk larger than the surplus is left out, so smaller
   jobs of the queue are tried, even of higher priority);
4. overshoot: the reclaimer may end above its keep only while less saturated than every side it takes from on
   this path: (allocated + job) / steady x multiplier < remaining / steady, at every level of its ancestry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from operators.scheduler.decide.model import QueueState
from operators.scheduler.decide.units import GPU_AXIS, RATIO_EPS

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


def may_reclaim(session: Session, queue: QueueState, request: Sequence[int]) -> bool:
    """Rule 1 on the reclaimer's own queue."""
    return (session.config.steady_fair_share_reclaim and request[GPU_AXIS] > 0 and queue.steady_keep >= 0
            and queue.allocated[GPU_AXIS] < queue.steady_keep)


def above_keep(session: Session, v_side: QueueState) -> bool:
    """Rule 2, before anything is taken: the victim side holds more GPUs than its keep."""
    return (session.config.steady_fair_share_reclaim and v_side.steady_keep >= 0
            and v_side.allocated[GPU_AXIS] > v_side.steady_keep)


def takes(r_side: QueueState, mine_gpu: int, v_side: QueueState, remaining_gpu: int, chunk_gpu: int) -> bool:
    """Rules 1 to 3 for one chunk: the reclaimer side below its keep, the victim side above it before the chunk
    and not below it after."""
    keep = v_side.steady_keep
    return mine_gpu < r_side.steady_keep and remaining_gpu > keep and remaining_gpu - chunk_gpu >= keep >= 0


def saturation_ok(lineage: Iterable[QueueState], siblings: Callable[[QueueState], Sequence[QueueState]],
                  a: Callable[[QueueState], list[int]], taken_from: set[QueueState], request_gpu: int,
                  multiplier: float) -> bool:
    """Rule 4 at every level of the reclaimer's ancestry, in GPUs, with steady fair shares."""
    for q in lineage:
        takes_from = [s for s in siblings(q) if s is not q and s in taken_from]
        if not takes_from:
            continue
        after = a(q)[GPU_AXIS] + request_gpu
        if after <= q.steady_keep:
            continue
        ratio = after / q.steady_share if q.steady_share > 0 else float("inf")
        for s in takes_from:
            if s.steady_share > 0 and ratio * multiplier >= a(s)[GPU_AXIS] / s.steady_share - RATIO_EPS:
                return False
    return True
