"""Every label, annotation, resource name, condition and event reason of KAI's contract, in one place.

The values are wire constants: user YAML, KubeRay and dashboards depend on them byte for byte.
"""

from __future__ import annotations

from typing import Final

# --- API groups and versions -------------------------------------------------------------------
GROUP: Final = "scheduling.run.ai"
QUEUE_VERSION: Final = "v2"
PODGROUP_VERSION: Final = "v2alpha2"
BINDREQUEST_VERSION: Final = "v1alpha2"
QUEUE_PLURAL: Final = "queues"
PODGROUP_PLURAL: Final = "podgroups"
BINDREQUEST_PLURAL: Final = "bindrequests"

SCHEDULER_NAME: Final = "kai-scheduler"
KAI_NAMESPACE: Final = "kai-scheduler"
DEFAULT_QUEUE: Final = "default-queue"
DEFAULT_PARENT_QUEUE: Final = "default-parent-queue"

# --- user-facing labels and annotations ---------------------------------------------------------
QUEUE_LABEL: Final = "kai.scheduler/queue"
# Autoscaler opt-in (on a workload or a Queue): the ProvisioningRequest class, and its parameters as
# `provisioning.kai.scheduler/<name>: <value>` annotations.
PROVISIONING_CLASS_ANNOTATION: Final = "kai.scheduler/provisioning-class"
PROVISIONING_PARAMETER_PREFIX: Final = "provisioning.kai.scheduler/"
PRIORITY_CLASS_LABEL: Final = "priorityClassName"
PREEMPTIBILITY_LABEL: Final = "kai.scheduler/preemptibility"
RAY_PRIORITY_CLASS_LABEL: Final = "ray.io/priority-class-name"
GPU_FRACTION: Final = "gpu-fraction"
GPU_MEMORY: Final = "gpu-memory"
GPU_FRACTION_NUM_DEVICES: Final = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER_NAME: Final = "gpu-fraction-container-name"
MPS: Final = "mps"
TOPOLOGY: Final = "kai.scheduler/topology"
TOPOLOGY_REQUIRED: Final = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED: Final = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE: Final = "kai.scheduler/segment-size"
TASK_PRIORITY_LABEL: Final = "kai.scheduler/task-priority"
# A Go duration a pending workload must wait before it may cause evictions (label, as KAI reads it, or
# annotation); the PodGroup carries it as spec.preemptionDelay.
PREEMPTION_DELAY: Final = "kai.scheduler/preemption-delay"
# Beyond KAI, on a Queue: `forbid` keeps its workloads' PodDisruptionBudgets whole (`allow`: tried last).
PDB_VIOLATION: Final = "kai.scheduler/pdb-violation"
# Beyond KAI, on a workload's top owner or a Queue: `true` suspends a suspendable owner chosen as a victim
# (`spec.suspend`) instead of evicting its pods; `false` on a workload overrides its queue's `true`.
SUSPEND_ON_PREEMPTION: Final = "kai.scheduler/suspend-on-preemption"
NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"
PROJECT_LABEL: Final = "project"
USER_LABEL: Final = "user"
POD_GROUP_NAME: Final = "pod-group-name"

# --- system-written keys -------------------------------------------------------------------------
SUBGROUP_LABEL: Final = "kai.scheduler/subgroup-name"
TOP_OWNER_METADATA: Final = "kai.scheduler/top-owner-metadata"
STALE_PODGROUP_TIMESTAMP: Final = "kai.scheduler/stale-podgroup-timestamp"
LAST_START_TIMESTAMP: Final = "kai.scheduler/last-start-timestamp"
# Stamped by the scheduler on a PodGroup when it evicts on its behalf: its preemption delay counts from here.
LAST_EVICTION_TIMESTAMP: Final = "kai.scheduler/last-eviction-timestamp"
# Stamped by the scheduler on the PodGroup of an owner it suspended: what it needs to resume it whole (JSON).
SUSPENDED_BY_SCHEDULER: Final = "kai.scheduler/suspended-by-scheduler"
SHARED_GPU_CONFIGMAP: Final = "runai/shared-gpu-configmap"
GPU_GROUP_LABEL: Final = "runai-gpu-group"
RECEIVED_RESOURCE_TYPE: Final = "received-resource-type"
RESERVE_FOR_GPU_INDEX: Final = "run.ai/reserve_for_gpu_index"
DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
RESERVATION_APP_LABEL_VALUE: Final = "kai-resource-reservation"
RESERVATION_NAMESPACE: Final = "kai-resource-reservation"
RESERVATION_SERVICE_ACCOUNT: Final = "kai-resource-reservation"
SELECTED_NODE_LABEL: Final = "selected-node"
FAKE_GPU_NODE_LABEL: Final = "run.ai/fake.gpu"

# --- node labels written by the GPU operator ------------------------------------------------------
NODE_GPU_COUNT: Final = "nvidia.com/gpu.count"
NODE_GPU_MEMORY: Final = "nvidia.com/gpu.memory"
NODE_GPU_PRODUCT: Final = "nvidia.com/gpu.product"

# --- resource names ------------------------------------------------------------------------------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_MEMORY_RESOURCE: Final = "run.ai/gpu.memory"

# --- workload labels read by the pod-grouper and the scheduler ---------------------------------
RAY_GROUP_LABEL: Final = "ray.io/group"
RAY_NODE_TYPE_LABEL: Final = "ray.io/node-type"
RAY_CLUSTER_LABEL: Final = "ray.io/cluster"
KUBEFLOW_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
KUBEFLOW_JOB_NAME: Final = "training.kubeflow.org/job-name"
KUBEFLOW_JOB_ROLE: Final = "training.kubeflow.org/job-role"

# --- resource types on BindRequests and pods ------------------------------------------------------
RESOURCE_TYPE_REGULAR: Final = "Regular"
RESOURCE_TYPE_FRACTION: Final = "Fraction"
RESOURCE_TYPE_MIG: Final = "MigInstance"

# --- BindRequest phases -------------------------------------------------------------------------
BIND_PHASE_SUCCEEDED: Final = "Succeeded"
BIND_PHASE_FAILED: Final = "Failed"

# --- preemptibility -----------------------------------------------------------------------------
PREEMPTIBLE: Final = "preemptible"
NON_PREEMPTIBLE: Final = "non-preemptible"
# KAI v0.18 (alpha): non-preemptible up to the gang minimum (or minNonPreemptible), preemptible above it.
SEMI_PREEMPTIBLE: Final = "semi-preemptible"
# KAI v0.18: "false" on a workload (or its pods) keeps consolidation from moving it (PodGroup spec.safeToConsolidate).
SAFE_TO_CONSOLIDATE: Final = "kai.scheduler/safe-to-consolidate"
# Quota gates (beyond KAI): admission gates new pods with it, the scheduler lifts it once quota admits the gang.
QUOTA_GATE: Final = "kai.scheduler/quota"
REASON_WAITING_FOR_QUOTA: Final = "WaitingForQuota"

# --- priority classes installed with the suite ---------------------------------------------------
PRIORITY_CLASSES: Final[dict[str, int]] = {
    "train": 50,
    "build-preemptible": 75,
    "build": 100,
    "inference": 125,
}
DEFAULT_PODGROUP_PRIORITY: Final = 50
NON_PREEMPTIBLE_PRIORITY_THRESHOLD: Final = 100

# --- conditions and reasons ---------------------------------------------------------------------
CONDITION_UNSCHEDULABLE_ON_NODE_POOL: Final = "UnschedulableOnNodePool"
CONDITION_POD_BOUND: Final = "PodBound"
CONDITION_POD_SCHEDULED: Final = "PodScheduled"
CONDITION_DISRUPTION_TARGET: Final = "DisruptionTarget"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_NON_PREEMPTIBLE_OVER_QUOTA: Final = "NonPreemptibleOverQuota"
REASON_OVER_LIMIT: Final = "OverLimit"
REASON_QUEUE_DOES_NOT_EXIST: Final = "QueueDoesNotExist"
REASON_POD_SCHEDULING_ERRORS: Final = "PodSchedulingErrors"
REASON_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"

# --- event reasons ------------------------------------------------------------------------------
EVENT_SCHEDULED: Final = "Scheduled"
EVENT_PIPELINED: Final = "Pipelined"
EVENT_NOT_READY: Final = "NotReady"
EVENT_EVICT: Final = "Evict"
EVENT_UNSCHEDULABLE: Final = "Unschedulable"
EVENT_STALE_JOB: Final = "StaleJob"
EVENT_BOUND: Final = "Bound"
EVENT_BINDING_ERROR: Final = "BindingError"
EVENT_POD_GROUPER_WARNING: Final = "PodGrouperWarning"
