"""Topology-aware scheduling on the local control plane: the Topology CRD and its admission webhook.

Each test builds its own Topology (labelled for the namespace fixture's cleanup) and, where placement matters, its
own kwok nodes labelled with zones and racks, which only its own workloads can use: the suite's other nodes carry
no zone or rack label, so they are in no domain of the test's Topology.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from operators.devcluster.nodes import RACK_LABEL, ZONE_LABEL, NodeShape, topology_node_manifests
from tests.support import EXAMPLES, Cluster, apply, items, labelled, load_yaml, poll, queue

pytestmark = pytest.mark.cluster
GPU = "nvidia.com/gpu"


def topology(name: str, levels: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": levels}}


def create(cluster: Cluster, doc: dict[str, Any]) -> Any:
    return cluster.kubectl("apply", "-f", "-", input=labelled([doc]), check=False)


def test_topology_webhook_refuses_ambiguous_levels_and_label_changes(cluster: Cluster, namespace: str) -> None:
    name = f"dc-{uuid.uuid4().hex[:6]}"
    levels = [{"nodeLabel": ZONE_LABEL, "alias": "zone"}, {"nodeLabel": RACK_LABEL, "alias": "rack"},
              {"nodeLabel": "kubernetes.io/hostname"}]
    ok = create(cluster, topology(name, levels))
    assert ok.returncode == 0, ok.stderr
    stored = cluster.get_json("topology", name)
    assert stored["spec"]["levels"] == levels

    duplicate_alias = create(cluster, topology(f"{name}-x", [{"nodeLabel": ZONE_LABEL, "alias": "a"},
                                                             {"nodeLabel": RACK_LABEL, "alias": "a"}]))
    assert duplicate_alias.returncode != 0
    assert 'admission webhook "topology-validation.kai.scheduler" denied the request' in duplicate_alias.stderr
    assert "spec.levels[1].alias: alias 'a' is already used by level 0" in duplicate_alias.stderr

    alias_is_a_label = create(cluster, topology(f"{name}-y", [{"nodeLabel": ZONE_LABEL, "alias": RACK_LABEL},
                                                              {"nodeLabel": RACK_LABEL}]))
    assert alias_is_a_label.returncode != 0 and "equals the nodeLabel of level 1" in alias_is_a_label.stderr

    duplicate_label = create(cluster, topology(f"{name}-z", [{"nodeLabel": RACK_LABEL}, {"nodeLabel": RACK_LABEL}]))
    assert duplicate_label.returncode != 0 and "is already level 0" in duplicate_label.stderr
    assert cluster.kubectl("get", "topology", f"{name}-x", check=False).returncode != 0

    # Aliases may change; the node labels (values and order) may not.
    renamed = [{"nodeLabel": ZONE_LABEL, "alias": "az"}, {"nodeLabel": RACK_LABEL},
               {"nodeLabel": "kubernetes.io/hostname", "alias": "host"}]
    changed = create(cluster, topology(name, renamed))
    assert changed.returncode == 0, changed.stderr
    assert cluster.get_json("topology", name)["spec"]["levels"] == renamed
    reordered = create(cluster, topology(name, [renamed[1], renamed[0], renamed[2]]))
    assert reordered.returncode != 0 and "the node labels of a Topology cannot change" in reordered.stderr
    assert cluster.get_json("topology", name)["spec"]["levels"] == renamed


# --- scheduling -------------------------------------------------------------------------------------------


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or ())


@pytest.fixture
def racks(cluster: Cluster, namespace: str) -> Iterator[dict[str, dict[str, str]]]:
    """2 zones x 2 racks x 2 nodes of 4 GPUs, named after the namespace; node name -> labels.

    In every rack the first node already runs a 2-GPU pod (bound by name, outside kai-scheduler), so each rack has
    6 GPUs free, split 2 + 4: a bin-packing scheduler without topology would fill the 2-GPU holes of four
    different racks first. The nodes are removed (and waited for) after the test, so later tests see the
    suite's own four nodes only.
    """
    docs = topology_node_manifests(namespace, NodeShape(gpus=4), labels={"kai.test/topology": namespace})
    apply(cluster, namespace, docs)
    names = [d["metadata"]["name"] for d in docs]
    poll(lambda: len([n for n in items(cluster, "nodes", None, "-l", f"kai.test/topology={namespace}")
                      if ready(n)]) == len(names), "the topology test nodes to be Ready", timeout=60)
    blockers = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"blocker-{i}"},
                 "spec": {"nodeName": name, "terminationGracePeriodSeconds": 0,
                          "containers": [{"name": "main", "image": "busybox",
                                          "resources": {"limits": {GPU: "2"}, "requests": {GPU: "2"}}}]}}
                for i, name in enumerate(n for n in names if n.endswith("-0"))]
    apply(cluster, namespace, blockers)
    poll(lambda: all(p["status"].get("phase") == "Running" for p in items(cluster, "pods", namespace))
         and len(items(cluster, "pods", namespace)) == len(blockers), "the blocker pods to run", timeout=60)
    yield {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs}
    # The namespace goes first, while its pods' nodes still exist: kwok finishes their deletion at once, where a
    # pod left on a deleted node waits for the pod garbage collector (about a minute per test).
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s", check=False)
    cluster.kubectl("delete", "nodes", "-l", f"kai.test/topology={namespace}", "--wait=true", "--timeout=60s",
                    check=False)


def ray_workload(namespace: str, topology_name: str, *, workers: int, gpus: int,
                 required: str = "", preferred: str = "", name: str = "ray") -> list[dict[str, Any]]:
    """The example Topology and rack-bound RayCluster, renamed for this test, in a queue of its own."""
    topo = load_yaml(EXAMPLES / "topology" / "cluster-topology.yaml")[0]
    topo["metadata"]["name"] = topology_name
    ray = load_yaml(EXAMPLES / "topology" / "ray-cluster-rack.yaml")[0]
    ray["metadata"]["name"] = name
    ray["metadata"]["labels"]["kai.scheduler/queue"] = f"q-{namespace}"
    annotations = {"kai.scheduler/topology": topology_name}
    if required:
        annotations["kai.scheduler/topology-required-placement"] = required
    if preferred:
        annotations["kai.scheduler/topology-preferred-placement"] = preferred
    ray["metadata"]["annotations"] = annotations
    worker = ray["spec"]["workerGroupSpecs"][0]
    worker["replicas"] = worker["minReplicas"] = workers
    resources = worker["template"]["spec"]["containers"][0]["resources"]
    resources["requests"][GPU] = resources["limits"][GPU] = str(gpus)
    return [queue(f"q-{namespace}"), topo, ray]


def ray_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return items(cluster, "pods", namespace, "-l", f"ray.io/cluster={name}")


def running_gang(cluster: Cluster, namespace: str, name: str, size: int) -> list[dict[str, Any]] | None:
    pods = ray_pods(cluster, namespace, name)
    if len(pods) == size and all(p["status"].get("phase") == "Running" and p["spec"].get("nodeName")
                                 for p in pods):
        return pods
    return None


def podgroup(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    groups = [g for g in items(cluster, "podgroups", namespace) if g["metadata"]["name"].startswith("pg-ray-")]
    return groups[0] if groups else None


def test_required_rack_keeps_the_raycluster_in_one_rack(cluster: Cluster, namespace: str,
                                                        racks: dict[str, dict[str, str]]) -> None:
    name = f"dc-{namespace}"
    apply(cluster, namespace, ray_workload(namespace, name, workers=3, gpus=2, required="rack"))
    pods = poll(lambda: running_gang(cluster, namespace, "ray", 4), "the RayCluster (head + 3 workers) to run",
                timeout=120)
    where = [racks.get(p["spec"]["nodeName"], {}) for p in pods]  # {} for a node outside the topology
    placed = {(labels.get(ZONE_LABEL), labels.get(RACK_LABEL)) for labels in where}
    assert len(placed) == 1, f"the gang spans racks: {sorted(placed)}"
    group = podgroup(cluster, namespace)
    assert group is not None
    assert group["spec"]["topologyConstraint"] == {"topology": name, "requiredTopologyLevel": "rack"}


def test_no_rack_can_hold_it_so_it_stays_pending_explained(cluster: Cluster, namespace: str,
                                                           racks: dict[str, dict[str, str]]) -> None:
    name = f"dc-{namespace}"
    # 4 workers x 2 GPUs = 8 GPUs; every rack has 6 free (a zone has 12).
    apply(cluster, namespace, ray_workload(namespace, name, workers=4, gpus=2, required=RACK_LABEL))

    def explained() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        group = podgroup(cluster, namespace)
        pods = ray_pods(cluster, namespace, "ray")
        conditions = ((group or {}).get("status") or {}).get("schedulingConditions") or []
        scheduled = [next((c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
                     for p in pods]
        if group is None or len(pods) != 5 or not conditions or not all(scheduled):
            return None
        return conditions[-1], [c for c in scheduled if c]

    condition, pod_conditions = poll(explained, "the topology explanation on the PodGroup and the pods",
                                     timeout=120)
    expected = "no domain of level rack can hold the job (8 GPUs"
    reasons = condition["reasons"]
    assert reasons[0]["reason"] == "Not enough resources for the workload", reasons
    assert expected in reasons[0]["message"] and "lacks 2 GPUs" in reasons[0]["message"], reasons
    for c in pod_conditions:
        assert c["status"] == "False" and c["reason"] == "Unschedulable", c
        assert expected in c["message"], c
    described = cluster.kubectl("describe", "pod", ray_pods(cluster, namespace, "ray")[0]["metadata"]["name"],
                                namespace=namespace).stdout
    assert "no domain of level rack can hold the job" in described
    assert not items(cluster, "bindrequests", namespace)


def test_preferred_rack_falls_back_to_one_zone(cluster: Cluster, namespace: str,
                                               racks: dict[str, dict[str, str]]) -> None:
    name = f"dc-{namespace}"
    # 8 GPUs fit no rack (6 free each) but fit a zone (12 free): preferred rack falls back to a zone.
    apply(cluster, namespace, ray_workload(namespace, name, workers=4, gpus=2, preferred="rack"))
    pods = poll(lambda: running_gang(cluster, namespace, "ray", 5), "the RayCluster (head + 4 workers) to run",
                timeout=120)
    zones = {racks.get(p["spec"]["nodeName"], {}).get(ZONE_LABEL) for p in pods}
    assert len(zones) == 1, f"the gang spans zones: {sorted(zones)}"


def test_worker_group_template_annotations_bind_only_the_workers_to_a_rack(
        cluster: Cluster, namespace: str, racks: dict[str, dict[str, str]]) -> None:
    name = f"dc-{namespace}"
    docs = ray_workload(namespace, name, workers=3, gpus=2)
    ray = docs[-1]
    ray["metadata"]["annotations"] = {}
    worker = ray["spec"]["workerGroupSpecs"][0]["template"]
    worker.setdefault("metadata", {})["annotations"] = {"kai.scheduler/topology": name,
                                                        "kai.scheduler/topology-required-placement": "rack"}
    apply(cluster, namespace, docs)
    pods = poll(lambda: running_gang(cluster, namespace, "ray", 4), "the RayCluster (head + 3 workers) to run",
                timeout=120)
    workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
    assert len(workers) == 3
    where = [racks.get(p["spec"]["nodeName"], {}) for p in workers]
    assert len({(labels.get(ZONE_LABEL), labels.get(RACK_LABEL)) for labels in where}) == 1, where
    group = podgroup(cluster, namespace)
    assert group is not None
    subgroups = {s["name"]: s for s in group["spec"]["subGroups"]}
    assert subgroups["worker"]["topologyConstraint"] == {"topology": name, "requiredTopologyLevel": "rack"}
    assert "topologyConstraint" not in subgroups["headgroup"]
