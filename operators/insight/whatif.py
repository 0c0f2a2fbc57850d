"""`kai what-if -f FILE`: what the scheduler would do if these objects were submitted now. Pure.

Workloads are expanded into the pods their controllers would create (Deployment, ReplicaSet, StatefulSet: replicas;
Job: parallelism; RayCluster, RayJob: KubeRay's head and worker pods; PyTorchJob: the training operator's Master and
Worker pods) and grouped by the pod-grouper's own rules, so they get the PodGroup, queue and priority they would get
for real. Queues, PriorityClasses, Nodes and PodGroups in the file are added as they are.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from operators.core import keys
from operators.insight.core import one_line
from operators.podgrouper.grouping.grouper import group_pod, owners_skip, should_skip
from operators.podgrouper.grouping.model import GroupingResult, Lookups, NeedObjects, ObjectRef
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.session import rfc3339
from operators.scheduler.decide.simulation import apply_decisions, with_implicit_podgroups
from operators.scheduler.decide.snapshot import flatten, snapshot_from_objects

Obj = dict[str, Any]
_AS_IS = ("Queue", "PriorityClass", "Node", "PodGroup", "ConfigMap")
_REPLICATED = {"Deployment": ("replicas", 1), "ReplicaSet": ("replicas", 1), "StatefulSet": ("replicas", 1),
               "Job": ("parallelism", 1)}
_OPERATED = ("RayCluster", "RayJob", "PyTorchJob")
SUPPORTED = ("Pod", *_REPLICATED, *_OPERATED, *_AS_IS)
# Made-up objects get stable uids (the names derived from them, like a PodGroup's, stay the same run to run).
_UID_NAMESPACE = uuid.UUID("0b5a3c1e-52d4-4d8e-9a57-8c4f5f1e2d30")


def _ref(obj: Mapping[str, Any]) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", ""), "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}


def _stamp(obj: Obj, namespace: str, now: float, uid: str) -> Obj:
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = f"{meta['generateName']}whatif"  # as `kubectl create` would, with a fixed suffix
    if not meta.get("name"):
        raise ValueError(f"a {obj.get('kind')} without metadata.name")
    if obj.get("kind") not in ("Queue", "PriorityClass", "Node"):
        meta.setdefault("namespace", namespace)
    meta.setdefault("uid", uid)
    meta.setdefault("creationTimestamp", rfc3339(now))
    return obj


def _pod_from_template(owner: Obj, base: str, index: int, now: float) -> Obj:
    return _pod(owner, (owner.get("spec") or {}).get("template") or {}, f"{base}-whatif-{index}", now)


def _pod(owner: Obj, template: Any, name: str, now: float, labels: Mapping[str, str] | None = None) -> Obj:
    """The pod a controller makes of `template`, owned by `owner`, with its own `labels` added."""
    template = template if isinstance(template, dict) else {}
    meta = copy.deepcopy(template.get("metadata") or {})
    uid = str(uuid.uuid5(_UID_NAMESPACE, f"{owner['metadata']['namespace']}/{name}"))
    meta.update({"name": name, "namespace": owner["metadata"]["namespace"], "uid": uid,
                 "creationTimestamp": rfc3339(now), "ownerReferences": [_ref(owner)]})
    if labels:
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"}}


def _grouped(pod: Obj, chain: Sequence[Obj], priority_classes: Sequence[str],
             related: Sequence[Obj] = ()) -> list[Obj]:
    """The pod pointed at the PodGroup the pod-grouper would give it, and that PodGroup. `related`: the objects the
    file amounts to that the rules may look up (a RayJob's RayCluster); anything else does not exist yet."""
    if should_skip(pod) or owners_skip(chain):
        # As the pod-grouper: another scheduler's pod (it only takes room once it runs), a pod the user grouped,
        # or one whose creator makes its PodGroup (`kai.scheduler/skip-podgrouper` on the pod or an owner).
        return [pod]
    annotations = (pod["metadata"].get("annotations") or {})
    lookups = Lookups(priority_classes=frozenset(priority_classes))
    result = group_pod(pod, chain, lookups)
    for _ in range(8):  # each round answers the objects the rules asked for
        if not isinstance(result, NeedObjects):
            break
        answers: dict[ObjectRef, Any] = {ref: _lookup(ref, related) for ref in result.refs}
        lookups = lookups.with_related(answers)
        result = group_pod(pod, chain, lookups)
    if not isinstance(result, GroupingResult):
        detail = getattr(result, "message", None) or "it needs objects that are not in the file"
        raise ValueError(f"pod {pod['metadata']['name']}: cannot derive its PodGroup: {detail}")
    pod["metadata"]["annotations"] = {**annotations, keys.POD_GROUP_NAME: result.name}
    if result.subgroup:
        pod["metadata"].setdefault("labels", {})[keys.SUBGROUP_LABEL] = result.subgroup
    pg = result.podgroup
    pg["metadata"]["uid"] = str(uuid.uuid5(_UID_NAMESPACE, f"{pod['metadata']['namespace']}/{result.name}"))
    pg["metadata"]["creationTimestamp"] = pod["metadata"]["creationTimestamp"]
    return [pod, pg]


def _lookup(ref: ObjectRef, related: Sequence[Obj]) -> Obj | list[Obj] | None:
    def matches(obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        return (obj.get("kind") == ref.kind and meta.get("namespace") == ref.namespace
                and (ref.name is None or meta.get("name") == ref.name)
                and all(labels.get(k) == v for k, v in ref.labels))

    found = [obj for obj in related if matches(obj)]
    if ref.name is None:
        return found
    return found[0] if found else None


# --- KubeRay: RayCluster and RayJob ------------------------------------------------------------------------

def _marked(name: str) -> str:
    """A made-up object's name: it ends in `whatif`."""
    return name if name.endswith("whatif") else f"{name}-whatif"


RAY_HEAD_GROUP = "headgroup"
RAY_SUBMITTER_CONTAINER = "ray-job-submitter"
RAY_SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
_INT32_MAX = 2**31 - 1


def _count(value: Any, default: int, what: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, not {value!r}")
    return value


def ray_worker_pods(group: Mapping[str, Any], index: int) -> int:
    """Worker pods KubeRay runs for one workerGroupSpec: replicas bounded by [minReplicas, maxReplicas], times
    numOfHosts; none for a suspended group."""
    what = f"workerGroupSpecs[{index}]"
    if group.get("suspend") is True:
        return 0
    low = _count(group.get("minReplicas"), 0, f"{what}.minReplicas")
    high = _count(group.get("maxReplicas"), _INT32_MAX, f"{what}.maxReplicas")
    replicas = _count(group.get("replicas"), low, f"{what}.replicas")
    hosts = _count(group.get("numOfHosts"), 1, f"{what}.numOfHosts")
    return min(max(replicas, low), high) * hosts


def _ray_pod(cluster: Obj, template: Any, name: str, group: str, node_type: str, now: float) -> Obj:
    """A pod as KubeRay started with --batch-scheduler=kai-scheduler makes it: the Ray labels, kai-scheduler as its
    scheduler and the RayCluster's queue label."""
    labels = {keys.RAY_CLUSTER_LABEL: cluster["metadata"]["name"], keys.RAY_GROUP_LABEL: group,
              keys.RAY_NODE_TYPE_LABEL: node_type, "ray.io/is-ray-node": "yes"}
    queue = (cluster["metadata"].get("labels") or {}).get(keys.QUEUE_LABEL)
    if queue:
        labels[keys.QUEUE_LABEL] = queue
    pod = _pod(cluster, template, name, now, labels)
    pod["spec"]["schedulerName"] = keys.SCHEDULER_NAME
    return pod


def ray_cluster_pods(cluster: Obj, now: float) -> list[Obj]:
    """The head pod and every worker pod KubeRay creates for a RayCluster."""
    spec = cluster.get("spec") or {}
    name = cluster["metadata"]["name"]
    head = spec.get("headGroupSpec")
    if not isinstance(head, dict) or not isinstance(head.get("template"), dict):
        raise ValueError(f"RayCluster {name}: spec.headGroupSpec.template is required")
    base = _marked(name)
    pods = [_ray_pod(cluster, head["template"], f"{base}-head", RAY_HEAD_GROUP, "head", now)]
    for index, group in enumerate(spec.get("workerGroupSpecs") or []):
        if not isinstance(group, dict):
            raise ValueError(f"RayCluster {name}: workerGroupSpecs[{index}] is not an object")
        group_name = str(group.get("groupName") or f"worker-group-{index}")
        for i in range(ray_worker_pods(group, index)):
            pods.append(_ray_pod(cluster, group.get("template"), f"{base}-{group_name}-worker-{i}",
                                 group_name, "worker", now))
    return pods


def ray_job_cluster(job: Obj) -> Obj:
    """The RayCluster KubeRay (started with --batch-scheduler=kai-scheduler) creates for a RayJob: owned by it, with
    its labels. SidecarMode: the submitter is a container of the head pod (KubeRay's default submitter resources).
    HTTPMode, InteractiveMode: no submitter pod. K8sJobMode (the default): KubeRay refuses the RayJob and creates
    nothing (its submitter pod would start only once the cluster is ready, outside the gang): a ValueError.
    """
    meta, spec = job["metadata"], job.get("spec") or {}
    mode = str(spec.get("submissionMode") or "K8sJobMode")
    if mode == "K8sJobMode":
        raise ValueError(f"RayJob {meta['name']}: KubeRay started with --batch-scheduler=kai-scheduler refuses "
                         "submissionMode K8sJobMode (the default) and creates no pods for it; set "
                         "spec.submissionMode: SidecarMode")
    if not isinstance(spec.get("rayClusterSpec"), dict):
        selector = "spec.clusterSelector" if spec.get("clusterSelector") else "no spec.rayClusterSpec"
        raise ValueError(f"RayJob {meta['name']}: what-if needs spec.rayClusterSpec (it expands the RayCluster the "
                         f"RayJob creates; a RayJob with {selector} adds no cluster of its own)")
    cluster_spec = copy.deepcopy(spec["rayClusterSpec"])
    if mode == "SidecarMode":
        template = (cluster_spec.get("headGroupSpec") or {}).get("template") or {}
        containers = (template.get("spec") or {}).get("containers") or []
        if containers:
            template["spec"]["containers"] = [*containers, {
                "name": RAY_SUBMITTER_CONTAINER, "image": containers[0].get("image", ""),
                "resources": copy.deepcopy(RAY_SUBMITTER_RESOURCES)}]
    name = _marked(meta["name"])
    return {"apiVersion": job.get("apiVersion") or "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {}),
                         "uid": str(uuid.uuid5(_UID_NAMESPACE, f"{meta['namespace']}/raycluster/{name}")),
                         "ownerReferences": [_ref(job)]},
            "spec": cluster_spec}


# --- Kubeflow training operator: PyTorchJob ---------------------------------------------------------------

def pytorch_job_pods(job: Obj, now: float) -> list[Obj]:
    """The pods the training operator creates: `replicas` of every replica spec (Master, Worker), labelled with
    their replica type and index."""
    name = job["metadata"]["name"]
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs")
    if not isinstance(specs, dict) or not specs:
        raise ValueError(f"PyTorchJob {name}: spec.pytorchReplicaSpecs is required")
    pods: list[Obj] = []
    for replica_type in sorted(specs, key=lambda t: (t != "Master", t)):  # the master first, as the operator
        spec = specs[replica_type]
        if not isinstance(spec, dict):
            raise ValueError(f"PyTorchJob {name}: pytorchReplicaSpecs.{replica_type} is not an object")
        role = replica_type.lower()
        for i in range(_count(spec.get("replicas"), 1, f"pytorchReplicaSpecs.{replica_type}.replicas")):
            labels = {keys.KUBEFLOW_REPLICA_TYPE: role, keys.KUBEFLOW_REPLICA_INDEX: str(i),
                      keys.KUBEFLOW_JOB_NAME: name, "training.kubeflow.org/operator-name": "pytorchjob-controller"}
            if role == "master":
                labels[keys.KUBEFLOW_JOB_ROLE] = "master"
            pods.append(_pod(job, spec.get("template"), f"{name}-{role}-whatif-{i}", now, labels))
    return pods


def expand(objects: Sequence[Mapping[str, Any]], namespace: str, now: float,
           priority_classes: Sequence[str] = tuple(keys.PRIORITY_CLASSES)) -> list[Obj]:
    """Pods and PodGroups (plus cluster objects) the given objects amount to; ValueError for unsupported kinds."""
    out: list[Obj] = []
    pgs: dict[str, Obj] = {}
    for i, raw in enumerate(flatten(objects)):
        kind = str(raw.get("kind", ""))
        if kind not in SUPPORTED:
            raise ValueError(f"kind {kind or '?'} is not supported by what-if (supported: {', '.join(SUPPORTED)})")
        obj = _stamp(dict(raw), namespace, now, f"whatif-{i}")
        if kind in _AS_IS:
            out.append(obj)
        elif kind == "Pod":
            obj.setdefault("status", {})["phase"] = "Pending"
            obj["spec"].pop("nodeName", None)
            out += _grouped(obj, [], priority_classes)
        elif kind == "RayCluster":
            for pod in ray_cluster_pods(obj, now):
                out += _grouped(pod, [obj], priority_classes)
        elif kind == "RayJob":
            cluster = ray_job_cluster(obj)
            job = {**obj, "status": {**(obj.get("status") or {}), "rayClusterName": cluster["metadata"]["name"]}}
            for pod in ray_cluster_pods(cluster, now):
                out += _grouped(pod, [cluster, job], priority_classes, [cluster])
        elif kind == "PyTorchJob":
            for pod in pytorch_job_pods(obj, now):
                out += _grouped(pod, [obj], priority_classes)
        else:
            count_field, default = _REPLICATED[kind]
            count = int((obj.get("spec") or {}).get(count_field, default) or 0)
            chain: list[Obj] = [obj]
            parent = obj
            if kind == "Deployment":  # pods belong to a ReplicaSet the Deployment owns
                parent = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                          "metadata": {"name": f"{obj['metadata']['name']}-whatif",
                                       "namespace": obj["metadata"]["namespace"],
                                       "uid": f"whatif-rs-{obj['metadata']['name']}",
                                       "ownerReferences": [_ref(obj)]},
                          "spec": obj.get("spec") or {}}
                chain = [parent, obj]
            for index in range(count):
                out += _grouped(_pod_from_template(parent, obj["metadata"]["name"], index, now), chain,
                                priority_classes)
    # Pods of one owner-wide group (ReplicaSet, StatefulSet, Job gangs) share one PodGroup.
    for obj in out:
        if obj.get("kind") == "PodGroup":
            pgs.setdefault(f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}", obj)
    return [o for o in out if o.get("kind") != "PodGroup"] + list(pgs.values())


def _fair(d: Decisions) -> dict[str, dict[str, float]]:
    return {q.name: q.fair_share for q in d.queues}


def what_if(cluster: Sequence[Mapping[str, Any]], added: Sequence[Obj], config: SchedulerConfig, now: float,
            cycles: int = 1) -> dict[str, Any]:
    """Decisions for the cluster plus the added objects; the cluster's own pending decisions are reported too."""
    base = snapshot_from_objects(with_implicit_podgroups(cluster, config.scheduler_name),
                                 node_pool_label=config.node_pool_label, partition=config.partition)
    before = run_cycle(base, config, now)
    snapshot = snapshot_from_objects(with_implicit_podgroups([*cluster, *added], config.scheduler_name),
                                     node_pool_label=config.node_pool_label, partition=config.partition)
    new_groups = {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in added if o["kind"] == "PodGroup"}
    new_pods = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in added if o["kind"] == "Pod"]
    evictions: list[dict[str, Any]] = []
    placed: dict[tuple[str, str], dict[str, Any]] = {}
    last = before
    for cycle in range(1, cycles + 1):
        last = run_cycle(snapshot, config, now + (cycle - 1) * config.schedule_period)
        for b in last.binds:
            placed[(b.namespace, b.pod)] = {"namespace": b.namespace, "pod": b.pod, "podGroup": b.pod_group,
                                            "node": b.node, "status": "Bound", "cycle": cycle}
        for p in last.pipelined:
            placed.setdefault((p.namespace, p.pod), {"namespace": p.namespace, "pod": p.pod,
                                                     "podGroup": p.pod_group, "node": p.node,
                                                     "status": "Pipelined", "cycle": cycle})
        evictions += [{**e.to_dict(), "cycle": cycle} for e in last.evictions]
        snapshot = apply_decisions(snapshot, last)
    placements = []
    for ns, name in new_pods:
        placements.append(placed.pop((ns, name), {"namespace": ns, "pod": name, "node": "", "status": "Pending"}))
    fair_before, fair_after = _fair(before), _fair(last)
    return {
        "placements": placements,
        "otherPlacements": sorted(placed.values(), key=lambda p: (p["namespace"], p["pod"])),
        "evictions": evictions,
        "unschedulable": [{"namespace": u.namespace, "podGroup": u.pod_group, "message": u.message}
                          for u in last.unschedulable if f"{u.namespace}/{u.pod_group}" in new_groups],
        "queues": [{"name": n, "fairShareBefore": fair_before.get(n, {}), "fairShareAfter": fair_after.get(n, {})}
                   for n in sorted(set(fair_before) | set(fair_after))],
    }


def format_text(result: Mapping[str, Any]) -> str:
    lines = []
    for p in result["placements"]:
        where = f"-> {p['node']} ({p['status']}, cycle {p['cycle']})" if p["node"] else "stays Pending"
        lines.append(f"place    {p['namespace']}/{p['pod']} {where}")
    for p in result["otherPlacements"]:
        lines.append(f"also     {p['namespace']}/{p['pod']} -> {p['node']} ({p['status']}, cycle {p['cycle']})")
    for e in result["evictions"]:
        lines.append(f"evict    {e['namespace']}/{e['pod']} by {e['action']} for {e['forPodGroup'] or '-'}: "
                     f"{e['message']}")
    for u in result["unschedulable"]:
        lines.append(f"pending  {u['namespace']}/{u['podGroup']}: {one_line(u['message'])}")
    if not result["evictions"]:
        lines.append("evict    nothing")
    for q in result["queues"]:
        b, a = q["fairShareBefore"], q["fairShareAfter"]
        if b == a:
            lines.append(f"queue    {q['name']}: fair share gpu={b.get('gpu', 0):g} (unchanged)")
        else:
            lines.append(f"queue    {q['name']}: fair share gpu={b.get('gpu', 0):g} -> {a.get('gpu', 0):g}, "
                         f"cpu={b.get('cpu', 0):g}m -> {a.get('cpu', 0):g}m, "
                         f"memory={b.get('memory', 0):g}MB -> {a.get('memory', 0):g}MB")
    return "\n".join(lines) + "\n"
