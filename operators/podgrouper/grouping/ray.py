"""ray.io: RayCluster, and RayJob / RayService through the RayCluster they run on.

The gang follows KubeRay's own PodGroup arithmetic: the head plus the minimum of every worker group.
"""

from __future__ import annotations

from typing import Any

from operators.core import keys
from operators.core.api.podgroup import API_VERSION
from operators.podgrouper.grouping.common import (
    Context,
    api_version_of,
    as_int,
    base_metadata,
    kind_of,
    labels_of,
    name_of,
    namespace_of,
    nested,
)
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, ObjectRef, SubGroup
from operators.podgrouper.grouping.registry import register

HEAD_GROUP = "headgroup"


def _template_topology(template: Any, subgroup: str) -> dict[str, str] | None:
    annotations = nested(template, "metadata", "annotations") if isinstance(template, dict) else None
    annotations = annotations if isinstance(annotations, dict) else {}
    topology = annotations.get(keys.TOPOLOGY, "")
    required = annotations.get(keys.TOPOLOGY_REQUIRED, "")
    preferred = annotations.get(keys.TOPOLOGY_PREFERRED, "")
    if (required or preferred) and not topology:
        raise GroupingFailure(f"topology annotation ({keys.TOPOLOGY}) is required for {subgroup} "
                              "when topology placement annotations are set")
    if not topology:
        return None
    out = {"topology": topology}
    if required:
        out["requiredTopologyLevel"] = required
    if preferred:
        out["preferredTopologyLevel"] = preferred
    return out


def cluster_gang(cluster: Obj) -> tuple[int, list[SubGroup]]:
    """minMember and subgroups of a RayCluster: head (1) + per worker group min (or replicas) x numOfHosts."""
    head = SubGroup(HEAD_GROUP, 1, topology=_template_topology(nested(cluster, "spec", "headGroupSpec",
                                                                       "template"), HEAD_GROUP))
    subgroups = [head]
    total = 1
    for index, spec in enumerate(nested(cluster, "spec", "workerGroupSpecs") or []):
        # KubeRay's field is `suspend`; `suspended` is what KAI reads. A suspended group gets no pods, so counting
        # it would hold the gang forever: either spelling skips it.
        if not isinstance(spec, dict) or spec.get("suspend") is True or spec.get("suspended") is True:
            continue
        replicas = as_int(spec.get("replicas")) or 0
        min_replicas = as_int(spec.get("minReplicas")) or 0
        if min_replicas > replicas:
            raise GroupingFailure(
                "ray-cluster replicas for a workerGroupsSpec can't be less than minReplicas. "
                f"Given {replicas} replicas and {min_replicas} minReplicas. "
                f"Please fix the replicas field for group number {index}")
        if replicas == 0 and min_replicas == 0:
            continue
        hosts = as_int(spec.get("numOfHosts"))
        hosts = 1 if hosts is None else hosts
        count = (min_replicas if min_replicas > 0 else replicas) * hosts
        total += count
        name = spec.get("groupName") or f"worker-group-{index}"
        subgroups.append(SubGroup(str(name), count, topology=_template_topology(spec.get("template"), name)))
    return total, subgroups


def _ray_metadata(ctx: Context, top: Obj, cluster: Obj) -> Metadata:
    metadata = base_metadata(ctx, top)
    metadata.min_member, subgroups = cluster_gang(cluster)
    existing = ctx.get(ObjectRef(API_VERSION, "PodGroup", metadata.namespace, metadata.name))
    # Backward compatibility: a PodGroup created before subgroups existed keeps its flat gang.
    if existing is None or nested(existing, "spec", "subGroups"):
        metadata.subgroups = subgroups
        group = labels_of(ctx.pod).get(keys.RAY_GROUP_LABEL)
        if group in {subgroup.name for subgroup in subgroups}:
            metadata.pod_subgroup = group
    override = labels_of(top).get(keys.RAY_PRIORITY_CLASS_LABEL)
    if override is not None:  # Ray's own priority label wins, unchecked
        metadata.priority_class = override
    return metadata


def _cluster_named(ctx: Context, top: Obj, paths: tuple[tuple[str, ...], ...]) -> Obj:
    cluster_name = ""
    for path in paths:
        value = nested(top, *path)
        if value:
            cluster_name = str(value)
            break
    if not cluster_name:
        raise GroupingFailure(
            f"failed to extract rayClusterName for {namespace_of(top)}/{name_of(top)} "
            f"of kind {kind_of(top)}. Please make sure that the ray-operator is up "
            "and a rayCluster child-object has been created")
    namespace = namespace_of(top) or namespace_of(ctx.pod)
    ref = ObjectRef(api_version_of(top), "RayCluster", namespace, cluster_name)
    cluster = ctx.get(ref)
    if cluster is None:
        raise GroupingFailure(f'rayclusters.ray.io "{cluster_name}" not found')
    return cluster


@register("ray.io", "RayCluster", name="raycluster")
def raycluster_rule(ctx: Context, top: Obj) -> Metadata:
    return _ray_metadata(ctx, top, top)


@register("ray.io", "RayJob", name="rayjob")
def rayjob_rule(ctx: Context, top: Obj) -> Metadata:
    return _ray_metadata(ctx, top, _cluster_named(ctx, top, (("status", "rayClusterName"),)))


@register("ray.io", "RayService", name="rayservice")
def rayservice_rule(ctx: Context, top: Obj) -> Metadata:
    paths = (("status", "activeServiceStatus", "rayClusterName"),
             ("status", "pendingServiceStatus", "rayClusterName"))
    return _ray_metadata(ctx, top, _cluster_named(ctx, top, paths))
