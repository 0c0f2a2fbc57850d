"""RayJob admission: a suspended RayJob is un-suspended only when its whole gang fits in its queue."""

from __future__ import annotations

import copy
from typing import Any

from operators.podgrouper import rayjob_admission as admission

UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def rayjob(workers: int = 2, gpus: int = 4, *, suspend: bool = True, queue: str = "team-a",
           min_replicas: int | None = None) -> dict[str, Any]:
    worker = {"groupName": "gpu", "replicas": workers, "minReplicas": workers if min_replicas is None else min_replicas,
              "template": {"spec": {"containers": [{"name": "w", "resources": {
                  "requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}
    head = {"template": {"spec": {"containers": [{"name": "h", "resources": {"requests": {"cpu": "1",
                                                                                           "memory": "2Gi"}}}]}}}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "job", "namespace": "ns", "uid": "u1", "labels": {"kai.scheduler/queue": queue}},
            "spec": {"suspend": suspend, "rayClusterSpec": {"headGroupSpec": head, "workerGroupSpecs": [worker]}},
            "status": {}}


def queue(name: str, *, gpu_limit: float = -1, parent: str = "", allocated_gpus: int = 0) -> admission.QueueView:
    obj = {"metadata": {"name": name},
           "spec": {"parentQueue": parent, "resources": {"gpu": {**UNLIMITED, "limit": gpu_limit},
                                                         "cpu": UNLIMITED, "memory": UNLIMITED}},
           "status": {"allocated": {"nvidia.com/gpu": str(allocated_gpus), "cpu": "3", "memory": "1Gi"}}}
    return admission.queue_view(obj)


def test_gang_request_counts_head_and_minimum_workers() -> None:
    pods, req = admission.gang_request(rayjob(workers=3, gpus=4, min_replicas=2))
    assert pods == 3
    assert req == (8.0, 5000.0, float(2 * 2**30 + 2 * 4 * 2**30))


def test_candidates_are_suspended_since_creation_and_never_admitted() -> None:
    assert admission.is_candidate(rayjob())
    assert not admission.is_candidate(rayjob(suspend=False))
    assert not admission.is_candidate(rayjob(queue=""))
    admitted = rayjob()
    admitted["metadata"]["annotations"] = {admission.ADMITTED_ANNOTATION: "2026-01-01T00:00:00Z"}
    assert not admission.is_candidate(admitted)  # a user who suspends it again keeps it suspended
    # Created unsuspended: marked when first seen, so that a later suspension by its user stays.
    running = rayjob(suspend=False)
    assert admission.needs_mark(running) and not admission.needs_mark(rayjob())
    running["metadata"]["annotations"] = {admission.ADMITTED_ANNOTATION: "created-unsuspended"}
    assert not admission.needs_mark(running)
    running["spec"]["suspend"] = True
    assert not admission.is_candidate(running)


def test_admitted_when_the_gang_fits_the_queue_and_its_parents() -> None:
    queues = {"team-a": queue("team-a", gpu_limit=16, parent="org", allocated_gpus=8),
              "org": queue("org", gpu_limit=-1)}
    d = admission.decide(rayjob(workers=2, gpus=4), queues)
    assert d.admit and d.reason == "Admitted"
    assert d.message == "Admitted: the gang of 3 pods (8 GPUs, 5 CPU cores, 10.737 GB memory) fits in queue 'team-a'"


def test_waits_when_the_queue_or_an_ancestor_limit_is_short() -> None:
    queues = {"team-a": queue("team-a", gpu_limit=16, parent="org", allocated_gpus=12),
              "org": queue("org", gpu_limit=-1)}
    d = admission.decide(rayjob(workers=2, gpus=4), queues)
    assert not d.admit and d.reason == "WaitingForQuota"
    assert "needs 8 GPUs; queue 'team-a' has 12 allocated of a limit of 16" in d.message
    queues = {"team-a": queue("team-a", parent="org"), "org": queue("org", gpu_limit=4)}
    d = admission.decide(rayjob(workers=2, gpus=4), queues)
    assert not d.admit and "queue 'org'" in d.message


def test_waits_for_a_missing_queue_and_explains_a_broken_spec() -> None:
    d = admission.decide(rayjob(queue="nope"), {})
    assert not d.admit and d.message == "RayJob stays suspended: queue 'nope' does not exist"
    broken = rayjob(workers=1, min_replicas=3)
    d = admission.decide(broken, {"team-a": queue("team-a")})
    assert not d.admit and d.reason == "InvalidRayJob" and "minReplicas" in d.message


def test_a_provisioned_request_admits_the_gang() -> None:
    queues = {"team-a": queue("team-a", gpu_limit=4)}
    d = admission.decide(copy.deepcopy(rayjob()), queues, provisioned="pg-job-u1-provisioning-1")
    assert d.admit and "pg-job-u1-provisioning-1 is provisioned" in d.message
