"""Elastic SubGroup trees (minSubGroup) and the preemption delay against a real control plane.

Admission: PodGroups and pods go through the API server and the webhooks (kubectl), which refuse the invalid
trees and delays with their messages and pass a minSubGroup above the children with one warning.

Scheduling (the dev cluster's default shape, 4 nodes x 8 GPUs, every test waiting until no GPU is held first):
a minSubGroup job starts with the children that fit and grows when capacity frees; a preemption delay holds an
eviction back for its window, explained on the PodGroup, then evicts and stamps the PodGroup.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
import yaml

from tests.support import EXAMPLES, Cluster, apply, held_gpus, items, labelled, load_yaml, queue, wait_for

pytestmark = pytest.mark.cluster


def podgroup(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"queue": "default-queue", **spec}}


def kubectl_create(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.kubectl("create", "-f", "-", input=labelled([doc]), namespace=namespace, check=False)
    return proc.returncode, proc.stderr


def refused(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> str:
    code, stderr = kubectl_create(cluster, namespace, doc)
    assert code != 0 and "denied the request" in stderr, (doc["metadata"]["name"], stderr)
    return stderr


LEAVES = [{"name": f"w{i}", "minMember": 2} for i in range(4)]


def test_subgroup_trees_are_refused_or_admitted_through_the_api_server(cluster: Cluster, namespace: str) -> None:
    code, stderr = kubectl_create(cluster, namespace, podgroup("three-of-four", {"minSubGroup": 3,
                                                                                 "subGroups": LEAVES}))
    assert code == 0 and "Warning" not in stderr, stderr
    stored = cluster.get_json("podgroup", "three-of-four", namespace=namespace)["spec"]
    assert stored["minSubGroup"] == 3 and stored["subGroups"][0] == {"name": "w0", "minMember": 2}

    assert ("spec.minMember and spec.minSubGroup are mutually exclusive" in
            refused(cluster, namespace, podgroup("both", {"minMember": 2, "minSubGroup": 1, "subGroups": LEAVES})))
    assert "subgroup 'w0': minSubGroup cannot be set on a leaf SubGroup" in refused(
        cluster, namespace, podgroup("leaf", {"subGroups": [{"name": "w0", "minSubGroup": 1}]}))
    assert "subgroup 'w0': minMember and minSubGroup are mutually exclusive" in refused(
        cluster, namespace, podgroup("leaf-both", {"subGroups": [{"name": "w0", "minMember": 1, "minSubGroup": 1}]}))
    assert "subgroup 'p': minMember cannot be set on a SubGroup that has child SubGroups (c)" in refused(
        cluster, namespace, podgroup("parent", {"subGroups": [{"name": "p", "minMember": 1},
                                                              {"name": "c", "parent": "p", "minMember": 1}]}))
    assert 'spec.preemptionDelay: must be a non-negative Go duration' in refused(
        cluster, namespace, podgroup("delay", {"minMember": 1, "preemptionDelay": "5"}))

    # Above the number of children: admitted, with exactly one warning that says so.
    code, stderr = kubectl_create(cluster, namespace, podgroup("five-of-four", {"minSubGroup": 5,
                                                                                "subGroups": LEAVES}))
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == ["Warning: minSubGroup (5) exceeds the number of direct child SubGroups (4)"], stderr

    # Editing the tree is judged again; the stored object stays as it was.
    changed = podgroup("three-of-four", {"minMember": 1, "minSubGroup": 3, "subGroups": LEAVES})
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(changed), namespace=namespace, check=False)
    assert proc.returncode != 0 and "mutually exclusive" in proc.stderr, proc.stderr


def test_a_malformed_preemption_delay_on_a_pod_is_refused_with_the_format(cluster: Cluster, namespace: str) -> None:
    def pod(name: str, where: str, value: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, where: {"kai.scheduler/preemption-delay": value}},
                "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "10m"}}}]}}

    stderr = refused(cluster, namespace, pod("bad-annotation", "annotations", "5 minutes"))
    assert ('metadata.annotations[kai.scheduler/preemption-delay]: must be a non-negative Go duration: numbers '
            'with units (ns, us, ms, s, m, h), e.g. "30s", "5m", "1h30m", got \'5 minutes\'') in stderr, stderr
    assert "metadata.labels[kai.scheduler/preemption-delay]" in refused(cluster, namespace,
                                                                         pod("bad-label", "labels", "5"))
    code, stderr = kubectl_create(cluster, namespace, pod("good", "labels", "90s"))
    assert code == 0, stderr


GPU = "nvidia.com/gpu"
NODE_GPUS = 8
CLUSTER_GPUS = 32  # kai dev up default: 4 nodes x 8 GPUs


def gpu_pod(name: str, queue_name: str, gpus: int, *, group: str | None = None, subgroup: str | None = None,
            priority: str = "train", labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"kai.scheduler/queue": queue_name, **(labels or {})}}
    if group:
        metadata["annotations"] = {"pod-group-name": group}
    if subgroup:
        metadata["labels"]["kai.scheduler/subgroup-name"] = subgroup
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "priorityClassName": priority,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                   "limits": {GPU: str(gpus)}}}]}}


def bound(cluster: Cluster, namespace: str, selector: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in items(cluster, "pods", namespace, "-l", selector)
                  if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"))


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def test_a_min_sub_group_job_starts_partially_and_grows_when_capacity_frees(cluster: Cluster,
                                                                            namespace: str) -> None:
    wait_for("no GPU held by any pod", lambda: held_gpus(cluster) == 0, 120)
    q = f"q-{namespace}"
    # Non-preemptible fillers leave 6 GPUs free: three nodes full, two GPUs taken on the fourth.
    fillers = [gpu_pod(f"fill-{i}", q, NODE_GPUS, priority="build", labels={"role": "fill"}) for i in range(3)]
    fillers.append(gpu_pod("fill-small", q, 2, priority="build", labels={"role": "fill"}))
    apply(cluster, namespace, [queue(q), *fillers])
    wait_for("the fillers to run", lambda: len(bound(cluster, namespace, "role=fill")) == 4, 120)

    # The example: four leaves of two 1-GPU pods, three of them needed; in this test's queue.
    docs = load_yaml(EXAMPLES / "elastic" / "min-subgroup.yaml")
    for doc in docs:
        if doc["kind"] == "PodGroup":
            doc["spec"]["queue"] = q
        else:
            doc["metadata"]["labels"].update({"kai.scheduler/queue": q, "role": "tree"})
    apply(cluster, namespace, docs)
    started = wait_for("three whole leaves to start", lambda: (
        pods if len(pods := bound(cluster, namespace, "role=tree")) == 6 else None), 120)
    leaves = {name.split("-")[2] for name in started}
    assert len(leaves) == 3 and all(f"elastic-train-{leaf}-0" in started and f"elastic-train-{leaf}-1" in started
                                    for leaf in leaves), started
    waiting = ({"w0", "w1", "w2", "w3"} - leaves).pop()

    def explained() -> str | None:
        events = [e for e in items(cluster, "events", namespace)
                  if e["involvedObject"]["name"] == "elastic-train" and e["reason"] == "Unschedulable"]
        return next((e["message"] for e in events if "minimum is met (3 of its 4 child SubGroups" in e["message"]),
                    None)

    message = wait_for("the PodGroup to explain the pods left pending", explained, 60)
    assert f"{namespace}/elastic-train-{waiting}-" in message, message  # the pods of the leaf left out

    # Capacity frees: the fourth leaf starts, both its pods.
    cluster.kubectl("delete", "pod", "fill-0", "--wait=false", namespace=namespace)
    wait_for(f"leaf {waiting} to start", lambda: len(bound(cluster, namespace, "role=tree")) == 8, 120)


def test_a_preemption_delay_holds_the_eviction_for_its_window(cluster: Cluster, namespace: str) -> None:
    wait_for("no GPU held by any pod", lambda: held_gpus(cluster) == 0, 120)
    q = f"q-{namespace}"
    victims = [gpu_pod(f"low-{i}", q, NODE_GPUS, priority="train", labels={"role": "low"}) for i in range(4)]
    apply(cluster, namespace, [queue(q), *victims])
    wait_for("the cluster to be full", lambda: len(bound(cluster, namespace, "role=low")) == 4, 120)

    urgent = gpu_pod("urgent", q, NODE_GPUS, priority="inference", labels={"role": "urgent"})
    urgent["metadata"].setdefault("annotations", {})["kai.scheduler/preemption-delay"] = "20s"
    apply(cluster, namespace, [urgent])
    group = wait_for("the urgent pod's PodGroup", lambda: (
        cluster.get_json("pod", "urgent", namespace=namespace)["metadata"].get("annotations") or {}).get(
        "pod-group-name"), 60)
    pg = cluster.get_json("podgroup", group, namespace=namespace)
    assert pg["spec"]["preemptionDelay"] == "20s"  # the pod-grouper carried it over
    created = ts(pg["metadata"]["creationTimestamp"])

    def held() -> str | None:
        conditions = (cluster.get_json("podgroup", group, namespace=namespace).get("status") or {}).get(
            "schedulingConditions") or []
        return next((c["message"] for c in conditions if "before evicting other workloads" in c["message"]), None)

    message = wait_for("the PodGroup to say it waits out its delay", held, 60)
    assert "preemption delay 20s" in message, message

    def stamped() -> str | None:
        annotations = cluster.get_json("podgroup", group, namespace=namespace)["metadata"].get("annotations") or {}
        return annotations.get("kai.scheduler/last-eviction-timestamp")

    stamp = wait_for("the eviction once the window passed", stamped, 120)
    # The eviction came only after the window: the stamp is the moment the scheduler decided it.
    assert ts(stamp) - created >= 20, (stamp, pg["metadata"]["creationTimestamp"])
    assert len(bound(cluster, namespace, "role=low")) == 3
    wait_for("the urgent pod to run", lambda: bound(cluster, namespace, "role=urgent") == ["urgent"], 120)
