"""Validation messages of the admission webhook, table-driven."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from operators.admission import validate as v
from operators.admission.validate import validate_pod
from operators.core.numbers import go_parse_float, go_parse_uint


def pod(
    annotations: dict[str, str] | None = None,
    *,
    limits: dict[str, str] | None = None,
    init_limits: dict[str, str] | None = None,
    sidecar_limits: dict[str, str] | None = None,
    scheduler: str = "kai-scheduler",
    init_name: str | None = None,
) -> dict[str, Any]:
    containers: list[dict[str, Any]] = [{"name": "main", "image": "x", "resources": {"limits": limits or {}}}]
    if sidecar_limits is not None:
        containers.append({"name": "sidecar", "image": "x", "resources": {"limits": sidecar_limits}})
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": containers}
    if init_limits is not None or init_name is not None:
        spec["initContainers"] = [
            {"name": init_name or "init", "image": "x", "resources": {"limits": init_limits or {}}}
        ]
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}}, "spec": spec}


GPU = "nvidia.com/gpu"

DENIED: list[tuple[str, dict[str, Any], str]] = [
    ("mps without fraction", pod({"mps": "true"}), v.MPS_WITHOUT_FRACTION),
    (
        "mps with a whole GPU is still not a fraction",
        pod({"mps": "true"}, limits={GPU: "1"}),
        v.MPS_WITHOUT_FRACTION,
    ),
    (
        "mps is checked before num-devices",
        pod({"mps": "true", "gpu-fraction-num-devices": "2"}),
        v.MPS_WITHOUT_FRACTION,
    ),
    (
        "fraction and whole GPU limit",
        pod({"gpu-fraction": "0.5"}, limits={GPU: "1"}),
        v.FRACTION_AND_WHOLE_GPU,
    ),
    (
        "fraction and a zero GPU limit: the key counts",
        pod({"gpu-fraction": "0.5"}, limits={GPU: "0"}),
        v.FRACTION_AND_WHOLE_GPU,
    ),
    (
        "fraction and GPU limit on an init container",
        pod({"gpu-fraction": "0.5"}, init_limits={GPU: "1"}),
        v.FRACTION_AND_WHOLE_GPU,
    ),
    (
        "fraction wins over memory when a whole GPU is also asked",
        pod({"gpu-fraction": "0.5", "gpu-memory": "100"}, limits={GPU: "1"}),
        v.FRACTION_AND_WHOLE_GPU,
    ),
    ("memory and fraction", pod({"gpu-fraction": "0.5", "gpu-memory": "1"}), v.MEMORY_AND_GPU),
    (
        "memory and a GPU limit in a sidecar",
        pod({"gpu-memory": "1"}, sidecar_limits={GPU: "1"}),
        v.MEMORY_AND_GPU,
    ),
    (
        "memory and fraction, both malformed: the conflict is reported first",
        pod({"gpu-fraction": "x", "gpu-memory": "y"}),
        v.MEMORY_AND_GPU,
    ),
    ("num-devices without portion", pod({"gpu-fraction-num-devices": "1"}), v.NUM_DEVICES_WITHOUT_PORTION),
    (
        "malformed num-devices without portion",
        pod({"gpu-fraction-num-devices": "x"}),
        v.NUM_DEVICES_WITHOUT_PORTION,
    ),
    *[
        (f"gpu-memory {raw!r}", pod({"gpu-memory": raw}), v.INVALID_GPU_MEMORY)
        for raw in ["-1", "0", "abc", "1.5", "+5", " 5", "1_000", "", "1e3", "18446744073709551616"]
    ],
    *[
        (f"gpu-fraction {raw!r}", pod({"gpu-fraction": raw}), v.INVALID_GPU_FRACTION)
        for raw in [
            "0",
            "0.0",
            "1",
            "1.0",
            "1.2",
            "-1",
            "-0.5",
            "abc",
            "",
            "nan",
            "NaN",
            "inf",
            "0.1_5",
            " 0.5",
            "0.5 ",
            "50%",
            "1/2",
            "1e400",
            "1e-400",
            "0x1p0",
        ]
    ],
    (
        "fraction checked before num-devices",
        pod({"gpu-fraction": "2", "gpu-fraction-num-devices": "x"}),
        v.INVALID_GPU_FRACTION,
    ),
    (
        "memory checked before num-devices",
        pod({"gpu-memory": "0", "gpu-fraction-num-devices": "x"}),
        v.INVALID_GPU_MEMORY,
    ),
    *[
        (
            f"num-devices {raw!r}",
            pod({"gpu-fraction": "0.2", "gpu-fraction-num-devices": raw}),
            v.INVALID_NUM_DEVICES,
        )
        for raw in ["0", "1.2", "-1", "x", "", "+2"]
    ],
    (
        "num-devices with memory",
        pod({"gpu-memory": "100", "gpu-fraction-num-devices": "0"}),
        v.INVALID_NUM_DEVICES,
    ),
    (
        "unknown fraction container",
        pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"}),
        "failed to get fraction container ref: container with name nope not found for fraction request",
    ),
]


@pytest.mark.parametrize(("case", "subject", "message"), DENIED, ids=[c[0] for c in DENIED])
def test_denied(case: str, subject: dict[str, Any], message: str) -> None:
    assert validate_pod(subject, gpu_sharing_enabled=True) == message


ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("no annotation", pod()),
    ("whole GPUs", pod(limits={GPU: "2"}, sidecar_limits={GPU: "1"})),
    ("mps false without fraction", pod({"mps": "false"})),
    ("mps with fraction", pod({"mps": "true", "gpu-fraction": "0.5"})),
    ("memory", pod({"gpu-memory": "2000"})),
    ("fraction with num-devices", pod({"gpu-fraction": "0.3", "gpu-fraction-num-devices": "2"})),
    ("memory with num-devices", pod({"gpu-memory": "1000", "gpu-fraction-num-devices": "2"})),
    *[
        (f"fraction {raw!r}", pod({"gpu-fraction": raw}))
        for raw in ["0.5", "0.2", "0.7", ".5", "5e-1", "+0.25", "0.999", "1e-3", "0x1p-1"]
    ],
    (
        "named regular container",
        pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}, sidecar_limits={}),
    ),
    (
        "named init container",
        pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "warmup"}, init_name="warmup"),
    ),
    (
        "another scheduler is not judged",
        pod({"gpu-fraction": "7", "mps": "true"}, scheduler="default-scheduler"),
    ),
]


@pytest.mark.parametrize(("case", "subject"), ALLOWED, ids=[c[0] for c in ALLOWED])
def test_allowed(case: str, subject: dict[str, Any]) -> None:
    assert validate_pod(subject, gpu_sharing_enabled=True) is None


@pytest.mark.parametrize(
    "annotation", [{"gpu-fraction": "0.5"}, {"gpu-memory": "100"}, {"gpu-fraction": "bad"}]
)
def test_sharing_disabled_names_the_pod_and_comes_first(annotation: dict[str, str]) -> None:
    assert validate_pod(pod(annotation, limits={GPU: "1"}), gpu_sharing_enabled=False) == (
        "attempting to create a pod ns/p with gpu sharing request, while GPU sharing is disabled"
    )


def test_sharing_disabled_still_validates_other_rules() -> None:
    assert validate_pod(pod(limits={GPU: "1"}), gpu_sharing_enabled=False) is None
    assert validate_pod(pod({"mps": "true"}), gpu_sharing_enabled=False) == v.MPS_WITHOUT_FRACTION


def test_configured_scheduler_name() -> None:
    bad = pod({"gpu-fraction": "7"}, scheduler="my-kai")
    assert validate_pod(bad, gpu_sharing_enabled=True) is None
    assert validate_pod(bad, gpu_sharing_enabled=True, scheduler_name="my-kai") == v.INVALID_GPU_FRACTION


def _template_pod(template: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {
        "metadata": {**template.get("metadata", {}), "name": "x", "namespace": namespace},
        "spec": {"schedulerName": "kai-scheduler", **template["spec"]},
    }


@pytest.mark.parametrize("name", ["vllm-test-02.yaml", "vllm-test-07.yaml"])
def test_seed_vllm_pods_pass(examples: Callable[[str], list[dict[str, Any]]], name: str) -> None:
    (deployment,) = examples(name)
    subject = _template_pod(deployment["spec"]["template"], "ai-workloads")
    assert subject["metadata"]["annotations"]["gpu-fraction"] in ("0.2", "0.7")
    assert validate_pod(subject, gpu_sharing_enabled=True) is None
    assert validate_pod(subject, gpu_sharing_enabled=False) == (
        "attempting to create a pod ai-workloads/x with gpu sharing request, while GPU sharing is disabled"
    )


def test_ray_gpu_sharing_worker_passes(examples: Callable[[str], list[dict[str, Any]]]) -> None:
    cluster = next(d for d in examples("ray-cluster.kai-gpu-sharing.yaml") if d["kind"] == "RayCluster")
    (group,) = cluster["spec"]["workerGroupSpecs"]
    worker = _template_pod(group["template"])
    assert worker["metadata"]["annotations"] == {"gpu-fraction": "0.5"}
    assert validate_pod(worker, gpu_sharing_enabled=True) is None


@pytest.mark.parametrize("name", ["gpu-fraction-pod.yaml", "gpu-memory-pod.yaml"])
def test_doc_pods_pass(examples: Callable[[str], list[dict[str, Any]]], name: str) -> None:
    (subject,) = examples("gpu-sharing/" + name)
    assert validate_pod(subject, gpu_sharing_enabled=True) is None


def test_go_number_parsing() -> None:
    assert go_parse_uint("007") == 7
    assert go_parse_uint(str(2**64 - 1)) == 2**64 - 1
    assert [go_parse_uint(s) for s in ("", "-1", "+1", "1 ", "1_0", "٣")] == [None] * 6
    assert go_parse_float("1.") == 1.0
    assert go_parse_float("0x1.8p1") == 3.0
    assert go_parse_float("Inf") == float("inf")
    assert [go_parse_float(s) for s in ("1e999", ".", "e1", "1_0", "0x1", "0.5f")] == [None] * 6


def delayed(where: str, value: str) -> dict[str, Any]:
    out = pod()
    out["metadata"][where] = {"kai.scheduler/preemption-delay": value}
    return out


@pytest.mark.parametrize("value", ["30s", "5m", "1h30m", "1.5h", "0", "500ms"])
@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_a_go_duration_preemption_delay_is_admitted(where: str, value: str) -> None:
    assert validate_pod(delayed(where, value), gpu_sharing_enabled=True) is None


@pytest.mark.parametrize(("value", "shown"), [("5", "'5'"), ("soon", "'soon'"), ("5 m", "'5 m'"), ("", "''"),
                                              ("-30s", "the negative '-30s'"), ("1d", "'1d'")])
@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_a_malformed_preemption_delay_is_refused_with_the_format(where: str, value: str, shown: str) -> None:
    assert validate_pod(delayed(where, value), gpu_sharing_enabled=True) == (
        f"metadata.{where}[kai.scheduler/preemption-delay]: must be a non-negative Go duration: numbers with units "
        f'(ns, us, ms, s, m, h), e.g. "30s", "5m", "1h30m", got {shown}')


def test_a_preemption_delay_the_stored_pod_already_had_is_not_judged_on_update() -> None:
    stored = delayed("annotations", "5")
    assert validate_pod(stored, gpu_sharing_enabled=True, old=stored) is None
    assert validate_pod(delayed("annotations", "6"), gpu_sharing_enabled=True, old=stored) is not None
    # Pods of other schedulers are not ours to judge.
    other = delayed("annotations", "soon")
    other["spec"]["schedulerName"] = "default-scheduler"
    assert validate_pod(other, gpu_sharing_enabled=True) is None
