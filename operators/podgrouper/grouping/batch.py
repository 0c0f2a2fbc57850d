"""batch/v1: Job (one PodGroup per Job) and CronJob (one per Job run)."""

from __future__ import annotations

from operators.core.api.podgroup import API_VERSION
from operators.podgrouper.grouping.common import (
    PG_PREFIX,
    Context,
    base_metadata,
    name_of,
    namespace_of,
    uid_of,
)
from operators.podgrouper.grouping.minmember import min_member_of
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, ObjectRef
from operators.podgrouper.grouping.registry import register


@register("batch", "Job", name="job")
def job_rule(ctx: Context, top: Obj) -> Metadata:
    """KAI v0.15+: a Job's pods share `pg-<job>-<uid>`, minMember 1 or `kai.scheduler/batch-min-member` (a gang).

    Older pod-groupers gave each pod of a Job its own `pg-<pod>-<job uid>`: with `--search-legacy-pg` a pod whose
    such PodGroup exists keeps it (minMember 1), so running pods are not re-parented by an upgrade.
    """
    metadata = base_metadata(ctx, top)
    if ctx.config.search_legacy_pg:
        legacy = f"{PG_PREFIX}-{name_of(ctx.pod)}-{uid_of(top)}"
        if legacy != metadata.name:
            ref = ObjectRef(API_VERSION, "PodGroup", namespace_of(ctx.pod), legacy)
            if ctx.get(ref) is not None:
                metadata.name = legacy
                return metadata
    metadata.min_member = min_member_of(top, "Job", 1)
    return metadata


@register("batch", "CronJob", name="cronjob")
def cronjob_rule(ctx: Context, top: Obj) -> Metadata:
    # Each run is its own workload: group by the Job, and take queue and labels from the Job.
    jobs = [owner for owner in ctx.chain if owner.get("kind") == "Job"]
    if not jobs:
        raise GroupingFailure(
            f"pod {namespace_of(ctx.pod)}/{name_of(ctx.pod)} of CronJob {name_of(top)} has no Job owner")
    return base_metadata(ctx, jobs[-1])
