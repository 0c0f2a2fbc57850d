"""AdmissionReview v1 in and out: pure functions over the decoded request body.

The server shell decodes the HTTP body, calls `mutate_review` or `validate_review`, and encodes the result;
a `ReviewError` means the body is not an AdmissionReview at all and deserves an HTTP 400. Responses mirror
controller-runtime's (which KAI uses): allowed with status code 200, denied with 403 / `Forbidden` and the
plugin's message, a malformed object with 400.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from operators.admission.mutate import AdmissionDenied, JsonPatch, make_random_suffix, mutate_pod
from operators.admission.topology import validate_topology
from operators.admission.validate import validate_pod
from operators.core import keys
from operators.core.badreview import BadReview

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"


class ReviewError(BadReview):
    """The body is not an AdmissionReview request (the webhook server answers HTTP 400)."""


def review_request(review: Mapping[str, Any]) -> Mapping[str, Any]:
    """The `request` of an AdmissionReview, checked enough to answer it."""
    if not isinstance(review, Mapping):
        raise ReviewError("AdmissionReview must be a JSON object")
    request = review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("AdmissionReview has no request with a uid")
    return request


def response(
    uid: str,
    *,
    allowed: bool,
    code: int,
    message: str | None = None,
    reason: str | None = None,
    patch: JsonPatch | None = None,
) -> dict[str, Any]:
    """A complete AdmissionReview v1 response."""
    status: dict[str, Any] = {"code": code}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    body: dict[str, Any] = {"uid": uid, "allowed": allowed, "status": status}
    if patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": KIND, "response": body}


def allowed(uid: str, patch: JsonPatch | None = None) -> dict[str, Any]:
    return response(uid, allowed=True, code=200, patch=patch)


def denied(uid: str, message: str) -> dict[str, Any]:
    return response(uid, allowed=False, code=403, reason="Forbidden", message=message)


def errored(uid: str, message: str) -> dict[str, Any]:
    """The object cannot be judged (not a pod): refused as a bad request."""
    return response(uid, allowed=False, code=400, reason="BadRequest", message=message)


def response_patch(review_response: Mapping[str, Any]) -> JsonPatch:
    """The JSON patch carried by a response (empty when there is none)."""
    raw = (review_response.get("response") or {}).get("patch")
    if not raw:
        return []
    patch: JsonPatch = json.loads(base64.b64decode(raw))
    return patch


def _shape_error(pod: Mapping[str, Any]) -> str | None:
    """What makes `pod` not decodable as a Pod, as far as the plugins read it; None when it is.

    The API server only sends decoded pods; this keeps a malformed body a 400 instead of a crash (a 500).
    """
    metadata, spec = pod.get("metadata"), pod.get("spec")
    if metadata is not None and not isinstance(metadata, Mapping):
        return "metadata must be an object"
    if spec is not None and not isinstance(spec, Mapping):
        return "spec must be an object"
    for field in ("annotations", "labels"):
        values = (metadata or {}).get(field)
        if values is not None and not (isinstance(values, Mapping)
                                       and all(isinstance(v, str) for v in values.values())):
            return f"metadata.{field} must map names to strings"
    owners = (metadata or {}).get("ownerReferences")
    if owners is not None and not (isinstance(owners, list) and all(isinstance(o, Mapping) for o in owners)):
        return "metadata.ownerReferences must be a list of objects"
    for field in ("name", "namespace", "generateName"):
        if (metadata or {}).get(field) is not None and not isinstance(metadata[field], str):  # type: ignore[index]
            return f"metadata.{field} must be a string"
    for kind in ("containers", "initContainers", "volumes"):
        items = (spec or {}).get(kind)
        if items is not None and not (isinstance(items, list) and all(isinstance(i, Mapping) for i in items)):
            return f"spec.{kind} must be a list of objects"
    for kind in ("containers", "initContainers"):
        for container in (spec or {}).get(kind) or []:
            for field in ("env", "envFrom"):
                items = container.get(field)
                if items is not None and not (isinstance(items, list)
                                              and all(isinstance(i, Mapping) for i in items)):
                    return f"spec.{kind}[].{field} must be a list of objects"
            resources = container.get("resources")
            if resources is not None and not (isinstance(resources, Mapping) and all(
                    isinstance(resources.get(s) or {}, Mapping) for s in ("requests", "limits"))):
                return f"spec.{kind}[].resources must be an object of requests and limits"
    return None


def _pod_object(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kind = request.get("kind")
    kind_name = kind.get("kind") if isinstance(kind, Mapping) else kind
    obj = request.get("object")
    if kind_name not in (None, "Pod") or not isinstance(obj, Mapping) or obj.get("kind") not in (None, "Pod"):
        return None
    return obj


def mutate_review(
    review: Mapping[str, Any],
    *,
    runtime_class_name: str | None,
    random_suffix: Callable[[], str] = make_random_suffix,
    scheduler_name: str = keys.SCHEDULER_NAME,
    fraction_runtime_class_name: str | None = None,
    quota_gate: bool = False,
) -> dict[str, Any]:
    """Answer a mutating AdmissionReview (registered for pod CREATE only; anything else passes untouched)."""
    request = review_request(review)
    uid = str(request["uid"])
    if request.get("operation") != "CREATE":
        return allowed(uid)
    pod = _pod_object(request)
    if pod is None:
        return errored(uid, "bad object type")
    if (problem := _shape_error(pod)) is not None:
        return errored(uid, f"bad pod: {problem}")
    try:
        ops = mutate_pod(pod, str(request.get("namespace") or ""), runtime_class_name=runtime_class_name,
                         random_suffix=random_suffix, scheduler_name=scheduler_name,
                         fraction_runtime_class_name=fraction_runtime_class_name, quota_gate=quota_gate)
    except AdmissionDenied as exc:
        return denied(uid, exc.message)
    return allowed(uid, ops)


def validate_review(
    review: Mapping[str, Any], *, gpu_sharing_enabled: bool, scheduler_name: str = keys.SCHEDULER_NAME,
) -> dict[str, Any]:
    """Answer a validating AdmissionReview (pod CREATE and UPDATE; the new object is judged)."""
    request = review_request(review)
    uid = str(request["uid"])
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed(uid)
    pod = _pod_object(request)
    if pod is None:
        return errored(uid, "bad object type")
    if (problem := _shape_error(pod)) is not None:
        return errored(uid, f"bad pod: {problem}")
    metadata = pod.get("metadata") or {}
    if not metadata.get("namespace") and request.get("namespace"):
        # The denial names the pod `<namespace>/<name>`; a CREATE object may not carry its namespace yet.
        pod = {**pod, "metadata": {**metadata, "namespace": request["namespace"]}}
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    message = validate_pod(pod, gpu_sharing_enabled=gpu_sharing_enabled, scheduler_name=scheduler_name,
                           old=old if isinstance(old, Mapping) else None)
    return allowed(uid) if message is None else denied(uid, message)


def validate_topology_review(review: Mapping[str, Any]) -> dict[str, Any]:
    """Answer a validating AdmissionReview for a Topology (CREATE and UPDATE; UPDATE also sees the old object)."""
    request = review_request(review)
    uid = str(request["uid"])
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed(uid)
    kind = request.get("kind")
    kind_name = kind.get("kind") if isinstance(kind, Mapping) else kind
    obj, old = request.get("object"), request.get("oldObject")
    if kind_name not in (None, "Topology") or not isinstance(obj, Mapping) \
            or obj.get("kind") not in (None, "Topology"):
        return errored(uid, "bad object type: expected a kai.scheduler/v1alpha1 Topology")
    previous = old if request.get("operation") == "UPDATE" and isinstance(old, Mapping) else None
    errors = validate_topology(obj, previous)
    if not errors:
        return allowed(uid)
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    prefix = f"Topology {name}: " if isinstance(name, str) and name else ""
    return denied(uid, prefix + "; ".join(errors))
