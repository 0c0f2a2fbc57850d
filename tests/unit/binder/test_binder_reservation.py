"""GPU reservation pod manifests and reservation garbage-collection decisions."""

from __future__ import annotations

import re
from typing import Any

import pytest

from operators.binder.gpusharing import fake_gpu_device_id
from operators.binder.reservation import (
    make_random_suffix,
    pods_by_gpu_group,
    reservation_pod_manifest,
    reservation_pod_name,
    reserved_device_id,
    sync_all,
    sync_decisions,
)

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
GROUP = "407623a2-216d-4c06-b5b8-f8345bf28b5a"


def test_manifest() -> None:
    pod = reservation_pod_manifest(
        "gpu-node-1", GROUP, suffix="x7k2p", image="registry/rr:v1", runtime_class_name="nvidia"
    )
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-reservation-gpu-node-1-x7k2p",
            "namespace": "kai-resource-reservation",
            "labels": {"app": "kai-resource-reservation", "runai-gpu-group": GROUP},
            "annotations": {"karpenter.sh/do-not-disrupt": "true"},
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "serviceAccountName": "kai-resource-reservation",
            "runtimeClassName": "nvidia",
            "containers": [
                {
                    "name": "resource-reservation",
                    "image": "registry/rr:v1",
                    "imagePullPolicy": "IfNotPresent",
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {
                            "name": "POD_NAMESPACE",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                    ],
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    assert reserved_device_id(pod) is None


def test_manifest_options() -> None:
    pod = reservation_pod_manifest(
        "n",
        GROUP,
        suffix="abcde",
        image="img",
        namespace="rr",
        service_account="sa",
        app_label_value="rr-app",
        extra_resources={"requests": {"cpu": "1m", "nvidia.com/gpu": "4"}, "limits": {"memory": "100Mi"}},
    )
    assert "runtimeClassName" not in pod["spec"]
    assert pod["metadata"]["namespace"] == "rr" and pod["spec"]["serviceAccountName"] == "sa"
    assert pod["metadata"]["labels"]["app"] == "rr-app"
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1m", "nvidia.com/gpu": "1"},
        "limits": {"memory": "100Mi", "nvidia.com/gpu": "1"},
    }


def test_fake_gpu_manifest_is_born_reserved() -> None:
    pod = reservation_pod_manifest("kwok-gpu-0", GROUP, suffix="abcde", image="img", fake_gpu=True)
    assert reserved_device_id(pod) == fake_gpu_device_id("kwok-gpu-0", GROUP)
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert pod["spec"]["containers"][0]["args"] == ["sleep", "infinity"]


@pytest.mark.parametrize("node", ["n" * 300, "a" * 229 + "." + "b" * 40, "a" * 230 + "." + "b" * 40])
def test_long_node_names_give_valid_pod_names(node: str) -> None:
    name = reservation_pod_name(node, "abcde")
    assert len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name), name
    assert name.startswith("gpu-reservation-") and name.endswith("-abcde")


def test_random_suffix() -> None:
    assert re.fullmatch(r"[a-z0-9]{5}", make_random_suffix())


def pod(
    name: str,
    phase: str | None,
    *,
    namespace: str = "team",
    groups: tuple[str, ...] = (GROUP,),
    multi: bool = False,
) -> dict[str, Any]:
    labels = {f"runai-gpu-group/{g}": g for g in groups} if multi else {"runai-gpu-group": groups[0]}
    result: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": name, "labels": labels}
    }
    if phase:
        result["status"] = {"phase": phase}
    return result


def reservation(name: str = "gpu-reservation-n-abcde", group: str = GROUP) -> dict[str, Any]:
    return pod(name, "Running", namespace="kai-resource-reservation", groups=(group,))


def names(pods: list[Any]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


@pytest.mark.parametrize(
    ("members", "reservations_deleted", "fractions_deleted"),
    [
        ([reservation(), pod("a", "Running"), pod("b", "Pending")], [], []),
        ([pod("a", "Running"), pod("b", "Pending"), pod("c", None)], [], ["a"]),
        ([pod("b", "Pending")], [], []),
        ([reservation()], ["gpu-reservation-n-abcde"], []),
        ([reservation(), pod("a", "Succeeded"), pod("b", "Failed")], ["gpu-reservation-n-abcde"], []),
        ([reservation(), pod("b", None)], [], []),
        ([reservation("r1"), reservation("r2")], ["r1", "r2"], []),
        ([reservation("r1"), reservation("r2"), pod("a", "Running")], [], []),
        ([pod("a", "Succeeded")], [], []),
        ([], [], []),
    ],
)
def test_sync_decisions(
    members: list[dict[str, Any]],
    reservations_deleted: list[str],
    fractions_deleted: list[str],
) -> None:
    decision = sync_decisions(members)
    assert names(decision.reservation_pods_to_delete) == reservations_deleted
    assert names(decision.fraction_pods_to_delete) == fractions_deleted


def test_sync_decisions_reservation_namespace_is_configurable() -> None:
    members = [pod("r", "Running", namespace="rr"), pod("a", "Running")]
    assert sync_decisions(members, reservation_namespace="rr") == ([], [])
    assert names(sync_decisions(members).fraction_pods_to_delete) == ["a", "r"]


def test_pods_by_gpu_group() -> None:
    multi = pod("m", "Running", groups=("g1", "g2"), multi=True)
    grouped = pods_by_gpu_group(
        [multi, pod("s", "Running", groups=("g1",)), reservation(group="g2"), {"metadata": {"name": "plain"}}]
    )
    assert {g: names(p) for g, p in grouped.items()} == {
        "g1": ["m", "s"],
        "g2": ["gpu-reservation-n-abcde", "m"],
    }


def test_sync_all_sees_multi_device_pods() -> None:
    multi = pod("m", "Running", groups=("g1", "g2"), multi=True)
    # g1 is reserved, g2 is not: the pod lost one of its GPUs.
    decision = sync_all([multi, reservation("r1", "g1")])
    assert names(decision.fraction_pods_to_delete) == ["m"]
    assert decision.reservation_pods_to_delete == []
    # Neither is reserved: deleted once, not once per group.
    assert names(sync_all([multi]).fraction_pods_to_delete) == ["m"]
    # Both reserved: nothing to do; an orphan reservation of another group goes.
    decision = sync_all([multi, reservation("r1", "g1"), reservation("r2", "g2"), reservation("r3", "g3")])
    assert decision == ([reservation("r3", "g3")], [])
