"""The API models, the CRDs generated from them, and round trips of real user YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from operators.core.api import BindRequest, PodGroup, Queue, crdgen
from tests.support import EXAMPLES

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", sorted(crdgen.all_crds()))
def test_crds_in_repo_match_models(name: str) -> None:
    on_disk = (REPO / "crds" / name).read_text()
    assert on_disk == crdgen.render(crdgen.all_crds()[name]), (
        f"crds/{name} is stale: run `python -m operators.core.api.crdgen crds`")


def test_queue_crd_has_kai_printer_columns_and_gpu_columns() -> None:
    crd = crdgen.all_crds()["scheduling.run.ai_queues.yaml"]
    version = crd["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:4] == ["Priority", "Parent", "Children", "DisplayName"]
    assert {"GPU-Quota", "GPU-Limit", "GPU-Allocated"} <= set(names)
    assert crd["spec"]["scope"] == "Cluster"
    assert version["subresources"] == {"status": {}}


def test_podgroup_crd_short_name_and_subgroup_constraints() -> None:
    crd = crdgen.all_crds()["scheduling.run.ai_podgroups.yaml"]
    assert crd["spec"]["names"]["shortNames"] == ["pg"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    sub = spec["subGroups"]["items"]
    assert sub["properties"]["minMember"]["minimum"] == 1
    assert sub["properties"]["name"]["minLength"] == 1
    # minMember is optional: a parent SubGroup sets minSubGroup instead (the webhook requires one or the other).
    assert set(sub["required"]) == {"name"}
    assert sub["properties"]["minSubGroup"] == {"format": "int32", "minimum": 0, "type": "integer"}
    assert spec["minSubGroup"] == {"format": "int32", "minimum": 0, "type": "integer"}
    assert spec["preemptionDelay"] == {"type": "string"}
    assert spec["preemptibility"]["enum"] == ["preemptible", "non-preemptible", "semi-preemptible"]
    assert spec["minNonPreemptible"] == {"format": "int32", "minimum": 0, "type": "integer"}


def test_topology_crd_matches_kai_and_adds_an_optional_alias() -> None:
    crd = crdgen.all_crds()["kai.scheduler_topologies.yaml"]
    assert crd["metadata"]["name"] == "topologies.kai.scheduler"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"] == {"kind": "Topology", "listKind": "TopologyList", "plural": "topologies",
                                    "singular": "topology"}
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and "subresources" not in version  # KAI's Topology has no status
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["required"] == ["spec"]
    levels = schema["properties"]["spec"]["properties"]["levels"]
    assert (levels["minItems"], levels["maxItems"], levels["x-kubernetes-list-type"]) == (1, 16, "atomic")
    level = levels["items"]
    assert level["required"] == ["nodeLabel"]
    assert level["properties"]["nodeLabel"]["minLength"] == 1
    assert level["properties"]["alias"]["type"] == "string"
    from operators.core.api import Topology

    parsed = Topology.from_wire({"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                                 "metadata": {"name": "dc"},
                                 "spec": {"levels": [{"nodeLabel": "zone"}, {"nodeLabel": "rack", "alias": "r"}]}})
    assert parsed.to_wire()["spec"] == {"levels": [{"nodeLabel": "zone"}, {"nodeLabel": "rack", "alias": "r"}]}


def test_schema_is_structural() -> None:
    """Every node has a type (or is int-or-string / preserve-unknown), as the API server requires."""

    def walk(node: dict, path: str) -> None:
        assert ("type" in node or node.get("x-kubernetes-int-or-string")
                or node.get("x-kubernetes-preserve-unknown-fields")), path
        assert "$ref" not in node and "title" not in node, path
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    for name, crd in crdgen.all_crds().items():
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], name)


def _examples(kind: str) -> list[dict]:
    docs = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == kind]
    return docs


def _numbers_as_float(value: object) -> object:
    if isinstance(value, dict):
        return {k: _numbers_as_float(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_as_float(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def test_the_examples_hold_queues() -> None:
    assert len(_examples("Queue")) >= 8  # the round trip below is parametrized over them


@pytest.mark.parametrize("doc", _examples("Queue"), ids=lambda d: d["metadata"]["name"])
def test_example_queues_round_trip(doc: dict) -> None:
    assert _numbers_as_float(Queue.model_validate(doc).to_wire()) == _numbers_as_float(doc)


def test_podgroup_round_trip_of_a_full_object() -> None:
    obj = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-x", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "x",
                                          "uid": "u2"}]},
        "spec": {"minMember": 3, "queue": "team-a", "priorityClassName": "train", "markUnschedulable": True,
                 "topologyConstraint": {},
                 "subGroups": [{"name": "headgroup", "minMember": 1}, {"name": "worker", "minMember": 2}]},
        "status": {
            "resourcesStatus": {"requested": {"cpu": "3", "memory": "4Gi"}, "allocated": {"nvidia.com/gpu": "1.5"}},
            "schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                      "reasons": [{"reason": "OverLimit", "message": "m",
                                                   "details": {"queueDetails": {"name": "q"}}}],
                                      "transitionID": "1", "status": "True",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    }
    assert PodGroup.model_validate(obj).to_wire() == obj


def test_bindrequest_round_trip_keeps_acronym_fields() -> None:
    obj = {
        "apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"podName": "p", "selectedNode": "n1", "receivedResourceType": "Fraction",
                 "receivedGPU": {"count": 1, "portion": "0.50"}, "selectedGPUGroups": ["g1"]},
        "status": {"phase": "Succeeded"},
    }
    assert BindRequest.model_validate(obj).to_wire() == obj


def test_unknown_fields_survive_a_round_trip() -> None:
    obj = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
           "spec": {"resources": {"gpu": {"quota": 1.0}}, "futureField": {"x": 1}}}
    assert Queue.model_validate(obj).to_wire()["spec"]["futureField"] == {"x": 1}
