"""Time-based fair share (KAI v0.10+): each queue's historical usage, as the proportion plugin weighs it. Pure.

A queue's usage of a resource is its allocation summed over the window at the query resolution, each step
decayed by `0.5 ^ (age / halfLife)`, divided by the cluster capacity summed and decayed the same way: 0.24 means
the queue used 24% of what the cluster could give over the window. Prometheus computes these sums in the live
scheduler (`sum_over_time((metric * decay)[window:resolution])`); `windowed_sum` is the same arithmetic over
samples, for `kai simulate` and the tests.

Its effect (in `fairshare._over_quota`): among the unsatisfied siblings of a priority, a queue's share of each
over-quota round is `max(0, w + k * (w - usage))` normalised over them, with `w` its over-quota weight over
theirs and `k` the proportion plugin's `kValue`. No usage gives `(1 + k) w`: plain fair share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from operators.core.durations import parse_seconds
from operators.scheduler.decide.snapshot import Snapshot
from operators.scheduler.decide.units import AXES
from operators.scheduler.decide.usageconfig import UsageDBSettings

Usage = tuple[float, float, float]  # (gpu, cpu, memory), each a fraction of the cluster's capacity over the window
NO_USAGE: Usage = (0.0, 0.0, 0.0)
LOOKBACK = 300.0  # PromQL: a step sees the latest sample at most 5 minutes old


def decay(age: float, half_life: float | None) -> float:
    """Weight of a usage `age` seconds old: 0.5^(age / half_life); 1 without a half-life."""
    return 1.0 if not half_life else 0.5 ** (age / half_life)


def window_start(now: float, window: float, tumbling_start: float | None = None) -> float:
    """Sliding: `window` before now. Tumbling: the last reset before now, every `window` from `tumbling_start`
    (KAI: a reset at exactly now still counts the window it ends; a start in the future gives an empty window)."""
    if tumbling_start is None:
        return now - window
    if tumbling_start >= now:
        return now
    return tumbling_start + max(0, math.ceil((now - tumbling_start) / window) - 1) * window


def steps(now: float, start: float, resolution: float) -> list[float]:
    """A subquery's evaluation times, newest first: the multiples of `resolution` in (start, now]."""
    out: list[float] = []
    step = (now // resolution) * resolution
    while step > start:
        out.append(step)
        step -= resolution
    return out


def windowed_sum(samples: Sequence[tuple[float, float]], now: float, start: float, resolution: float,
                 half_life: float | None = None) -> float:
    """PromQL's `sum_over_time((x * decay)[now-start : resolution])` over (time, value) samples: one step at every
    multiple of `resolution` in (start, now], each taking the latest sample at most `LOOKBACK` old."""
    ordered = sorted(samples)
    total = 0.0
    i = len(ordered) - 1
    for t in steps(now, start, resolution):  # newest first; the sample pointer only moves back
        while i >= 0 and ordered[i][0] > t:
            i -= 1
        if i >= 0 and t - ordered[i][0] <= LOOKBACK:
            total += ordered[i][1] * decay(now - t, half_life)
    return total


def normalized(allocated: Mapping[str, Sequence[float]], capacity: Sequence[float]) -> dict[str, Usage]:
    """Per queue: windowed allocation / windowed capacity, per resource; a resource without capacity counts 1
    (KAI's fallback), so its usage stays the raw sum."""
    caps = [c if c > 0 else 1.0 for c in capacity]
    return {q: (v[0] / caps[0], v[1] / caps[1], v[2] / caps[2]) for q, v in allocated.items()}


def queue_usage(snapshot: Snapshot) -> dict[str, Usage]:
    """The historical usage the snapshot carries (from the usage database, or a simulation's input)."""
    return dict(snapshot.queue_usage)


def usage_pairs(usage: Mapping[str, Iterable[float]]) -> tuple[tuple[str, Usage], ...]:
    """A usage map in the snapshot's form (sorted pairs; a missing resource is 0)."""
    out = []
    for name, values in sorted(usage.items()):
        v = [*values, 0.0, 0.0, 0.0][:3]
        out.append((name, (float(v[0]), float(v[1]), float(v[2]))))
    return tuple(out)


# `kai simulate` input: a `QueueUsage` document (not an API kind) gives the usage database's answer, either as
# fractions (`usage: {queue: {gpu: 0.5}}`) or as a history to window and decay with the shard's usageParams:
# `history: {capacity: {gpu: 8}, queues: {queue: [{from: 2h, to: 1h, gpu: 8}]}}` (durations before now).
USAGE_KIND = "QueueUsage"
_RESOURCES = ("gpu", "cpu", "memory")


def usage_from_documents(objects: Iterable[Mapping[str, Any]], settings: UsageDBSettings | None,
                         now: float) -> dict[str, Usage]:
    cfg = settings or UsageDBSettings()
    out: dict[str, Usage] = {}
    for doc in objects:
        if doc.get("kind") != USAGE_KIND:
            continue
        for name, values in (doc.get("usage") or {}).items():
            out[str(name)] = _vector(values)
        history = doc.get("history") or {}
        if history.get("queues"):
            capacity = _vector(history.get("capacity") or {})
            start = window_start(now, cfg.window_size, cfg.tumbling_start)
            sums = {str(name): _history_sum(intervals, now, start, cfg) for name, intervals
                    in history["queues"].items()}
            cap = _history_sum([{"from": f"{now - start}s", **dict(zip(_RESOURCES, capacity, strict=True))}],
                               now, start, cfg)
            out.update(normalized(sums, cap))
    return out


def _vector(values: Mapping[str, Any]) -> Usage:
    return (float(values.get("gpu", 0)), float(values.get("cpu", 0)), float(values.get("memory", 0)))


def _history_sum(intervals: Sequence[Mapping[str, Any]], now: float, start: float,
                 cfg: UsageDBSettings) -> tuple[float, float, float]:
    """Per resource: the windowed, decayed sum of a step function given as intervals (from, to] before now."""
    spans = [(now - parse_seconds(i.get("from", "0s")), now - parse_seconds(i.get("to", "0s")), _vector(i))
             for i in intervals]
    times = steps(now, start, cfg.query_resolution)
    out = []
    for r in AXES:
        samples = [(t, sum(v[r] for a, b, v in spans if a < t <= b)) for t in times]
        out.append(windowed_sum(samples, now, start, cfg.query_resolution, cfg.half_life))
    return out[0], out[1], out[2]
