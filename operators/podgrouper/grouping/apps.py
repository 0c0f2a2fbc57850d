"""apps/v1: Deployment (one PodGroup per Deployment, or per pod), ReplicaSet and StatefulSet (one per owner)."""

from __future__ import annotations

from operators.core import keys
from operators.core.api.podgroup import API_VERSION
from operators.podgrouper.grouping.common import (
    INFERENCE,
    Context,
    annotations_of,
    base_metadata,
    name_of,
    namespace_of,
    nested,
    owner_reference,
    pg_name,
)
from operators.podgrouper.grouping.minmember import min_member_of
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, ObjectRef
from operators.podgrouper.grouping.registry import register


@register("apps", "Deployment", name="deployment")
def deployment_rule(ctx: Context, top: Obj) -> Metadata:
    """KAI v0.18: a Deployment's pods share one PodGroup `pg-<deployment>-<uid>` owned by the Deployment, minMember 1
    or `kai.scheduler/batch-min-member`. A Deployment whose pods already have a PodGroup each (grouped by an older
    pod-grouper) keeps that, so running pods are not re-parented; `--gang-schedule-deployment=false` keeps it for
    every Deployment.
    """
    metadata = base_metadata(ctx, top, default_priority=INFERENCE)
    if not ctx.config.gang_schedule_deployment or _has_podgroup_per_pod(ctx, top):
        metadata.name = pg_name(ctx.pod)
        metadata.owner = owner_reference(ctx.pod)
        return metadata
    metadata.min_member = min_member_of(top, "Deployment", 1)
    return metadata


def _has_podgroup_per_pod(ctx: Context, deployment: Obj) -> bool:
    """Whether the Deployment's pods are already spread over a PodGroup each (KAI's rule, on the pods'
    `pod-group-name`): two pods sharing one PodGroup -> no; two or more PodGroups -> yes; exactly one -> whatever
    that PodGroup's owner says (a Pod: yes; the Deployment, or gone: no)."""
    selector = nested(deployment, "spec", "selector", "matchLabels")
    if not isinstance(selector, dict) or not selector:
        return False  # no selector to find its pods by: as a new Deployment (KAI lists no pods either)
    namespace = namespace_of(deployment)
    pods = ctx.list(ObjectRef("v1", "Pod", namespace, labels=tuple(sorted((str(k), str(v))
                                                                          for k, v in selector.items()))))
    groups: set[str] = set()
    for pod in pods:
        group = annotations_of(pod).get(keys.POD_GROUP_NAME)
        if not group:
            continue
        if group in groups:
            return False  # two pods in one PodGroup: already grouped as one
        groups.add(group)
    if len(groups) != 1:
        return len(groups) > 1
    only = next(iter(groups))
    podgroup = ctx.get(ObjectRef(API_VERSION, "PodGroup", namespace, only))
    if podgroup is None:
        return False
    owners = (podgroup.get("metadata") or {}).get("ownerReferences") or []
    problem = f"unable to determine gang behavior for deployment {namespace}/{name_of(deployment)} and pod " \
              f"{namespace_of(ctx.pod)}/{name_of(ctx.pod)}"
    if not owners:
        raise GroupingFailure(f"{problem}: podgroup {only} has no owner references")
    kind = owners[0].get("kind")
    if kind == "Deployment":
        return False
    if kind == "Pod":
        return True
    raise GroupingFailure(f"{problem}: podgroup {only} has unexpected owner reference: {owners[0]}")


@register("apps", "ReplicaSet", name="replicaset")
@register("apps", "StatefulSet", name="statefulset")
def owner_wide_rule(ctx: Context, top: Obj) -> Metadata:
    # The Default grouper, selected explicitly: all replicas share one elastic PodGroup.
    return base_metadata(ctx, top, priority_owners=ctx.chain)
