"""The pinned versions in versions.py and the Go modules that build them agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from operators.devcluster import build, nodes, versions


def _require(module_dir: Path, module: str) -> str:
    text = (module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", text, re.M)
    assert match, f"{module} not required in {module_dir}/go.mod"
    return match.group(1)


def test_kubernetes_pin() -> None:
    assert _require(build.KUBE_SOURCES, "k8s.io/kubernetes") == versions.KUBERNETES


def test_tool_pins() -> None:
    assert _require(build.TOOLS / "kwok", "sigs.k8s.io/kwok") == versions.KWOK
    assert _require(build.TOOLS / "ray-operator", versions.KUBERAY_MODULE) == versions.KUBERAY
    assert _require(build.TOOLS / "helm", "helm.sh/helm/v3") == versions.HELM


def test_staging_replacements_follow_the_kubernetes_version() -> None:
    staging = versions.KUBERNETES.replace("v1.", "v0.")
    replaced = re.findall(r"^\s*k8s\.io/\S+ => k8s\.io/\S+ (v\S+)", (build.KUBE_SOURCES / "go.mod").read_text(), re.M)
    assert replaced and set(replaced) == {staging}


def test_fake_gpu_node_shape() -> None:
    node = nodes.node_manifest("n1", nodes.NodeShape(gpus=4, gpu_memory_mib=40960, gpu_product="A100"))
    labels = node["metadata"]["labels"]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert labels["nvidia.com/gpu.count"] == "4" and labels["nvidia.com/gpu.memory"] == "40960"
    assert labels["nvidia.com/gpu.product"] == "A100" and labels["run.ai/fake.gpu"] == "true"
    assert node["metadata"]["annotations"][nodes.KWOK_ANNOTATION] == "fake"
    cpu_only = nodes.node_manifest("n2", nodes.NodeShape(gpus=0))
    assert "nvidia.com/gpu" not in cpu_only["status"]["allocatable"]
    assert "nvidia.com/gpu.count" not in cpu_only["metadata"]["labels"]


def test_topology_nodes_form_zones_of_racks_of_nodes() -> None:
    docs = nodes.topology_node_manifests("t1", nodes.NodeShape(gpus=4), zones=2, racks=2, nodes_per_rack=2,
                                         labels={"kai.test/pool": "t1"})
    assert len(docs) == 8
    by_name = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs}
    first = by_name["t1-z0-r1-0"]
    assert first[nodes.ZONE_LABEL] == "t1-z0" and first[nodes.RACK_LABEL] == "r1"
    assert first[nodes.HOSTNAME_LABEL] == "t1-z0-r1-0" and first["kai.test/pool"] == "t1"
    racks = {(labels[nodes.ZONE_LABEL], labels[nodes.RACK_LABEL]) for labels in by_name.values()}
    assert racks == {("t1-z0", "r0"), ("t1-z0", "r1"), ("t1-z1", "r0"), ("t1-z1", "r1")}
    assert all(d["status"]["allocatable"]["nvidia.com/gpu"] == "4" for d in docs)


def test_dev_up_topology_cuts_the_nodes_into_zones_of_racks() -> None:
    names = [f"kwok-node-{i}" for i in range(8)]
    labels = nodes.spread_over_topology(names, *nodes.parse_topology("2x2"))
    racks = [(labels[n][nodes.ZONE_LABEL], labels[n][nodes.RACK_LABEL]) for n in names]
    assert racks == [("zone-0", "r0")] * 2 + [("zone-0", "r1")] * 2 + [("zone-1", "r0")] * 2 + [("zone-1", "r1")] * 2
    four = nodes.spread_over_topology(names[:4], 2, 2)
    assert len({(v[nodes.ZONE_LABEL], v[nodes.RACK_LABEL]) for v in four.values()}) == 4
    for bad in ("2", "0x2", "ax2", "2x2x2"):
        with pytest.raises(ValueError, match="--topology"):
            nodes.parse_topology(bad)
