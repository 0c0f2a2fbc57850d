"""serving.knative.dev Service: one gang per Revision (min-scale pods), or one PodGroup per pod."""

from __future__ import annotations

from operators.core import keys
from operators.podgrouper.grouping.common import (
    INFERENCE,
    Context,
    annotations_of,
    base_metadata,
    kind_of,
    labels_of,
    name_of,
    namespace_of,
    owner_reference,
    pg_name,
)
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, ObjectRef
from operators.podgrouper.grouping.registry import register

REVISION_LABEL = "serving.knative.dev/revision"
MIN_SCALE = "autoscaling.knative.dev/min-scale"
REVISION_API_VERSION = "serving.knative.dev/v1"


def _revision(ctx: Context, name: str) -> Obj:
    for owner in ctx.chain:
        if kind_of(owner) == "Revision" and name_of(owner) == name:
            return owner
    found = ctx.get(ObjectRef(REVISION_API_VERSION, "Revision", namespace_of(ctx.pod), name))
    if found is None:
        raise GroupingFailure(f'revisions.serving.knative.dev "{name}" not found')
    return found


def _revision_uses_per_pod_groups(ctx: Context, revision: Obj) -> bool:
    """Keep a revision that started with per-pod PodGroups that way (backward compatibility)."""
    selector = ((REVISION_LABEL, name_of(revision)),)
    pods = ctx.list(ObjectRef("v1", "Pod", namespace_of(ctx.pod), None, selector))
    names = [annotations_of(pod).get(keys.POD_GROUP_NAME) for pod in pods]
    names = [name for name in names if name]
    if len(names) != len(set(names)):
        return False  # two pods share a PodGroup: a gang revision
    if len(names) > 1:
        return True
    return bool(names) and names[0] != pg_name(revision)


@register("serving.knative.dev", "Service", name="knative-service")
def knative_rule(ctx: Context, top: Obj) -> Metadata:
    revision_name = labels_of(ctx.pod).get(REVISION_LABEL)
    if not revision_name:
        raise GroupingFailure(
            f"revisionName not found for knative service pod {namespace_of(ctx.pod)}/{name_of(ctx.pod)}")
    revision = _revision(ctx, revision_name)
    metadata = base_metadata(ctx, revision, default_priority=INFERENCE)
    if not ctx.config.knative_gang_schedule or _revision_uses_per_pod_groups(ctx, revision):
        metadata.name = pg_name(ctx.pod)
        metadata.owner = owner_reference(ctx.pod)
        return metadata
    raw = annotations_of(revision).get(MIN_SCALE, "")
    metadata.min_member = int(raw) if raw.isdigit() and int(raw) > 0 else 1
    return metadata
