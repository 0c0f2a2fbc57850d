"""`kai what-if -f FILE`: what the scheduler would do if these objects were submitted now. Pure.

Workloads are expanded into the pods their controllers would create (Deployment, ReplicaSet, StatefulSet: replicas;
Job: parallelism) and grouped by the pod-grouper's own rules, so they get the PodGroup, queue and priority they
would get for real. Queues, PriorityClasses, Nodes and PodGroups in the file are added as they are.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from operators.core import keys
from operators.insight.core import one_line
from operators.podgrouper.grouping.grouper import group_pod
from operators.podgrouper.grouping.model import GroupingResult
from operators.scheduler.config import SchedulerConfig
from operators.scheduler.cycle import run_cycle
from operators.scheduler.decisions import Decisions
from operators.scheduler.session import rfc3339
from operators.scheduler.simulate import apply_decisions, with_implicit_podgroups
from operators.scheduler.snapshot import flatten, snapshot_from_objects

Obj = dict[str, Any]
_AS_IS = ("Queue", "PriorityClass", "Node", "PodGroup", "ConfigMap")
_REPLICATED = {"Deployment": ("replicas", 1), "ReplicaSet": ("replicas", 1), "StatefulSet": ("replicas", 1),
               "Job": ("parallelism", 1)}
SUPPORTED = ("Pod", *_REPLICATED, *_AS_IS)
# Made-up objects get stable uids (the names derived from them, like a PodGroup's, stay the same run to run).
_UID_NAMESPACE = uuid.UUID("0b5a3c1e-52d4-4d8e-9a57-8c4f5f1e2d30")


def _ref(obj: Mapping[str, Any]) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", ""), "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}


def _stamp(obj: Obj, namespace: str, now: float, uid: str) -> Obj:
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        raise ValueError(f"a {obj.get('kind')} without metadata.name")
    if obj.get("kind") not in ("Queue", "PriorityClass", "Node"):
        meta.setdefault("namespace", namespace)
    meta.setdefault("uid", uid)
    meta.setdefault("creationTimestamp", rfc3339(now))
    return obj


def _pod_from_template(owner: Obj, base: str, index: int, now: float) -> Obj:
    template = (owner.get("spec") or {}).get("template") or {}
    meta = copy.deepcopy(template.get("metadata") or {})
    name = f"{base}-whatif-{index}"
    uid = str(uuid.uuid5(_UID_NAMESPACE, f"{owner['metadata']['namespace']}/{name}"))
    meta.update({"name": name, "namespace": owner["metadata"]["namespace"], "uid": uid,
                 "creationTimestamp": rfc3339(now), "ownerReferences": [_ref(owner)]})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"}}


def _grouped(pod: Obj, chain: Sequence[Obj], priority_classes: Sequence[str]) -> list[Obj]:
    """The pod pointed at the PodGroup the pod-grouper would give it, and that PodGroup."""
    from operators.podgrouper.grouping.model import Lookups

    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != keys.SCHEDULER_NAME:
        return [pod]  # another scheduler's pod: it only takes room once it runs
    annotations = (pod["metadata"].get("annotations") or {})
    if keys.POD_GROUP_NAME in annotations and not chain:
        return [pod]
    result = group_pod(pod, chain, Lookups(priority_classes=frozenset(priority_classes)))
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
