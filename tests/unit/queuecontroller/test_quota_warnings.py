"""`--enable-quota-validation`: KAI's opt-in quota comparisons, as admission warnings."""

from __future__ import annotations

from typing import Any

from operators.core.api.queue_validation import quota_warnings


def q(name: str, parent: str = "", **resources: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": resources}
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name}, "spec": spec}


def test_quota_above_its_own_limit() -> None:
    assert quota_warnings(q("a", gpu={"quota": -1, "limit": 0}), [], update=False) == [
        "spec.resources.gpu: quota unlimited (-1) is greater than limit 0"]
    assert quota_warnings(q("a", cpu={"quota": 3, "limit": 2}), [], update=False) == [
        "spec.resources.cpu: quota 3 is greater than limit 2"]
    assert quota_warnings(q("a", cpu={"quota": 2, "limit": 2}, gpu={"quota": 4, "limit": -1}), [],
                          update=False) == []


def test_child_against_parent_on_create() -> None:
    parent = q("dept", cpu={"quota": 1000}, gpu={"quota": 4}, memory={"quota": 100})
    sibling = q("team-a", "dept", cpu={"quota": 600})
    child = q("team-b", "dept", cpu={"quota": 500}, gpu={"quota": 4.5}, memory={"quota": 200})
    assert quota_warnings(child, [parent, sibling], update=False) == [
        "total children CPU quota (1100) exceeds parent queue dept CPU quota (1000)",
        "child queue GPU quota (4.50) exceeds parent queue dept GPU quota (4.00)",
        "child queue Memory quota (200) exceeds parent queue dept Memory quota (100)",
    ]


def test_unlimited_and_missing_parents_compare_with_nothing() -> None:
    parent = q("dept", cpu={"quota": -1}, gpu={"quota": 2})
    assert quota_warnings(q("team", "dept", cpu={"quota": 5000}, gpu={"quota": -1}), [parent], update=False) == []
    assert quota_warnings(q("team", "not-yet", gpu={"quota": 8}), [parent], update=False) == []


def test_parent_against_its_children_on_update_only() -> None:
    children = [q("a", "dept", cpu={"quota": 800}, gpu={"quota": 2}), q("b", "dept", cpu={"quota": 300},
                                                                       gpu={"quota": 3})]
    dept = q("dept", cpu={"quota": 700}, gpu={"quota": 4}, memory={"quota": 0})
    assert quota_warnings(dept, children, update=False) == []
    assert quota_warnings(dept, children, update=True) == [
        "child queue a CPU quota (800) exceeds parent CPU quota (700)",
        "total children CPU quota (1100) exceeds parent CPU quota (700)",
        "total children GPU quota (5.00) exceeds parent GPU quota (4.00)",
    ]
