"""apps/v1: Deployment (one PodGroup per pod), ReplicaSet and StatefulSet (one per owner)."""

from __future__ import annotations

from operators.podgrouper.grouping.common import INFERENCE, Context, base_metadata, owner_reference, pg_name
from operators.podgrouper.grouping.model import Metadata, Obj
from operators.podgrouper.grouping.registry import register


@register("apps", "Deployment", name="deployment")
def deployment_rule(ctx: Context, top: Obj) -> Metadata:
    # Replicas of a service are independent: each pod is its own gang, owned (and collected) by the pod.
    metadata = base_metadata(ctx, top, default_priority=INFERENCE)
    metadata.name = pg_name(ctx.pod)
    metadata.owner = owner_reference(ctx.pod)
    return metadata


@register("apps", "ReplicaSet", name="replicaset")
@register("apps", "StatefulSet", name="statefulset")
def owner_wide_rule(ctx: Context, top: Obj) -> Metadata:
    # The Default grouper, selected explicitly: all replicas share one elastic PodGroup.
    return base_metadata(ctx, top, priority_owners=ctx.chain)
