from __future__ import annotations

import pytest

from operators.core.times import parse_rfc3339, rfc3339


def test_rfc3339_is_utc_whole_seconds_with_z() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1700000000.999) == "2023-11-14T22:13:20Z"  # the fraction dropped, never rounded up
    assert rfc3339().endswith("Z") and len(rfc3339()) == 20


@pytest.mark.parametrize(("text", "epoch"), [
    ("2023-11-14T22:13:20Z", 1700000000.0),
    ("2023-11-14T23:13:20+01:00", 1700000000.0),
    ("2023-11-14T22:13:20.250000Z", 1700000000.25),  # metav1.MicroTime
])
def test_parse_rfc3339_reads_any_offset_and_fraction(text: str, epoch: float) -> None:
    assert parse_rfc3339(text) == epoch


@pytest.mark.parametrize("value", [None, "", 17, "2023-11-14", "2023-11-14 22:13:20Z", "2023-11-14T22:13:20",
                                   "2023-13-14T22:13:20Z", "yesterday"])
def test_parse_rfc3339_refuses_what_is_not_rfc3339(value: object) -> None:
    assert parse_rfc3339(value) is None


def test_format_and_parse_round_trip() -> None:
    assert parse_rfc3339(rfc3339(1234567890)) == 1234567890.0
