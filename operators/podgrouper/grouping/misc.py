"""Smaller integrations: NVIDIA SPOTRequest, Azure ML AmlJob, legacy Run:ai RunaiJob."""

from __future__ import annotations

from operators.podgrouper.grouping.common import (
    INFERENCE,
    PG_PREFIX,
    Context,
    base_metadata,
    name_of,
    nested,
    uid_of,
)
from operators.podgrouper.grouping.model import Metadata, Obj
from operators.podgrouper.grouping.registry import register


@register("egx.nvidia.io", "SPOTRequest", name="spotrequest")
def spotrequest_rule(ctx: Context, top: Obj) -> Metadata:
    return base_metadata(ctx, top, default_priority=INFERENCE)


@register("amlarc.azureml.com", "AmlJob", name="amljob")
def amljob_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = base_metadata(ctx, top)
    raw = nested(top, "spec", "job", "options", "envs", "AZUREML_NODE_COUNT")
    if raw is not None and str(raw).isdigit() and int(raw) > 0:
        metadata.min_member = int(raw)
    return metadata


@register("run.ai", "RunaiJob", name="runaijob")
def runaijob_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = base_metadata(ctx, top)
    # One PodGroup per pod "run": the pod name without its random suffix.
    pod_name = name_of(ctx.pod)
    base = pod_name.rsplit("-", 1)[0] if "-" in pod_name else pod_name
    metadata.name = f"{PG_PREFIX}-{base}-{uid_of(top)}"
    return metadata
