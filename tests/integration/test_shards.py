"""SchedulingShard and Config on the local control plane: live shard settings and node-pool shards.

- `kubectl patch schedulingshard default` to spread placement changes where the next pods land, without a
  restart of the scheduler; the shard's Deployed/Available conditions carry the new observedGeneration.
- Two node-pool shards (2 nodes each, their own scheduler processes, as `kai dev up --shards` starts them): pods
  of pool A land only on A's nodes, pool B's only on B's; a pod of a pool no shard serves stays pending with the
  reason on the pod and its PodGroup. Each shard scheduler holds its own Lease and exposes its shard label.
- A partitioned shard stamps its node-pool label on a pod it binds that lacks it (a Job labelled with the pool,
  its pod template not), and its BindRequest carries the label; the default shard's pods get none.

The shards use pool names derived from the test namespace, so the test also runs on a cluster started with
`--shards`; its SchedulingShards are deleted and its nodes carry the test label (removed by the fixture).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from operators.devcluster import cluster as dev
from operators.devcluster import nodes, shards
from tests.support import TEST_LABEL, Cluster, wait_for

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
POOL = "kai.scheduler/node-pool"


def gpu_pod(name: str, gpus: int, pool: str | None = None) -> dict[str, Any]:
    labels = {"kai.scheduler/queue": "default-queue"}
    if pool:
        labels[POOL] = pool
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {GPU: str(gpus)}}}]}}


def apply(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
                    namespace=namespace)


def placement(cluster: Cluster, namespace: str, names: list[str]) -> dict[str, str]:
    """pod -> node for the named pods, once every one of them is bound."""
    pods = {p["metadata"]["name"]: p for p in cluster.get_json("pods", namespace=namespace)["items"]}
    out = {n: pods[n]["spec"].get("nodeName", "") for n in names if n in pods}
    return out if len(out) == len(names) and all(out.values()) else {}


def pod_scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def podgroup_condition(cluster: Cluster, namespace: str, pod_name: str) -> dict[str, Any] | None:
    pod = cluster.get_json("pod", pod_name, namespace=namespace)
    group = (pod["metadata"].get("annotations") or {}).get("pod-group-name")
    if not group:
        return None
    pg = cluster.get_json("podgroup", group, namespace=namespace)
    conditions = (pg.get("status") or {}).get("schedulingConditions") or []
    return conditions[-1] if conditions else None


def held_gpus_on(cluster: Cluster, node_names: set[str]) -> int:
    total = 0
    for p in cluster.get_json("pods", "--all-namespaces")["items"]:
        if p["spec"].get("nodeName") in node_names and p["status"].get("phase") not in ("Succeeded", "Failed"):
            total += sum(int((c.get("resources", {}).get("limits") or {}).get(GPU, 0))
                         for c in p["spec"]["containers"])
    return total


def shard_condition(cluster: Cluster, name: str, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    shard = cluster.get_json("schedulingshard", name)
    cond = next(c for c in shard["status"]["conditions"] if c["type"] == kind)
    return shard, cond


def applied(cluster: Cluster, name: str) -> bool:
    """The shard's scheduler has taken its current generation into use."""
    shard, cond = shard_condition(cluster, name, "Available")
    return cond["observedGeneration"] == shard["metadata"]["generation"] and cond["status"] == "True"


@pytest.fixture
def default_nodes(cluster: Cluster) -> set[str]:
    """The default shard's nodes (no node-pool label); the test needs them free of GPU pods."""
    names = {n["metadata"]["name"] for n in cluster.get_json("nodes")["items"]
             if not n["metadata"].get("labels", {}).get(POOL) and int(n["status"]["allocatable"].get(GPU, 0))}
    assert len(names) >= 3, names
    wait_for("no GPU held on the default shard's nodes", lambda: held_gpus_on(cluster, names) == 0, 120)
    return names


def test_patching_the_default_shard_to_spread_moves_the_next_pods_without_a_restart(
        cluster: Cluster, namespace: str, default_nodes: set[str]) -> None:
    state = dev.load_state(cluster.name)
    assert state is not None
    pid = state.pids["scheduler"]
    wait_for("the default shard applied", lambda: applied(cluster, "default"))
    try:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge",
                        "-p", json.dumps({"spec": {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}}}))
        wait_for("binpack applied", lambda: applied(cluster, "default"))
        apply(cluster, namespace, [gpu_pod("pack-0", 1), gpu_pod("pack-1", 1)])
        packed = wait_for("binpacked pods bound", lambda: placement(cluster, namespace, ["pack-0", "pack-1"]))
        assert len(set(packed.values())) == 1, f"binpack puts both pods on one node: {packed}"

        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge",
                        "-p", json.dumps({"spec": {"placementStrategy": {"gpu": "spread", "cpu": "spread"}}}))
        wait_for("spread applied (observedGeneration of the new spec)", lambda: applied(cluster, "default"))
        apply(cluster, namespace, [gpu_pod("spread-0", 1), gpu_pod("spread-1", 1)])
        spread = wait_for("spread pods bound", lambda: placement(cluster, namespace, ["spread-0", "spread-1"]))
        assert len(set(spread.values())) == 2, f"spread puts the pods on different nodes: {spread}"
        assert not set(spread.values()) & set(packed.values()), (packed, spread)
        assert set(spread.values()) <= default_nodes
    finally:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge",
                        "-p", json.dumps({"spec": {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}}}))
    wait_for("binpack applied again", lambda: applied(cluster, "default"))
    state = dev.load_state(cluster.name)
    assert state is not None and state.pids["scheduler"] == pid and dev._alive(pid), "the scheduler restarted"
    shard, deployed = shard_condition(cluster, "default", "Deployed")
    assert (deployed["status"], deployed["reason"], deployed["message"]) == ("True", "deployed", "Resources deployed")
    assert deployed["observedGeneration"] == shard["metadata"]["generation"]


def test_unhonoured_fields_and_unusable_specs_are_reported_on_the_shard(cluster: Cluster, namespace: str) -> None:
    def patch(spec: dict[str, Any]) -> None:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge", "-p", json.dumps({"spec": spec}))

    def condition(kind: str, status: str) -> dict[str, Any] | None:
        shard, cond = shard_condition(cluster, "default", kind)
        current = cond["observedGeneration"] == shard["metadata"]["generation"]
        return cond if current and cond["status"] == status else None

    try:
        patch({"futureField": {"a": 1}, "plugins": {"snapshot": {"enabled": False}}})
        stored = cluster.get_json("schedulingshard", "default")
        assert stored["spec"]["futureField"] == {"a": 1}, "unknown fields are kept"
        named = wait_for("FieldsNotHonoured names the fields", lambda: condition("FieldsNotHonoured", "True"))
        assert named["message"] == ("Accepted but not honoured by this scheduler: spec.futureField, "
                                    "spec.plugins.snapshot.enabled"), named
        assert condition("Available", "True")

        patch({"queueDepthPerAction": {"backfill": 2}})
        refused = wait_for("Available=False with the reason", lambda: condition("Available", "False"))
        assert "backfill isn't one of them, making the queueDepthPerAction invalid" in refused["message"]
        assert "running with the last valid settings" in refused["message"]
        apply(cluster, namespace, [gpu_pod("still-scheduled", 1)])
        wait_for("scheduling goes on with the last valid settings",
                 lambda: placement(cluster, namespace, ["still-scheduled"]), 120)
    finally:
        patch({"futureField": None, "plugins": None, "queueDepthPerAction": None})
    wait_for("every field honoured again", lambda: condition("FieldsNotHonoured", "False"))
    assert wait_for("available again", lambda: condition("Available", "True"))
    # The default shard reports on the Config too; the dev cluster's Config sets only what is honoured.
    config = cluster.get_json("config", "kai-config")
    ignored = next(c for c in config["status"]["conditions"] if c["type"] == "FieldsNotHonoured")
    assert ignored["status"] == "False" and ignored["observedGeneration"] == config["metadata"]["generation"]
    bad = cluster.kubectl("apply", "-f", "-", check=False, input=json.dumps(
        shards.shard_manifest(f"{namespace}-y", placementStrategy={"gpu": "pack"})))
    assert bad.returncode != 0 and 'Unsupported value: "pack"' in bad.stderr, bad.stderr


@pytest.fixture
def two_shards(cluster: Cluster, namespace: str) -> Iterator[tuple[str, str]]:
    """Shards `<ns>-a` and `<ns>-b`, 2 nodes each, each with its own scheduler process."""
    state = dev.load_state(cluster.name)
    assert state is not None
    names = [f"{namespace}-a", f"{namespace}-b"]
    try:
        shards.start_shards(state, names, nodes_per_shard=2, shape=nodes.NodeShape(), timeout=120,
                            node_labels={TEST_LABEL: "true"})
        yield names[0], names[1]
    finally:
        shards.stop_shards(state, names)
        cluster.kubectl("delete", "schedulingshard", *names, "--ignore-not-found")
        cluster.kubectl("delete", "lease", *(f"kai-scheduler-{n}" for n in names), "-n", "kai-scheduler",
                        "--ignore-not-found")


def test_two_node_pool_shards_schedule_only_their_pools(cluster: Cluster, namespace: str,
                                                        two_shards: tuple[str, str]) -> None:
    pool_a, pool_b = two_shards
    nodes_a, nodes_b = set(shards.node_names(pool_a, 2)), set(shards.node_names(pool_b, 2))
    unknown = f"{namespace}-nobody"
    apply(cluster, namespace, [gpu_pod("a-0", 8, pool_a), gpu_pod("a-1", 8, pool_a),
                               gpu_pod("b-0", 1, pool_b), gpu_pod("b-1", 1, pool_b),
                               gpu_pod("lost-0", 1, unknown)])
    placed_a = wait_for("pool A pods bound", lambda: placement(cluster, namespace, ["a-0", "a-1"]), 120)
    placed_b = wait_for("pool B pods bound", lambda: placement(cluster, namespace, ["b-0", "b-1"]), 120)
    assert set(placed_a.values()) == nodes_a, f"pool A fills exactly A's two nodes: {placed_a}"
    assert set(placed_b.values()) <= nodes_b, f"pool B only on B's nodes: {placed_b}"

    # A's nodes are full: a third A pod waits (explained by shard A) although other nodes have free GPUs.
    apply(cluster, namespace, [gpu_pod("a-2", 8, pool_a)])
    cond = wait_for("shard A explains a-2", lambda: podgroup_condition(cluster, namespace, "a-2"), 120)
    assert cond["nodePool"] == pool_a and cond["type"] == "UnschedulableOnNodePool"
    assert not cluster.get_json("pod", "a-2", namespace=namespace)["spec"].get("nodeName")

    # A pod of a pool no shard serves stays pending, with the reason on the pod and on its PodGroup.
    def lost_explained() -> dict[str, Any] | None:
        pod = cluster.get_json("pod", "lost-0", namespace=namespace)
        cond = pod_scheduled(pod)
        return pod if cond and cond["status"] == "False" else None

    lost = wait_for("the unknown-pool pod explained", lost_explained, 120)
    assert not lost["spec"].get("nodeName")
    cond = pod_scheduled(lost)
    assert cond is not None and cond["reason"] == "Unschedulable"
    assert f"no SchedulingShard serves node pool '{unknown}'" in cond["message"], cond
    pg_cond = podgroup_condition(cluster, namespace, "lost-0")
    assert pg_cond is not None and pg_cond["nodePool"] == unknown
    assert [r["reason"] for r in pg_cond["reasons"]] == ["NodePoolNotServed"]
    events = [e for e in cluster.get_json("events", namespace=namespace)["items"]
              if e["involvedObject"]["name"] == "lost-0" and e["reason"] == "Unschedulable"]
    assert events and events[0]["type"] == "Warning"

    # Each shard scheduler holds its own Lease and labels its metrics with its shard.
    state = dev.load_state(cluster.name)
    assert state is not None
    for pool in (pool_a, pool_b):
        lease = cluster.get_json("lease", f"kai-scheduler-{pool}", namespace="kai-scheduler")
        assert lease["spec"].get("holderIdentity"), lease
        port = state.ports[f"{shards.process_name(pool)}-metrics"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert f'kai_scheduler_shard_info{{node_pool="{pool}",shard="{pool}"}} 1.0' in text
        _, available = shard_condition(cluster, pool, "Available")
        assert available["status"] == "True"


@pytest.fixture
def one_shard(cluster: Cluster, namespace: str) -> Iterator[str]:
    """Shard `<ns>-p` with 1 node and its own scheduler process."""
    state = dev.load_state(cluster.name)
    assert state is not None
    name = f"{namespace}-p"
    try:
        shards.start_shards(state, [name], nodes_per_shard=1, shape=nodes.NodeShape(), timeout=120,
                            node_labels={TEST_LABEL: "true"})
        yield name
    finally:
        shards.stop_shards(state, [name])
        cluster.kubectl("delete", "schedulingshard", name, "--ignore-not-found")
        cluster.kubectl("delete", "lease", f"kai-scheduler-{name}", "-n", "kai-scheduler", "--ignore-not-found")


def test_a_partitioned_shard_stamps_its_node_pool_on_the_pods_it_binds(cluster: Cluster, namespace: str,
                                                                       one_shard: str) -> None:
    pool = one_shard
    # The Job carries the node-pool label (so does its PodGroup); its pod template does not.
    template = gpu_pod("unused", 1)
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "pooled", "labels": {POOL: pool, "kai.scheduler/queue": "default-queue"}},
           "spec": {"backoffLimit": 0, "template": {
               "metadata": {"labels": {"kai.scheduler/queue": "default-queue"}},
               "spec": {**template["spec"], "restartPolicy": "Never"}}}}
    apply(cluster, namespace, [job])

    def bound_pod() -> dict[str, Any] | None:
        items = cluster.get_json("pods", "-l", "job-name=pooled", namespace=namespace)["items"]
        return items[0] if len(items) == 1 and items[0]["spec"].get("nodeName") else None

    pod = wait_for("the Job's pod bound", bound_pod, 120)
    assert pod["spec"]["nodeName"] in set(shards.node_names(pool, 1)), pod["spec"]["nodeName"]
    name = pod["metadata"]["name"]
    labelled = wait_for("the pod labelled with its node pool", lambda: (cluster.get_json(
        "pod", name, namespace=namespace)["metadata"].get("labels") or {}).get(POOL), 60)
    assert labelled == pool
    request = cluster.get_json("bindrequest", name, namespace=namespace)  # kept until the pod goes
    assert request["metadata"]["labels"] == {"selected-node": pod["spec"]["nodeName"], POOL: pool}

    # A pod of the default shard (no partition value) gets no node-pool label.
    apply(cluster, namespace, [gpu_pod("unpooled", 1)])
    wait_for("the default shard's pod bound", lambda: placement(cluster, namespace, ["unpooled"]), 120)
    unpooled = cluster.get_json("pod", "unpooled", namespace=namespace)
    assert POOL not in (unpooled["metadata"].get("labels") or {})
