"""KEP-5004's special ResourceClaim, as kube-scheduler's PreBind makes it: the claim of a pod's extended resources
backed by DRA, created before the binding with `generateName: <pod>-extended-resources-`, the annotation
`resource.kubernetes.io/extended-resource-claim: "true"`, owned (controller) by the pod, one `exactly` request
`container-<i>-request-<j>` of `count` devices of the resource's DeviceClass per container and resource; and the
pod's `status.extendedResourceClaimStatus` naming it with each (container, resource) -> request mapping, which
the kubelet reads. The requests are those the scheduler's allocation names; the allocation itself is written by
the dynamicresources plugin as for any claim."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.binder.common import meta
from operators.core.dra import EXTENDED_RESOURCE_CLAIM, extended_requests, extended_resource_classes

DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
NAMESPACE_CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
POD_STATUS = "/api/v1/namespaces/{namespace}/pods/{name}/status"


def existing_claim(pod: Mapping[str, Any]) -> str:
    """The special claim the pod's status names already (a bind that failed after creating it); "" if none."""
    return str(((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName") or "")


def special_claim(pod: Mapping[str, Any], allocation: Mapping[str, Any],
                  classes: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The claim to create and the pod's request mappings, for the requests the allocation names. Raises
    ValueError when a request of the allocation is not an extended resource of the pod mapped by a class."""
    mapping = extended_resource_classes((str(meta(c).get("name") or ""),
                                         str((c.get("spec") or {}).get("extendedResourceName") or ""))
                                        for c in classes)
    named = {str(r.get("request") or "") for r in (allocation.get("devices") or {}).get("results") or ()}
    mine = [e for e in extended_requests(pod.get("spec") or {}) if e[2] in named and e[1] in mapping]
    missing = named - {e[2] for e in mine}
    if missing:
        raise ValueError(f"the allocation names requests {sorted(missing)} that are no extended resource of the pod "
                         "backed by a DeviceClass")
    m = meta(pod)
    requests = [{"name": request, "exactly": {"deviceClassName": mapping[resource], "allocationMode": "ExactCount",
                                              "count": count}}
                for _, resource, request, count in sorted(mine, key=lambda e: e[2])]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"generateName": f"{m.get('name')}-extended-resources-", "namespace": m.get("namespace"),
                          "annotations": {EXTENDED_RESOURCE_CLAIM: "true"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": m.get("name"),
                                               "uid": m.get("uid"), "controller": True,
                                               "blockOwnerDeletion": True}]},
             "spec": {"devices": {"requests": requests}}}
    mappings = [{"containerName": container, "resourceName": resource, "requestName": request}
                for container, resource, request, _ in mine]
    return claim, mappings


def pod_status_patch(claim_name: str, mappings: list[dict[str, str]]) -> dict[str, Any]:
    return {"status": {"extendedResourceClaimStatus": {"resourceClaimName": claim_name,
                                                       "requestMappings": mappings}}}
