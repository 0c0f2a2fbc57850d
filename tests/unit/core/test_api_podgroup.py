"""The one typed PodGroup: the body the pod-grouper writes is the CRD's schema, and the record every component
reads back carries what the body says."""

from __future__ import annotations

from operators.core import keys
from operators.core.api.podgroup import (
    PodGroup,
    podgroup_body,
    podgroup_record,
    subgroup_body,
    unschedulable_condition_body,
)

OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "job-uid", "controller": True}
TOPOLOGY = {"topology": "dc", "requiredTopologyLevel": "rack"}


def _body() -> dict[str, object]:
    return podgroup_body(
        name="pg-job", namespace="ns", owner=OWNER, labels={"l": "v"}, annotations={"a": "b"}, min_member=3,
        queue="team-a", priority_class="train", preemptibility=keys.SEMI_PREEMPTIBLE,
        sub_groups=[subgroup_body("workers", min_sub_group=2), subgroup_body("w0", min_member=1, parent="workers"),
                    subgroup_body("w1", min_member=2, parent="workers", topology=TOPOLOGY)],
        topology=TOPOLOGY, preemption_delay="30s", safe_to_consolidate=False)


def test_the_body_is_a_podgroup_of_the_schema() -> None:
    body = _body()
    assert PodGroup.model_validate(body).to_wire() == body
    assert body["spec"] == {
        "minMember": 3, "queue": "team-a", "priorityClassName": "train", "preemptibility": "semi-preemptible",
        "subGroups": [{"name": "workers", "minSubGroup": 2}, {"name": "w0", "minMember": 1, "parent": "workers"},
                      {"name": "w1", "minMember": 2, "parent": "workers", "topologyConstraint": TOPOLOGY}],
        "topologyConstraint": TOPOLOGY, "preemptionDelay": "30s", "safeToConsolidate": False}


def test_unset_fields_are_left_out_and_min_member_is_at_least_one() -> None:
    body = podgroup_body(name="p", namespace="ns", owner=OWNER, labels={}, annotations={}, min_member=0, queue="q")
    assert body["spec"] == {"minMember": 1, "queue": "q", "topologyConstraint": {}}
    assert PodGroup.model_validate(body).to_wire() == body


def test_what_is_written_is_what_is_read_back() -> None:
    record = podgroup_record(_body())
    assert (record.key, record.queue, record.min_member, record.priority_class) == ("ns/pg-job", "team-a", 3, "train")
    assert (record.preemption_delay, record.safe_to_consolidate, record.optional_features) == (30.0, False, True)
    assert [(s.name, s.parent, s.min_sub_group) for s in record.subgroups] == [
        ("workers", "", 2), ("w0", "workers", None), ("w1", "workers", None)]
    assert record.topology is not None and (record.topology.topology, record.topology.required) == ("dc", "rack")
    assert record.owner == ("batch/v1", "Job", "job", "job-uid")


def test_the_unschedulable_condition_replaces_its_node_pools_with_the_next_transition() -> None:
    reasons = [{"reason": "OverLimit", "message": "queue q is over its limit"}]
    body = unschedulable_condition_body("ns", "pg", [], "pool-a", "no room", reasons, "2026-01-01T00:00:00Z")
    assert body is not None and PodGroup.model_validate(body).to_wire()["status"] == body["status"]
    first = body["status"]["schedulingConditions"]
    assert [(c["nodePool"], c["transitionID"], c["reason"]) for c in first] == [("pool-a", "1", "Unschedulable")]
    assert unschedulable_condition_body("ns", "pg", first, "pool-a", "no room", reasons, "later") is None
    other = unschedulable_condition_body("ns", "pg", first, "pool-b", "no room", reasons, "later")
    assert other is not None
    assert [(c["nodePool"], c["transitionID"]) for c in other["status"]["schedulingConditions"]] == [
        ("pool-a", "1"), ("pool-b", "2")]
    again = unschedulable_condition_body("ns", "pg", other["status"]["schedulingConditions"], "pool-a", "full", [],
                                         "later")
    assert again is not None
    assert [(c["nodePool"], c["transitionID"], c["message"]) for c in again["status"]["schedulingConditions"]] == [
        ("pool-b", "2", "no room"), ("pool-a", "3", "full")]
    assert podgroup_record(again).unschedulable_pools == ("pool-b", "pool-a")
