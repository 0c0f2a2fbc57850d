"""Which PodGroups a workload named on the command line has. Pure (plain Kubernetes objects in)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.core import keys

# Command-line kinds (kubectl-style, singular/plural/short) -> Kubernetes kind.
KINDS = {
    "pod": "Pod", "pods": "Pod", "po": "Pod",
    "podgroup": "PodGroup", "podgroups": "PodGroup", "pg": "PodGroup",
    "rayjob": "RayJob", "rayjobs": "RayJob",
    "raycluster": "RayCluster", "rayclusters": "RayCluster",
    "deployment": "Deployment", "deployments": "Deployment", "deploy": "Deployment",
    "job": "Job", "jobs": "Job",
}


def _owned_by(obj: Mapping[str, Any], kind: str, names: set[str]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("kind") == kind and r.get("name") in names for r in refs)


def podgroups_for(objects: Iterable[Mapping[str, Any]], kind: str, name: str, namespace: str) -> list[str]:
    """Names of the PodGroups (in `namespace`) of the workload; ReplicaSets must be among the objects for a
    Deployment. Found through the PodGroups' owners and through their pods' `pod-group-name`."""
    objs = [o for o in objects if (o.get("metadata") or {}).get("namespace", namespace) == namespace]
    groups = {str(o["metadata"]["name"]) for o in objs if o.get("kind") == "PodGroup"}
    if kind == "PodGroup":
        return [name] if name in groups else []
    pods = [o for o in objs if o.get("kind") == "Pod"]
    if kind == "Pod":
        owners_pods = [p for p in pods if p["metadata"].get("name") == name]
    else:
        owners = {name}
        owner_kind = kind
        if kind == "Deployment":
            owners = {str(o["metadata"]["name"]) for o in objs
                      if o.get("kind") == "ReplicaSet" and _owned_by(o, "Deployment", {name})}
            owner_kind = "ReplicaSet"
        owners_pods = [p for p in pods if _owned_by(p, owner_kind, owners)]
        if kind in ("RayJob", "RayCluster"):
            owners_pods += [p for p in pods if (p["metadata"].get("labels") or {}).get(
                "ray.io/cluster" if kind == "RayCluster" else "ray.io/originated-from-cr-name") == name]
    found = {str((p["metadata"].get("annotations") or {}).get(keys.POD_GROUP_NAME, "")) for p in owners_pods}
    found |= {str(o["metadata"]["name"]) for o in objs if o.get("kind") == "PodGroup" and _owned_by(o, kind, {name})}
    return sorted(g for g in found if g in groups)


def deadlines(objects: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """"namespace/pod" -> epoch at which a running pod's activeDeadlineSeconds runs out."""
    from operators.scheduler.decide.records import parse_time

    out: dict[str, float] = {}
    for o in objects:
        if o.get("kind") != "Pod":
            continue
        seconds = (o.get("spec") or {}).get("activeDeadlineSeconds")
        started = parse_time((o.get("status") or {}).get("startTime"))
        if seconds and started:
            meta = o.get("metadata") or {}
            out[f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"] = started + float(seconds)
    return out
