"""KEP-5004 in the scheduler: a pod asking `requests[<extendedResourceName>]` on nodes that do not list the
resource gets that many devices of the DeviceClass through its special claim, counted as GPUs; a node listing the
name keeps it a device-plugin resource; a pod asking plain nvidia.com/gpu is untouched."""

from __future__ import annotations

import json
from typing import Any

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue
from test_sched_dra import DRIVER, dra_node

from operators.core.dra import EXTENDED_RESOURCE_CLAIM, extended_requests, extended_resource_classes, pod_claim_names
from operators.scheduler.decide.snapshot import snapshot_from_objects

NAME = "example.com/dra-gpu"
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
                  "extendedResourceName": NAME}}


def ext_pod(name: str, count: int, resource: str = NAME, **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, name, **kwargs)
    obj["spec"]["containers"][0]["resources"]["requests"][resource] = str(count)
    return obj


def objects(*extra: dict[str, Any], nodes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [CLASS, *PRIORITY_CLASSES, queue("q"), *(nodes if nodes is not None else dra_node("n1", gpus=4)), *extra]


def test_request_names_follow_the_kep() -> None:
    spec = {"initContainers": [{"name": "init", "resources": {"limits": {NAME: "1"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi", NAME: "2"}}},
                           {"name": "b", "resources": {"requests": {"cpu": "1", "kubernetes.io/x": "1"}}}]}
    # sorted request names of container "a" (index 1): cpu, example.com/dra-gpu, memory
    assert extended_requests(spec) == (("init", NAME, "container-0-request-0", 1),
                                       ("a", NAME, "container-1-request-1", 2))
    assert extended_resource_classes([("gpu.nvidia.com", NAME), ("other", "")]) == {
        NAME: "gpu.nvidia.com", "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "gpu.nvidia.com",
        "deviceclass.resource.kubernetes.io/other": "other"}


def test_extended_resource_is_satisfied_from_devices_and_counts_as_gpus() -> None:
    d = cycle(objects(podgroup("e"), ext_pod("e", 3)))
    assert [(b.pod, b.node, b.gpu_count) for b in d.binds] == [("e", "n1", 3)]
    ((name, raw),) = d.binds[0].claim_allocations
    assert name == EXTENDED_RESOURCE_CLAIM
    results = json.loads(raw)["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("container-0-request-1", f"gpu-{i}") for i in range(3)]


def test_the_implicit_class_name_works_and_too_many_stay_pending() -> None:
    implicit = f"deviceclass.resource.kubernetes.io/{DRIVER}"
    d = cycle(objects(podgroup("a"), ext_pod("a", 3, implicit), podgroup("b", created="2025-01-01T00:05:00Z"),
                      ext_pod("b", 2, created="2025-01-01T00:05:00Z")))
    assert [b.pod for b in d.binds] == ["a"]
    (u,) = d.unschedulable
    assert u.pod_group == "b"


def test_a_node_listing_the_name_keeps_it_a_device_plugin_resource() -> None:
    plugin_node = node("p1", gpus=0)
    plugin_node["status"]["allocatable"][NAME] = "2"
    plugin_node["status"]["capacity"] = dict(plugin_node["status"]["allocatable"])
    snap = snapshot_from_objects(objects(podgroup("e"), ext_pod("e", 2), nodes=[plugin_node]))
    (p,) = snap.pods
    assert p.claims == () and dict(p.scalars)[NAME] == 2
    assert [(b.pod, b.node) for b in cycle(objects(podgroup("e"), ext_pod("e", 2), nodes=[plugin_node])).binds] == [
        ("e", "p1")]


def test_plain_gpu_pods_are_untouched() -> None:
    snap = snapshot_from_objects(objects(podgroup("g"), pod("g", "g", gpus=1)))
    (p,) = snap.pods
    assert p.claims == () and p.extended == () and snap.resource_claims == ()


def test_the_controllers_find_the_special_claim_in_the_pod_status() -> None:
    obj = {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "mine"}]},
           "status": {"extendedResourceClaimStatus": {"resourceClaimName": "e-extended-resources-x"}}}
    assert pod_claim_names(obj) == ["e-extended-resources-x", "mine"]


def test_a_claim_already_in_the_snapshot_is_not_made_again() -> None:
    """`kai simulate`'s next cycle has the bound pod's claim, allocated under the virtual name: it holds the
    devices, and no unallocated twin replaces it."""
    held = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "e-extended-resources", "namespace": "ns", "uid": "c1"},
            "spec": {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
                "deviceClassName": DRIVER, "count": 2}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "container-0-request-1", "driver": DRIVER, "pool": "n1", "device": f"gpu-{i}"}
                for i in range(2)]}}, "reservedFor": [{"resource": "pods", "name": "e", "uid": "uid-e"}]}}
    snap = snapshot_from_objects(objects(podgroup("e"), ext_pod("e", 2, node_name="n1", phase="Running"), held))
    (c,) = snap.resource_claims
    assert c.allocated is not None and len(c.allocated) == 2
