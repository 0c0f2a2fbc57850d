"""Queue status aggregation over PodGroups and child queues."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from operators.core.resources import parse_resource_list
from operators.queuecontroller.status import (
    ORPHAN,
    all_queue_statuses,
    ancestry_conditions,
    ancestry_problem,
    child_queues,
    queue_status,
    status_patch,
)
from tests.support import EXAMPLES


def example_queues(relative: str) -> list[dict[str, Any]]:
    with open(EXAMPLES / relative) as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc and doc["kind"] == "Queue"]


def queue(name: str, parent: str = "", status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"parentQueue": parent, "resources": {}},
            "status": status or {}}


def pg(queue_name: str, allocated: dict[str, str], requested: dict[str, str] | None = None,
       non_preemptible: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": f"pg-{queue_name}", "namespace": "ns"}, "spec": {"queue": queue_name},
            "status": {"resourcesStatus": {"allocated": allocated, "requested": requested or allocated,
                                           "allocatedNonPreemptible": non_preemptible or {}}}}


def test_default_queues_example() -> None:
    queues = example_queues("quickstart/default-queues.yaml")
    pgs = [pg("default-queue", {"cpu": "100m", "memory": "250M"}),
           pg("default-queue", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"})]
    statuses = all_queue_statuses(queues, pgs)
    leaf = statuses["default-queue"]
    assert leaf == {"allocated": {"cpu": "100m", "memory": "250000000", "nvidia.com/gpu": "1"},
                    "allocatedNonPreemptible": {"nvidia.com/gpu": "1"},
                    "requested": {"cpu": "100m", "memory": "250000000", "nvidia.com/gpu": "2"}}
    parent = statuses["default-parent-queue"]
    assert parent["childQueues"] == ["default-queue"]
    assert {k: v for k, v in parent.items() if k != "childQueues"} == leaf


def test_one_reconcile_uses_children_stored_status() -> None:
    queues = [queue("root"), queue("a", "root", {"allocated": {"cpu": "2"}, "requested": {"cpu": "3"}}),
              queue("b", "root", {"allocated": {"cpu": "500m"}})]
    status = queue_status("root", queues, [pg("root", {"memory": "1Gi"}), pg("a", {"cpu": "99"})])
    assert status == {"childQueues": ["a", "b"],
                      "allocated": {"cpu": "2500m", "memory": "1Gi"},
                      "allocatedNonPreemptible": {},
                      "requested": {"cpu": "3", "memory": "1Gi"}}
    assert "childQueues" not in queue_status("a", queues, [])


def test_three_levels_and_cycles() -> None:
    queues = [queue("top"), queue("mid", "top"), queue("leaf", "mid"), queue("x", "y"), queue("y", "x")]
    pgs = [pg("leaf", {"cpu": "1"}), pg("x", {"cpu": "2"}), pg("gone", {"cpu": "7"})]
    statuses = all_queue_statuses(queues, pgs)
    assert [statuses[n]["allocated"] for n in ("top", "mid", "leaf")] == [{"cpu": "1"}] * 3
    assert statuses["x"]["allocated"] == statuses["y"]["allocated"] == {"cpu": "2"}
    assert child_queues("x", queues) == ["y"]


def test_status_patch_by_value_and_clears_stale_keys() -> None:
    computed = {"allocated": {"cpu": "1"}, "allocatedNonPreemptible": {}, "requested": {"cpu": "1"}}
    stored = queue("q", status={"allocated": {"cpu": "1000m"}, "requested": {"cpu": "1"}})
    assert status_patch(stored, computed) is None
    stored["status"]["allocated"]["nvidia.com/gpu"] = "1"
    patch = status_patch(stored, computed)
    assert patch is not None
    assert patch["status"]["allocated"] == {"cpu": "1", "nvidia.com/gpu": None}
    assert patch["status"]["childQueues"] is None
    assert "allocatedNonPreemptible" not in patch["status"]


def test_status_patch_removes_lists_that_became_empty() -> None:
    computed = {"allocated": {}, "allocatedNonPreemptible": {}, "requested": {}}
    stored = queue("q", status={"allocated": {"cpu": "1"}, "requested": {"cpu": "1"}})
    patch = status_patch(stored, computed)
    assert patch == {"status": {"allocated": None, "requested": None, "childQueues": None}}


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(min_value=0, max_value=7), st.integers(min_value=0, max_value=5000)),
                max_size=12))
def test_parent_totals_equal_sum_of_children(parents: list[int], groups: list[tuple[int, int]]) -> None:
    # Queue i's parent is an earlier queue (a forest), so sums must add up exactly at every level.
    queues = [queue(f"q{i}", f"q{parents[i] % i}" if i and parents[i] < 5 else "")
              for i in range(len(parents))]
    pgs = [pg(f"q{q % len(parents)}", {"cpu": f"{milli}m"}) for q, milli in groups]
    statuses = all_queue_statuses(queues, pgs)
    for q in queues:
        name = q["metadata"]["name"]
        own = sum((parse_resource_list(p["status"]["resourcesStatus"]["allocated"])["cpu"]
                   for p in pgs if p["spec"]["queue"] == name), Decimal(0))
        children = sum((parse_resource_list(statuses[c]["allocated"]).get("cpu", Decimal(0))
                        for c in statuses[name].get("childQueues", [])), Decimal(0))
        assert parse_resource_list(statuses[name]["allocated"]).get("cpu", Decimal(0)) == own + children


def test_ancestry_problem_names_the_missing_queue() -> None:
    parents = {"top": "", "team": "dept", "sub": "team", "ok": "top", "x": "y", "y": "x", "below": "x"}
    assert ancestry_problem("top", parents) is None
    assert ancestry_problem("ok", parents) is None
    assert ancestry_problem("team", parents) == (
        "ParentQueueNotFound", "parent queue 'dept' does not exist; workloads of this queue stay pending until it "
        "is created")
    reason, message = ancestry_problem("sub", parents) or ("", "")
    assert reason == "ParentQueueNotFound"
    assert message.startswith("ancestor queue 'dept' (parent of queue 'team') does not exist")
    assert ancestry_problem("x", parents) == (
        "ParentQueueCycle", "the parent chain loops (x -> y -> x); workloads of this queue stay pending until a "
        "spec.parentQueue in the loop is changed")
    assert (ancestry_problem("below", parents) or ("", ""))[1].startswith("the parent chain loops (x -> y -> x)")


def test_ancestry_condition_set_kept_and_cleared() -> None:
    problem = ("ParentQueueNotFound", "parent queue 'dept' does not exist")
    other = {"type": "OverQuota", "status": "False"}
    first = ancestry_conditions([other], problem, "2026-01-01T00:00:00Z")
    assert first == [other, {"type": ORPHAN, "status": "True", "reason": "ParentQueueNotFound",
                             "message": "parent queue 'dept' does not exist",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    # Unchanged status keeps its transition time, so a resync writes nothing.
    assert ancestry_conditions(first, problem, "2026-01-01T00:05:00Z") == first
    assert ancestry_conditions(first, None, "2026-01-01T00:06:00Z") == [other]


def test_status_patch_writes_conditions_only_when_they_change() -> None:
    stored = queue("q", status={"allocated": {"cpu": "1"}, "requested": {"cpu": "1"}})
    computed: dict[str, Any] = {"allocated": {"cpu": "1"}, "allocatedNonPreemptible": {}, "requested": {"cpu": "1"},
                                "conditions": []}
    assert status_patch(stored, computed) is None
    condition = {"type": ORPHAN, "status": "True", "reason": "ParentQueueNotFound", "message": "m",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    computed["conditions"] = [condition]
    assert status_patch(stored, computed) == {"status": {"conditions": [condition]}}
    stored["status"]["conditions"] = [condition]
    assert status_patch(stored, computed) is None
    computed["conditions"] = []
    assert status_patch(stored, computed) == {"status": {"conditions": None}}
