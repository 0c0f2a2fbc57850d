"""The seeds' GPU-sharing flows, run exactly as the documents write them, on the local control plane."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import yaml

from tests.support import EXAMPLES, Cluster, labelled, load_yaml

T = TypeVar("T")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SEED_COLUMNS = ('custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,'
                'GPU-FRACTION:.metadata.annotations.gpu-fraction,GPU-GROUP:.metadata.labels.runai-gpu-group')


def wait_for(fn: Callable[[], T | None], timeout: float = 60, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def table(text: str) -> list[dict[str, str]]:
    lines = [ln.split() for ln in text.strip().splitlines()]
    return [dict(zip(lines[0], row, strict=True)) for row in lines[1:]]


def running(cluster: Cluster, namespace: str, selector: str, count: int) -> Callable[[], list[dict[str, Any]] | None]:
    def check() -> list[dict[str, Any]] | None:
        pods = cluster.get_json("pods", "-l", selector, namespace=namespace)["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running"]
        return ok if len(ok) == count and len(pods) == count else None
    return check


def configmap_data(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> dict[str, str]:
    """The GPU-sharing ConfigMap the pod's container reads its GPU env from."""
    env = pod["spec"]["containers"][0].get("env") or []
    ref = next(e["valueFrom"]["configMapKeyRef"]["name"] for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES")
    return cluster.get_json("configmap", ref, namespace=namespace)["data"]


def test_ray_workers_share_one_gpu(cluster: Cluster, namespace: str) -> None:
    docs = load_yaml(EXAMPLES / "ray-cluster.kai-gpu-sharing.yaml")
    cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace)
    pods = wait_for(running(cluster, namespace, "ray.io/cluster=raycluster-half-gpu", 3), 90, "3 Running pods")
    # The seed's exact verification command.
    out = cluster.kubectl(*shlex.split(f'get pods -l ray.io/cluster=raycluster-half-gpu -o "{SEED_COLUMNS}"'),
                          namespace=namespace).stdout
    rows = {r["NAME"]: r for r in table(out)}
    head = next(r for n, r in rows.items() if "-head-" in n)
    workers = [r for n, r in rows.items() if "shared-gpu-worker" in n]
    assert head["GPU-FRACTION"] == "<none>" and head["GPU-GROUP"] == "<none>"
    assert len(workers) == 2
    assert workers[0]["NODE"] == workers[1]["NODE"] != "<none>"
    assert {w["GPU-FRACTION"] for w in workers} == {"0.5"}
    assert workers[0]["GPU-GROUP"] == workers[1]["GPU-GROUP"] and UUID.match(workers[0]["GPU-GROUP"])
    # Same physical GPU: the same NVIDIA_VISIBLE_DEVICES, and a portion of 0.50 each.
    worker_pods = [p for p in pods if "shared-gpu-worker" in p["metadata"]["name"]]
    data = [configmap_data(cluster, namespace, p) for p in worker_pods]
    assert data[0]["NVIDIA_VISIBLE_DEVICES"] == data[1]["NVIDIA_VISIBLE_DEVICES"]
    assert data[0]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    assert {d["GPU_PORTION"] for d in data} == {"0.50"}
    assert all(p["metadata"]["annotations"].get("received-resource-type") == "Fraction" for p in worker_pods)
    # One reservation pod holds the whole GPU for the group.
    group = workers[0]["GPU-GROUP"]
    reservations = cluster.get_json("pods", "-l", f"runai-gpu-group={group}", namespace="kai-resource-reservation")
    assert len(reservations["items"]) == 1
    res = reservations["items"][0]
    assert res["spec"]["nodeName"] == workers[0]["NODE"]
    assert res["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


@pytest.fixture
def ai_workloads(cluster: Cluster) -> Iterator[str]:
    """The seed's namespace and queues (`default` -> `test`), removed afterwards."""
    cluster.kubectl("create", "namespace", "ai-workloads")
    queues = load_yaml(EXAMPLES / "queues-default-test.yaml")
    cluster.kubectl("apply", "-f", "-", input=labelled(queues))
    yield "ai-workloads"
    cluster.kubectl("delete", "namespace", "ai-workloads", "--wait=true", "--timeout=60s", check=False)
    cluster.kubectl("delete", "queues", "test", "default", check=False)


def test_vllm_deployments_share_one_gpu_and_a_third_goes_elsewhere(cluster: Cluster, ai_workloads: str) -> None:
    seed_columns = ('custom-columns=NAME:.metadata.name,STATUS:.status.phase,NODE:.spec.nodeName,'
                    'GPU-FRACTION:.metadata.annotations.gpu-fraction,GPU-GROUP:.metadata.labels.runai-gpu-group')
    cluster.kubectl("apply", "-f", str(EXAMPLES / "vllm-test-07.yaml"))
    wait_for(running(cluster, ai_workloads, "app=vllm-test-07", 1), 60, "vllm-test-07 Running")
    cluster.kubectl("apply", "-f", str(EXAMPLES / "vllm-test-02.yaml"))
    wait_for(running(cluster, ai_workloads, "app=vllm-test-02", 1), 60, "vllm-test-02 Running")
    out = cluster.kubectl("-n", "ai-workloads", "get", "pods", "-o", seed_columns).stdout
    rows = {r["NAME"].rsplit("-", 2)[0]: r for r in table(out)}
    assert rows["vllm-test-07"]["STATUS"] == rows["vllm-test-02"]["STATUS"] == "Running"
    assert rows["vllm-test-07"]["GPU-FRACTION"] == "0.7" and rows["vllm-test-02"]["GPU-FRACTION"] == "0.2"
    assert rows["vllm-test-07"]["NODE"] == rows["vllm-test-02"]["NODE"]
    assert rows["vllm-test-07"]["GPU-GROUP"] == rows["vllm-test-02"]["GPU-GROUP"]
    # Deployments are inference workloads: one PodGroup per Deployment (one replica each), priority inference.
    podgroups = cluster.get_json("podgroups", namespace=ai_workloads)["items"]
    assert len(podgroups) == 2 and {pg["spec"]["priorityClassName"] for pg in podgroups} == {"inference"}
    # 0.5 more does not fit on that GPU (0.9 used): it takes another GPU (a new group).
    third = yaml.safe_load((EXAMPLES / "vllm-test-02.yaml").read_text())
    third["metadata"]["name"] = "vllm-test-05"
    third["metadata"]["labels"]["app"] = third["spec"]["selector"]["matchLabels"]["app"] = "vllm-test-05"
    third["spec"]["template"]["metadata"]["labels"]["app"] = "vllm-test-05"
    third["spec"]["template"]["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(third))
    pod = wait_for(running(cluster, ai_workloads, "app=vllm-test-05", 1), 60, "vllm-test-05 Running")[0]
    assert pod["metadata"]["labels"]["runai-gpu-group"] != rows["vllm-test-07"]["GPU-GROUP"]


def _fraction_pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "default-queue", "app": name},
                         "annotations": annotations},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]}}


def test_gpu_memory_is_converted_with_the_node_gpu_memory(cluster: Cluster, namespace: str) -> None:
    # 81920 MiB GPUs (floored to 81900 as KAI does): 40950 MiB is half a GPU, so two such pods share one.
    for name in ("mem-a", "mem-b"):
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_fraction_pod(name, {"gpu-memory": "40950"})),
                        namespace=namespace)
    pods = wait_for(running(cluster, namespace, "app in (mem-a,mem-b)", 2), 60, "gpu-memory pods Running")
    groups = {p["metadata"]["labels"]["runai-gpu-group"] for p in pods}
    assert len(groups) == 1
    binds = {b["metadata"]["name"]: b for b in cluster.get_json("bindrequests", namespace=namespace)["items"]}
    assert binds["mem-a"]["spec"]["receivedResourceType"] == "Fraction"
    assert binds["mem-a"]["spec"]["receivedGPU"]["portion"] == "0.50"


def test_two_pods_of_point_six_never_share_a_gpu(cluster: Cluster, namespace: str) -> None:
    for name in ("six-a", "six-b"):
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_fraction_pod(name, {"gpu-fraction": "0.6"})),
                        namespace=namespace)
    pods = wait_for(running(cluster, namespace, "app in (six-a,six-b)", 2), 60, "0.6 pods Running")
    assert len({p["metadata"]["labels"]["runai-gpu-group"] for p in pods}) == 2
