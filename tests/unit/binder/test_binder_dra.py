"""The binder's DRA plugin: which claim a pod claim names, and the status it writes and takes back."""

from __future__ import annotations

import pytest

from operators.binder.plugins.dynamicresources import ClaimError, claim_name, release, reserve
from operators.binder.plugins.extended_claim import pod_status_patch, special_claim

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


def test_the_special_claim_of_extended_resources_follows_kep_5004() -> None:
    pod_obj = {"metadata": {"name": "e", "namespace": "ns", "uid": "u1"},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"},
                                                                   "limits": {"example.com/dra-gpu": "2"}}}]}}
    classes = [{"metadata": {"name": "gpu.nvidia.com"}, "spec": {"extendedResourceName": "example.com/dra-gpu"}}]
    allocation = {"devices": {"results": [{"request": "container-0-request-1", "driver": "gpu.nvidia.com",
                                           "pool": "n1", "device": f"gpu-{i}"} for i in range(2)]}}
    claim, mappings = special_claim(pod_obj, allocation, classes)
    assert claim["metadata"]["generateName"] == "e-extended-resources-"
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert claim["spec"]["devices"]["requests"] == [{"name": "container-0-request-1", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]
    assert pod_status_patch("e-extended-resources-x", mappings) == {"status": {"extendedResourceClaimStatus": {
        "resourceClaimName": "e-extended-resources-x", "requestMappings": [
            {"containerName": "c", "resourceName": "example.com/dra-gpu", "requestName": "container-0-request-1"}]}}}
    with pytest.raises(ValueError, match="no extended resource"):
        special_claim(pod_obj, {"devices": {"results": [{"request": "gpu"}]}}, classes)
