"""DRA GPUs in PodGroup and Queue status, as KAI counts them (pkg/common/resources/dra.go): each GPU-class claim of a
pod adds its count under the device class name, to requested (active pods) and allocated (allocated pods); the queue
sums them and its GPU gauges count them as GPUs."""

from __future__ import annotations

from typing import Any

from operators.core import dra, keys
from operators.podgroupcontroller.status import resources_status
from operators.queuecontroller.metrics import queue_metric_values
from operators.queuecontroller.status import all_queue_statuses

SCHEDULED = [{"type": "PodScheduled", "status": "True"}]


def claim(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": f"r{i}", "exactly": r} for i, r in enumerate(requests)]}}}


def dra_pod(name: str, phase: str, *claims: str, template: bool = False) -> dict[str, Any]:
    refs = [{"name": f"c{i}", **({"resourceClaimTemplateName": "t"} if template else {"resourceClaimName": c})}
            for i, c in enumerate(claims)]
    status: dict[str, Any] = {"phase": phase, "conditions": SCHEDULED if phase == "Running" else []}
    if template:
        status["resourceClaimStatuses"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    return {"metadata": {"name": name, "namespace": "ns", "annotations": {keys.POD_GROUP_NAME: "pg"}},
            "spec": {"nodeName": "n1" if phase == "Running" else "", "resourceClaims": refs,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": status}


CLAIMS = {
    "two": claim("two", {"deviceClassName": "gpu.nvidia.com", "count": 2}),
    "all": claim("all", {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}),
    "nic": claim("nic", {"deviceClassName": "rdma.mellanox.com", "count": 4}),
    "mixed": claim("mixed", {"deviceClassName": "nic.example.com"}, {"deviceClassName": "A100-GPU"}),
}


def test_kai_counts_of_a_claim() -> None:
    assert dra.claim_gpus(CLAIMS["two"]) == ("gpu.nvidia.com", 2)
    assert dra.claim_gpus(CLAIMS["all"]) == ("gpu.nvidia.com", 1)  # All: one, for bookkeeping
    assert dra.claim_gpus(CLAIMS["nic"]) == ("", 0)
    assert dra.claim_gpus(CLAIMS["mixed"]) == ("A100-GPU", 1)  # "gpu" in any case
    first = claim("f", {"deviceClassName": "gpu.nvidia.com"})
    first["spec"]["devices"]["requests"].append({"name": "alt", "firstAvailable": [{"name": "a"}]})
    assert dra.claim_gpus(first) == ("gpu.nvidia.com", 1)  # as KAI, only `exactly` requests count
    assert dra.pod_claim_names(dra_pod("p", "Pending", "x", "y", template=True)) == ["x", "y"]
    assert dra.pod_claim_names({"spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}}) == []


def status_of(pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    counts = {name: dra.claim_gpus(c) for name, c in CLAIMS.items()}

    def gpus(pod: Any) -> dict[str, int]:
        return dra.gpus_by_class(counts[n] for n in dra.pod_claim_names(pod) if n in counts)

    pg = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"queue": "q", "priorityClassName": "train"}}
    return resources_status(pg, pods, {}, {}, gpus)


def test_podgroup_status_counts_dra_gpus_under_the_device_class() -> None:
    status = status_of([dra_pod("run", "Running", "two", "nic", template=True), dra_pod("wait", "Pending", "all"),
                        dra_pod("done", "Succeeded", "two")])
    assert status["allocated"] == {"cpu": "1", "gpu.nvidia.com": "2"}
    assert status["requested"] == {"cpu": "2", "gpu.nvidia.com": "3"}
    assert status["allocatedNonPreemptible"] == {}
    # Without claims known (a cluster without DRA), nothing is added.
    pg = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"queue": "q"}}
    assert resources_status(pg, [dra_pod("run", "Running", "two")], {}, {})["allocated"] == {"cpu": "1"}


def test_queue_status_and_gauges_count_dra_gpus() -> None:
    podgroups = [{"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"queue": "q"},
                  "status": {"resourcesStatus": {"allocated": {"gpu.nvidia.com": "2", "nvidia.com/gpu": "1"},
                                                 "requested": {"gpu.nvidia.com": "3", "cpu": "2"}}}}]
    queues = [{"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"quota": 4}}}}]
    status = all_queue_statuses(queues, podgroups)["q"]
    assert status["allocated"] == {"gpu.nvidia.com": "2", "nvidia.com/gpu": "1"}
    values = queue_metric_values({**queues[0], "status": status})
    assert values["queue_allocated_gpus"] == 3.0 and values["queue_requested_gpus"] == 3.0
