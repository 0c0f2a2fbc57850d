"""AdmissionReview v1 responses built from requests."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from operators.admission.mutate import mutate_pod
from operators.admission.review import ReviewError, mutate_review, response_patch, validate_review

ApplyPatch = Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]]  # the conftest fixture


def fixed() -> str:
    return "zzzzzzz"


def fraction_pod(fraction: str = "0.5", namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "annotations": {"gpu-fraction": fraction}}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }


def review(obj: dict[str, Any] | None, operation: str = "CREATE", namespace: str = "team") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": operation,
    }
    if obj is not None:
        request["object"] = obj
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_mutation_is_patched(apply_patch: ApplyPatch) -> None:
    pod = fraction_pod()
    answer = mutate_review(review(pod), runtime_class_name="nvidia", random_suffix=fixed)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    body = answer["response"]
    assert body["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert body["allowed"] is True and body["status"] == {"code": 200}
    assert body["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(body["patch"]))
    assert ops == mutate_pod(pod, "team", runtime_class_name="nvidia", random_suffix=fixed)
    assert response_patch(answer) == ops
    result = apply_patch(pod, ops)
    assert result["metadata"]["namespace"] == "team"
    assert result["spec"]["runtimeClassName"] == "nvidia"


def test_mutation_denied() -> None:
    answer = mutate_review(review(fraction_pod(namespace="a"), namespace="b"), runtime_class_name=None)
    assert answer["response"] == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": False,
        "status": {
            "code": 403,
            "reason": "Forbidden",
            "message": "error: the namespace from the provided object a does not match the namespace b",
        },
    }


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_mutation_only_on_create(operation: str) -> None:
    body = mutate_review(review(fraction_pod(), operation), runtime_class_name="nvidia")["response"]
    assert body["allowed"] is True and "patch" not in body


def test_nothing_to_patch_has_no_patch_type() -> None:
    pod = fraction_pod(namespace="team")
    pod["spec"]["schedulerName"] = "default-scheduler"
    body = mutate_review(review(pod), runtime_class_name="nvidia")["response"]
    assert body == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True, "status": {"code": 200}}


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_validation_denied(operation: str) -> None:
    answer = validate_review(
        review(fraction_pod("1.5", namespace="team"), operation), gpu_sharing_enabled=True
    )
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"] == {
        "code": 403,
        "reason": "Forbidden",
        "message": "gpu-fraction annotation value must be a positive number smaller than 1.0",
    }


def test_validation_names_the_pod_with_the_request_namespace() -> None:
    answer = validate_review(review(fraction_pod()), gpu_sharing_enabled=False)
    assert answer["response"]["status"]["message"] == (
        "attempting to create a pod team/p with gpu sharing request, while GPU sharing is disabled"
    )


def test_validation_allows() -> None:
    assert validate_review(review(fraction_pod()), gpu_sharing_enabled=True)["response"]["allowed"] is True
    deleting = review(None, "DELETE")
    assert validate_review(deleting, gpu_sharing_enabled=True)["response"]["allowed"] is True


def test_not_a_pod_is_a_bad_request() -> None:
    request = review({"kind": "Service", "metadata": {"name": "s"}})
    body = validate_review(request, gpu_sharing_enabled=True)["response"]
    assert body["allowed"] is False and body["status"]["code"] == 400
    body = mutate_review(review(None), runtime_class_name=None)["response"]
    assert body["allowed"] is False and body["status"]["code"] == 400


@pytest.mark.parametrize("bad", [{}, {"request": {}}, {"request": {"uid": ""}}, {"request": []}])
def test_malformed_review(bad: dict[str, Any]) -> None:
    with pytest.raises(ReviewError):
        validate_review(bad, gpu_sharing_enabled=True)
    with pytest.raises(ReviewError):
        mutate_review(bad, runtime_class_name=None)


def test_an_update_keeping_a_stored_malformed_preemption_delay_is_allowed() -> None:
    bad = fraction_pod(namespace="team")
    bad["metadata"]["annotations"]["kai.scheduler/preemption-delay"] = "5"
    create = validate_review(review(bad), gpu_sharing_enabled=True)["response"]
    assert create["allowed"] is False
    assert create["status"]["message"].startswith("metadata.annotations[kai.scheduler/preemption-delay]: must be")
    update = review(bad, "UPDATE")
    update["request"]["oldObject"] = bad
    assert validate_review(update, gpu_sharing_enabled=True)["response"]["allowed"] is True
