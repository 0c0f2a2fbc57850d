"""The PodGroup webhook refuses raising a minimum of a semi-preemptible PodGroup (KAI v0.18); lowering is fine."""

from __future__ import annotations

from typing import Any

import pytest

from operators.core.api.podgroup_validation import validate_podgroup


def pg(preemptibility: str = "semi-preemptible", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg"},
            "spec": {"queue": "q", "preemptibility": preemptibility, **spec}}


TREE = [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}, {"name": "c", "minMember": 2}]


@pytest.mark.parametrize(("old", "new", "refused"), [
    (pg(minMember=2), pg(minMember=3), "spec.minMember of a semi-preemptible PodGroup cannot be raised (from 2 to 3)"),
    (pg(), pg(minMember=2), "spec.minMember"),  # unset is 1
    (pg(minMember=3), pg(minMember=2), None),
    (pg(minMember=2), pg(minMember=2, minNonPreemptible=3), "spec.minNonPreemptible"),
    (pg(minMember=2, minNonPreemptible=3), pg(minMember=2), None),
    (pg(minSubGroup=1, subGroups=TREE), pg(minSubGroup=2, subGroups=TREE), "spec.minSubGroup"),
    (pg(minSubGroup=2, subGroups=TREE), pg(subGroups=TREE), "spec.minSubGroup"),  # unset: all 3 children
    (pg(minSubGroup=2, subGroups=TREE),
     pg(minSubGroup=2, subGroups=[{"name": "a", "minMember": 3}, *TREE[1:]]), "subgroup 'a' minMember"),
    (pg(minSubGroup=2, subGroups=TREE), pg(minSubGroup=2, subGroups=[{"name": "a", "minMember": 1}, *TREE[1:]]),
     None),
    (pg("preemptible", minMember=2), pg("preemptible", minMember=3), None),  # only semi-preemptible ones
    (pg("preemptible", minMember=2), pg(minMember=3), "spec.minMember"),
])
def test_raising_a_minimum_is_refused(old: dict[str, Any], new: dict[str, Any], refused: str | None) -> None:
    problem = validate_podgroup(new, old)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem, problem


def test_create_is_not_judged_by_the_rule() -> None:
    assert validate_podgroup(pg(minMember=5, minNonPreemptible=7)) is None


# --- the controller's allocatedNonPreemptible of a semi-preemptible PodGroup -----------------------------------

def _pod(name: str, created: str, subgroup: str = "") -> dict[str, Any]:
    labels = {"kai.scheduler/subgroup-name": subgroup} if subgroup else {}
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": created, "labels": labels,
                         "annotations": {"pod-group-name": "pg"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}}


@pytest.mark.parametrize(("spec", "cpu"), [
    ({"minMember": 2}, "2"),
    ({"minMember": 2, "minNonPreemptible": 3}, "3"),
    ({"subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 2}]}, "3"),
])
def test_only_the_core_is_non_preemptible(spec: dict[str, Any], cpu: str) -> None:
    from operators.podgroupcontroller.status import resources_status

    group = {"metadata": {"name": "pg", "namespace": "ns"},
             "spec": {"queue": "q", "priorityClassName": "inference", "preemptibility": "semi-preemptible", **spec}}
    pods = [_pod(f"p{i}", f"2025-01-01T00:00:0{i}Z", "ab"[i % 2] if "subGroups" in spec else "") for i in range(4)]
    status = resources_status(group, pods, {"n1": {"metadata": {"name": "n1"}}}, {})
    assert status["allocated"] == {"cpu": "4"}
    assert status["allocatedNonPreemptible"] == {"cpu": cpu}
