"""`kai what-if` on the repository's RayCluster, RayJob and PyTorchJob examples against the local control plane.

The Ray answer is checked against what really happens: KubeRay (started with --batch-scheduler=kai-scheduler) and
the pod-grouper then create the very pods and PodGroups what-if predicted (head with its submitter sidecar, workers,
minMember, sub-groups), and the scheduler binds them. The PyTorchJob (no training operator in the dev cluster) is
answered for its whole gang: bound together when 3 GPUs are free, all pending when only 2 are.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.insight import whatif
from tests.integration.test_kai_cli import kai, pod, running, wait_cluster_idle
from tests.support import EXAMPLES, Cluster, apply, items, load_yaml, queue, wait_for

pytestmark = pytest.mark.cluster

RAY_FILES = ("ray-cluster.kai-scheduler.yaml", "ray-job.kai-scheduler.yaml")


def predicted_podgroups(namespace: str) -> dict[str, dict[str, Any]]:
    """The PodGroups what-if derives, by the owner's name prefix (`raycluster-sample`, `rayjob-sample`)."""
    docs = [d for f in RAY_FILES for d in load_yaml(EXAMPLES / f)]
    added = whatif.expand(docs, namespace, 0)
    return {o["metadata"]["name"].split("-whatif")[0][3:]: o for o in added if o["kind"] == "PodGroup"}


def shape(pg: dict[str, Any]) -> tuple[Any, ...]:
    spec = pg["spec"]
    return (spec["minMember"], spec["queue"], spec.get("priorityClassName"),
            sorted((s["name"], s["minMember"]) for s in spec.get("subGroups") or []))


def containers(p: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["name"], (c.get("resources") or {}).get("requests")) for c in p["spec"]["containers"]]


def test_what_if_the_ray_examples_predicts_the_pods_and_gangs_kuberay_and_the_pod_grouper_make(
        cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    args = [a for f in RAY_FILES for a in ("-f", str(EXAMPLES / f))]
    result = kai(cluster, "what-if", *args, "-n", namespace, "-o", "json")
    assert result.returncode == 0, result.stderr
    predicted = json.loads(result.stdout)
    placements = {p["pod"]: p for p in predicted["placements"]}
    assert sorted(placements) == ["raycluster-sample-whatif-head", "raycluster-sample-whatif-worker-worker-0",
                                  "raycluster-sample-whatif-worker-worker-1", "rayjob-sample-whatif-head",
                                  "rayjob-sample-whatif-small-group-worker-0"]
    assert {p["status"] for p in placements.values()} == {"Bound"}
    assert items(cluster, "rayclusters.ray.io", namespace) == []  # nothing was written

    # For real: the queues and the RayCluster from the first file, the RayJob (generateName) from the second.
    apply(cluster, namespace, load_yaml(EXAMPLES / RAY_FILES[0]))
    cluster.kubectl("create", "-f", str(EXAMPLES / RAY_FILES[1]), namespace=namespace)
    real = wait_for("the 5 Ray pods Running", lambda: (r := running(cluster, namespace)) and len(r) == 5 and r,
                    timeout=180)
    groups = {g["metadata"]["name"]: g for g in items(cluster, "podgroups", namespace)}
    expected = predicted_podgroups(namespace)
    for owner, pg in expected.items():
        [live] = [g for n, g in groups.items() if n.startswith(f"pg-{owner}")]
        assert shape(live) == shape(pg), (owner, live["spec"], pg["spec"])
    # The same pods: one head per cluster (the RayJob's with KubeRay's submitter sidecar), workers per group.
    made = whatif.expand([d for f in RAY_FILES for d in load_yaml(EXAMPLES / f)], namespace, 0)
    want = sorted((p["metadata"]["labels"]["ray.io/group"], str(containers(p))) for p in made if p["kind"] == "Pod")
    got = sorted((p["metadata"]["labels"]["ray.io/group"], str(containers(p))) for p in real)
    assert got == want


def test_what_if_a_pytorch_job_answers_for_its_whole_gang(cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    path = EXAMPLES / "batch" / "pytorch-job.yaml"
    roomy = json.loads(kai(cluster, "what-if", "-f", str(path), "-n", namespace, "-o", "json").stdout)
    assert sorted(p["pod"] for p in roomy["placements"]) == [
        "pytorch-dist-mnist-nccl-master-whatif-0", "pytorch-dist-mnist-nccl-worker-whatif-0",
        "pytorch-dist-mnist-nccl-worker-whatif-1"]
    assert {p["status"] for p in roomy["placements"]} == {"Bound"}

    # 30 of the 32 GPUs held by pods nobody may evict: master + 2 workers (3 GPUs) start together or not at all.
    team = f"team-{namespace}"
    apply(cluster, namespace, [queue(team)])
    apply(cluster, namespace, [pod(f"hold-{i:02d}", team, gpus=2, priority="build") for i in range(15)])
    wait_for("the 15 holding pods Running", lambda: len(running(cluster, namespace)) == 15, timeout=180)
    full = kai(cluster, "what-if", "-f", str(path), "-n", namespace, "-o", "json")
    assert full.returncode == 0, full.stderr
    answer = json.loads(full.stdout)
    assert {p["status"] for p in answer["placements"]} == {"Pending"} and len(answer["placements"]) == 3
    assert answer["evictions"] == []
    [pending] = answer["unschedulable"]
    assert pending["podGroup"].startswith("pg-pytorch-dist-mnist-nccl-")
    text = kai(cluster, "what-if", "-f", str(path), "-n", namespace).stdout
    assert text.count("stays Pending") == 3, text
