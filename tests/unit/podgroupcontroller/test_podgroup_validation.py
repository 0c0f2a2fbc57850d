"""PodGroup webhook validation messages (contract 2.2)."""

from __future__ import annotations

from typing import Any

import pytest

from operators.podgroupcontroller.validation import validate_podgroup


def pg(*subgroups: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "pg"}, "spec": {"minMember": 1, "subGroups": list(subgroups)}}


@pytest.mark.parametrize(("subgroups", "message"), [
    ((), None),
    (({"name": "a", "minMember": 1}, {"name": "b", "minMember": 1, "parent": "a"}), None),
    (({"name": "a", "minMember": 1}, {"name": "a", "minMember": 2}), "duplicate subgroup name a"),
    (({"name": "a", "minMember": 1, "parent": "x"},), "parent x of a was not found"),
    (({"name": "a", "minMember": 1, "parent": "b"}, {"name": "b", "minMember": 1, "parent": "a"}),
     "cycle detected in subgroups"),
    (({"name": "a", "minMember": 1, "parent": "a"},), "cycle detected in subgroups"),
])
def test_validate(subgroups: tuple[dict[str, Any], ...], message: str | None) -> None:
    assert validate_podgroup(pg(*subgroups)) == message


def test_podgroup_without_spec_is_valid() -> None:
    assert validate_podgroup({"metadata": {"name": "x"}}) is None
