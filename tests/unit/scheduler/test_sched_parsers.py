"""The scheduler's durations, booleans and times go through the core helpers: every spelling its own parsers took
before (Go durations, plain seconds, any-case booleans and yes/no, RFC3339 with any offset or fraction) still
reads the same."""

from __future__ import annotations

from datetime import datetime

import pytest

from operators.core.durations import parse_seconds
from operators.scheduler.decide.config import SHARD_ARGS
from operators.scheduler.decide.plugins.podaffinity.plugin import PodAffinity
from operators.scheduler.decide.records import parse_time


@pytest.mark.parametrize(("value", "seconds"), [
    (30, 30.0), (1.5, 1.5), ("30", 30.0), ("1.5", 1.5), (" 30s ", 30.0), ("1s", 1.0), ("1m30s", 90.0),
    ("-1s", -1.0), ("+5s", 5.0), ("500ms", 0.5), ("1.5h", 5400.0), ("2h45m", 9900.0), ("0", 0.0),
    ("250us", 0.00025), (".5s", 0.5),
])
def test_durations_in_go_form_or_plain_seconds(value: str | float, seconds: float) -> None:
    assert parse_seconds(value) == pytest.approx(seconds)
    assert SHARD_ARGS["schedule-period"][1](value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "s", "1x", "1 s", "1m-30s"])
def test_what_is_no_duration_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_seconds(value)


@pytest.mark.parametrize(("value", "flag"), [
    ("true", True), ("TRUE", True), ("True", True), ("tRuE", True), (True, True), ("1", True), (" yes ", True),
    ("false", False), ("False", False), ("0", False), ("No", False), (False, False),
])
def test_boolean_settings_in_any_case(value: object, flag: bool) -> None:
    assert SHARD_ARGS["detailed-fit-errors"][1](value) is flag
    assert PodAffinity({"normalize": value}).normalize is flag


def test_a_boolean_setting_that_is_no_boolean_is_refused() -> None:
    with pytest.raises(ValueError, match="normalize must be true or false"):
        PodAffinity({"normalize": "maybe"})


@pytest.mark.parametrize("text", ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.123456Z", "2026-01-02T05:04:05+02:00",
                                  "2026-01-01T23:04:05-04:00"])
def test_rfc3339_times_with_any_offset_or_fraction(text: str) -> None:
    assert parse_time(text) == datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize("value", [None, "", "yesterday", "2026-13-01T00:00:00Z", 5])
def test_an_absent_or_malformed_time_is_zero(value: object) -> None:
    assert parse_time(value) == 0.0
