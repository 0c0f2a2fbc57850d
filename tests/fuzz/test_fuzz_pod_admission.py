"""Fuzzing the pod admission boundary: any annotation text and any pod shape the API server can decode.

Every input is either refused with one of the known messages, or admitted with values the scheduler can use
(a finite fraction in (0, 1), a positive whole number of MiB). Nothing raises.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.admission import validate as v
from operators.admission.mutate import mutate_pod
from operators.admission.review import ReviewError, mutate_review, response_patch, validate_review
from operators.core import keys
from operators.core.gpusharing import CONTAINER_REF_ERROR
from operators.core.resources import GpuRequestError, gpu_request

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Texts a user may put in a numeric annotation: numbers in every spelling, NaN/Inf, huge and tiny values.
NUMBER_TEXTS = st.one_of(
    st.sampled_from(["NaN", "nan", "-nan", "Inf", "+Inf", "-inf", "infinity", "1e309", "-1e309", "1e-400",
                     "0", "-0", "0.0", "1", "1.0", "0.5", ".5", "5.", "0x1p-1", "0x1p-2000", "1_0", " 0.5",
                     "0.5 ", "+0.5", "1e-320", "18446744073709551615", "18446744073709551616", "9" * 400,
                     "", " ", "½", "\u0660\u066b\u0665", "0,5", "true", "null"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=12),
)
SHARING_KEYS = [keys.GPU_FRACTION, keys.GPU_MEMORY, keys.GPU_FRACTION_NUM_DEVICES, keys.MPS,
                keys.GPU_FRACTION_CONTAINER_NAME]
ANNOTATIONS = st.dictionaries(st.sampled_from(SHARING_KEYS), NUMBER_TEXTS | st.sampled_from(["true", "main", "x"]),
                              max_size=5)
GPU_LIMITS = st.dictionaries(st.just(keys.GPU_RESOURCE), st.sampled_from(["0", "1", "2", "500m", "1e3"]), max_size=1)
NAMES = st.sampled_from(["main", "side", "init", "x"])
ENV = st.lists(st.fixed_dictionaries({"name": st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "GPU_PORTION", "A"]),
                                      "value": st.text(max_size=3)}), max_size=2)


def container(name: str, limits: dict[str, str], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": limits}, "env": env}


CONTAINERS = st.lists(st.builds(container, NAMES, GPU_LIMITS, ENV), max_size=3)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": draw(st.sampled_from(["kai-scheduler", "kai-scheduler",
                                                                   "default-scheduler"])),
                            "containers": draw(CONTAINERS)}
    if draw(st.booleans()):
        spec["initContainers"] = draw(CONTAINERS)
    if draw(st.booleans()):
        spec["volumes"] = [{"name": draw(st.sampled_from(["v", "x-0-vol"])), "emptyDir": {}}]
    metadata: dict[str, Any] = {"name": draw(st.sampled_from(["p", "a" * 70, "gpu-reservation-x", "a.b.c"])),
                                "namespace": draw(st.sampled_from(["ns", ""])),
                                "annotations": draw(ANNOTATIONS)}
    if draw(st.booleans()):
        metadata["ownerReferences"] = [{"name": draw(st.sampled_from(["job", "r" * 80, "a.b"]))}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


KNOWN_DENIALS = {v.MPS_WITHOUT_FRACTION, v.FRACTION_AND_WHOLE_GPU, v.MEMORY_AND_GPU, v.NUM_DEVICES_WITHOUT_PORTION,
                 v.INVALID_GPU_MEMORY, v.INVALID_GPU_FRACTION, v.INVALID_NUM_DEVICES}


@FUZZ
@given(pods())
def test_validation_refuses_with_a_known_message_or_admits_usable_values(pod: dict[str, Any]) -> None:
    message = v.validate_pod(pod, gpu_sharing_enabled=True)
    if message is not None:
        assert message in KNOWN_DENIALS or message.startswith(CONTAINER_REF_ERROR.split("%")[0]), message
        return
    annotations = pod["metadata"]["annotations"]
    if pod["spec"]["schedulerName"] != keys.SCHEDULER_NAME:
        return
    if (fraction := annotations.get(keys.GPU_FRACTION)) is not None:
        value = float.fromhex(fraction) if "x" in fraction.lower() else float(fraction)
        assert math.isfinite(value) and 0 < value < 1, fraction
    if (memory := annotations.get(keys.GPU_MEMORY)) is not None:
        assert memory.isascii() and memory.isdigit() and int(memory) > 0, memory
    # What the webhook admits, the scheduler can read.
    request = gpu_request(annotations, {})
    assert request.portion is None or (math.isfinite(request.portion) and 0 < request.portion < 1)


@FUZZ
@given(pods(), st.booleans())
def test_reviews_always_answer_allowed_or_a_4xx_denial(pod: dict[str, Any], sharing: bool) -> None:
    for operation in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u", "operation": operation, "namespace": "ns", "kind": {"kind": "Pod"},
                              "object": pod}}
        for answer in (validate_review(review, gpu_sharing_enabled=sharing),
                       mutate_review(review, runtime_class_name="nvidia", fraction_runtime_class_name="frac",
                                     random_suffix=lambda: "abcdefg")):
            body = answer["response"]
            assert body["uid"] == "u"
            code = body["status"]["code"]
            assert (body["allowed"] and code == 200) or (not body["allowed"] and code in (400, 403)), body
            assert body["allowed"] or body["status"]["message"]
            response_patch(answer)  # the patch, when there is one, decodes


@FUZZ
@given(pods())
def test_mutation_is_idempotent_and_its_names_fit(pod: dict[str, Any]) -> None:
    from tests.unit.admission.conftest import _apply

    before = repr(pod)  # the copy-on-write view must never write through to the request's pod
    try:
        ops = mutate_pod(pod, "ns", runtime_class_name="nvidia", random_suffix=lambda: "abcdefg")
    except Exception as exc:
        assert type(exc).__name__ == "AdmissionDenied", exc
        return
    finally:
        assert repr(pod) == before
    mutated = _apply(pod, ops)
    assert mutate_pod(mutated, "ns", runtime_class_name="nvidia", random_suffix=lambda: "zzzzzzz") == []
    for volume in (mutated["spec"].get("volumes") or []):
        assert len(volume["name"]) <= 63, volume["name"]


# Review bodies of any shape: the function answers or raises ReviewError (the server's 400), nothing else.
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)


# Objects that are almost pods: any member may have the wrong type.
ALMOST_PODS = st.fixed_dictionaries({}, optional={
    "kind": st.sampled_from(["Pod", "Node"]) | JSON,
    "metadata": JSON | st.fixed_dictionaries({}, optional={
        "name": JSON | st.just("p"), "namespace": JSON, "annotations": JSON | ANNOTATIONS,
        "ownerReferences": JSON, "generateName": JSON}),
    "spec": JSON | st.fixed_dictionaries({"schedulerName": st.just("kai-scheduler")}, optional={
        "containers": JSON | st.lists(st.dictionaries(st.sampled_from(["name", "env", "envFrom", "resources"]), JSON,
                                                      max_size=4), max_size=2),
        "initContainers": JSON, "volumes": JSON})})
REQUESTS = st.fixed_dictionaries(
    {"uid": st.just("u"), "operation": st.sampled_from(["CREATE", "UPDATE"])},
    optional={"namespace": st.just("ns") | JSON, "kind": st.just({"kind": "Pod"}) | JSON,
              "object": ALMOST_PODS | pods() | JSON})


@FUZZ
@given(REQUESTS | JSON)
def test_any_review_body_is_answered_or_refused_as_a_bad_request(request: Any) -> None:
    for review in ({"request": request}, request):
        for call in (lambda r: validate_review(r, gpu_sharing_enabled=True),
                     lambda r: mutate_review(r, runtime_class_name="nvidia", fraction_runtime_class_name="f")):
            try:
                answer = call(review)
            except ReviewError:
                continue
            assert answer["response"]["status"]["code"] in (200, 400, 403)


@FUZZ
@given(st.dictionaries(st.sampled_from(SHARING_KEYS), NUMBER_TEXTS, max_size=4))
def test_the_scheduler_reads_any_annotation_or_names_the_error(annotations: dict[str, str]) -> None:
    try:
        request = gpu_request(annotations, {})
    except GpuRequestError as exc:
        assert "annotation value must be" in str(exc)
        return
    assert request.portion is None or (math.isfinite(request.portion) and 0 < request.portion <= 1)
    assert request.memory_mib is None or request.memory_mib > 0
    assert request.num_devices >= 1
