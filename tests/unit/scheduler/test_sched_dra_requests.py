"""DRA request features beyond `exactly`: firstAvailable (prioritized sub-requests), matchAttribute constraints across
requests, device taints and request tolerations; capacity requests are refused with a reason."""

from __future__ import annotations

from typing import Any

from sched_builders import cycle, podgroup
from test_sched_dra import CLASS, DRIVER, allocations, base, dra_node, dra_pod

from operators.scheduler.decide.devices import claim_record, device_class_record, slice_record
from operators.scheduler.decide.plugins.dynamicresources.allocator import Allocation, allocate

CLASSES = {DRIVER: device_class_record(CLASS)}


def gpu_slice(node: str, *devices: tuple[str, str, int, list[dict[str, str]]]) -> dict[str, Any]:
    """A slice of devices (name, product, pcie root, taints)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-s"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     "devices": [{"name": name, "attributes": {"productName": {"string": product},
                                                               "pcieRoot": {"int": root}},
                                  **({"taints": taints} if taints else {})}
                                 for name, product, root, taints in devices]}}


def claim_of(requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None,
             name: str = "c", owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": f"uid-{owner}", "apiVersion": "v1"}]
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": devices}}


def product(name: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.attributes['{DRIVER}'].productName == '{name}'"}}]


def alloc(claim: dict[str, Any], slice_obj: dict[str, Any], taken: set[tuple[str, str, str]] | None = None
          ) -> Allocation | str:
    return allocate(claim_record(claim), "n1", slice_record(slice_obj).devices, taken or set(), CLASSES, "claim c")


def picked(result: Allocation | str) -> list[tuple[str, str]]:
    assert isinstance(result, Allocation), result
    return [(d.request, d.device) for d in result.devices]


FIRST_AVAILABLE = [{"name": "gpu", "firstAvailable": [
    {"name": "big", "deviceClassName": DRIVER, "selectors": product("H100"), "count": 2},
    {"name": "small", "deviceClassName": DRIVER, "selectors": product("A100"), "count": 1}]}]


def test_first_available_takes_the_first_sub_request_that_fits() -> None:
    two_h100 = gpu_slice("n1", ("g0", "A100", 0, []), ("g1", "H100", 0, []), ("g2", "H100", 1, []))
    assert picked(alloc(claim_of(FIRST_AVAILABLE), two_h100)) == [("gpu/big", "g1"), ("gpu/big", "g2")]
    # One H100 held by another claim: the second choice, one A100.
    assert picked(alloc(claim_of(FIRST_AVAILABLE), two_h100, {(DRIVER, "n1", "g2")})) == [("gpu/small", "g0")]
    none = alloc(claim_of(FIRST_AVAILABLE), gpu_slice("n1", ("g1", "H100", 0, [])))
    assert isinstance(none, str)
    assert "claim c request 'gpu/big': needs 2 devices" in none and "no alternative of claim c request 'gpu'" in none


def test_first_available_binds_and_names_the_sub_request_in_the_allocation() -> None:
    """Like KAI, a firstAvailable request is not counted as GPUs (KAI counts `exactly` requests only)."""
    objs = base(dra_node("n1", product="A100")) + [podgroup("a"), dra_pod("a-0", "a", "a-gpu"),
                                                   claim_of(FIRST_AVAILABLE, name="a-gpu", owner="a-0")]
    d = cycle(objs)
    assert [(b.pod, b.node, b.gpu_count) for b in d.binds] == [("a-0", "n1", 0)]
    (result,) = allocations(d)["a-0"][0]["devices"]["results"]
    assert result["request"] == "gpu/small" and result["device"] == "gpu-0"


def test_match_attribute_keeps_the_requests_on_one_pcie_root() -> None:
    # Root 0 has one free device, root 1 two: two single-device requests constrained together land on root 1.
    devices = gpu_slice("n1", ("g0", "A100", 0, []), ("g1", "A100", 1, []), ("g2", "A100", 1, []))
    requests = [{"name": r, "exactly": {"deviceClassName": DRIVER}} for r in ("a", "b")]
    constraint = [{"matchAttribute": f"{DRIVER}/pcieRoot"}]
    assert picked(alloc(claim_of(requests), devices)) == [("a", "g0"), ("b", "g1")]  # unconstrained: in order
    assert picked(alloc(claim_of(requests, constraint), devices)) == [("a", "g1"), ("b", "g2")]
    # The constraint names request b only (a is free to go anywhere).
    assert picked(alloc(claim_of(requests, [{"requests": ["b"], **constraint[0]}]), devices)) == [
        ("a", "g0"), ("b", "g1")]
    split = gpu_slice("n1", ("g0", "A100", 0, []), ("g1", "A100", 1, []))
    refused = alloc(claim_of(requests, constraint), split)
    assert isinstance(refused, str) and "request 'b'" in refused
    unknown = alloc(claim_of(requests, [{"matchAttribute": f"{DRIVER}/numaNode"}]), split)
    assert unknown == f"claim c: no device on the node has the attribute {DRIVER}/numaNode its constraints match"


def test_a_tainted_device_is_allocated_only_to_a_request_tolerating_it() -> None:
    taint = [{"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}]
    devices = gpu_slice("n1", ("g0", "A100", 0, taint), ("g1", "A100", 0, []))
    one = [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2}}]
    refused = alloc(claim_of(one), devices)
    assert isinstance(refused, str) and "1 of 1 free" in refused and "1 more tainted, not tolerated" in refused
    for toleration in ({"key": "example.com/unhealthy", "operator": "Exists"},
                       {"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"},
                       {"operator": "Exists"}):
        tolerant = [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2, "tolerations": [toleration]}}]
        assert picked(alloc(claim_of(tolerant), devices)) == [("gpu", "g0"), ("gpu", "g1")], toleration
    wrong = [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2, "tolerations": [
        {"key": "example.com/unhealthy", "value": "other"}]}}]
    assert isinstance(alloc(claim_of(wrong), devices), str)
    # A NoSchedule taint keeps the device from a pod, in a cycle too: the second pod stays pending.
    objs = base([dra_node("n1", gpus=0)[0], devices | {"metadata": {"name": "n1-s"}}])
    for i in range(2):
        objs += [podgroup(f"p{i}", created=f"2025-01-01T00:0{i}:00Z"), dra_pod(f"p{i}-0", f"p{i}", f"c{i}"),
                 claim_of([{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}], name=f"c{i}", owner=f"p{i}-0")]
    d = cycle(objs)
    assert [b.pod for b in d.binds] == ["p0-0"] and allocations(d)["p0-0"][0]["devices"]["results"][0][
        "device"] == "g1"


def test_capacity_requests_are_refused_with_a_reason() -> None:
    capacity = [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": "10Gi"}}}}]
    result = alloc(claim_of(capacity), gpu_slice("n1", ("g0", "A100", 0, [])))
    assert result == "claim c request 'gpu': capacity requests are not supported"
