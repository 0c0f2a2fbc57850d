"""Slim copies of pods and nodes for in-memory caches: only the fields the controllers read.

A full pod is several KiB (managed fields, env, volumes, probes); tens of thousands of them would dominate memory
and GC time. The slim copy keeps the same shape, so pure functions written for full objects work on it.
"""

from __future__ import annotations

from typing import Any

_META_KEYS = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences", "creationTimestamp",
              "deletionTimestamp", "resourceVersion")
_CONTAINER_KEYS = ("name", "resources", "ports", "env", "envFrom", "restartPolicy")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in _META_KEYS if k in meta}


def _containers(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{k: c[k] for k in _CONTAINER_KEYS if k in c} for c in items or []]


def pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    slim_spec = {k: spec[k] for k in ("nodeName", "schedulerName", "priorityClassName", "priority", "overhead",
                                       "nodeSelector", "affinity", "tolerations", "schedulingGates",
                                       "hostNetwork", "runtimeClassName", "resourceClaims") if k in spec}
    slim_spec["containers"] = _containers(spec.get("containers"))
    if spec.get("initContainers"):
        slim_spec["initContainers"] = _containers(spec.get("initContainers"))
    volumes = [v for v in spec.get("volumes") or [] if "configMap" in v or "persistentVolumeClaim" in v]
    if volumes:
        slim_spec["volumes"] = volumes
    slim_status = {k: status[k] for k in ("phase", "conditions", "nominatedNodeName", "startTime",
                                          "resourceClaimStatuses", "extendedResourceClaimStatus") if k in status}
    for key in ("containerStatuses", "initContainerStatuses"):  # what each container was given (in-place resize)
        given = [{"name": cs.get("name"), "resources": {"requests": (cs.get("resources") or {}).get("requests")},
                  "allocatedResources": cs.get("allocatedResources")}
                 for cs in status.get(key) or () if (cs.get("resources") or {}).get("requests")
                 or cs.get("allocatedResources")]
        if given:
            slim_status[key] = given
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(obj), "spec": slim_spec, "status": slim_status}


def node(obj: dict[str, Any]) -> dict[str, Any]:
    status = obj.get("status") or {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": _meta(obj), "spec": obj.get("spec") or {},
            "status": {k: status[k] for k in ("capacity", "allocatable", "conditions") if k in status}}
