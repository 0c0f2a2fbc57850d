"""Fair-share division (the algorithm and a worked hierarchy) and DRF helpers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduler.decide.plugins.proportion.fairshare import (
    QueueSpec,
    ShareInput,
    allocatable_share,
    divide,
    dominant_share,
    fair_shares,
)
from operators.scheduler.decide.units import GPU


def q(name: str, deserved: float, weight: float, request: float, priority: int = 100, created: float = 0,
      limit: float = -1) -> ShareInput:
    return ShareInput(name, deserved, limit, weight, request, priority, created, name)


@pytest.mark.parametrize(("amount", "queues", "expected"), [
    # 2.4 top level
    (20, [q("A", 8, 1, 16, created=1), q("B", 4, 2, 12, created=2), q("C", 0, 1, 10, 50, created=3)],
     {"A": 10, "B": 9, "C": 1}),
    # without C the leftover unit goes to the larger fraction
    (20, [q("A", 8, 1, 16, created=1), q("B", 4, 2, 12, created=2)], {"A": 11, "B": 9}),
    # 2.4 inside A: a2 satisfied in round 1 triggers round 2
    (10, [q("a1", 4, 1, 10, created=1), q("a2", 2, 1, 3, created=2)], {"a1": 7, "a2": 3}),
    # 2.4 inside B: equal fractions, older queue gets the remainder
    (9, [q("b1", 4, 1, 7, created=1), q("b2", 0, 1, 5, created=2)], {"b1": 7, "b2": 2}),
    # fairshare-simulator anchor: weights 3:1
    (100, [q("x", 10, 3, 1000, created=1), q("y", 10, 1, 1000, created=2)], {"x": 70, "y": 30}),
    # deserved is granted even beyond capacity (over-subscription), nothing for over-quota
    (10, [q("x", 8, 1, 20, created=1), q("y", 8, 1, 20, created=2)], {"x": 8, "y": 8}),
    # weight 0 gets no over-quota share
    (10, [q("x", 0, 0, 20, created=1), q("y", 0, 1, 20, created=2)], {"x": 0, "y": 10}),
    # deserved -1 = the whole amount, capped by request
    (10, [q("x", -1, 1, 4, created=1), q("y", 0, 1, 20, created=2)], {"x": 4, "y": 6}),
    # limit caps requestable
    (10, [q("x", 0, 1, 20, created=1, limit=3), q("y", 0, 1, 20, created=2)], {"x": 3, "y": 7}),
    # limit 0 blocks the resource
    (10, [q("x", 5, 1, 20, created=1, limit=0), q("y", 0, 1, 20, created=2)], {"x": 0, "y": 10}),
    # priorities: the higher bucket is served first
    (5, [q("hi", 0, 1, 3, 200, created=2), q("lo", 0, 1, 10, 100, created=1)], {"hi": 3, "lo": 2}),
])
def test_divide_examples(amount: float, queues: list[ShareInput], expected: dict[str, float]) -> None:
    assert divide(amount, queues) == pytest.approx(expected)


def test_hierarchy_worked_example() -> None:
    g = GPU  # GPU amounts are in micro-GPUs; over-quota rounds hand out whole GPUs
    specs = {
        "A": QueueSpec("A", "", (8 * g, 0, 0), (-1, -1, -1), (1, 0, 0), (16 * g, 0, 0), 100, 1),
        "B": QueueSpec("B", "", (4 * g, 0, 0), (-1, -1, -1), (2, 0, 0), (12 * g, 0, 0), 100, 2),
        "C": QueueSpec("C", "", (0, 0, 0), (-1, -1, -1), (1, 0, 0), (10 * g, 0, 0), 50, 3),
        "a1": QueueSpec("a1", "A", (4 * g, 0, 0), (-1, -1, -1), (1, 0, 0), (10 * g, 0, 0), 100, 4),
        "a2": QueueSpec("a2", "A", (2 * g, 0, 0), (-1, -1, -1), (1, 0, 0), (3 * g, 0, 0), 100, 5),
        "b1": QueueSpec("b1", "B", (4 * g, 0, 0), (-1, -1, -1), (1, 0, 0), (7 * g, 0, 0), 100, 6),
        "b2": QueueSpec("b2", "B", (0, 0, 0), (-1, -1, -1), (1, 0, 0), (5 * g, 0, 0), 100, 7),
    }
    shares = {name: v[0] for name, v in fair_shares(specs, (20 * g, 0, 0)).items()}
    assert shares == {"A": 10 * g, "B": 9 * g, "C": 1 * g, "a1": 7 * g, "a2": 3 * g, "b1": 7 * g, "b2": 2 * g}


def test_resources_are_divided_independently() -> None:
    specs = {
        "x": QueueSpec("x", "", (0, 1000, 0), (-1, -1, -1), (1, 1, 1), (4 * GPU, 500, 10), 100, 1),
        "y": QueueSpec("y", "", (0, 0, 0), (-1, -1, -1), (1, 1, 1), (4 * GPU, 8000, 10), 100, 2),
    }
    shares = fair_shares(specs, (6 * GPU, 4000, 20))
    assert shares["x"] == (3 * GPU, 500, 10)
    assert shares["y"] == (3 * GPU, 3500, 10)


def test_fractional_gpu_requests_are_shared_exactly() -> None:
    # Requests of 0.1 + 0.2 GPU and a 0.3 GPU quota: integer micro-GPUs, so the quota covers the requests
    # exactly (in float GPUs 0.1 + 0.2 > 0.3) and the leftover GPUs go to the other queue to the last micro-GPU.
    specs = {
        "x": QueueSpec("x", "", (300_000, 0, 0), (-1, -1, -1), (1, 0, 0), (100_000 + 200_000, 0, 0), 100, 1),
        "y": QueueSpec("y", "", (0, 0, 0), (-1, -1, -1), (1, 0, 0), (10 * GPU, 0, 0), 100, 2),
    }
    shares = fair_shares(specs, (4 * GPU, 0, 0))
    assert shares["x"][0] == 300_000
    assert shares["y"][0] == 3_700_000
    assert shares["x"][0] + shares["y"][0] == 4 * GPU


share_inputs = st.lists(st.tuples(
    st.sampled_from([-1.0, 0.0, 1.0, 2.0, 5.0]),  # deserved
    st.sampled_from([-1.0, 0.0, 2.0, 4.0, 10.0]),  # limit
    st.sampled_from([0.0, 1.0, 2.0, 3.0]),  # weight
    st.integers(0, 30),  # request
    st.sampled_from([50, 100]),  # priority
), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(amount=st.integers(0, 60), raw=share_inputs)
def test_division_invariants(amount: int, raw: list[tuple[float, float, float, int, int]]) -> None:
    queues = [ShareInput(f"q{i}", d, lim, w, float(r), p, float(i), f"q{i}") for i, (d, lim, w, r, p) in enumerate(raw)]
    shares = divide(float(amount), queues)
    for qi in queues:
        s = shares[qi.name]
        assert s >= 0
        if qi.limit != -1:
            assert s <= qi.limit + 1e-9  # never above the limit
        assert s <= qi.request + 1e-9  # never above the request
    deserved_sum = sum(min(amount if qi.deserved == -1 else qi.deserved, qi.requestable) for qi in queues)
    if deserved_sum <= amount:
        assert sum(shares.values()) <= amount + 1e-9  # within capacity when quotas fit
        # work conserving: if some queue still wants more and has weight, nothing is left over
        if any(qi.weight > 0 and qi.requestable - shares[qi.name] >= 1 for qi in queues):
            assert sum(shares.values()) == pytest.approx(amount, abs=1e-9) or all(
                qi.requestable - shares[qi.name] < 1e-9 or qi.weight == 0 for qi in queues)


def test_allocatable_share_and_drf() -> None:
    assert allocatable_share(4, 6, -1, 100) == 6
    assert allocatable_share(4, 6, 5, 100) == 5
    assert allocatable_share(-1, 6, -1, 100) == 100
    assert allocatable_share(-1, 6, 7, 100) == 7
    assert dominant_share([2, 1000, 0], [4, 4000, 10]) == 0.5
    # A zero allocatable share is penalised by the allocation in whole units (GPUs, millicores, bytes) x 1000.
    assert dominant_share([GPU, 0, 0], [0, 10, 10]) == 1000.0
    assert dominant_share([0, 5, 0], [10, 0, 10]) == 5000.0
