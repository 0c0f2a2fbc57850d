"""Queue validation: KAI's required `spec.resources` plus field-named checks; quota comparisons never refuse."""

from __future__ import annotations

from typing import Any

import pytest

from operators.core.api.queue_validation import RESOURCES_REQUIRED, validate_queue
from operators.core.durations import parse_delay as parse_duration


def q(name: str = "q", parent: str = "", **spec: Any) -> dict[str, Any]:
    resources = spec.pop("resources", {"cpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}})
    return {"metadata": {"name": name}, "spec": {"parentQueue": parent, "resources": resources, **spec}}


def test_resources_must_be_specified() -> None:
    assert validate_queue({"metadata": {"name": "q"}, "spec": {}}) == [RESOURCES_REQUIRED]
    assert RESOURCES_REQUIRED == "resources must be specified"


def test_valid_queue() -> None:
    assert validate_queue(q(priority=100, preemptMinRuntime="20s", reclaimMinRuntime="1h30m")) == []


@pytest.mark.parametrize(("resources", "message"), [
    ({"cpu": {"quota": -5}}, "spec.resources.cpu.quota: -5 is negative; only -1 (unlimited) is allowed"),
    ({"memory": {"overQuotaWeight": -0.5}},
     "spec.resources.memory.overQuotaWeight: -0.5 is negative; only -1 (unlimited) is allowed"),
    ({"memory": {"limit": "10Gi"}}, "spec.resources.memory.limit: must be a number, got '10Gi'"),
])
def test_resource_errors(resources: dict[str, Any], message: str) -> None:
    assert validate_queue(q(resources=resources)) == [message]


def test_quota_within_unlimited_limit_is_fine() -> None:
    resources = {"gpu": {"quota": 8, "limit": -1}, "cpu": {"quota": 2, "limit": 2}}
    assert validate_queue(q(resources=resources)) == []


@pytest.mark.parametrize("resources", [
    {"gpu": {"quota": -1, "limit": 0}},  # what KAI users' tools write: unlimited quota, no GPUs beyond it
    {"cpu": {"quota": -1, "limit": 1}},
    {"gpu": {"quota": 3, "limit": 2}},
])
def test_quota_against_limit_is_never_refused(resources: dict[str, Any]) -> None:
    # KAI accepts these; its quota checks are opt-in warnings (see test_quota_warnings.py).
    assert validate_queue(q(resources=resources)) == []


def test_priority_and_durations() -> None:
    assert validate_queue(q(priority=1.5)) == ["spec.priority: must be an integer, got 1.5"]
    assert validate_queue(q(preemptMinRuntime="5 minutes")) == [
        "spec.preemptMinRuntime: '5 minutes' is not a duration (e.g. \"20s\", \"5m\", \"1h30m\")"]


@pytest.mark.parametrize(("text", "seconds"), [("20s", 20), ("5m", 300), ("1h30m", 5400), ("1.5h", 5400),
                                               ("0", 0), ("250ms", 0.25), (".5m", 30), ("1h0.5s", 3600.5)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "-1s", "1h 30m", "h", "1d", "s5"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_missing_parent_is_accepted() -> None:
    # Files list children before parents (as KAI's own tooling does): the queue-controller reports it instead.
    stored = [q("root")]
    assert validate_queue(q("a", "root"), stored) == []
    assert validate_queue(q("a", "nope"), stored) == []
    assert validate_queue(q("a", "nope"), []) == []


def test_what_is_really_invalid_is_still_refused_with_a_missing_parent() -> None:
    stored = [q("child", "late")]  # stored while its parent did not exist yet
    assert validate_queue(q("late", "child"), stored) == [
        "spec.parentQueue: setting parent 'child' creates a cycle: late -> child -> late"]
    assert validate_queue({"metadata": {"name": "x"}, "spec": {"parentQueue": "late"}}, stored) == [
        RESOURCES_REQUIRED]
    assert validate_queue(q("x", "late", resources={"gpu": {"quota": "2", "limit": 1}}), stored) == [
        "spec.resources.gpu.quota: must be a number, got '2'"]


def test_hierarchy_cycles() -> None:
    stored = [q("a"), q("b", "a"), q("c", "b")]
    assert validate_queue(q("a", "c"), stored) == [
        "spec.parentQueue: setting parent 'c' creates a cycle: a -> c -> b -> a"]
    assert validate_queue(q("a", "a"), stored) == ["spec.parentQueue: queue 'a' cannot be its own parent"]
    # An existing cycle elsewhere does not block an unrelated change.
    assert validate_queue(q("d", "x"), [q("x", "y"), q("y", "x")]) == []
