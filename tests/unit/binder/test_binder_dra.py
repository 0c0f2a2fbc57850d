"""The binder's DRA plugin: which claim a pod claim names, and the status it writes and takes back."""

from __future__ import annotations

import pytest

from operators.binder.plugins.dynamicresources import ClaimError, claim_name, release, reserve

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
       "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"},
                                   {"name": "shared", "resourceClaimName": "s"},
                                   {"name": "late", "resourceClaimTemplateName": "t"}]},
       "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]}}
ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]}}


def test_claim_names_from_spec_and_status() -> None:
    assert claim_name(POD, "gpu") == "p-gpu-x"
    assert claim_name(POD, "shared") == "s"
    with pytest.raises(ClaimError, match="not created yet"):
        claim_name(POD, "late")
    with pytest.raises(ClaimError, match="is not a claim of pod p"):
        claim_name(POD, "other")


def test_reserve_allocates_once_and_adds_the_pod_once() -> None:
    claim = {"metadata": {"name": "c"}, "status": {}}
    written, allocated = reserve(claim, POD, ALLOCATION)
    assert allocated and written["status"] == {"allocation": ALLOCATION,
                                               "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}
    again, allocated = reserve(written, POD, {"devices": {"results": []}})
    assert not allocated and again["status"] == written["status"]  # a shared claim keeps its allocation


def test_release_removes_the_pod_and_the_allocation_it_made() -> None:
    claim = {"status": {"allocation": ALLOCATION, "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"},
                                                                  {"resource": "pods", "name": "q", "uid": "u2"}]}}
    kept = release(claim, "u1", deallocate=True)
    assert kept["status"] == {"allocation": ALLOCATION, "reservedFor": [{"resource": "pods", "name": "q", "uid": "u2"}]}
    assert release(kept, "u2", deallocate=True)["status"] == {}
    assert release(kept, "u2", deallocate=False)["status"] == {"allocation": ALLOCATION}
