"""Fuzzing PodGroup validation: subgroups of any shape, names, parents and cycles. Nothing raises; a refusal
names the problem; an accepted PodGroup has a subgroup tree (unique names, known parents, no cycle)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.core.api.podgroup_validation import podgroup_warnings, validate_podgroup

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)
NAMES = st.sampled_from(["a", "b", "c", "d", ""])
SUBGROUP = st.fixed_dictionaries({"name": NAMES}, optional={
    "parent": NAMES | JSON, "minMember": st.integers(min_value=-5, max_value=2**63) | JSON,
    "minSubGroup": st.integers(min_value=-5, max_value=2**63) | JSON})
PODGROUPS = st.fixed_dictionaries({}, optional={"spec": st.fixed_dictionaries({}, optional={
    "minMember": st.integers(min_value=-(2**64), max_value=2**64) | JSON,
    "minSubGroup": st.integers(min_value=-(2**64), max_value=2**64) | JSON,
    "preemptionDelay": st.sampled_from(["30s", "5m", "1h30m", "0", "-1s", "5", "soon"]) | JSON,
    "subGroups": st.lists(SUBGROUP | JSON, max_size=5) | JSON, "queue": JSON}) | JSON, "metadata": JSON})


@FUZZ
@given(PODGROUPS)
def test_any_podgroup_is_accepted_as_a_tree_or_refused(podgroup: dict[str, Any]) -> None:
    message = validate_podgroup(podgroup)
    if message is not None:
        known = ("duplicate subgroup name", "parent ", "spec.", "spec:", "cycle detected in subgroups",
                 "subgroup ")
        assert isinstance(message, str) and message.startswith(known), message
        return
    warnings = podgroup_warnings(podgroup)
    assert all("exceeds the number of direct child SubGroups" in w for w in warnings), warnings
    spec = podgroup.get("spec")
    subgroups = spec.get("subGroups") if isinstance(spec, dict) else None
    if not isinstance(subgroups, list):
        return
    named = [s for s in subgroups if isinstance(s, dict)]
    names = [str(s.get("name") or "") for s in named]
    assert len(names) == len(set(names))
    parents = {str(s.get("name") or ""): s.get("parent") or None for s in named}
    for name in parents:
        seen, current = {name}, parents[name]
        while current is not None:
            assert isinstance(current, str) and current in parents, (name, current)
            assert current not in seen
            seen.add(current)
            current = parents[current]


def test_min_member_beyond_int32_is_refused_naming_the_field() -> None:
    assert validate_podgroup({"spec": {"minMember": 2**31}}) == "spec.minMember: 2147483648 is larger than 2147483647"
    assert validate_podgroup({"spec": {"minMember": 2**31 - 1}}) is None
    sub = {"spec": {"subGroups": [{"name": "a", "minMember": 2**40}]}}
    assert validate_podgroup(sub) == f"spec.subGroups[0].minMember: {2**40} is larger than 2147483647"
