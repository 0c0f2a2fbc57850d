"""Grouping rules per owner kind: names, gang sizes, priorities, queues and user-facing errors."""

from __future__ import annotations

from typing import Any

import pytest
from pg_builders import World, child, load_kind, ok, pod_from_template

from operators.core import keys
from operators.podgrouper.grouping import (
    GrouperConfig,
    GroupingError,
    KindDefaults,
    Lookups,
    NeedObjects,
    group_pod,
    merge_with_existing,
    parse_kind_defaults,
)
from operators.podgrouper.grouping.minmember import MIN_MEMBER_KEY as BATCH_MIN_MEMBER

TEMPLATE: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def pod_of(owner: dict[str, Any] | None, name: str = "p-0", labels: dict[str, str] | None = None,
           annotations: dict[str, str] | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    template = {"metadata": {"labels": labels or {}, "annotations": annotations or {}},
                "spec": {**TEMPLATE["spec"], **(spec or {})}}
    return pod_from_template(name, owner, template)


def error(result: object) -> str:
    assert isinstance(result, GroupingError), result
    return result.message


# --- queue, priority, preemptibility -----------------------------------------------------------

def test_queue_owner_label_wins_then_pod_then_project_then_default() -> None:
    sts = child("apps/v1", "StatefulSet", "s", None, labels={keys.QUEUE_LABEL: "from-owner"})
    sts["metadata"]["namespace"] = "default"
    pod = pod_of(sts, labels={keys.QUEUE_LABEL: "from-pod", keys.PROJECT_LABEL: "proj"})
    assert ok(World().group(pod, [sts])).spec["queue"] == "from-owner"
    sts["metadata"]["labels"] = {}
    assert ok(World().group(pod, [sts])).spec["queue"] == "from-pod"
    del pod["metadata"]["labels"][keys.QUEUE_LABEL]
    assert ok(World().group(pod, [sts])).spec["queue"] == "proj"
    pod["metadata"]["labels"][keys.NODE_POOL_LABEL] = "pool-a"
    result = ok(World().group(pod, [sts]))
    assert result.spec["queue"] == "proj-pool-a"
    assert result.podgroup["metadata"]["labels"][keys.NODE_POOL_LABEL] == "pool-a"  # copied from the pod
    pod["metadata"]["labels"] = {}
    assert ok(World().group(pod, [sts])).spec["queue"] == keys.DEFAULT_QUEUE


def test_configurable_queue_label_key() -> None:
    pod = pod_of(None, labels={"my/queue": "q1", keys.QUEUE_LABEL: "ignored"})
    assert ok(World().group(pod, [], config=GrouperConfig(queue_label_key="my/queue"))).spec["queue"] == "q1"


def test_priority_only_from_existing_priority_classes() -> None:
    pod = pod_of(None, labels={keys.PRIORITY_CLASS_LABEL: "nope"}, spec={"priorityClassName": "build"})
    assert ok(World().group(pod, [])).spec["priorityClassName"] == "build"
    pod["spec"]["priorityClassName"] = "also-missing"
    assert ok(World().group(pod, [])).spec["priorityClassName"] == "train"


def test_priority_intermediate_owner_label_counts_for_default_grouper() -> None:
    rs = child("apps/v1", "ReplicaSet", "rs", None, labels={keys.PRIORITY_CLASS_LABEL: "build"})
    rs["metadata"]["namespace"] = "default"
    top = child("example.com/v1", "Widget", "w", None)
    top["metadata"]["namespace"] = "default"
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
                                          "uid": top["metadata"]["uid"]}]
    pod = pod_of(rs)
    result = ok(World().group(pod, [rs, top]))
    assert result.rule == "default"
    assert result.name == f"pg-w-{top['metadata']['uid']}"
    assert result.spec["priorityClassName"] == "build"


def test_preemptibility_label_and_kind_defaults() -> None:
    sts = child("apps/v1", "StatefulSet", "s", None, labels={keys.PREEMPTIBILITY_LABEL: "Non-Preemptible"})
    sts["metadata"]["namespace"] = "default"
    pod = pod_of(sts, labels={keys.PREEMPTIBILITY_LABEL: "non-preemptible"})
    # The owner's value is not a valid one (labels are case-sensitive): the pod's applies.
    assert ok(World().group(pod, [sts])).spec["preemptibility"] == "non-preemptible"
    pod["metadata"]["labels"] = {}
    assert "preemptibility" not in ok(World().group(pod, [sts])).spec
    defaults = parse_kind_defaults({"types": '[{"typeName": "StatefulSet", "group": "apps", '
                                             '"priorityName": "build", "preemptibility": "Preemptible"}]'})
    assert defaults["StatefulSet.apps"] == KindDefaults("build", "Preemptible")
    result = ok(World().group(pod, [sts], Lookups(kind_defaults=defaults)))
    assert result.spec["priorityClassName"] == "build"
    assert result.spec["preemptibility"] == "preemptible"


def test_preemption_delay_from_the_owner_label_or_annotation_then_the_pod() -> None:
    delay = keys.PREEMPTION_DELAY
    sts = child("apps/v1", "StatefulSet", "s", None, labels={delay: "2m"})
    sts["metadata"]["namespace"] = "default"
    pod = pod_of(sts, annotations={delay: "30s"})
    assert ok(World().group(pod, [sts])).spec["preemptionDelay"] == "2m"  # the top owner first
    sts["metadata"]["labels"] = {delay: "soon"}  # malformed: skipped, the pod's (its template's) applies
    assert ok(World().group(pod, [sts])).spec["preemptionDelay"] == "30s"
    sts["metadata"]["labels"], sts["metadata"]["annotations"] = {}, {delay: "90s"}
    assert ok(World().group(pod, [sts])).spec["preemptionDelay"] == "90s"
    sts["metadata"]["annotations"] = {}
    pod["metadata"]["annotations"] = {}
    assert "preemptionDelay" not in ok(World().group(pod, [sts])).spec


def test_the_preemption_delay_follows_the_workload_on_an_existing_podgroup() -> None:
    sts = child("apps/v1", "StatefulSet", "s", None, labels={keys.PREEMPTION_DELAY: "1m"})
    sts["metadata"]["namespace"] = "default"
    desired = ok(World().group(pod_of(sts), [sts])).podgroup
    live = {**desired, "spec": {k: v for k, v in desired["spec"].items() if k != "preemptionDelay"}}
    merged, changed = merge_with_existing(desired, live)
    assert changed and merged["spec"]["preemptionDelay"] == "1m"


def test_kind_defaults_parse_errors() -> None:
    with pytest.raises(ValueError, match="<types>"):
        parse_kind_defaults({})
    with pytest.raises(ValueError, match="unmarshal"):
        parse_kind_defaults({"types": "{"})


def test_labels_annotations_and_topology_from_top_owner() -> None:
    sts = child("apps/v1", "StatefulSet", "s", None, labels={"team": "a"},
                annotations={keys.TOPOLOGY: "dc", keys.TOPOLOGY_REQUIRED: "rack", "user": "owner-user"})
    sts["metadata"]["namespace"] = "default"
    pod = pod_of(sts, labels={"user": "alice"}, annotations={"user": "bob"})
    result = ok(World().group(pod, [sts]))
    assert result.podgroup["metadata"]["labels"] == {"team": "a", "user": "alice"}
    assert result.podgroup["metadata"]["annotations"]["user"] == "owner-user"  # owner annotations win
    assert result.spec["topologyConstraint"] == {"topology": "dc", "requiredTopologyLevel": "rack"}


def test_multiple_owners_error() -> None:
    rs = child("apps/v1", "ReplicaSet", "rs", None)
    rs["metadata"]["namespace"] = "ns1"
    rs["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "uid": "u1", "controller": True},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "u2"}]
    message = error(group_pod(pod_of(rs), [rs]))
    assert message == ("found ReplicaSet <rs in namespace ns1> with multiple owners: "
                       "[{apps/v1 Deployment a u1 true <nil>} {apps/v1 Deployment b u2 <nil> <nil>}]")


# --- apps and batch -------------------------------------------------------------------------------

def test_replicaset_and_statefulset_share_one_group() -> None:
    for kind in ("ReplicaSet", "StatefulSet"):
        owner = child("apps/v1", kind, "o", None)
        owner["metadata"]["namespace"] = "default"
        names = {ok(World().group(pod_of(owner, f"o-{i}"), [owner])).name for i in range(3)}
        assert names == {f"pg-o-{owner['metadata']['uid']}"}


def test_job_keeps_a_pods_legacy_podgroup() -> None:
    # Older pod-groupers gave each pod of a Job its own `pg-<pod>-<job uid>`: an upgrade does not re-parent it.
    job = load_kind("batch/batch-job.yaml", "Job")
    job["metadata"].setdefault("annotations", {})[BATCH_MIN_MEMBER] = "2"
    uid = job["metadata"]["uid"]
    pod = pod_from_template("batch-job-zzz", job, job["spec"]["template"])
    legacy = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
              "metadata": {"name": f"pg-batch-job-zzz-{uid}", "namespace": "default"}}
    kept = ok(World(legacy).group(pod, [job]))
    assert (kept.name, kept.spec["minMember"]) == (f"pg-batch-job-zzz-{uid}", 1)
    fresh = ok(World().group(pod, [job]))
    assert (fresh.name, fresh.spec["minMember"]) == (f"pg-batch-job-{uid}", 2)
    no_search = GrouperConfig(search_legacy_pg=False)
    assert ok(World(legacy).group(pod, [job], config=no_search)).name == f"pg-batch-job-{uid}"


def test_cronjob_groups_per_job_run_with_job_metadata() -> None:
    cron = child("batch/v1", "CronJob", "nightly", None, labels={keys.QUEUE_LABEL: "cron-q"})
    cron["metadata"]["namespace"] = "default"
    job = child("batch/v1", "Job", "nightly-2890", cron, labels={keys.QUEUE_LABEL: "job-q"})
    result = ok(World().group(pod_of(job), [job, cron]))
    assert result.name == f"pg-nightly-2890-{job['metadata']['uid']}"
    assert result.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert result.spec["queue"] == "job-q"


def test_bare_spark_pod_named_by_app_selector() -> None:
    pod = pod_of(None, labels={"spark-app-name": "pi", "spark-app-selector": "spark-3f2a"})
    assert ok(World().group(pod, [])).name == "spark-3f2a"


# --- Ray --------------------------------------------------------------------------------------

def ray_cluster(workers: list[dict[str, Any]], labels: dict[str, str] | None = None,
                head_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    cluster = child("ray.io/v1", "RayCluster", "rc", None, labels=labels,
                    spec={"headGroupSpec": {"template": {"metadata": {"annotations": head_annotations or {}},
                                                         "spec": TEMPLATE["spec"]}},
                          "workerGroupSpecs": workers})
    cluster["metadata"]["namespace"] = "default"
    return cluster


def test_ray_gang_arithmetic() -> None:
    cluster = ray_cluster([
        {"groupName": "a", "replicas": 4, "minReplicas": 1, "numOfHosts": 2},
        {"replicas": 3},
        {"groupName": "off", "replicas": 5, "minReplicas": 5, "suspended": True},
        {"groupName": "zero", "replicas": 0, "minReplicas": 0},
        {"groupName": "paused", "replicas": 2, "suspend": True},  # KubeRay's own field
    ], labels={keys.RAY_PRIORITY_CLASS_LABEL: "not-checked"})
    result = ok(World().group(pod_of(cluster, labels={keys.RAY_GROUP_LABEL: "worker-group-1"}), [cluster]))
    assert result.spec["minMember"] == 1 + 2 + 3
    assert result.spec["subGroups"] == [{"name": "headgroup", "minMember": 1}, {"name": "a", "minMember": 2},
                                        {"name": "worker-group-1", "minMember": 3}]
    assert result.subgroup == "worker-group-1"
    assert result.spec["priorityClassName"] == "not-checked"


def test_ray_min_replicas_above_replicas() -> None:
    cluster = ray_cluster([{"groupName": "ok", "replicas": 1},
                           {"groupName": "w", "replicas": 1, "minReplicas": 2}])
    assert error(World().group(pod_of(cluster), [cluster])) == (
        "ray-cluster replicas for a workerGroupsSpec can't be less than minReplicas. Given 1 replicas and 2 "
        "minReplicas. Please fix the replicas field for group number 1")


def test_ray_subgroup_topology() -> None:
    worker = {"groupName": "w", "replicas": 2, "template": {"metadata": {"annotations": {
        keys.TOPOLOGY: "cluster-topo", keys.TOPOLOGY_PREFERRED: "rack"}}}}
    cluster = ray_cluster([worker])
    result = ok(World().group(pod_of(cluster), [cluster]))
    assert result.spec["subGroups"][1]["topologyConstraint"] == {"topology": "cluster-topo",
                                                                 "preferredTopologyLevel": "rack"}
    cluster = ray_cluster([worker], head_annotations={keys.TOPOLOGY_REQUIRED: "zone"})
    assert error(World().group(pod_of(cluster), [cluster])) == (
        "topology annotation (kai.scheduler/topology) is required for headgroup when topology placement "
        "annotations are set")


def test_ray_keeps_legacy_podgroup_without_subgroups() -> None:
    cluster = ray_cluster([{"groupName": "w", "replicas": 2}])
    pod = pod_of(cluster, labels={keys.RAY_GROUP_LABEL: "w"})
    legacy = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
              "metadata": {"name": f"pg-rc-{cluster['metadata']['uid']}", "namespace": "default"},
              "spec": {"minMember": 3, "queue": "q"}}
    result = ok(World(legacy).group(pod, [cluster]))
    assert "subGroups" not in result.spec
    assert result.subgroup is None
    assert result.spec["minMember"] == 3


def test_ray_service_uses_active_then_pending_cluster() -> None:
    service = child("ray.io/v1", "RayService", "svc", None)
    service["metadata"]["namespace"] = "default"
    cluster = ray_cluster([{"groupName": "w", "replicas": 1}])
    service["status"] = {"pendingServiceStatus": {"rayClusterName": "rc"}}
    result = ok(World(cluster).group(pod_of(cluster), [cluster, service]))
    assert result.name == f"pg-svc-{service['metadata']['uid']}"
    assert result.spec["minMember"] == 2
    service["status"] = {"activeServiceStatus": {"rayClusterName": "gone"}}
    message = error(World(cluster).group(pod_of(cluster), [cluster, service]))
    assert message == 'rayclusters.ray.io "gone" not found'


def test_need_objects_protocol() -> None:
    job = child("ray.io/v1", "RayJob", "j", None)
    job["metadata"]["namespace"] = "default"
    job["status"] = {"rayClusterName": "rc"}
    first = group_pod(pod_of(job), [job])
    assert isinstance(first, NeedObjects)
    assert [(r.kind, r.name, r.is_list) for r in first.refs] == [("RayCluster", "rc", False)]


# --- Kubeflow ---------------------------------------------------------------------------------

def kubeflow_job(kind: str, spec_field: str, specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    job = child("kubeflow.org/v1", kind, "kj", None, spec={spec_field: specs, **spec})
    job["metadata"]["namespace"] = "default"
    return job


def test_kubeflow_replica_errors() -> None:
    tf = kubeflow_job("TFJob", "tfReplicaSpecs", {"PS": {"replicas": 1}, "Worker": {"replicas": 0}})
    assert error(World().group(pod_of(tf), [tf])) == (
        "the type of the job kj doesn't allow for 0 Worker pods. Please fix the replica field")
    xgb = kubeflow_job("XGBoostJob", "xgbReplicaSpecs", {"Worker": {"replicas": 2}})
    assert error(World().group(pod_of(xgb), [xgb])) == (
        "the type of the job kj doesn't have a Master replica spec which is required. "
        "Please fix the replica field")
    jax = kubeflow_job("JAXJob", "jaxReplicaSpecs", {"Worker": {"replicas": 4}})
    assert ok(World().group(pod_of(jax), [jax])).spec["minMember"] == 4


def test_kubeflow_min_available_overrides() -> None:
    tf = kubeflow_job("TFJob", "tfReplicaSpecs", {"Worker": {"replicas": 0}},
                      runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    assert ok(World().group(pod_of(tf), [tf])).spec["minMember"] == 2
    pt = kubeflow_job("PyTorchJob", "pytorchReplicaSpecs",
                      {"Master": {"replicas": 1}, "Worker": {"replicas": 8}},
                      runPolicy={"schedulingPolicy": {"minAvailable": 5}}, elasticPolicy={"minReplicas": 2})
    result = ok(World().group(pod_of(pt), [pt]))
    assert result.spec["minMember"] == 5
    assert result.spec["subGroups"] == [{"name": "master", "minMember": 1},
                                        {"name": "worker", "minMember": 4}]


def test_pytorch_segments() -> None:
    pt = kubeflow_job("PyTorchJob", "pytorchReplicaSpecs", {
        "Master": {"replicas": 1},
        "Worker": {"replicas": 5, "template": {"metadata": {"annotations": {
            keys.SEGMENT_SIZE: "2", keys.TOPOLOGY: "t",
            "kai.scheduler/segment-topology-required-placement": "rack"}}}},
    })
    pod = pod_of(pt, labels={keys.KUBEFLOW_REPLICA_TYPE: "worker", keys.KUBEFLOW_REPLICA_INDEX: "3"})
    result = ok(World().group(pod, [pt]))
    topo = {"topology": "t", "requiredTopologyLevel": "rack"}
    assert result.spec["subGroups"] == [
        # The parent of the segments needs all three (minSubGroup), as each segment needs its pods (minMember).
        {"name": "master", "minMember": 1}, {"name": "worker", "minSubGroup": 3},
        {"name": "worker-0", "minMember": 2, "parent": "worker", "topologyConstraint": topo},
        {"name": "worker-1", "minMember": 2, "parent": "worker", "topologyConstraint": topo},
        {"name": "worker-2", "minMember": 1, "parent": "worker", "topologyConstraint": topo}]
    assert result.subgroup == "worker-1"


def test_mpi_launcher_waits_for_workers() -> None:
    mpi = child("kubeflow.org/v2beta1", "MPIJob", "m", None, spec={
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}})
    mpi["metadata"]["namespace"] = "default"
    worker = pod_of(mpi, labels={keys.KUBEFLOW_JOB_NAME: "m", keys.KUBEFLOW_JOB_ROLE: "worker"})
    assert ok(World().group(worker, [mpi])).spec["minMember"] == 4
    launcher = pod_of(mpi, "m-launcher",
                      labels={keys.KUBEFLOW_JOB_NAME: "m", keys.KUBEFLOW_JOB_ROLE: "launcher"})
    assert ok(World(launcher).group(worker, [mpi])).spec["minMember"] == 5
    missing = kubeflow_job("MPIJob", "mpiReplicaSpecs", {"Worker": {"replicas": 1}})
    assert "Launcher replica spec" in error(World().group(pod_of(missing), [missing]))


def test_notebook_defaults_to_build() -> None:
    nb = child("kubeflow.org/v1beta1", "Notebook", "nb", None)
    nb["metadata"]["namespace"] = "default"
    assert ok(World().group(pod_of(nb), [nb])).spec["priorityClassName"] == "build"


# --- JobSet, LeaderWorkerSet, Knative, skip-top-owner -------------------------------------------

def test_jobset_in_order_and_whole_set() -> None:
    js = child("jobset.x-k8s.io/v1alpha2", "JobSet", "js", None, spec={"replicatedJobs": [
        {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 3}}}]})
    js["metadata"]["namespace"] = "default"
    pod = pod_of(js, labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    result = ok(World().group(pod, [js]))
    assert result.name == f"pg-js-{js['metadata']['uid']}-workers"
    assert result.spec["minMember"] == 6
    js["spec"]["startupPolicy"] = {"startupPolicyOrder": "AnyOrder"}
    result = ok(World().group(pod, [js]))
    assert (result.name, result.spec["minMember"]) == (f"pg-js-{js['metadata']['uid']}", 7)
    js["spec"]["startupPolicy"] = {}
    assert "replicatedjob-name" in error(World().group(pod_of(js), [js]))


def lws(size: int, **spec: Any) -> dict[str, Any]:
    obj = child("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws", None,
                spec={"leaderWorkerTemplate": {"size": size, **spec.pop("template", {})}, **spec})
    obj["metadata"]["namespace"] = "default"
    return obj


def lws_pod(owner: dict[str, Any], group: int, worker: int, **kwargs: Any) -> dict[str, Any]:
    return pod_of(owner, f"lws-{group}-{worker}", labels={
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker)}, **kwargs)


def test_lws_groups() -> None:
    owner = lws(4)
    leader = ok(World().group(lws_pod(owner, 1, 0), [owner]))
    worker = ok(World().group(lws_pod(owner, 1, 2), [owner]))
    assert leader.name == worker.name == f"pg-lws-{owner['metadata']['uid']}-group-1"
    assert leader.spec["subGroups"] == [{"name": "leader", "minMember": 1},
                                        {"name": "workers", "minMember": 3}]
    assert (leader.subgroup, worker.subgroup) == ("leader", "workers")
    ready = lws(4, startupPolicy="LeaderReady")
    assert ok(World().group(lws_pod(ready, 0, 0), [ready])).spec["minMember"] == 1
    assert ok(World().group(lws_pod(ready, 0, 0, spec={"nodeName": "n1"}), [ready])).spec["minMember"] == 4


def test_lws_segments() -> None:
    owner = lws(5, template={"subGroupPolicy": {"subGroupSize": 2}})  # 4 workers split evenly: leader joins 0
    result = ok(World().group(lws_pod(owner, 0, 3), [owner]))
    assert result.spec["subGroups"] == [
        {"name": "segment-0", "minSubGroup": 2}, {"name": "segment-1", "minMember": 2},
        {"name": "leader", "minMember": 1, "parent": "segment-0"},
        {"name": "workers", "minMember": 2, "parent": "segment-0"}]
    assert result.subgroup == "segment-1"
    assert ok(World().group(lws_pod(owner, 0, 2), [owner])).subgroup == "workers"
    policy = {"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"}
    excluded = lws(5, template={"subGroupPolicy": policy})
    result = ok(World().group(lws_pod(excluded, 0, 0), [excluded]))
    assert [(s["name"], s["minMember"]) for s in result.spec["subGroups"]] == [
        ("leader", 1), ("segment-0", 2), ("segment-1", 2)]
    assert result.subgroup == "leader"


def knative_chain() -> tuple[dict[str, Any], ...]:
    service = child("serving.knative.dev/v1", "Service", "hello", None)
    service["metadata"]["namespace"] = "default"
    config = child("serving.knative.dev/v1", "Configuration", "hello", service)
    revision = child("serving.knative.dev/v1", "Revision", "hello-00001", config,
                     annotations={"autoscaling.knative.dev/min-scale": "3"})
    deployment = child("apps/v1", "Deployment", "hello-00001-deployment", revision)
    rs = child("apps/v1", "ReplicaSet", "hello-00001-deployment-7f", deployment)
    return service, config, revision, deployment, rs


def test_knative_gang_per_revision() -> None:
    service, config, revision, deployment, rs = knative_chain()
    pod = pod_of(rs, labels={"serving.knative.dev/revision": "hello-00001"})
    chain = [rs, deployment, revision, config, service]
    result = ok(World().group(pod, chain))
    assert result.name == f"pg-hello-00001-{revision['metadata']['uid']}"
    assert result.spec["minMember"] == 3
    assert result.spec["priorityClassName"] == "inference"
    assert result.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Revision"
    per_pod = ok(World().group(pod, chain, config=GrouperConfig(knative_gang_schedule=False)))
    assert per_pod.name == f"pg-{pod['metadata']['name']}-{pod['metadata']['uid']}"
    # A revision whose pods already have per-pod groups keeps them.
    old = pod_of(rs, "old", labels={"serving.knative.dev/revision": "hello-00001"},
                 annotations={keys.POD_GROUP_NAME: "pg-old-123"})
    assert ok(World(old).group(pod, chain)).name == per_pod.name
    assert "revisionName not found" in error(World().group(pod_of(rs), chain))


def test_skip_top_owner_groups_as_owner_below() -> None:
    wf = child("argoproj.io/v1alpha1", "Workflow", "wf", None, labels={keys.QUEUE_LABEL: "wf-q"})
    wf["metadata"]["namespace"] = "default"
    pt_full = child("kubeflow.org/v1", "PyTorchJob", "pt", wf, labels={"team": "x"},
                    spec={"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}})
    pt_meta = {k: v for k, v in pt_full.items() if k != "spec"}
    pod = pod_of(pt_full, labels={keys.KUBEFLOW_REPLICA_TYPE: "master"})
    world = World(pt_full)
    result = ok(world.group(pod, [pt_meta, wf]))
    assert result.rule == "skip-top-owner"
    assert result.name == f"pg-pt-{pt_full['metadata']['uid']}"
    assert result.spec["minMember"] == 2
    assert result.spec["queue"] == "wf-q"  # inherited from the skipped Workflow
    assert result.podgroup["metadata"]["labels"] == {"team": "x", keys.QUEUE_LABEL: "wf-q"}
    direct = pod_of(wf)
    direct_result = ok(World().group(direct, [wf]))
    assert direct_result.name == f"pg-{direct['metadata']['name']}-{direct['metadata']['uid']}"
    assert direct_result.spec["queue"] == "wf-q"


def test_unknown_kind_uses_default_grouper() -> None:
    top = child("example.com/v1", "Widget", "w", None)
    top["metadata"]["namespace"] = "default"
    result = ok(World().group(pod_of(top), [top]))
    assert result.rule == "default"
    assert result.spec["minMember"] == 1
