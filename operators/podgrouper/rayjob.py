"""KubeRay's refusal of RayJobs in K8sJobMode, made visible on the RayJob.

KubeRay (1.6+) started with `--batch-scheduler=kai-scheduler` refuses a RayJob whose submissionMode is
K8sJobMode (the default): its submitter pod would be created only after the RayCluster is ready, outside the
gang. KubeRay reports this only in its own log and requeues, so the RayJob sits in `jobDeploymentStatus:
Initializing` with a RayCluster name but no RayCluster, and no pod ever reaches us. The pod-grouper recognises
that state and explains it with a Warning event on the RayJob. Pure: the shell passes what it read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

RAYJOBS_API_VERSION: Final = "ray.io/v1"
K8S_JOB_MODE: Final = "K8sJobMode"
INITIALIZING: Final = "Initializing"
# KubeRay retries every 3 s: after this long without a RayCluster the refusal is not a passing state.
GRACE_SECONDS: Final = 10.0
REASON: Final = "RayJobSubmissionModeUnsupported"
KUBERAY_MESSAGE: Final = "KAI-Scheduler does not support RayJob with K8sJobMode"


def slim_rayjob(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the check reads (the informer keeps only these)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {"apiVersion": obj.get("apiVersion", RAYJOBS_API_VERSION), "kind": "RayJob",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                         "creationTimestamp": meta.get("creationTimestamp"),
                         "deletionTimestamp": meta.get("deletionTimestamp")},
            "spec": {"submissionMode": spec.get("submissionMode")},
            "status": {"jobDeploymentStatus": status.get("jobDeploymentStatus"),
                       "rayClusterName": status.get("rayClusterName")}}


def may_be_refused(rayjob: Mapping[str, Any]) -> bool:
    """True while the RayJob is in the state a refusal leaves it in (before looking for its RayCluster)."""
    spec = rayjob.get("spec") or {}
    status = rayjob.get("status") or {}
    return ((spec.get("submissionMode") or K8S_JOB_MODE) == K8S_JOB_MODE
            and status.get("jobDeploymentStatus") == INITIALIZING
            and bool(status.get("rayClusterName"))
            and not (rayjob.get("metadata") or {}).get("deletionTimestamp"))


def refusal_message(rayjob: Mapping[str, Any], cluster_exists: bool, age_seconds: float) -> str | None:
    """The event message when KubeRay evidently refused the RayJob, else None."""
    if not may_be_refused(rayjob) or cluster_exists or age_seconds < GRACE_SECONDS:
        return None
    cluster = (rayjob.get("status") or {}).get("rayClusterName")
    return (f"KubeRay has not created RayCluster {cluster} for this RayJob: with --batch-scheduler=kai-scheduler "
            f"it refuses submissionMode K8sJobMode (the default) with \"{KUBERAY_MESSAGE}\", because the "
            "submitter pod would start after the cluster, outside its gang. Create the RayJob again with "
            "spec.submissionMode: SidecarMode (or HTTPMode).")
