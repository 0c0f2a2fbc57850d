"""Issue 2: the local control plane is a real Kubernetes with fake GPU nodes, KubeRay and our CRDs."""

from __future__ import annotations

import json
import time

import yaml

from tests.conftest import EXAMPLES, Cluster, labelled, load_yaml


def _wait(predicate, timeout: float = 60, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def test_api_server_ready_and_gpu_nodes(cluster: Cluster) -> None:
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    nodes = cluster.get_json("nodes", "-l", "kai.dev/fake-node=true")["items"]
    assert len(nodes) >= 4
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.memory"] == "81920"
        assert labels["nvidia.com/gpu.product"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    table = cluster.kubectl("get", "nodes").stdout
    assert "kwok-node-0" in table and "Ready" in table


def test_priority_classes_and_default_queues_installed(cluster: Cluster) -> None:
    classes = {pc["metadata"]["name"]: pc["value"] for pc in cluster.get_json("priorityclasses")["items"]}
    assert {k: classes.get(k) for k in ("train", "build-preemptible", "build", "inference")} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    queues = {q["metadata"]["name"]: q for q in cluster.get_json("queues")["items"]}
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert queues["default-queue"]["spec"]["resources"]["gpu"] == {"quota": 0, "limit": -1, "overQuotaWeight": 1}


def test_kuberay_creates_kai_pods_for_the_sample(cluster: Cluster, namespace: str) -> None:
    docs = load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml")
    out = cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace).stdout
    assert "queue.scheduling.run.ai/department-1" in out and "queue.scheduling.run.ai/team-a" in out
    assert "raycluster.ray.io/raycluster-sample" in out

    def pods() -> list[dict]:
        items = cluster.get_json("pods", "-l", "ray.io/cluster=raycluster-sample", namespace=namespace)["items"]
        return items if len(items) == 3 else []

    items = _wait(pods, timeout=90)
    assert items, "KubeRay did not create the head and two worker pods"
    for pod in items:
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    # The default scheduler never touches them.
    events = cluster.get_json("events", namespace=namespace)["items"]
    assert not [e for e in events if (e.get("source") or {}).get("component") == "default-scheduler"
                or e.get("reportingComponent") == "default-scheduler"]


def test_queue_printer_columns_and_validation(cluster: Cluster, namespace: str) -> None:
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
             "metadata": {"name": f"cols-{namespace}"},
             "spec": {"displayName": "Columns", "priority": 120,
                      "resources": {"gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 1}}}}
    cluster.kubectl("apply", "-f", "-", input=labelled([queue]))
    header = cluster.kubectl("get", "queues", f"cols-{namespace}").stdout.splitlines()[0].split()
    assert header[:5] == ["NAME", "PRIORITY", "PARENT", "CHILDREN", "DISPLAYNAME"]
    assert {"GPU-QUOTA", "GPU-LIMIT", "GPU-ALLOCATED"} <= set(header)
    row = cluster.kubectl("get", "queues", f"cols-{namespace}", "--no-headers").stdout.split()
    assert row[:2] == [f"cols-{namespace}", "120"]
    assert "2" in row and "4" in row

    bad = json.loads(json.dumps(queue))
    bad["metadata"]["name"] = f"bad-{namespace}"
    bad["spec"]["resources"]["gpu"]["quota"] = "lots"
    proc = cluster.kubectl("apply", "-f", "-", input=labelled([bad]), check=False)
    assert proc.returncode != 0
    assert "spec.resources.gpu.quota" in proc.stderr and "must be of type number" in proc.stderr


def test_podgroup_short_name_and_schema_validation(cluster: Cluster, namespace: str) -> None:
    pg = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
          "metadata": {"name": "pg-check"},
          "spec": {"minMember": 0, "queue": "default-queue"}}
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pg), namespace=namespace, check=False)
    assert proc.returncode != 0 and "spec.minMember" in proc.stderr
    pg["spec"]["minMember"] = 1
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pg), namespace=namespace)
    assert "pg-check" in cluster.kubectl("get", "pg", namespace=namespace).stdout


def test_deployment_gets_replicaset_and_running_pods(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=2", namespace=namespace)

    def running() -> list[dict]:
        items = cluster.get_json("pods", "-l", "app=web", namespace=namespace)["items"]
        ok = [p for p in items if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]
        return ok if len(ok) == 2 else []

    pods = _wait(running, timeout=90)
    assert pods, cluster.kubectl("get", "pods,rs", "-o", "wide", namespace=namespace).stdout
    assert all(p["spec"]["nodeName"].startswith("kwok-node-") for p in pods)
    assert cluster.get_json("replicasets", "-l", "app=web", namespace=namespace)["items"]
