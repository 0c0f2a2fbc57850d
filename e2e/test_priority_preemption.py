"""examples/priority on the local control plane: train work fills every GPU, a build pod preempts one train pod."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.support import EXAMPLES, Cluster, labelled, load_yaml, poll

GPUS_PER_TRAIN_POD = 8


def pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    found = cluster.get_json("pods", "-l", selector, namespace=namespace)["items"]
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def test_build_pod_preempts_a_train_pod(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=labelled(load_yaml(EXAMPLES / "queues-default-test.yaml")))
    # The GPU nodes (a real node for the suite's own pods, when there is one, has none).
    nodes = [n for n in cluster.get_json("nodes")["items"] if "nvidia.com/gpu" in n["status"]["allocatable"]]
    gpus = [int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) for n in nodes]
    assert gpus and set(gpus) == {GPUS_PER_TRAIN_POD}, f"the example assumes {GPUS_PER_TRAIN_POD}-GPU nodes: {gpus}"

    [job] = load_yaml(EXAMPLES / "priority" / "train-job.yaml")
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(
        GPUS_PER_TRAIN_POD)
    job = copy.deepcopy(job)
    job["spec"]["parallelism"] = job["spec"]["completions"] = len(nodes)  # one pod per node fills every GPU
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job), namespace=namespace)
    selector = "batch.kubernetes.io/job-name=train-job"

    def all_running() -> list[dict[str, Any]] | None:
        found = pods(cluster, namespace, selector)
        ok = [p for p in found if p["status"].get("phase") == "Running"]
        return ok if len(ok) == len(nodes) else None
    first = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in poll(all_running, "every train pod Running",
                                                                         timeout=120)}

    cluster.kubectl("apply", "-f", str(EXAMPLES / "priority" / "build-pod.yaml"), namespace=namespace)

    def build_running() -> dict[str, Any] | None:
        pod = cluster.get_json("pod", "build-pod", namespace=namespace)
        return pod if pod["status"].get("phase") == "Running" else None
    build = poll(build_running, "build-pod Running", timeout=120)

    still = {p["metadata"]["name"] for p in pods(cluster, namespace, selector) if p["metadata"]["name"] in first}
    [evicted] = set(first) - still
    assert build["spec"]["nodeName"] == first[evicted]  # it took the preempted pod's place
    events = cluster.get_json("events", "--field-selector", "reason=Evict", namespace=namespace)["items"]
    assert any(evicted in e["message"] for e in events), [e["message"] for e in events]
    # The Job replaces its pod, which now waits: no GPU is free and it cannot preempt a build pod.
    def replacement_pending() -> list[dict[str, Any]] | None:
        waiting = [p for p in pods(cluster, namespace, selector) if p["metadata"]["name"] not in first]
        return waiting if waiting and all(p["status"].get("phase") == "Pending" for p in waiting) else None
    poll(replacement_pending, "the Job's replacement pod to wait", timeout=60)
