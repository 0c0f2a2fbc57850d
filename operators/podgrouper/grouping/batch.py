"""batch/v1: Job (one PodGroup per pod) and CronJob (one per Job run)."""

from __future__ import annotations

from operators.core import keys
from operators.podgrouper.grouping.common import (
    PG_PREFIX,
    Context,
    as_int,
    base_metadata,
    name_of,
    namespace_of,
    nested,
    uid_of,
)
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, ObjectRef
from operators.podgrouper.grouping.registry import register

PODGROUP_API_VERSION = f"{keys.GROUP}/{keys.PODGROUP_VERSION}"


@register("batch", "Job", name="job")
def job_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = base_metadata(ctx, top)
    metadata.name = f"{PG_PREFIX}-{name_of(ctx.pod)}-{uid_of(top)}"
    parallelism = as_int(nested(top, "spec", "parallelism"))
    if ctx.config.search_legacy_pg and (parallelism is None or parallelism <= 1):
        # Older pod-groupers named single-pod Jobs after the Job: keep such a group rather than fork one.
        legacy = f"{PG_PREFIX}-{name_of(top)}-{uid_of(top)}"
        ref = ObjectRef(PODGROUP_API_VERSION, "PodGroup", namespace_of(ctx.pod), legacy)
        if ctx.get(ref) is not None:
            metadata.name = legacy
    return metadata


@register("batch", "CronJob", name="cronjob")
def cronjob_rule(ctx: Context, top: Obj) -> Metadata:
    # Each run is its own workload: group by the Job, and take queue and labels from the Job.
    jobs = [owner for owner in ctx.chain if owner.get("kind") == "Job"]
    if not jobs:
        raise GroupingFailure(
            f"pod {namespace_of(ctx.pod)}/{name_of(ctx.pod)} of CronJob {name_of(top)} has no Job owner")
    return base_metadata(ctx, jobs[-1])
