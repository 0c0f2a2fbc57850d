"""Fuzzing Queue validation: wrong types, negative and huge quotas, non-finite numbers, parent cycles.

Every problem is refused with a message that names its field; a valid queue is accepted; nothing raises.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.core.api.queue_validation import RESOURCES_REQUIRED, quota_warnings, validate_queue

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)
NUMBERS = st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.sampled_from([-1, 0, 1, -2, 10**400]),
                    st.floats(allow_nan=True, allow_infinity=True))
VALUES = NUMBERS | st.sampled_from(["NaN", "Infinity", "1e309", "-1", "1", "", "two"]) | st.booleans() | JSON
SETTINGS = st.fixed_dictionaries({}, optional={"quota": VALUES, "limit": VALUES, "overQuotaWeight": VALUES}) | JSON
RESOURCES = st.fixed_dictionaries({}, optional={"cpu": SETTINGS, "gpu": SETTINGS, "memory": SETTINGS}) | JSON
DURATIONS = st.sampled_from(["20s", "5m", "1h30m", "1.5h", "0", "-5s", "5", "s", "", "1d", "NaN", "1e3s"]) | JSON
NAMES = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def queues(draw: st.DrawFn) -> dict[str, Any]:
    spec = draw(st.fixed_dictionaries({}, optional={
        "resources": RESOURCES, "priority": NUMBERS | JSON, "parentQueue": NAMES | JSON,
        "preemptMinRuntime": DURATIONS, "reclaimMinRuntime": DURATIONS}) | JSON)
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": draw(NAMES)}, "spec": spec}


FIELD_PREFIXES = ("spec.resources", "spec.priority", "spec.preemptMinRuntime", "spec.reclaimMinRuntime",
                  "spec.parentQueue", "spec:")


def is_valid_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or math.isfinite(value)) and (value >= 0 or value == -1)


@FUZZ
@given(queues(), st.lists(queues(), max_size=4))
def test_every_queue_is_accepted_or_refused_naming_the_field(queue: dict[str, Any],
                                                             stored: list[dict[str, Any]]) -> None:
    errors = validate_queue(queue, stored)
    assert all(isinstance(e, str) and e for e in errors)
    for error in errors:
        assert error == RESOURCES_REQUIRED or error.startswith(FIELD_PREFIXES), error
    spec = queue["spec"]
    resources = spec.get("resources") if isinstance(spec, dict) else None
    if not isinstance(resources, dict):
        assert errors, "a queue without resources (or with resources of the wrong type) must be refused"
        return
    for name, settings_ in resources.items():
        if name not in ("cpu", "gpu", "memory") or settings_ is None:
            continue
        if not isinstance(settings_, dict):
            assert any(e.startswith(f"spec.resources.{name}") for e in errors), errors
            continue
        for field, value in settings_.items():
            if field in ("quota", "limit", "overQuotaWeight") and value is not None and not is_valid_number(value):
                assert any(e.startswith(f"spec.resources.{name}.{field}") for e in errors), (value, errors)


@FUZZ
@given(st.dictionaries(NAMES, NAMES, max_size=4), NAMES, NAMES)
def test_a_parent_that_closes_a_cycle_is_refused(parents: dict[str, str], name: str, parent: str) -> None:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}

    def queue(n: str, p: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"resources": {"cpu": unlimited}}
        if p:
            spec["parentQueue"] = p
        return {"metadata": {"name": n}, "spec": spec}

    stored = [queue(n, p) for n, p in parents.items()]
    errors = validate_queue(queue(name, parent), stored)
    # Walk up from the new parent with the stored links: reaching `name` means this change closes a cycle.
    links = {**parents, name: parent}
    seen, current, cycle = set(), parent, False
    while current and current not in seen:
        if current == name:
            cycle = True
            break
        seen.add(current)
        current = links.get(current, "")
    assert cycle == any(e.startswith("spec.parentQueue") for e in errors), (links, errors)


def test_non_finite_and_huge_quotas() -> None:
    for value in (math.nan, math.inf, -math.inf):
        errors = validate_queue({"spec": {"resources": {"gpu": {"quota": value, "limit": -1}}}})
        assert errors and errors[0].startswith("spec.resources.gpu.quota: must be a number"), (value, errors)
    # Beyond float range, an integer is still a number: accepted, and compared exactly.
    assert validate_queue({"spec": {"resources": {"gpu": {"quota": 10**400, "limit": -1}}}}) == []
    huge = {"spec": {"resources": {"gpu": {"quota": 10**400 + 1, "limit": 10**400}}}}
    assert validate_queue(huge) == []
    assert quota_warnings(huge, [], update=False) == [
        f"spec.resources.gpu: quota {10**400 + 1} is greater than limit {10**400}"]
