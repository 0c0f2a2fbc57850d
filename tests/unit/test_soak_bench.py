"""bench/soak_bench.py's pure parts: /proc/<pid>/status read in MiB, the least-squares slope per hour, the second
half of a run."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t  812345 kB
VmHWM:\t  143360 kB
VmRSS:\t  122880 kB
RssAnon:\t   99328 kB
RssFile:\t   23552 kB
RssShmem:\t       0 kB
Threads:\t3
"""


@pytest.fixture(scope="module")
def soak() -> Any:
    saved = list(sys.path)  # the module puts bench/ and the checkout first on the path: restored after
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("soak_bench")
    finally:
        sys.path[:] = saved


def test_status_fields_in_mib(soak: Any) -> None:
    assert soak.parse_status(STATUS) == {"VmHWM": 140.0, "VmRSS": 120.0, "RssAnon": 97.0, "RssFile": 23.0}
    assert soak.parse_status(STATUS, ("VmPeak",)) == {"VmPeak": 812345 / 1024}
    # A kernel thread's status has no memory lines.
    assert soak.parse_status("Name:\tkthreadd\nState:\tS (sleeping)\n") == {}


def test_slope_is_per_hour_and_least_squares(soak: Any) -> None:
    # 1 MiB a minute is 60 MiB an hour, whatever the offset.
    times = [0.0, 60.0, 120.0, 180.0]
    assert soak.slope_per_hour(times, [100.0, 101.0, 102.0, 103.0]) == pytest.approx(60.0)
    # The fit, not first-to-last: one high point in the middle does not change the slope of a flat series.
    assert soak.slope_per_hour([0.0, 30.0, 60.0, 90.0, 120.0], [5.0, 5.0, 9.0, 5.0, 5.0]) == pytest.approx(0.0)
    # Noise around a falling line: the fit recovers it (-2 MiB per 600 s = -12 MiB/h).
    noisy = [50.0 - 2 * t / 600 + (0.5 if i % 2 else -0.5) for i, t in enumerate(range(0, 3600, 300))]
    assert soak.slope_per_hour([float(t) for t in range(0, 3600, 300)], noisy) == pytest.approx(-12.0, abs=0.5)
    assert soak.slope_per_hour([10.0], [1.0]) == 0.0
    assert soak.slope_per_hour([10.0, 10.0], [1.0, 2.0]) == 0.0


def test_second_half_starts_at_the_middle_of_the_span(soak: Any) -> None:
    times = [100.0, 130.0, 160.0, 190.0, 220.0]
    assert soak.second_half(times, [1.0, 2.0, 3.0, 4.0, 5.0]) == ([160.0, 190.0, 220.0], [3.0, 4.0, 5.0])
    assert soak.second_half([], []) == ([], [])
