"""Pod mutation of the admission webhook: the JSON patch is applied and the pod inspected."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from operators.admission.mutate import AdmissionDenied, configmap_prefix, make_random_suffix, mutate_pod
from operators.admission.validate import validate_pod

ApplyPatch = Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]]  # the conftest fixture

SUFFIX = "abc1234"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def fixed() -> str:
    return SUFFIX


def no_random() -> str:
    raise AssertionError("the configmap annotation must not be regenerated")


def refs(configmap: str) -> list[dict[str, Any]]:
    return [
        {"name": var, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": var}}}
        for var in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
    ]


def mutated(
    apply_patch: ApplyPatch,
    subject: dict[str, Any],
    namespace: str = "default",
    runtime: str | None = None,
) -> dict[str, Any]:
    ops = mutate_pod(subject, namespace, runtime_class_name=runtime, random_suffix=fixed)
    return apply_patch(subject, ops)


def ray_worker(cluster: dict[str, Any]) -> dict[str, Any]:
    """The worker pod KubeRay builds from the template (generateName, owner, scheduler, env of its own)."""
    (group,) = cluster["spec"]["workerGroupSpecs"]
    template = copy.deepcopy(group["template"])
    spec = template["spec"]
    spec["schedulerName"] = "kai-scheduler"
    spec["containers"][0]["env"] = [
        {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "raycluster-half-gpu-shared-gpu-worker-",
            "labels": {"ray.io/cluster": "raycluster-half-gpu", "kai.scheduler/queue": "team-a"},
            "annotations": template["metadata"]["annotations"],
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": "raycluster-half-gpu",
                    "uid": "u-1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def test_kuberay_gpu_sharing_worker(
    apply_patch: ApplyPatch,
    examples: Callable[[str], list[dict[str, Any]]],
) -> None:
    cluster = next(d for d in examples("ray-cluster.kai-gpu-sharing.yaml") if d["kind"] == "RayCluster")
    worker = ray_worker(cluster)
    result = mutated(apply_patch, worker, "team-a-ns", runtime="nvidia")

    prefix = f"raycluster-half-gpu-{SUFFIX}-shared-gpu"  # base is the owner, not the (unknown) pod name
    assert result["metadata"]["namespace"] == "team-a-ns"
    assert result["metadata"]["annotations"] == {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": prefix}
    container = result["spec"]["containers"][0]
    assert container["env"] == worker["spec"]["containers"][0]["env"] + refs(f"{prefix}-0")
    assert container["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar", "optional": False}}]
    assert result["spec"]["volumes"] == [{"name": f"{prefix}-0-vol", "configMap": {"name": f"{prefix}-0"}}]
    assert not any("volumeMounts" in c for c in result["spec"]["containers"])
    assert result["spec"]["runtimeClassName"] == "nvidia"
    # Nothing else moved.
    assert {k: v for k, v in container.items() if k not in ("env", "envFrom")} == {
        k: v for k, v in worker["spec"]["containers"][0].items() if k != "env"
    }
    assert validate_pod(result, gpu_sharing_enabled=True) is None


@pytest.mark.parametrize("name", ["gpu-fraction-pod.yaml", "gpu-memory-pod.yaml"])
def test_doc_pods(
    apply_patch: ApplyPatch, examples: Callable[[str], list[dict[str, Any]]], name: str
) -> None:
    (subject,) = examples("gpu-sharing/" + name)
    ops = mutate_pod(subject, "default", runtime_class_name=None, random_suffix=fixed)
    # Absent lists are created whole; the annotation key is escaped.
    paths = [op["path"] for op in ops]
    assert "/metadata/annotations/runai~1shared-gpu-configmap" in paths
    assert "/spec/volumes" in paths and "/spec/containers/0/env" in paths
    result = apply_patch(subject, ops)
    prefix = f"gpu-sharing-{SUFFIX}-shared-gpu"
    assert result["metadata"]["namespace"] == "default"
    assert result["metadata"]["annotations"]["runai/shared-gpu-configmap"] == prefix
    assert result["spec"]["containers"][0]["env"] == refs(f"{prefix}-0")
    assert "runtimeClassName" not in result["spec"]


def test_idempotent(apply_patch: ApplyPatch, examples: Callable[[str], list[dict[str, Any]]]) -> None:
    cluster = next(d for d in examples("ray-cluster.kai-gpu-sharing.yaml") if d["kind"] == "RayCluster")
    once = mutated(apply_patch, ray_worker(cluster), "ns", runtime="nvidia")
    assert mutate_pod(once, "ns", runtime_class_name="nvidia", random_suffix=no_random) == []
    # As stored by the API server: defaults filled in, which must not read as a difference.
    stored = copy.deepcopy(once)
    stored["spec"]["volumes"][0]["configMap"]["defaultMode"] = 420
    stored["metadata"]["name"] = "raycluster-half-gpu-shared-gpu-worker-x7k2p"
    assert mutate_pod(stored, "ns", runtime_class_name="nvidia", random_suffix=no_random) == []


def test_existing_annotation_is_kept(apply_patch: ApplyPatch) -> None:
    subject = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": "given"},
        },
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }
    result = apply_patch(subject, mutate_pod(subject, "ns", runtime_class_name=None, random_suffix=no_random))
    assert result["metadata"]["annotations"]["runai/shared-gpu-configmap"] == "given"
    assert result["spec"]["volumes"] == [{"name": "given-0-vol", "configMap": {"name": "given-0"}}]


def base_pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"gpu-fraction": "0.25"}},
        "spec": {"schedulerName": "kai-scheduler", **spec},
    }


def test_init_container_target(apply_patch: ApplyPatch) -> None:
    subject = base_pod(
        initContainers=[{"name": "setup", "image": "x"}, {"name": "warmup", "image": "x"}],
        containers=[{"name": "main", "image": "x", "env": [{"name": "A", "value": "1"}]}],
    )
    subject["metadata"]["annotations"]["gpu-fraction-container-name"] = "warmup"
    result = mutated(apply_patch, subject, "ns")
    cm = f"p-{SUFFIX}-shared-gpu-i1"
    assert result["spec"]["initContainers"][1]["env"] == refs(cm)
    assert result["spec"]["initContainers"][1]["envFrom"] == [
        {"configMapRef": {"name": f"{cm}-evar", "optional": False}}
    ]
    assert result["spec"]["initContainers"][0] == subject["spec"]["initContainers"][0]
    assert result["spec"]["containers"] == subject["spec"]["containers"]
    assert result["spec"]["volumes"] == [{"name": f"{cm}-vol", "configMap": {"name": cm}}]


def test_init_containers_are_searched_first(apply_patch: ApplyPatch) -> None:
    subject = base_pod(
        initContainers=[{"name": "gpu", "image": "x"}],
        containers=[{"name": "other", "image": "x"}, {"name": "gpu", "image": "x"}],
    )
    subject["metadata"]["annotations"]["gpu-fraction-container-name"] = "gpu"
    result = mutated(apply_patch, subject, "ns")
    assert "env" in result["spec"]["initContainers"][0]
    assert all("env" not in c for c in result["spec"]["containers"])


def test_named_regular_container(apply_patch: ApplyPatch) -> None:
    subject = base_pod(containers=[{"name": "proxy", "image": "x"}, {"name": "model", "image": "x"}])
    subject["metadata"]["annotations"]["gpu-fraction-container-name"] = "model"
    result = mutated(apply_patch, subject, "ns")
    assert result["spec"]["containers"][1]["env"] == refs(f"p-{SUFFIX}-shared-gpu-1")
    assert "env" not in result["spec"]["containers"][0]


def test_unknown_container_is_denied() -> None:
    subject = base_pod(containers=[{"name": "main", "image": "x"}])
    subject["metadata"]["annotations"]["gpu-fraction-container-name"] = "ghost"
    with pytest.raises(AdmissionDenied) as denied:
        mutate_pod(subject, "ns", runtime_class_name=None, random_suffix=fixed)
    assert denied.value.message == (
        "failed to get fraction container ref: container with name ghost not found for fraction request"
    )


def test_namespace() -> None:
    subject = base_pod(containers=[{"name": "main", "image": "x"}])
    with pytest.raises(AdmissionDenied) as denied:
        mutate_pod(subject, "other", runtime_class_name=None, random_suffix=fixed)
    assert (
        denied.value.message
        == "error: the namespace from the provided object ns does not match the namespace other"
    )
    assert not any(
        op["path"] == "/metadata/namespace"
        for op in mutate_pod(subject, "ns", runtime_class_name=None, random_suffix=fixed)
    )
    cpu_pod = {"metadata": {"name": "p"}, "spec": {"schedulerName": "kai-scheduler", "containers": [{}]}}
    assert mutate_pod(cpu_pod, "team", runtime_class_name="nvidia", random_suffix=no_random) == [
        {"op": "add", "path": "/metadata/namespace", "value": "team"}
    ]


def test_existing_env_and_volume_are_replaced(apply_patch: ApplyPatch) -> None:
    cm = f"p-{SUFFIX}-shared-gpu-0"
    subject = base_pod(
        containers=[
            {
                "name": "main",
                "image": "x",
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "KEEP", "value": "1"}],
                "envFrom": [{"secretRef": {"name": "s"}}],
            }
        ],
        volumes=[{"name": "data", "emptyDir": {}}, {"name": f"{cm}-vol", "emptyDir": {}}],
    )
    ops = mutate_pod(subject, "ns", runtime_class_name=None, random_suffix=fixed)
    assert {"op": "replace", "path": "/spec/containers/0/env/0", "value": refs(cm)[0]} in ops
    result = apply_patch(subject, ops)
    env = result["spec"]["containers"][0]["env"]
    assert env == [refs(cm)[0], {"name": "KEEP", "value": "1"}, *refs(cm)[1:]]
    assert result["spec"]["containers"][0]["envFrom"] == [
        {"secretRef": {"name": "s"}},
        {"configMapRef": {"name": f"{cm}-evar", "optional": False}},
    ]
    assert result["spec"]["volumes"] == [
        {"name": "data", "emptyDir": {}},
        {"name": f"{cm}-vol", "configMap": {"name": cm}},
    ]


def test_null_members_are_created(apply_patch: ApplyPatch) -> None:
    subject = base_pod(
        containers=[{"name": "main", "image": "x", "env": None, "envFrom": None}], volumes=None
    )
    result = mutated(apply_patch, subject, "ns")
    assert len(result["spec"]["containers"][0]["env"]) == 3
    assert len(result["spec"]["volumes"]) == 1


@pytest.mark.parametrize(
    ("owner", "index", "kept"), [("x" * 100, 0, 33), ("x" * 100, 10, 32), ("x" * 33, 0, 33), ("short", 0, 5)]
)
def test_prefix_truncation(owner: str, index: int, kept: int) -> None:
    subject = {"metadata": {"name": "p", "ownerReferences": [{"name": owner}]}}
    prefix = configmap_prefix(subject, index, SUFFIX)
    assert prefix == f"{owner[:kept]}-{SUFFIX}-shared-gpu"
    capabilities = f"{prefix}-{index}"
    assert len(capabilities + "-vol") <= 63 and len(capabilities + "-evar") <= 63
    assert DNS_LABEL.fullmatch(capabilities + "-vol")


def test_long_owner_gives_valid_names(apply_patch: ApplyPatch) -> None:
    subject = base_pod(containers=[{"name": "main", "image": "x"}])
    subject["metadata"]["ownerReferences"] = [{"name": "my.model-server." + "a" * 80}]
    result = mutated(apply_patch, subject, "ns")
    (volume,) = result["spec"]["volumes"]
    assert len(volume["name"]) <= 63 and DNS_LABEL.fullmatch(volume["name"]), volume["name"]
    assert volume["name"].startswith("my-model-server-")


def test_generate_name_base() -> None:
    subject = {"metadata": {"generateName": "vllm-test-07-5979b99584-"}}
    assert configmap_prefix(subject, 0, SUFFIX) == f"vllm-test-07-5979b99584-{SUFFIX}-shared-gpu"


def test_random_suffix_shape() -> None:
    suffixes = {make_random_suffix() for _ in range(50)}
    assert len(suffixes) > 40
    assert all(re.fullmatch(r"[a-z0-9]{7}", s) for s in suffixes)


@pytest.mark.parametrize(
    ("name", "spec", "annotations", "expected"),
    [
        ("whole", {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, {}, "nvidia"),
        (
            "request only",
            {"containers": [{}, {"resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
            {},
            "nvidia",
        ),
        ("fraction without containers", {}, {"gpu-fraction": "0.5"}, "nvidia"),
        ("zero GPUs", {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0"}}}]}, {}, None),
        ("cpu", {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}, {}, None),
        (
            "init container GPU only",
            {"initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}], "containers": [{}]},
            {},
            None,
        ),
        (
            "gpu-reservation-node-1-abcde",
            {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            {},
            None,
        ),
        (
            "kept",
            {
                "runtimeClassName": "custom",
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            {},
            "custom",
        ),
    ],
)
def test_runtime_class(
    apply_patch: ApplyPatch,
    name: str,
    spec: dict[str, Any],
    annotations: dict[str, str],
    expected: str | None,
) -> None:
    subject = {
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"schedulerName": "kai-scheduler", **spec},
    }
    result = mutated(apply_patch, subject, "ns", runtime="nvidia")
    assert result["spec"].get("runtimeClassName") == expected
    without = mutated(apply_patch, subject, "ns", runtime="")
    assert without["spec"].get("runtimeClassName") == spec.get("runtimeClassName")


def test_other_scheduler_untouched() -> None:
    subject = base_pod(containers=[{"name": "main", "image": "x"}])
    subject["spec"]["schedulerName"] = "default-scheduler"
    assert mutate_pod(subject, "elsewhere", runtime_class_name="nvidia", random_suffix=no_random) == []
    assert (
        mutate_pod(
            subject, "ns", runtime_class_name=None, random_suffix=fixed, scheduler_name="default-scheduler"
        )
        != []
    )


def test_input_is_not_modified() -> None:
    subject = base_pod(containers=[{"name": "main", "image": "x"}])
    before = copy.deepcopy(subject)
    mutate_pod(subject, "ns", runtime_class_name="nvidia", random_suffix=fixed)
    assert subject == before


def test_agrees_with_jsonpatch_library(
    apply_patch: ApplyPatch,
    examples: Callable[[str], list[dict[str, Any]]],
) -> None:
    """Cross-check our test applier against an independent implementation (jsonpatch, a dependency of kopf)."""
    import jsonpatch  # type: ignore[import-untyped]
    cluster = next(d for d in examples("ray-cluster.kai-gpu-sharing.yaml") if d["kind"] == "RayCluster")
    worker = ray_worker(cluster)
    ops = mutate_pod(worker, "ns", runtime_class_name="nvidia", random_suffix=fixed)
    assert jsonpatch.apply_patch(worker, ops) == apply_patch(worker, ops)


def test_missing_parents_are_added(apply_patch: ApplyPatch) -> None:
    bare: dict[str, Any] = {"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}
    ops = mutate_pod(bare, "team", runtime_class_name=None, random_suffix=no_random)
    assert ops == [
        {"op": "add", "path": "/metadata", "value": {}},
        {"op": "add", "path": "/metadata/namespace", "value": "team"},
    ]
    assert apply_patch(bare, ops)["metadata"] == {"namespace": "team"}


def test_empty_annotation_is_regenerated(apply_patch: ApplyPatch) -> None:
    subject = base_pod(containers=[{"name": "main", "image": "x"}])
    subject["metadata"]["annotations"]["runai/shared-gpu-configmap"] = ""
    result = mutated(apply_patch, subject, "ns")
    assert result["metadata"]["annotations"]["runai/shared-gpu-configmap"] == f"p-{SUFFIX}-shared-gpu"


@pytest.mark.parametrize(
    ("name", "annotations", "limits", "expected"),
    [
        ("fraction", {"gpu-fraction": "0.5"}, {}, "nvidia-fraction"),
        ("gpu memory", {"gpu-memory": "1024"}, {}, "nvidia-fraction"),
        ("whole GPU", {}, {"nvidia.com/gpu": "1"}, "nvidia-whole"),
        ("cpu", {}, {"cpu": "1"}, None),
    ],
)
def test_fraction_runtime_class_goes_to_sharing_pods_only(
    apply_patch: ApplyPatch, name: str, annotations: dict[str, str], limits: dict[str, str], expected: str | None
) -> None:
    """KAI v0.16+ `gpuFractionRuntimeClassName`: GPU-sharing pods only; the every-GPU-pod class still applies
    to the others when it is set too."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
           "spec": {"schedulerName": "kai-scheduler",
                    "containers": [{"name": "main", "resources": {"limits": limits}}]}}
    ops = mutate_pod(pod, "ns", runtime_class_name="nvidia-whole", fraction_runtime_class_name="nvidia-fraction",
                     random_suffix=fixed)
    assert apply_patch(pod, ops)["spec"].get("runtimeClassName") == expected, name
    only_fraction = apply_patch(pod, mutate_pod(pod, "ns", runtime_class_name=None,
                                                fraction_runtime_class_name="nvidia-fraction", random_suffix=fixed))
    assert only_fraction["spec"].get("runtimeClassName") == (expected if expected == "nvidia-fraction" else None)
