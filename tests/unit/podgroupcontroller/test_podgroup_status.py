"""PodGroup resourcesStatus arithmetic: requested, allocated and allocated non-preemptible, and pod counts."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from operators.core import keys
from operators.core.resources import parse_resource_list
from operators.podgroupcontroller.status import counts_patch, pod_counts, pods_of, resources_status, status_patch
from tests.support import EXAMPLES

PRIORITY_CLASSES = {name: {"metadata": {"name": name}, "value": value}
                    for name, value in keys.PRIORITY_CLASSES.items()}
SCHEDULED = [{"type": "PodScheduled", "status": "True"}]


def podgroup(name: str = "pg-a", priority: str = "train", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"minMember": 1, "queue": "q", "priorityClassName": priority, **spec}}


def pod(name: str, phase: str = "Running", requests: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, group: str = "pg-a", node: str = "n1",
        conditions: list[dict[str, str]] | None = None, init: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node,
                            "containers": [{"name": "c", "resources": {"requests": requests or {}}}]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    return {"metadata": {"name": name, "namespace": "ns",
                         "annotations": {keys.POD_GROUP_NAME: group, **(annotations or {})}},
            "spec": spec, "status": {"phase": phase, "conditions": conditions or []}}


def example_pod(relative: str) -> dict[str, Any]:
    with open(EXAMPLES / relative) as handle:
        obj: dict[str, Any] = yaml.safe_load(handle)
    obj["metadata"]["namespace"] = "ns"
    obj["metadata"].setdefault("annotations", {})[keys.POD_GROUP_NAME] = "pg-a"
    obj["spec"]["nodeName"] = "n1"
    obj["status"] = {"phase": "Running"}
    return obj


NODES = {"n1": {"metadata": {"name": "n1", "labels": {keys.NODE_GPU_MEMORY: "40960"}}}}


def test_requested_and_allocated_by_phase() -> None:
    pods = [
        pod("running", requests={"cpu": "500m", "memory": "1Gi", keys.GPU_RESOURCE: "1"}),
        pod("bound", "Pending", {"cpu": "1"}, conditions=SCHEDULED),
        pod("waiting", "Pending", {"cpu": "2"}, conditions=[{"type": "PodScheduled", "status": "False"}]),
        pod("done", "Succeeded", {"cpu": "8"}),
        pod("other-group", requests={"cpu": "16"}, group="pg-b"),
        # An init container larger than the main one: the pod holds its peak (as Kubernetes reserves it).
        pod("init", requests={"cpu": "100m"}, init={"cpu": "4", "memory": "8Gi"}),
    ]
    status = resources_status(podgroup(), pods, NODES, PRIORITY_CLASSES)
    assert status["requested"] == {"cpu": "7500m", "memory": "9Gi", keys.GPU_RESOURCE: "1"}
    assert status["allocated"] == {"cpu": "5500m", "memory": "9Gi", keys.GPU_RESOURCE: "1"}
    assert status["allocatedNonPreemptible"] == {}  # train is preemptible


def test_gpu_fraction_example_pod() -> None:
    shared = example_pod("gpu-sharing/gpu-fraction-pod.yaml")
    status = resources_status(podgroup(), [shared], NODES, PRIORITY_CLASSES)
    assert status["requested"] == {keys.GPU_RESOURCE: "0.5"}
    assert status["allocated"] == {}  # not yet received as a Fraction by the binder
    shared["metadata"]["annotations"][keys.RECEIVED_RESOURCE_TYPE] = keys.RESOURCE_TYPE_FRACTION
    shared["metadata"]["annotations"][keys.GPU_FRACTION_NUM_DEVICES] = "2"
    status = resources_status(podgroup(), [shared], NODES, PRIORITY_CLASSES)
    assert status["requested"] == {keys.GPU_RESOURCE: "1"}
    assert status["allocated"] == {keys.GPU_RESOURCE: "1"}


def test_gpu_memory_example_pod() -> None:
    mem = example_pod("gpu-sharing/gpu-memory-pod.yaml")
    mem["metadata"]["annotations"][keys.RECEIVED_RESOURCE_TYPE] = keys.RESOURCE_TYPE_FRACTION
    status = resources_status(podgroup(), [mem], NODES, PRIORITY_CLASSES)
    assert status["requested"] == {keys.GPU_MEMORY_RESOURCE: "2000"}
    assert status["allocated"] == {keys.GPU_RESOURCE: "0.0489"}  # 2000 of 40960 MiB floored to 40900
    nodes_40g = {"n1": {"metadata": {"labels": {keys.NODE_GPU_MEMORY: "40000"}}}}
    assert resources_status(podgroup(), [mem], nodes_40g, PRIORITY_CLASSES)["allocated"] == {
        keys.GPU_RESOURCE: "0.05"}
    unknown_node = resources_status(podgroup(), [mem], {}, PRIORITY_CLASSES)
    assert unknown_node["allocated"] == {}


@pytest.mark.parametrize(("priority", "spec", "non_preemptible"), [
    ("train", {}, False),
    ("build", {}, True),
    ("inference", {}, True),
    ("inference", {"preemptibility": "preemptible"}, False),
    ("train", {"preemptibility": "non-preemptible"}, True),
    ("missing", {}, False),  # unknown class and no globalDefault: 50
])
def test_allocated_non_preemptible(priority: str, spec: dict[str, str], non_preemptible: bool) -> None:
    status = resources_status(podgroup(priority=priority, **spec), [pod("p", requests={"cpu": "1"})],
                              NODES, PRIORITY_CLASSES)
    assert status["allocatedNonPreemptible"] == ({"cpu": "1"} if non_preemptible else {})


def test_global_default_priority_class() -> None:
    classes: dict[str, dict[str, Any]] = {**PRIORITY_CLASSES, "high": {"value": 1000, "globalDefault": True}}
    status = resources_status(podgroup(priority="missing"), [pod("p", requests={"cpu": "1"})], NODES, classes)
    assert status["allocatedNonPreemptible"] == {"cpu": "1"}


def test_status_patch_compares_by_value() -> None:
    group = podgroup()
    computed = resources_status(group, [pod("p", requests={"cpu": "1"})], NODES, PRIORITY_CLASSES)
    assert status_patch(group, computed) == {"status": {"resourcesStatus": {
        name: value for name, value in computed.items() if value}}}
    group["status"] = {"resourcesStatus": {"allocated": {"cpu": "1000m"}, "requested": {"cpu": "1"}}}
    assert status_patch(group, computed) is None
    group["status"]["resourcesStatus"]["requested"][keys.GPU_RESOURCE] = "1"
    assert status_patch(group, computed) == {"status": {"resourcesStatus": {
        "allocated": {"cpu": "1"}, "requested": {"cpu": "1", keys.GPU_RESOURCE: None}}}}


def test_status_patch_removes_lists_that_became_empty() -> None:
    group = podgroup()
    group["status"] = {"resourcesStatus": {"allocated": {"cpu": "1"}, "requested": {"cpu": "1"}}}
    computed = resources_status(group, [], NODES, PRIORITY_CLASSES)
    # null removes the key: an empty object would be stored as null by server-side apply and rejected
    assert status_patch(group, computed) == {"status": {"resourcesStatus": {"allocated": None,
                                                                            "requested": None}}}


def test_pods_of_filters_namespace_and_name() -> None:
    same = pod("a")
    other_ns = copy.deepcopy(same)
    other_ns["metadata"]["namespace"] = "elsewhere"
    assert pods_of(podgroup(), [same, other_ns, pod("b", group="pg-b")]) == [same]


@given(st.lists(st.tuples(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
                          st.integers(min_value=0, max_value=4000), st.booleans()), max_size=8))
def test_allocated_never_exceeds_requested(specs: list[tuple[str, int, bool]]) -> None:
    pods = [pod(f"p{i}", phase, {"cpu": f"{milli}m"}, conditions=SCHEDULED if scheduled else [])
            for i, (phase, milli, scheduled) in enumerate(specs)]
    status = resources_status(podgroup(), pods, NODES, PRIORITY_CLASSES)
    allocated = parse_resource_list(status["allocated"]).get("cpu", 0)
    requested = parse_resource_list(status["requested"]).get("cpu", 0)
    assert allocated <= requested


def test_running_and_pending_counts_for_the_printer_columns() -> None:
    pods = [pod("a"), pod("b"), pod("c", phase="Pending"), pod("d", phase="Succeeded"), pod("e", group="other")]
    counts = pod_counts(podgroup(), pods)
    assert counts == {"running": 2, "pending": 1}
    assert counts_patch(podgroup(), counts) == counts
    stored = {**podgroup(), "status": {"running": 2, "pending": 0}}
    assert counts_patch(stored, counts) == {"pending": 1}
    assert counts_patch({**podgroup(), "status": counts}, counts) == {}
