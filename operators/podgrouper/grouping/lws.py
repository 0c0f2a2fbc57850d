"""leaderworkerset.x-k8s.io LeaderWorkerSet: one gang per group (leader + workers), optionally segmented."""

from __future__ import annotations

from operators.core import keys
from operators.podgrouper.grouping.common import (
    Context,
    annotations_of,
    as_int,
    base_metadata,
    labels_of,
    name_of,
    namespace_of,
    nested,
    segment_topology,
)
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, SubGroup
from operators.podgrouper.grouping.registry import register

GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LEADER, WORKERS = "leader", "workers"


def _min_member(ctx: Context, top: Obj, size: int) -> int:
    policy = nested(top, "spec", "startupPolicy") or "LeaderCreated"
    if policy == "LeaderCreated":
        return size
    if policy != "LeaderReady":
        raise GroupingFailure(f"unknown startupPolicy: {policy}")
    # Workers are created only once the leader is ready: until it is placed, the gang is the leader alone.
    is_leader = labels_of(ctx.pod).get(WORKER_INDEX_LABEL) == "0"
    if is_leader and not nested(ctx.pod, "spec", "nodeName"):
        return 1
    raw = annotations_of(ctx.pod).get(SIZE_ANNOTATION, "")
    return int(raw) if raw.isdigit() else size


def _segment_size(top: Obj, replicas: int) -> int | None:
    size = as_int(nested(top, "spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupSize"))
    if size is None:
        raw = annotations_of(top).get(keys.SEGMENT_SIZE)
        if raw is None:
            return None
        if not raw.isdigit():
            raise GroupingFailure(
                f"invalid segment size annotation {raw} in LWS {namespace_of(top)}/{name_of(top)}")
        size = int(raw)
    if size <= 1:
        raise GroupingFailure(f"segmentSize {size} is not valid. It must be greater than 1")
    if size > replicas:
        raise GroupingFailure(f"segmentSize {size} is greater than replicasSize {replicas}")
    return size


def _segmented(ctx: Context, top: Obj, replicas: int, size: int) -> tuple[list[SubGroup], str | None]:
    policy = nested(top, "spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupPolicyType")
    policy = policy or "LeaderWorker"
    divisible = (replicas - 1) % size == 0
    if policy == "LeaderExcluded" and not divisible:
        raise GroupingFailure(
            f"replicasSize {replicas} is not divisible by segmentSize {size}. "
            "LeaderExcluded policy is only supported when replicasSize is divisible by segmentSize.")

    def segment(index: int) -> int:
        # When the workers split evenly the leader rides along in the first segment as an extra pod.
        if index == 0:
            return 0
        return (index - 1) // size if divisible else index // size

    counts: dict[int, int] = {}
    first_worker = 1 if policy == "LeaderExcluded" else 0
    for index in range(first_worker, replicas):
        counts[segment(index)] = counts.get(segment(index), 0) + 1
    template = nested(top, "spec", "leaderWorkerTemplate", "workerTemplate")
    topology = segment_topology(ctx.pod, template, top)
    subgroups = [SubGroup(f"segment-{i}", counts[i], topology=dict(topology) if topology else None)
                 for i in sorted(counts)]
    raw_index = labels_of(ctx.pod).get(WORKER_INDEX_LABEL, "")
    if not raw_index.isdigit():
        raise GroupingFailure(
            f"failed to get worker index from pod {namespace_of(ctx.pod)}/{name_of(ctx.pod)}")
    worker_index = int(raw_index)
    if policy == "LeaderExcluded":
        subgroups.insert(0, SubGroup(LEADER, 1))
        return subgroups, LEADER if worker_index == 0 else f"segment-{segment(worker_index)}"
    first = subgroups[0]
    subgroups.append(SubGroup(LEADER, 1, parent=first.name))
    if first.min_member > 1:
        subgroups.append(SubGroup(WORKERS, first.min_member - 1, parent=first.name))
    if worker_index == 0:
        return subgroups, LEADER
    pod_segment = segment(worker_index)
    return subgroups, WORKERS if pod_segment == 0 else f"segment-{pod_segment}"


@register("leaderworkerset.x-k8s.io", "LeaderWorkerSet", name="leaderworkerset")
def lws_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = base_metadata(ctx, top)
    size = as_int(nested(top, "spec", "leaderWorkerTemplate", "size"))
    if size is None or size <= 0:
        raise GroupingFailure(f"invalid leaderWorkerTemplate.size in LWS {namespace_of(top)}/{name_of(top)}")
    metadata.min_member = _min_member(ctx, top, size)
    group_index = labels_of(ctx.pod).get(GROUP_INDEX_LABEL, "")
    if group_index.isdigit():
        metadata.name = f"{metadata.name}-group-{int(group_index)}"
    segment_size = _segment_size(top, metadata.min_member)
    if segment_size is not None:
        metadata.subgroups, metadata.pod_subgroup = _segmented(ctx, top, metadata.min_member, segment_size)
        return metadata
    is_leader = labels_of(ctx.pod).get(WORKER_INDEX_LABEL) == "0"
    metadata.subgroups = [SubGroup(LEADER, 1)]
    if metadata.min_member > 1:
        metadata.subgroups.append(SubGroup(WORKERS, metadata.min_member - 1))
    metadata.pod_subgroup = LEADER if is_leader else (WORKERS if metadata.min_member > 1 else None)
    return metadata
