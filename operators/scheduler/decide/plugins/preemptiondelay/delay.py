"""The preemption delay of a pending workload, as pure functions.

A workload with a preemption delay (PodGroup `spec.preemptionDelay`, else its pods' `kai.scheduler/preemption-delay`)
may make the scheduler evict others (preempt, reclaim, consolidation) only once it has been pending that long.
Allocation into free capacity is never held. The window counts from the later of the PodGroup's creation and the
`kai.scheduler/last-eviction-timestamp` stamped on it, so it re-arms after each eviction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from operators.core.times import rfc3339

REASON = "PreemptionDelay"


@dataclass(frozen=True, slots=True)
class DelayVerdict:
    may_disrupt: bool
    remaining: float  # seconds until it may (0 once it may)
    delay: float  # seconds; 0 when the workload has none
    since: float  # epoch seconds the window counts from

    @property
    def until(self) -> float:
        """Epoch seconds from which it may disrupt."""
        return self.since + self.delay

    @property
    def message(self) -> str:
        """The explanation while held ('' once it may disrupt). It names the moment the window ends rather than
        a countdown, so that it stays the same from cycle to cycle (the PodGroup and its pods are not rewritten
        every second)."""
        return "" if self.may_disrupt else hold_message(self)


def effective_delay(podgroup_delay: float | None, pod_delays: Iterable[float | None] = ()) -> float:
    """The PodGroup's own delay, else the largest its pods carry; 0 for none."""
    if podgroup_delay is not None:
        return max(podgroup_delay, 0.0)
    return max((d for d in pod_delays if d is not None and d > 0), default=0.0)


def verdict(delay: float, created: float, last_eviction: float, now: float) -> DelayVerdict:
    """May a workload with `delay` (seconds), created at `created` and last stamped `last_eviction` (epoch seconds,
    0 for never), cause evictions at `now`?"""
    since = max(created, last_eviction)
    if delay <= 0:
        return DelayVerdict(True, 0.0, 0.0, since)
    remaining = since + delay - now
    if remaining <= 0:
        return DelayVerdict(True, 0.0, delay, since)
    return DelayVerdict(False, remaining, delay, since)


def hold_message(v: DelayVerdict) -> str:
    return (f"waiting until {rfc3339(v.until)} before evicting other workloads (preemption delay "
            f"{format_duration(v.delay)} from {rfc3339(v.since)}, its creation or last eviction); it may still use "
            "free resources")


def format_duration(seconds: float) -> str:
    """Seconds as a Go duration ("45s", "5m", "1h30m", "1m30.5s")."""
    if seconds <= 0:
        return "0s"
    whole = int(seconds)
    fraction = seconds - whole
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if secs or fraction or not out:
        out += f"{secs + fraction:g}s"
    return out
