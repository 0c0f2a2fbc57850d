"""PodGroup webhook validation messages."""

from __future__ import annotations

from typing import Any

import pytest

from operators.core.api.podgroup_validation import podgroup_warnings, validate_podgroup


def pg(*subgroups: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "pg"}, "spec": {"minMember": 1, "subGroups": list(subgroups)}}


@pytest.mark.parametrize(("subgroups", "message"), [
    ((), None),
    (({"name": "a", "minSubGroup": 1}, {"name": "b", "minMember": 1, "parent": "a"}), None),
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


def tree(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "pg"}, "spec": spec}


LEAVES = [{"name": f"w{i}", "minMember": 2} for i in range(4)]


@pytest.mark.parametrize(("spec", "message"), [
    ({"minSubGroup": 3, "subGroups": LEAVES}, None),
    ({"minSubGroup": 0, "subGroups": LEAVES}, None),
    # Two levels: the PodGroup needs one of two racks, a rack needs one of its two leaves.
    ({"minSubGroup": 1, "subGroups": [
        {"name": "rack-a", "minSubGroup": 1}, {"name": "rack-b", "minSubGroup": 2},
        {"name": "a0", "parent": "rack-a", "minMember": 1}, {"name": "a1", "parent": "rack-a", "minMember": 1},
        {"name": "b0", "parent": "rack-b", "minMember": 1}, {"name": "b1", "parent": "rack-b", "minMember": 1}]},
     None),
    # A parent without minSubGroup needs all its children (as before minSubGroup existed).
    ({"minMember": 2, "subGroups": [{"name": "p"}, {"name": "c", "parent": "p", "minMember": 2}]}, None),
    ({"minMember": 3, "minSubGroup": 2, "subGroups": LEAVES},
     "spec.minMember and spec.minSubGroup are mutually exclusive: set minMember (3) to schedule a fixed number of "
     "pods, or minSubGroup to require a minimum number of child SubGroups, but not both"),
    ({"subGroups": [{"name": "w0", "minSubGroup": 1}]},
     "subgroup 'w0': minSubGroup cannot be set on a leaf SubGroup (no SubGroup names it as parent); use minMember, "
     "the number of its pods that must run"),
    ({"subGroups": [{"name": "w0", "minMember": 1, "minSubGroup": 1}]},
     "subgroup 'w0': minMember and minSubGroup are mutually exclusive: a leaf SubGroup sets minMember (pods), a "
     "SubGroup with children sets minSubGroup (children)"),
    ({"subGroups": [{"name": "p", "minMember": 2}, {"name": "c1", "parent": "p", "minMember": 1},
                    {"name": "c2", "parent": "p", "minMember": 1}]},
     "subgroup 'p': minMember cannot be set on a SubGroup that has child SubGroups (c1, c2); use minSubGroup, the "
     "number of children that must meet their own minimum"),
    ({"subGroups": [{"name": "w0"}]},
     "subgroup 'w0': minMember is required on a leaf SubGroup (no SubGroup names it as parent)"),
    ({"minMember": 1, "preemptionDelay": "5m"}, None),
    ({"minMember": 1, "preemptionDelay": "1h30m"}, None),
    ({"minMember": 1, "preemptionDelay": "0"}, None),
    ({"minMember": 1, "preemptionDelay": "5"},
     'spec.preemptionDelay: must be a non-negative Go duration: numbers with units (ns, us, ms, s, m, h), e.g. '
     '"30s", "5m", "1h30m", got \'5\''),
    ({"minMember": 1, "preemptionDelay": "-1s"},
     'spec.preemptionDelay: must be a non-negative Go duration: numbers with units (ns, us, ms, s, m, h), e.g. '
     '"30s", "5m", "1h30m", got the negative \'-1s\''),
])
def test_min_sub_group_tree_rules(spec: dict[str, Any], message: str | None) -> None:
    assert validate_podgroup(tree(spec)) == message


def test_min_sub_group_above_the_children_is_accepted_with_one_warning() -> None:
    podgroup = tree({"minSubGroup": 5, "subGroups": LEAVES})
    assert validate_podgroup(podgroup) is None
    assert podgroup_warnings(podgroup) == ["minSubGroup (5) exceeds the number of direct child SubGroups (4)"]
    nested = tree({"subGroups": [{"name": "p", "minSubGroup": 3}, {"name": "c", "parent": "p", "minMember": 1}]})
    assert validate_podgroup(nested) is None
    assert podgroup_warnings(nested) == [
        "subgroup 'p': minSubGroup (3) exceeds the number of direct child SubGroups (1)"]
    assert podgroup_warnings(tree({"minSubGroup": 4, "subGroups": LEAVES})) == []


def test_an_update_leaving_the_tree_as_stored_is_not_judged_again() -> None:
    # Stored before the tree rules: a parent with minMember. A metadata-only update (an annotation the
    # scheduler stamps) keeps working; changing the tree is judged.
    old = tree({"minMember": 2, "subGroups": [{"name": "p", "minMember": 2},
                                              {"name": "c", "parent": "p", "minMember": 2}]})
    stamped = {**old, "metadata": {"name": "pg", "annotations": {"kai.scheduler/last-start-timestamp": "x"}}}
    assert validate_podgroup(stamped, old) is None
    assert validate_podgroup(stamped) is not None
    changed = tree({"minMember": 3, "subGroups": old["spec"]["subGroups"]})
    assert validate_podgroup(changed, old) == (
        "subgroup 'p': minMember cannot be set on a SubGroup that has child SubGroups (c); use minSubGroup, the "
        "number of children that must meet their own minimum")
    # The structure (names, parents, cycles) is always judged.
    cyclic = tree({"subGroups": [{"name": "a", "parent": "a", "minMember": 1}]})
    assert validate_podgroup(cyclic, cyclic) == "cycle detected in subgroups"
