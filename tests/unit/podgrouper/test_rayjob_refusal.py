"""KubeRay's refusal of K8sJobMode RayJobs under kai-scheduler, recognised from the RayJob's state."""

from __future__ import annotations

from typing import Any

import pytest

from operators.podgrouper.rayjob import GRACE_SECONDS, may_be_refused, refusal_message, slim_rayjob
from tests.support import EXAMPLES, load_yaml


def rayjob(mode: str | None = None, deployment: str | None = "Initializing", cluster: str | None = "rj-abc",
           **meta: Any) -> dict[str, Any]:
    spec = {"submissionMode": mode} if mode else {}
    status = {k: v for k, v in (("jobDeploymentStatus", deployment), ("rayClusterName", cluster)) if v}
    return slim_rayjob({"apiVersion": "ray.io/v1", "kind": "RayJob",
                        "metadata": {"name": "rj", "namespace": "ns", "uid": "u1", **meta},
                        "spec": {**spec, "entrypoint": "python x.py"}, "status": {**status, "jobId": "j"}})


def test_refused_k8s_job_mode_is_explained_after_the_grace_period() -> None:
    for job in (rayjob(), rayjob("K8sJobMode")):  # the default mode is K8sJobMode
        assert may_be_refused(job)
        assert refusal_message(job, cluster_exists=False, age_seconds=GRACE_SECONDS - 1) is None
        message = refusal_message(job, cluster_exists=False, age_seconds=GRACE_SECONDS)
        assert message is not None
        assert "KAI-Scheduler does not support RayJob with K8sJobMode" in message
        assert "RayCluster rj-abc" in message and "spec.submissionMode: SidecarMode" in message


@pytest.mark.parametrize("job", [
    rayjob("SidecarMode"), rayjob("HTTPMode"), rayjob("InteractiveMode"),
    rayjob(deployment=None), rayjob(deployment="Running"), rayjob(cluster=None),
    rayjob(deletionTimestamp="2026-01-01T00:00:00Z"),
])
def test_other_states_are_not_a_refusal(job: dict[str, Any]) -> None:
    assert refusal_message(job, cluster_exists=False, age_seconds=600) is None


def test_a_created_cluster_means_no_refusal() -> None:
    assert refusal_message(rayjob(), cluster_exists=True, age_seconds=600) is None


def test_the_example_rayjob_is_not_refused() -> None:
    [doc] = load_yaml(EXAMPLES / "ray-job.kai-scheduler.yaml")
    assert doc["spec"]["submissionMode"] == "SidecarMode"
    doc["status"] = {"jobDeploymentStatus": "Initializing", "rayClusterName": "c"}
    assert not may_be_refused(slim_rayjob(doc))
