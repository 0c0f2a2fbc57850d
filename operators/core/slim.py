"""Slim copies of pods and nodes for in-memory caches: only the fields the controllers read.

A full pod is several KiB (managed fields, env, volumes, probes); tens of thousands of them would dominate memory
and GC time. The slim copy keeps the same shape, so pure functions written for full objects work on it, but only
the fields its component reads: `grouping_pod` for the pod-grouper, `accounting_pod` for the podgroup-controller
(at 150,000 pods each field kept costs tens of MiB: see bench/README.md).
"""

from __future__ import annotations

import sys
from typing import Any

_META_KEYS = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences", "creationTimestamp",
              "deletionTimestamp", "resourceVersion")
# A pod's metadata without resourceVersion: it changes with every write, so a record that kept it would differ
# after every status update of the kubelet, and the informer would call listeners for changes nobody reads.
_POD_META_KEYS = tuple(k for k in _META_KEYS if k != "resourceVersion")
# Conditions the readers of pods look at (the scheduler's verdict, a pending in-place resize), and their fields.
_POD_CONDITIONS = frozenset({"PodScheduled", "PodResizePending", "PodResizeInProgress"})
_CONDITION_KEYS = ("type", "status", "reason", "message")
_intern = sys.intern


def _meta(obj: dict[str, Any], keys: tuple[str, ...] = _META_KEYS) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in keys if k in meta}


def _strings(values: dict[str, Any] | None) -> dict[str, Any] | None:
    """Labels or annotations with their keys and short values shared between pods (a Job's pods carry the same
    ones): one string per distinct value instead of one per pod."""
    if not values:
        return values
    return {_intern(k): _intern(v) if isinstance(v, str) and len(v) <= 64 else v for k, v in values.items()}


def _pod_meta(obj: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    meta = _meta(obj, keys)
    for key in ("labels", "annotations"):
        if key in meta:
            meta[key] = _strings(meta[key])
    if "namespace" in meta:
        meta["namespace"] = _intern(meta["namespace"])
    return meta


def grouping_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What the pod-grouper reads of a pod: its metadata (owners, labels, annotations) and the three spec fields
    the grouping rules read. No status: a pod's progress is no reason to group it again."""
    spec = obj.get("spec") or {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _pod_meta(obj, _POD_META_KEYS),
            "spec": {k: _intern(spec[k]) for k in ("nodeName", "schedulerName", "priorityClassName")
                     if isinstance(spec.get(k), str)}}


def _requests(containers: list[dict[str, Any]] | None, init: bool) -> list[dict[str, Any]]:
    out = []
    for c in containers or []:
        res = c.get("resources") or {}
        kept: dict[str, Any] = {"name": c.get("name"),
                                "resources": {k: res[k] for k in ("requests", "limits") if res.get(k)}}
        if init and "restartPolicy" in c:
            kept["restartPolicy"] = c["restartPolicy"]
        out.append(kept)
    return out


def accounting_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What the podgroup-controller reads of a pod: its group (annotation), GPU-sharing annotations and subgroup
    label, creation time, node, phase, the scheduler's PodScheduled condition, and what its containers request
    or were given (`resources.pod_container_requests`)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    slim_spec: dict[str, Any] = {k: _intern(spec[k]) for k in ("nodeName", "schedulerName") if spec.get(k)}
    if spec.get("overhead"):
        slim_spec["overhead"] = spec["overhead"]
    slim_spec["containers"] = _requests(spec.get("containers"), False)
    if spec.get("initContainers"):
        slim_spec["initContainers"] = _requests(spec.get("initContainers"), True)
    slim_status: dict[str, Any] = {"phase": _intern(status["phase"])} if isinstance(status.get("phase"), str) else {}
    conditions = [{k: c[k] for k in _CONDITION_KEYS if k in c} for c in status.get("conditions") or ()
                  if c.get("type") in _POD_CONDITIONS]
    if conditions:
        slim_status["conditions"] = conditions
    # The pod's ResourceClaims (`core.dra.pod_claim_names`): its DRA GPUs count in the PodGroup's status.
    if spec.get("resourceClaims"):
        slim_spec["resourceClaims"] = spec["resourceClaims"]
    for key in ("resourceClaimStatuses", "extendedResourceClaimStatus"):
        if status.get(key):
            slim_status[key] = status[key]
    for key in ("containerStatuses", "initContainerStatuses"):  # what each container was given (in-place resize)
        given = [{"name": cs.get("name"), "resources": {"requests": (cs.get("resources") or {}).get("requests")},
                  "allocatedResources": cs.get("allocatedResources")}
                 for cs in status.get(key) or () if (cs.get("resources") or {}).get("requests")
                 or cs.get("allocatedResources")]
        if given:
            slim_status[key] = given
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _pod_meta(obj, _ACCOUNTING_META_KEYS), "spec": slim_spec,
            "status": slim_status}


_ACCOUNTING_META_KEYS = ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp",
                         "deletionTimestamp")


def node(obj: dict[str, Any]) -> dict[str, Any]:
    status = obj.get("status") or {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": _meta(obj), "spec": obj.get("spec") or {},
            "status": {k: status[k] for k in ("capacity", "allocatable", "conditions") if k in status}}
