"""The kai.scheduler/v1 CRDs (SchedulingShard, Config) generated from the models."""

from __future__ import annotations

from operators.core.api import crdgen


def test_kai_scheduler_crds_are_cluster_scoped_v1_with_status() -> None:
    crds = crdgen.all_crds()
    for file, plural in (("kai.scheduler_schedulingshards.yaml", "schedulingshards"),
                         ("kai.scheduler_configs.yaml", "configs")):
        crd = crds[file]
        assert crd["metadata"]["name"] == f"{plural}.kai.scheduler"
        assert crd["spec"]["group"] == "kai.scheduler" and crd["spec"]["scope"] == "Cluster"
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1" and version["subresources"] == {"status": {}}
        schema = version["schema"]["openAPIV3Schema"]["properties"]
        # KAI fields this scheduler does not read are accepted and kept, not pruned.
        assert schema["spec"]["x-kubernetes-preserve-unknown-fields"] is True
        condition = schema["status"]["properties"]["conditions"]["items"]
        assert set(condition["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}
        assert condition["properties"]["observedGeneration"]["type"] == "integer"


def test_shard_schema_types_the_honoured_fields() -> None:
    crd = crdgen.all_crds()["kai.scheduler_schedulingshards.yaml"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec) == {"args", "placementStrategy", "partitionLabelValue", "queueDepthPerAction", "minRuntime",
                         "kValue", "plugins", "actions", "usageDBConfig"}
    assert spec["placementStrategy"]["properties"]["gpu"]["enum"] == ["binpack", "spread"]
    assert spec["queueDepthPerAction"]["additionalProperties"] == {"type": "integer"}
    assert spec["plugins"]["additionalProperties"]["properties"]["arguments"]["additionalProperties"] == {
        "type": "string"}
