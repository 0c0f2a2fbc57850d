"""proportion's reclaim rules: which queue may reclaim, from which queues, and which victim scenarios are fair.

A job may reclaim only if its leaf queue stays within its fair share with the job (non-preemptible jobs: also
within quota at every level). A scenario is valid when, for every chunk before it is taken, the victim side of the
hierarchy (the sibling where the reclaimer's and victim's paths diverge) is still above its allocatable share
("maintain fair share"), or the reclaimer side stays within its quota while the victim side is above its quota
("guarantee deserved quota"); and no level of the reclaimer's ancestry ends more saturated than a sibling it takes
from. So reclaim takes queues back down to their share, never below it. With `queuePriorityInQuotaReclaim` (KAI
v0.18, opt-in) a chunk is also valid when the reclaimer side has a strictly higher queue priority than the victim
side and stays within its quota: in-quota work of lower-priority queues. With `steadyFairShareReclaim` (KAI v0.18,
opt-in) a GPU job may also reclaim on the steady fair-share path (`steadyreclaim`), whose victims, floor and
saturation rule use steady fair shares. The reclaim action asks these through the framework's `reclaim_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from operators.scheduler.decide.explain import amount, main_resource
from operators.scheduler.decide.model import Chunk, Job, QueueState
from operators.scheduler.decide.plugins.proportion import steadyreclaim as steady
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.units import AXES, GPU_AXIS, RATIO_EPS

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

Sides = dict[tuple[QueueState, QueueState], tuple[QueueState, QueueState]]

# The saturation rule compares ratios (allocated / fair share, times the configured multiplier), floats, under
# the core's one tolerance. Every amount is an exact integer (micro-GPUs, millicores, bytes).
_RATIO_EPS = RATIO_EPS


def can_reclaim(queue: QueueState, request: Sequence[int]) -> bool:
    """The reclaimer's leaf queue stays within its fair share in every requested resource."""
    return all(request[r] <= 0 or queue.allocated[r] + request[r] <= queue.fair_share[r] for r in AXES)


def _diverge(reclaimer: QueueState, victim: QueueState) -> tuple[QueueState, QueueState]:
    """The pair of sibling queues (reclaimer side, victim side) where the two ancestor paths split."""
    mine = reclaimer.lineage()
    theirs = victim.lineage()
    common = set(mine) & set(theirs)
    r_side = next(q for q in mine if q.parent is None or q.parent in common)
    v_side = next(q for q in theirs if q.parent is None or q.parent in common)
    return r_side, v_side


def _by_priority(session: Session, r_side: QueueState, v_side: QueueState) -> bool:
    """queuePriorityInQuotaReclaim: the reclaimer side outranks the victim side (strictly higher priority)."""
    return session.config.queue_priority_in_quota_reclaim and r_side.rec.priority > v_side.rec.priority


def _could_take(v_side: QueueState, used: Sequence[int]) -> bool:
    """The validator's per-chunk test on the victim side's allocation before anything is taken from it."""
    alloc, share, quota = v_side.allocated, v_side.alloc_share, v_side.rec.quota
    return any(alloc[r] > share[r] or (quota[r] != UNLIMITED and alloc[r] > quota[r]) for r in used)


class ReclaimValidator:
    """Fairness rules of one reclaimer against one scenario, on the accounting at the start of its search."""

    def __init__(self, session: Session, job: Job, request: Sequence[int],
                 sides: Sides | None = None, *,
                 existing: bool = True, steady_path: bool = False) -> None:
        """`existing`: the job passed the fair-share entry (the fairness and quota rules apply); `steady_path`: it
        passed the steady fair-share entry (`steady.may_reclaim`)."""
        assert job.queue is not None
        self.existing = existing
        self.steady = steady_path
        self.session = session
        self.job = job
        self.queue = job.queue
        self.request = request
        self.res = main_resource(request)
        self.multiplier = max(1.0, session.config.reclaimer_saturation_multiplier)
        self.contested = [r for r in AXES if request[r] > 0]
        self._sides = sides if sides is not None else {}
        self._viable: dict[tuple[QueueState, tuple[int, ...]], bool] = {}

    def _diverge(self, victim: QueueState) -> tuple[QueueState, QueueState]:
        pair = self._sides.get((self.queue, victim))
        if pair is None:
            pair = self._sides[(self.queue, victim)] = _diverge(self.queue, victim)
        return pair

    def _used(self, vec: Sequence[int]) -> tuple[int, ...]:
        contested = self.contested
        return tuple([r for r in contested if vec[r] > 0] or contested)

    def viable(self, chunk: Chunk) -> bool:
        """Necessary for any scenario holding `chunk`: its victim side is above its share or quota *now* in a
        resource the chunk uses (taking chunks only lowers it, so the validator's test would fail at the latest
        on this chunk). Valid for one search (the accounting does not change during it)."""
        victim = chunk.job.queue
        assert victim is not None
        key = (victim, self._used(chunk.vector(self.session)))
        ok = self._viable.get(key)
        if ok is None:
            r_side, v_side = self._diverge(victim)
            ok = self._viable[key] = self.existing and (_could_take(v_side, key[1])
                                                        or _by_priority(self.session, r_side, v_side))
        if not ok and self.steady:
            r_side, v_side = self._diverge(victim)
            return steady.takes(r_side, r_side.allocated[GPU_AXIS], v_side, v_side.allocated[GPU_AXIS],
                                chunk.vector(self.session)[GPU_AXIS])
        return ok

    def __call__(self, scenario: Sequence[Chunk]) -> list[str] | None:
        alloc: dict[QueueState, list[int]] = {}

        def a(q: QueueState) -> list[int]:
            v = alloc.get(q)
            if v is None:
                v = alloc[q] = list(q.allocated)
            return v

        contested = self.contested
        reasons: list[str] = []
        affected: set[QueueState] = set()
        on_steady: set[QueueState] = set()  # queues taken from on the steady fair-share path
        for chunk in scenario:
            assert chunk.job.queue is not None
            r_side, v_side = self._diverge(chunk.job.queue)
            vec = chunk.vector(self.session)
            used = self._used(vec)
            remaining = a(v_side)
            path_steady = False
            above_share = [r for r in used if remaining[r] > v_side.alloc_share[r]] if self.existing else []
            if not self.existing:
                if not (self.steady and steady.takes(r_side, a(r_side)[GPU_AXIS], v_side, remaining[GPU_AXIS],
                                                     vec[GPU_AXIS])):
                    return None
                reasons.append(_steady_reason(v_side, remaining))
                path_steady = True
            elif above_share:
                r = self.res if self.res in above_share else above_share[0]
                reasons.append(f"queue {v_side.name} uses {amount(remaining, r)}, above its fair share of "
                               f"{amount(v_side.alloc_share, r)}")
            else:
                mine = a(r_side)
                within_quota = all(r_side.rec.quota[r] == UNLIMITED
                                   or mine[r] + self.request[r] <= r_side.rec.quota[r] for r in contested)
                above_quota = [r for r in used if v_side.rec.quota[r] != UNLIMITED
                               and remaining[r] > v_side.rec.quota[r]]
                if within_quota and above_quota:
                    r = self.res if self.res in above_quota else above_quota[0]
                    reasons.append(f"queue {v_side.name} uses {amount(remaining, r)}, above its quota of "
                                   f"{amount(v_side.rec.quota, r)}, while queue {r_side.name} is within its quota")
                elif within_quota and _by_priority(self.session, r_side, v_side):
                    reasons.append(f"queue {r_side.name} (priority {r_side.rec.priority}) is within its quota and "
                                   f"outranks queue {v_side.name} (priority {v_side.rec.priority})")
                elif self.steady and steady.takes(r_side, mine[GPU_AXIS], v_side, remaining[GPU_AXIS], vec[GPU_AXIS]):
                    reasons.append(_steady_reason(v_side, remaining))
                    path_steady = True
                else:
                    return None
            lineage = chunk.job.queue.lineage()
            for q in lineage:
                v = a(q)
                for i in AXES:
                    v[i] -= vec[i]
            (on_steady if path_steady else affected).update(lineage)
        if not self._saturation_ok(a, affected, contested):
            return None
        if on_steady and not steady.saturation_ok(self.queue.lineage(), self._siblings, a, on_steady,
                                                  self.request[GPU_AXIS], self.multiplier):
            return None
        return reasons

    def _siblings(self, q: QueueState) -> list[QueueState]:
        return q.parent.children if q.parent is not None else [
            s for s in self.session.queues.values() if s.parent is None]

    def _saturation_ok(self, a: Callable[[QueueState], list[int]], affected: set[QueueState],
                       contested: list[int]) -> bool:
        """At every level of the reclaimer's ancestry it must end less saturated than each sibling it takes
        from (allocated / fair share), unless it stays within its own fair share."""
        for q in self.queue.lineage():
            siblings = q.parent.children if q.parent is not None else [
                s for s in self.session.queues.values() if s.parent is None]
            takes_from = [s for s in siblings if s is not q and s in affected]
            if not takes_from:
                continue
            mine = a(q)
            for r in contested:
                share = q.fair_share[r]
                after = mine[r] + self.request[r]
                if after <= share:
                    continue  # within its own fair share
                ratio = after / share if share > 0 else float("inf")
                for s in takes_from:
                    theirs = s.fair_share[r]
                    if theirs <= 0:
                        continue
                    if ratio * self.multiplier >= a(s)[r] / theirs - _RATIO_EPS:
                        return False
        return True


def _steady_reason(v_side: QueueState, remaining: Sequence[int]) -> str:
    return (f"queue {v_side.name} uses {amount(remaining, 0)}, above its steady fair share of "
            f"{amount((v_side.steady_keep, 0, 0), 0)}")


class ReclaimRules:
    """The reclaim action's questions, answered by these rules (registered by the proportion plugin)."""

    @staticmethod
    def may_reclaim(session: Session, queue: QueueState, request: Sequence[int]) -> tuple[bool, bool]:
        """(the fair-share entry, the steady fair-share entry) for a job of `queue` asking `request`."""
        return can_reclaim(queue, request), steady.may_reclaim(session, queue, request)

    @staticmethod
    def may_take_from(session: Session, reclaimer: QueueState, victim: QueueState, contested: Sequence[int],
                      sides: Sides) -> bool:
        """The victim queue's side may lose pods now (above its share or quota, outranked in quota, or above its
        steady keep); taking only lowers it, so queues failing this are left out of the search."""
        pair = sides.get((reclaimer, victim))
        if pair is None:
            pair = sides[(reclaimer, victim)] = _diverge(reclaimer, victim)
        v_side = pair[1]
        return (_could_take(v_side, contested) or _by_priority(session, pair[0], v_side)
                or steady.above_keep(session, v_side))

    @staticmethod
    def scenario_validator(session: Session, job: Job, request: Sequence[int], sides: Sides, *, existing: bool,
                           steady_path: bool) -> ReclaimValidator:
        return ReclaimValidator(session, job, request, sides, existing=existing, steady_path=steady_path)
