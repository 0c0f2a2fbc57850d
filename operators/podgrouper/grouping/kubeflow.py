"""kubeflow.org training jobs (PyTorchJob, TFJob, MPIJob, JAXJob, XGBoostJob) and Notebooks."""

from __future__ import annotations

from collections.abc import Sequence

from operators.core import keys
from operators.podgrouper.grouping.common import (
    BUILD,
    Context,
    as_int,
    base_metadata,
    labels_of,
    name_of,
    namespace_of,
    nested,
    segment_topology,
    template_value,
)
from operators.podgrouper.grouping.model import GroupingFailure, Metadata, Obj, ObjectRef, SubGroup
from operators.podgrouper.grouping.registry import register

MASTER, WORKER = "Master", "Worker"


def distributed_metadata(ctx: Context, top: Obj, spec_field: str, mandatory: Sequence[str] = ()) -> Metadata:
    """minMember = runPolicy.schedulingPolicy.minAvailable, else the sum of all replica specs' replicas."""
    metadata = base_metadata(ctx, top)
    min_available = as_int(nested(top, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
    if min_available is not None:
        metadata.min_member = min_available
        return metadata
    metadata.min_member = total_replicas(top, spec_field, mandatory)
    return metadata


def total_replicas(top: Obj, spec_field: str, mandatory: Sequence[str]) -> int:
    job = name_of(top)
    specs = nested(top, "spec", spec_field)
    if not isinstance(specs, dict):
        raise GroupingFailure(
            f"the type of the job {job} doesn't have a {spec_field} field. Please fix the replica field")
    for required in mandatory:
        if required not in specs:
            raise GroupingFailure(f"the type of the job {job} doesn't have a {required} replica spec "
                                  "which is required. Please fix the replica field")
    total = 0
    for replica_type, spec in specs.items():
        replicas = as_int(nested(spec, "replicas")) if isinstance(spec, dict) else None
        if not replicas:
            raise GroupingFailure(f"the type of the job {job} doesn't allow for 0 {replica_type} pods. "
                                  "Please fix the replica field")
        total += replicas
    if total <= 0:
        raise GroupingFailure(f"failed calculate number of pods for a distributed job {job}. "
                              f"Must be greater than 0, but got {total}")
    return total


# --- PyTorchJob ---------------------------------------------------------------------------------

def _segment_size(ctx: Context, worker_template: object) -> int | None:
    raw = template_value(ctx.pod, worker_template, keys.SEGMENT_SIZE)
    if not raw:
        return None
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size <= 0:
        raise GroupingFailure(f"invalid segment size {raw} on PyTorchJob {namespace_of(ctx.pod)}/"
                              f"{name_of(ctx.pod)}: must be a positive integer")
    return size


def _pytorch_subgroups(ctx: Context, top: Obj, min_member: int) -> tuple[list[SubGroup], str | None]:
    specs = nested(top, "spec", "pytorchReplicaSpecs") or {}
    role = labels_of(ctx.pod).get(keys.KUBEFLOW_REPLICA_TYPE, "")
    subgroups: list[SubGroup] = []
    pod_subgroup: str | None = None
    master_replicas = (as_int(nested(specs, MASTER, "replicas")) or 0) if MASTER in specs else 0
    if master_replicas > 0:
        subgroups.append(SubGroup("master", master_replicas))
        if role == "master":
            pod_subgroup = "master"
    if WORKER not in specs:
        return subgroups, pod_subgroup
    worker_spec = specs[WORKER]
    worker_template = nested(worker_spec, "template")
    worker_min = max(0, min_member - master_replicas)
    if worker_min == 0:
        # A subgroup needs minMember >= 1 (CRD); all workers are elastic here, so they get no subgroup.
        return subgroups, pod_subgroup
    subgroups.append(SubGroup("worker", worker_min))
    size = _segment_size(ctx, worker_template)
    if size is None:
        return subgroups, "worker" if role == "worker" else pod_subgroup
    # Segments split the workers into topology-local gangs; pods find theirs by replica index.
    worker_replicas = as_int(nested(worker_spec, "replicas"))
    worker_replicas = 1 if worker_replicas is None else worker_replicas
    topology = segment_topology(ctx.pod, worker_template, top)
    for start in range(0, max(worker_replicas, worker_min), size):
        index = start // size
        count = min(size, max(worker_replicas, worker_min) - start)
        subgroups.append(SubGroup(f"worker-{index}", count, parent="worker",
                                  topology=dict(topology) if topology else None))
    if role == "worker":
        raw_index = labels_of(ctx.pod).get(keys.KUBEFLOW_REPLICA_INDEX)
        if raw_index is None or not raw_index.isdigit():
            raise GroupingFailure(f"replica index label not found on pod {namespace_of(ctx.pod)}/"
                                  f"{name_of(ctx.pod)}")
        pod_subgroup = f"worker-{int(raw_index) // size}"
    return subgroups, pod_subgroup


@register("kubeflow.org", "PyTorchJob", name="pytorchjob")
def pytorchjob_rule(ctx: Context, top: Obj) -> Metadata:
    min_available = as_int(nested(top, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
    metadata = distributed_metadata(ctx, top, "pytorchReplicaSpecs")
    if min_available is None:
        elastic_min = as_int(nested(top, "spec", "elasticPolicy", "minReplicas"))
        if elastic_min is not None:
            metadata.min_member = elastic_min
    metadata.subgroups, metadata.pod_subgroup = _pytorch_subgroups(ctx, top, metadata.min_member)
    return metadata


@register("kubeflow.org", "TFJob", name="tfjob")
def tfjob_rule(ctx: Context, top: Obj) -> Metadata:
    return distributed_metadata(ctx, top, "tfReplicaSpecs")


@register("kubeflow.org", "XGBoostJob", name="xgboostjob")
def xgboostjob_rule(ctx: Context, top: Obj) -> Metadata:
    return distributed_metadata(ctx, top, "xgbReplicaSpecs", (MASTER, WORKER))


@register("kubeflow.org", "JAXJob", name="jaxjob")
def jaxjob_rule(ctx: Context, top: Obj) -> Metadata:
    return distributed_metadata(ctx, top, "jaxReplicaSpecs", (WORKER,))


@register("kubeflow.org", "MPIJob", "v1", "v2beta1", name="mpijob")
def mpijob_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = distributed_metadata(ctx, top, "mpiReplicaSpecs", ("Launcher", WORKER))
    if nested(top, "spec", "launcherCreationPolicy") == "WaitForWorkersReady":
        # The launcher is created only once the workers run: until then it cannot count towards the gang.
        selector = ((keys.KUBEFLOW_JOB_NAME, name_of(top)), (keys.KUBEFLOW_JOB_ROLE, "launcher"))
        launchers = ctx.list(ObjectRef("v1", "Pod", namespace_of(ctx.pod), None, selector))
        if not any(nested(pod, "metadata", "deletionTimestamp") is None for pod in launchers):
            launcher_replicas = as_int(nested(top, "spec", "mpiReplicaSpecs", "Launcher", "replicas")) or 0
            metadata.min_member -= launcher_replicas
    return metadata


@register("kubeflow.org", "Notebook", name="notebook")
def notebook_rule(ctx: Context, top: Obj) -> Metadata:
    return base_metadata(ctx, top, default_priority=BUILD)
