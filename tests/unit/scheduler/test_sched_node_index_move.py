"""The node index's in-place move of one entry of a sorted (key, index) list: the list it leaves is the one removing
the old entry and inserting the new one leaves, whatever the distance, direction, ties of keys or list ends."""

from __future__ import annotations

import random
from bisect import bisect_left, insort

from operators.scheduler.decide.placement.scoring import _move


def reference(lst: list[tuple[float, int]], old: float, new: float, idx: int) -> None:
    pos = bisect_left(lst, (old, idx))
    if pos < len(lst) and lst[pos] == (old, idx):
        del lst[pos]
    insort(lst, (new, idx))


def test_move_equals_remove_then_insert() -> None:
    moved_far = 0
    for seed in range(300):
        rng = random.Random(seed)
        n = rng.randrange(1, 40)
        # Few distinct keys (free GPUs in halves, as binpack keys are), so many entries tie on the key.
        keys = {i: rng.randrange(0, 17) / 2 for i in range(n)}
        lst = sorted((k, i) for i, k in keys.items())
        for _ in range(60):
            idx = rng.randrange(n)
            old, new = keys[idx], rng.randrange(0, 17) / 2
            if new == old:
                continue
            want = list(lst)
            reference(want, old, new, idx)
            moved_far += abs(want.index((new, idx)) - lst.index((old, idx))) > 1
            _move(lst, old, new, idx)
            assert lst == want, (seed, old, new, idx)
            keys[idx] = new
    assert moved_far > 1000  # the moves cross many entries, not just neighbours


def test_move_of_an_absent_entry_inserts_it() -> None:
    lst = [(1.0, 0), (2.0, 1), (3.0, 3)]
    _move(lst, 2.0, 0.5, 2)  # (2.0, 2) is not there: only the new entry goes in, as remove-then-insert does
    assert lst == [(0.5, 2), (1.0, 0), (2.0, 1), (3.0, 3)]
    _move(lst, 9.0, 4.0, 5)
    assert lst == [(0.5, 2), (1.0, 0), (2.0, 1), (3.0, 3), (4.0, 5)]
