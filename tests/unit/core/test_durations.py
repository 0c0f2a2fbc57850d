"""Go durations as KAI's fields and annotations carry them."""

from __future__ import annotations

import pytest

from operators.core.durations import delay_error, metadata_delay, parse_delay, parse_go_duration


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0),
                                               ("1.5h", 5400.0), ("300ms", 0.3), (".5s", 0.5), ("-5s", -5.0),
                                               ("+5s", 5.0), ("1m30s", 90.0)])
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1d", "5m ", " 5m", "m", "5mm", "-", "1h-30m", "0x5s"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


def test_a_delay_is_non_negative_and_the_message_shows_the_format() -> None:
    assert parse_delay("0") == 0.0
    assert delay_error("spec.preemptionDelay", "90s") is None
    assert delay_error("spec.preemptionDelay", 90) == (
        'spec.preemptionDelay: must be a non-negative Go duration: numbers with units (ns, us, ms, s, m, h), '
        'e.g. "30s", "5m", "1h30m", got 90')
    with pytest.raises(ValueError, match="negative"):
        parse_delay("-1m")


def test_metadata_delay_reads_the_label_then_the_annotation() -> None:
    key = "kai.scheduler/preemption-delay"
    assert metadata_delay({"labels": {key: "1m"}, "annotations": {key: "2m"}}) == (f"metadata.labels[{key}]", "1m")
    assert metadata_delay({"annotations": {key: "2m"}}) == (f"metadata.annotations[{key}]", "2m")
    assert metadata_delay({"labels": None}) is None
    assert metadata_delay("nonsense") is None
