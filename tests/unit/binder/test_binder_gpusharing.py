"""The binder's GPU-sharing bookkeeping: ConfigMap names and bodies, GPU group labels, fake device ids."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from operators.admission.mutate import mutate_pod
from operators.binder import gpusharing as gs

UUID_GPU = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def apply_ops(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Enough of RFC 6902 for these tests: add (incl. '-') and remove, with parents required to exist."""
    result = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"][1:].split("/")]
        node: Any = result
        for token in parents:
            node = node[int(token)] if isinstance(node, list) else node[token]
        if op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            node[last] = op["value"]
    return result


def admitted(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod as the admission webhook leaves it (mutated with a known suffix), with a uid."""
    pod = {
        "metadata": {
            "name": "vllm-abc",
            "namespace": "ai",
            "uid": "uid-1",
            "annotations": {"gpu-fraction": "0.5", **(annotations or {})},
        },
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "vllm", "image": "x"}], **spec},
    }
    ops = mutate_pod(pod, "ai", runtime_class_name=None, random_suffix=lambda: "k2b5c7d")
    return apply_ops(pod, ops)


def test_names_agree_with_admission() -> None:
    pod = admitted()
    names = gs.configmap_names(pod)
    assert names == gs.SharingConfigMaps(
        "vllm-abc-k2b5c7d-shared-gpu-0", "vllm-abc-k2b5c7d-shared-gpu-0-evar"
    )
    container = pod["spec"]["containers"][0]
    assert {e["valueFrom"]["configMapKeyRef"]["name"] for e in container["env"]} == {names.capabilities}
    assert container["envFrom"][0]["configMapRef"]["name"] == names.direct_env


def test_names_for_init_and_named_containers() -> None:
    init = admitted({"gpu-fraction-container-name": "warm"}, initContainers=[{"name": "a"}, {"name": "warm"}])
    assert gs.configmap_names(init).capabilities == "vllm-abc-k2b5c7d-shared-gpu-i1"
    named = admitted(
        {"gpu-fraction-container-name": "side"},
        containers=[{"name": "vllm"}, {"name": "x"}, {"name": "side"}],
    )
    assert gs.configmap_names(named).direct_env == "vllm-abc-k2b5c7d-shared-gpu-2-evar"


def test_names_need_the_annotation() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"gpu-fraction": "0.5"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    with pytest.raises(gs.GpuSharingError, match="no desired configmap name found in pod ns/p annotations"):
        gs.configmap_names(pod)
    pod["metadata"]["annotations"].update(
        {"runai/shared-gpu-configmap": "x", "gpu-fraction-container-name": "q"}
    )
    with pytest.raises(gs.GpuSharingError, match="container with name q not found for fraction request"):
        gs.configmap_names(pod)


def test_configmaps_for_an_admitted_pod() -> None:
    capabilities, direct_env = gs.configmap_bodies(admitted(), device_ids=["GPU-a", "GPU-b"], portion="0.50")
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": "vllm-abc", "uid": "uid-1"}]
    assert capabilities == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vllm-abc-k2b5c7d-shared-gpu-0", "namespace": "ai", "ownerReferences": owner},
        "data": {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "RUNAI_NUM_OF_GPUS": "0.50", "GPU_PORTION": "0.50"},
    }
    assert direct_env["metadata"]["name"] == "vllm-abc-k2b5c7d-shared-gpu-0-evar"
    assert direct_env["metadata"]["ownerReferences"] == owner
    assert direct_env["data"] == {}


def test_configmaps_for_a_pod_without_the_env_ref() -> None:
    pod = admitted()
    pod["spec"]["containers"][0]["env"] = [
        e for e in pod["spec"]["containers"][0]["env"] if e["name"] != "NVIDIA_VISIBLE_DEVICES"
    ]
    capabilities, direct_env = gs.configmap_bodies(pod, device_ids=["GPU-a"], portion="0.30", cdi=True)
    assert capabilities["data"] == {"RUNAI_NUM_OF_GPUS": "0.30", "GPU_PORTION": "0.30"}
    assert direct_env["data"] == {"NVIDIA_VISIBLE_DEVICES": "k8s.device-plugin.nvidia.com/gpu=GPU-a"}


def test_env_ref_of_the_target_container_decides() -> None:
    pod = admitted(
        {"gpu-fraction-container-name": "model"}, containers=[{"name": "proxy"}, {"name": "model"}]
    )
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    capabilities, _ = gs.configmap_bodies(pod, device_ids=["GPU-a"], portion="0.50")
    assert capabilities["data"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"


def test_configmap_merge_patch() -> None:
    (desired, _) = gs.configmap_bodies(admitted(), device_ids=["GPU-a"], portion="0.50")
    assert gs.configmap_merge_patch(desired, desired) is None
    existing = copy.deepcopy(desired)
    existing["data"] = {"NVIDIA_VISIBLE_DEVICES": "GPU-old", "RUNAI-VISIBLE-DEVICES": "GPU-old", "USER": "1"}
    assert gs.configmap_merge_patch(existing, desired) == {
        "data": {
            "NVIDIA_VISIBLE_DEVICES": "GPU-a",
            "RUNAI-VISIBLE-DEVICES": "GPU-a",
            "RUNAI_NUM_OF_GPUS": "0.50",
            "GPU_PORTION": "0.50",
        }
    }
    stale = copy.deepcopy(desired)
    stale["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-previous-pod"
    assert gs.configmap_merge_patch(stale, desired) == {
        "metadata": {"ownerReferences": desired["metadata"]["ownerReferences"]}
    }
    empty_value = copy.deepcopy(desired)
    empty_value["data"]["GPU_PORTION"] = ""
    assert gs.configmap_merge_patch(desired, empty_value) is None  # empty never erases


def test_single_and_multi_device_labels() -> None:
    single = admitted()
    assert gs.gpu_group_labels(single, ["g1"]) == {"runai-gpu-group": "g1"}
    assert gs.gpu_group_labels_patch(single, ["g1"]) == {"metadata": {"labels": {"runai-gpu-group": "g1"}}}
    with pytest.raises(gs.GpuSharingError):
        gs.gpu_group_labels(single, ["g1", "g2"])
    multi = admitted({"gpu-fraction-num-devices": "2"})
    assert gs.gpu_group_labels(multi, ["g1", "g2"]) == {
        "runai-gpu-group/g1": "g1",
        "runai-gpu-group/g2": "g2",
    }
    assert not gs.is_multi_fraction(admitted({"gpu-fraction-num-devices": "1"}))


def test_pod_gpu_groups_reads_both_forms() -> None:
    pod = {
        "metadata": {
            "labels": {
                "runai-gpu-group/b": "b",
                "runai-gpu-group": "a",
                "runai-gpu-group/a": "a",
                "app": "x",
                "runai-gpu-group-x": "no",
            }
        }
    }
    assert gs.pod_gpu_groups(pod) == ["a", "b"]
    assert gs.pod_gpu_groups({"metadata": {}}) == []


def test_label_removal_patch() -> None:
    single = {"metadata": {"labels": {"app": "x", "runai-gpu-group": "g1"}}}
    ops = gs.gpu_group_labels_removal_patch(single)
    assert ops == [{"op": "remove", "path": "/metadata/labels/runai-gpu-group"}]
    assert apply_ops(single, ops)["metadata"]["labels"] == {"app": "x"}

    multi = {"metadata": {"labels": {"app": "x", "runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2"}}}
    ops = gs.gpu_group_labels_removal_patch(multi)
    assert ops == [
        {"op": "remove", "path": "/metadata/labels/runai-gpu-group~1g1"},
        {"op": "remove", "path": "/metadata/labels/runai-gpu-group~1g2"},
    ]
    assert apply_ops(multi, ops)["metadata"]["labels"] == {"app": "x"}
    only_g2 = gs.gpu_group_labels_removal_patch(multi, ["g2"])
    assert apply_ops(multi, only_g2)["metadata"]["labels"] == {"app": "x", "runai-gpu-group/g1": "g1"}
    assert gs.gpu_group_labels_removal_patch({"metadata": {}}) == []


def test_fake_gpu_device_id() -> None:
    a = gs.fake_gpu_device_id("kwok-node-1", "407623a2-216d-4c06-b5b8-f8345bf28b5a")
    assert UUID_GPU.fullmatch(a)
    assert a == gs.fake_gpu_device_id("kwok-node-1", "407623a2-216d-4c06-b5b8-f8345bf28b5a")
    assert a != gs.fake_gpu_device_id("kwok-node-2", "407623a2-216d-4c06-b5b8-f8345bf28b5a")
    assert gs.fake_gpu_device_id("n", 0) != gs.fake_gpu_device_id("n", 1)
    assert gs.fake_gpu_device_id("n", 0) == gs.fake_gpu_device_id("n", "0")
    # Pinned: a change would re-map the GPUs of a running dev cluster.
    assert gs.fake_gpu_device_id("n", 0) == "GPU-ea609cbb-4e17-5baf-80ba-cd9d2dd8844f"


@pytest.mark.parametrize(
    ("labels", "flag", "expected"),
    [
        ({"run.ai/fake.gpu": "true"}, False, True),
        ({"run.ai/fake.gpu": "false"}, False, False),
        ({}, False, False),
        ({}, True, True),
    ],
)
def test_is_fake_gpu_node(labels: dict[str, str], flag: bool, expected: bool) -> None:
    assert gs.is_fake_gpu_node({"metadata": {"labels": labels}}, fake_gpu_nodes=flag) is expected
