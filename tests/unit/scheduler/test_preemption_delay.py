"""The preemption delay window: from the PodGroup's creation or its last eviction stamp, re-armed by each."""

from __future__ import annotations

import pytest

from operators.core.durations import parse_go_duration
from operators.scheduler.decide.plugins.preemptiondelay.delay import effective_delay, format_duration, verdict
from operators.scheduler.decide.records import parse_time, pod_record, podgroup_record

T0 = parse_time("2026-01-01T00:00:00Z")


def test_no_delay_may_always_disrupt() -> None:
    v = verdict(0.0, T0, 0.0, T0)
    assert v.may_disrupt and v.remaining == 0 and v.message == ""


def test_the_window_counts_from_creation() -> None:
    held = verdict(60.0, T0, 0.0, T0 + 15)
    assert not held.may_disrupt and held.remaining == 45
    # The moment it ends, not a countdown: the same text every cycle.
    assert held.message == ("waiting until 2026-01-01T00:01:00Z before evicting other workloads (preemption delay 1m "
                            "from 2026-01-01T00:00:00Z, its creation or last eviction); it may still use free "
                            "resources")
    assert verdict(60.0, T0, 0.0, T0 + 16).message == held.message
    assert verdict(60.0, T0, 0.0, T0 + 60).may_disrupt
    assert verdict(60.0, T0, 0.0, T0 + 61).may_disrupt


def test_the_last_eviction_re_arms_the_window() -> None:
    # Created long ago, but it evicted 10s ago: another 50s to wait.
    held = verdict(60.0, T0, T0 + 1000, T0 + 1010)
    assert not held.may_disrupt and held.remaining == 50 and held.since == T0 + 1000
    assert verdict(60.0, T0, T0 + 1000, T0 + 1060).may_disrupt
    # A stamp older than the creation (a recreated PodGroup keeping an annotation) does not shorten it.
    assert not verdict(60.0, T0 + 500, T0, T0 + 530).may_disrupt


def test_the_podgroup_delay_wins_over_its_pods() -> None:
    assert effective_delay(30.0, [300.0]) == 30.0
    assert effective_delay(0.0, [300.0]) == 0.0
    assert effective_delay(None, [None, 20.0, 90.0]) == 90.0
    assert effective_delay(None, []) == 0.0


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (45, "45s"), (60, "1m"), (90, "1m30s"), (3600, "1h"),
                                               (5400, "1h30m"), (1.5, "1.5s")])
def test_format_duration_is_a_go_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_go_duration(text) == seconds


def test_records_carry_the_delay_and_the_stamp() -> None:
    rec = podgroup_record({"metadata": {"name": "pg", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
                                        "annotations": {"kai.scheduler/last-eviction-timestamp":
                                                        "2026-01-01T00:05:00Z"}},
                           "spec": {"preemptionDelay": "2m"}})
    assert rec.preemption_delay == 120.0 and rec.last_eviction == T0 + 300
    assert podgroup_record({"metadata": {"name": "x"}, "spec": {"preemptionDelay": "soon"}}).preemption_delay is None
    labelled = pod_record({"metadata": {"name": "p", "labels": {"kai.scheduler/preemption-delay": "30s"},
                                        "annotations": {"kai.scheduler/preemption-delay": "5m"}}})
    assert labelled.preemption_delay == 30.0  # the label (KAI's form) first
    annotated = pod_record({"metadata": {"name": "p", "annotations": {"kai.scheduler/preemption-delay": "5m"}}})
    assert annotated.preemption_delay == 300.0
    assert pod_record({"metadata": {"name": "p"}}).preemption_delay is None
