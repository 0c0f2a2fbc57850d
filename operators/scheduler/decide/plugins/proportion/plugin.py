"""proportion: hierarchical fair share (DRF over gpu/cpu/memory, arguments `kValue` and
`relcaimerSaturationMultiplier`), the queue order of every action, and the capacity checks: a job may not take
a queue over its limit at any level (OverLimit), and a non-preemptible job may not take it over its quota
(NonPreemptibleOverQuota). The fair shares are computed at session open; reclaim's fairness rules use them."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from operators.core import keys
from operators.core.units import MS_PER_SECOND
from operators.scheduler.decide import explain
from operators.scheduler.decide.config import parse_bool_argument
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job, QueueState, Task
from operators.scheduler.decide.plugins.proportion.fairshare import QueueSpec, allocatable_share, fair_shares
from operators.scheduler.decide.plugins.proportion.queueorder import queue_before, queue_facts
from operators.scheduler.decide.plugins.proportion.reclaimable import ReclaimRules
from operators.scheduler.decide.plugins.proportion.steady import steady_shares
from operators.scheduler.decide.plugins.proportion.usage import NO_USAGE, queue_usage
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.units import AXES, GPU_AXIS, as_vector

RECLAIM_RULES = ReclaimRules()  # stateless: the action keeps its own caches


class Proportion(Plugin):
    name = "proportion"
    default_priority = 800
    required = True
    argument_names = frozenset({"kValue", "relcaimerSaturationMultiplier", "queuePriorityInQuotaReclaim",
                                "steadyFairShareReclaim"})

    # The plain functions (called on every job-tree pop).
    queue_facts = staticmethod(queue_facts)
    queue_before = staticmethod(queue_before)

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, queue_order=self, capacity=self, reclaim_rules=RECLAIM_RULES)

    @staticmethod
    def on_session_open(session: Session) -> None:
        """Every queue's fair share (hierarchical, DRF) of the session's total, and its allocatable share."""
        started = time.perf_counter()  # this OnSessionOpen's time, for metrics only
        total = session.total
        usage = queue_usage(session.snapshot)  # time-based fair share; empty without a usage database
        specs = {q.name: QueueSpec(q.name, q.parent.name if q.parent else "", q.rec.quota, q.rec.limit,
                                   q.rec.weight, as_vector(q.request), q.rec.priority,
                                   q.rec.created, q.rec.uid, usage.get(q.name, NO_USAGE))
                 for q in session.queues.values()}
        shares = fair_shares(specs, total, session.config.k_value,
                             priority_ordered=session.config.queue_priority_in_quota_reclaim)
        for q in session.queues.values():
            q.fair_share = shares[q.name]
            q.alloc_share = as_vector([allocatable_share(*per_axis) for per_axis
                                       in zip(q.rec.quota, q.fair_share, q.rec.limit, total, strict=True)])
        if session.config.steady_fair_share_reclaim:  # one more division, only when enabled
            steady = steady_shares(specs, total, session.config.k_value,
                                   priority_ordered=session.config.queue_priority_in_quota_reclaim)
            for q in session.queues.values():
                q.steady_share = steady[q.name][GPU_AXIS]  # steadyFairShareReclaim is about GPUs only
                q.steady_keep = allocatable_share(q.rec.quota[GPU_AXIS], q.steady_share, q.rec.limit[GPU_AXIS],
                                                  total[GPU_AXIS])
        session.decisions.timings["plugin/proportion"] = (time.perf_counter() - started) * MS_PER_SECOND

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        for arg in ("kValue", "relcaimerSaturationMultiplier"):
            if arguments.get(arg) is not None:
                try:
                    float(arguments[arg])
                except (TypeError, ValueError):
                    raise ValueError(f"proportion argument {arg} must be a number, got {arguments[arg]!r}") from None
        for arg in ("queuePriorityInQuotaReclaim", "steadyFairShareReclaim"):
            if arguments.get(arg) is not None:
                parse_bool_argument(arg, arguments[arg])

    @staticmethod
    def capacity_error(session: Session, job: Job, tasks: Iterable[Task],
                       freed: dict[QueueState, list[int]] | None) -> explain.JobError | None:
        """OverLimit / NonPreemptibleOverQuota at the leaf queue and every ancestor, on the current state.

        `freed` (per queue: what victims could still release under it) lowers the allocation the limits are
        checked against; victims are preemptible, so they never make room under a non-preemptible quota.
        """
        assert job.queue is not None
        if job.preemptible and session.unlimited(job.queue):
            return None  # no limit anywhere up the hierarchy, and the quota check is for non-preemptible jobs
        req = session.job_request(tasks)
        lineage = job.queue.lineage()
        for q in lineage:
            minus = freed.get(q) if freed is not None else None
            for r in AXES:
                limit = q.rec.limit[r]
                if limit == UNLIMITED or req[r] <= 0:
                    continue
                if q.allocated[r] - (minus[r] if minus is not None else 0) + req[r] > limit:
                    msg = explain.over_limit(q.rec.title, r, limit, q.allocated[r], req[r])
                    return explain.JobError(keys.REASON_OVER_LIMIT, (msg,), _details(q, job, req))
        if not job.preemptible:
            for q in lineage:
                for r in AXES:
                    quota = q.rec.quota[r]
                    if quota != UNLIMITED and req[r] > 0 and q.allocated_np[r] + req[r] > quota:
                        msg = explain.non_preemptible_over_quota(q.rec.title, r, quota, q.allocated_np[r], req[r])
                        return explain.JobError(keys.REASON_NON_PREEMPTIBLE_OVER_QUOTA, (msg,),
                                                _details(q, job, req))
        return None


def _details(q: QueueState, job: Job, req: list[int]) -> dict[str, object]:
    np_req = [0, 0, 0] if job.preemptible else req
    return explain.queue_details(q.name, q.request, q.rec.quota, q.allocated, q.allocated_np, q.rec.limit,
                                 req, np_req)


PLUGIN = Proportion
