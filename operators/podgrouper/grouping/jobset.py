"""jobset.x-k8s.io JobSet: one gang per replicated job when they start in order, else one for the set."""

from __future__ import annotations

from typing import Any

from operators.podgrouper.grouping.common import (
    Context,
    as_int,
    base_metadata,
    labels_of,
    name_of,
    namespace_of,
    nested,
)
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj
from operators.podgrouper.grouping.registry import register

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def replicated_job_pods(replicated_job: Any) -> int:
    """Pods that must run together: replicas x min(parallelism, completions)."""
    replicas = as_int(nested(replicated_job, "replicas"))
    replicas = replicas if replicas is not None and replicas >= 1 else 1
    parallelism = as_int(nested(replicated_job, "template", "spec", "parallelism"))
    per_job = 1 if parallelism is None else parallelism
    completions = as_int(nested(replicated_job, "template", "spec", "completions"))
    if completions is not None and completions < per_job:
        per_job = completions
    return replicas * per_job


@register("jobset.x-k8s.io", "JobSet", name="jobset")
def jobset_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = base_metadata(ctx, top)
    replicated_jobs = [job for job in nested(top, "spec", "replicatedJobs") or [] if isinstance(job, dict)]
    order = nested(top, "spec", "startupPolicy", "startupPolicyOrder")
    if order not in (None, "", "InOrder"):
        metadata.min_member = max(1, sum(replicated_job_pods(job) for job in replicated_jobs))
        return metadata
    # In-order start-up: each replicated job must be able to start before the next one is created.
    job_name = labels_of(ctx.pod).get(REPLICATED_JOB_LABEL)
    if not job_name:
        raise GroupingFailure(f"pod {namespace_of(ctx.pod)}/{name_of(ctx.pod)} of JobSet {name_of(top)} "
                              f"is missing the label {REPLICATED_JOB_LABEL}")
    metadata.name = f"{metadata.name}-{job_name}"
    matching = [job for job in replicated_jobs if job.get("name") == job_name]
    metadata.min_member = max(1, replicated_job_pods(matching[0])) if matching else 1
    return metadata
