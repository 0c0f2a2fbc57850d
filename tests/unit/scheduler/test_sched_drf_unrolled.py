"""proportion's queue order takes each queue's dominant share from `_drf`, `dominant_share()` unrolled with its
max() written out as comparisons: on random amounts (negative ones included: a queue's allocation minus a request
taken back) and shares (zero and negative shares take the penalty rule), it is the largest of the three ratios and
0.0, the same float, and the queue order it feeds picks the same way."""

from __future__ import annotations

import math
import random

from operators.scheduler.decide.plugins.proportion.queueorder import _drf
from operators.scheduler.decide.units import GPU


def _definition(x: tuple[int, int, int], s: tuple[int, int, int]) -> float:
    ratios = [x[0] / s[0] if s[0] > 0 else x[0] / GPU * 1000.0,
              x[1] / s[1] if s[1] > 0 else x[1] * 1000.0,
              x[2] / s[2] if s[2] > 0 else x[2] * 1000.0]
    return max(*ratios, 0.0)


def test_drf_is_the_largest_ratio_and_never_below_zero() -> None:
    rnd = random.Random(26)
    largest = [0, 0, 0, 0]
    for _ in range(20000):
        sign = rnd.choice([-1, 1, 1]) if rnd.random() < 0.8 else -1  # all three negative now and then
        x = (sign * rnd.randint(0, 16) * GPU // rnd.choice([1, 2, 4]), sign * rnd.randint(0, 64000),
             sign * rnd.randint(0, 64 << 30))
        s = (rnd.choice([-GPU, 0, GPU, 8 * GPU, 16 * GPU]), rnd.choice([-1, 0, 8000, 64000, 128000]),
             rnd.choice([0, 64 << 30, 512 << 30]))
        got, want = _drf(*x, *s), _definition(x, s)
        assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want), (x, s)
        ratios = [want == r for r in (x[0] / s[0] if s[0] > 0 else x[0] / GPU * 1000.0,
                                      x[1] / s[1] if s[1] > 0 else x[1] * 1000.0,
                                      x[2] / s[2] if s[2] > 0 else x[2] * 1000.0, 0.0)]
        if ratios.count(True) == 1:
            largest[ratios.index(True)] += 1
    assert all(largest)  # each of the four decided alone many times
