"""The one typed BindRequest: the body the scheduler posts is the CRD's schema, and the record read back is the
record that was posted."""

from __future__ import annotations

import pytest

from operators.core import keys
from operators.core.api.bindrequest import (
    BindRequest,
    BindRequestRecord,
    BindRequestSpec,
    parse_bindrequest,
    parse_decision,
)

FRACTION = BindRequestRecord.decided("ns", "pod-a", "uid-a", "node-1", keys.RESOURCE_TYPE_FRACTION,
                                     gpu_groups=("g1", "g2"), gpu_count=2, gpu_portion="0.50")


def test_the_body_is_a_bindrequest_of_the_schema() -> None:
    body = FRACTION.body({"kai.scheduler/node-pool": "pool-a"})
    assert BindRequest.model_validate(body).to_wire() == body
    spec_fields = {field.alias or name for name, field in BindRequestSpec.model_fields.items()}
    assert set(body["spec"]) <= spec_fields, "the body writes only fields the CRD declares"
    assert body["metadata"]["labels"] == {keys.SELECTED_NODE_LABEL: "node-1", "kai.scheduler/node-pool": "pool-a"}
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "pod-a",
                                                    "uid": "uid-a"}]
    assert body["spec"] == {"podName": "pod-a", "selectedNode": "node-1", "receivedResourceType": "Fraction",
                            "receivedGPU": {"count": 2, "portion": "0.50"}, "selectedGPUGroups": ["g1", "g2"]}


@pytest.mark.parametrize("record", [FRACTION, BindRequestRecord.decided("ns", "p", "u", "n", "Regular")])
def test_what_is_posted_is_what_is_read_back(record: BindRequestRecord) -> None:
    assert parse_bindrequest(record.body()) == record


def test_the_status_and_metadata_the_binder_reads() -> None:
    body = FRACTION.body()
    body["metadata"].update(uid="br-uid", deletionTimestamp="2024-01-01T00:00:00Z", managedFields=[{}])
    body["status"] = {"phase": keys.BIND_PHASE_FAILED, "reason": "nodes \"x\" not found", "failedAttempts": 1}
    record = parse_bindrequest(body)
    assert (record.key, record.uid, record.deleting, record.fraction) == ("ns/pod-a", "br-uid", True, True)
    assert (record.phase, record.reason, record.finished, record.succeeded) == ("Failed", 'nodes "x" not found',
                                                                                 True, False)


@pytest.mark.parametrize(("limit", "attempts", "failed"), [(None, 1, True), (3, 2, False), (3, 3, True)])
def test_failed_for_good_only_with_no_attempt_left(limit: int | None, attempts: int, failed: bool) -> None:
    body = FRACTION.body()
    if limit is not None:
        body["spec"]["backoffLimit"] = limit
    body["status"] = {"phase": keys.BIND_PHASE_FAILED, "failedAttempts": attempts}
    assert parse_bindrequest(body).failed is failed


def test_missing_fields_take_their_defaults() -> None:
    record = parse_bindrequest({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"selectedNode": "n"}})
    assert record == BindRequestRecord("ns", "p", "p", "n")
    assert not record.fraction and not record.finished and not record.failed


def test_the_claim_devices_the_scheduler_reads_come_from_the_allocations() -> None:
    allocation = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-1",
                                           "device": "gpu-0"},
                                          {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1",
                                           "device": "gpu-1"}]}}
    record = BindRequestRecord.decided("ns", "p", "u", "n", "Regular",
                                       claim_allocations=(("claim", '{"devices":{"results":[]}}'),))
    assert record.claim_devices == ()
    body = record.body()
    body["spec"]["resourceClaimAllocations"] = [{"name": "claim", "allocation": allocation}, {"name": "empty"}]
    parsed = parse_bindrequest(body)
    assert parsed.claim_devices == (("gpu.example.com", "node-1", "gpu-0"), ("gpu.example.com", "node-1", "gpu-1"))
    assert BindRequestRecord.decided("ns", "p", "u", "n", "Regular",
                                     claim_allocations=parsed.claim_allocations).claim_devices == parsed.claim_devices
    assert parse_bindrequest(FRACTION.body()).claim_devices == ()


def test_the_schedulers_record_changes_only_with_the_decision() -> None:
    posted = parse_decision(FRACTION.body())
    echo = FRACTION.body()
    echo["metadata"].update(uid="br-uid", creationTimestamp="2024-01-01T00:00:00Z")
    echo["status"] = {"phase": keys.BIND_PHASE_SUCCEEDED}
    assert parse_decision(echo) == posted, "the watch's echo and the binder's progress wake no cycle"
    echo["spec"]["backoffLimit"] = 3
    echo["status"] = {"phase": keys.BIND_PHASE_FAILED, "failedAttempts": 1, "reason": "retrying"}
    assert parse_decision(echo) == posted and not parse_decision(echo).failed
    echo["status"]["failedAttempts"] = 3
    assert parse_decision(echo) != posted and parse_decision(echo).failed
