"""The operator's rendering (operators/operator/render.py): Config + SchedulingShards -> the suite's objects."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from operators.operator import render

DEPLOYMENTS = {"admission", "binder", "podgroup-controller", "pod-grouper", "queue-controller", "kai-scheduler-default"}


def objects(spec: dict[str, Any], shards: dict[str, dict[str, Any]] | None = None) -> dict[tuple[str, str], Any]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render.render(spec, shards or {"default": {}}, version="v1")}


def deployment(spec: dict[str, Any], name: str, shards: dict[str, dict[str, Any]] | None = None) -> Any:
    return objects(spec, shards)[("Deployment", name)]


def args(d: Any) -> list[str]:
    return list(d["spec"]["template"]["spec"]["containers"][0]["args"])


def test_an_empty_config_renders_the_six_components_like_kai() -> None:
    objs = objects({})
    assert {n for k, n in objs if k == "Deployment"} == DEPLOYMENTS
    assert {n for k, n in objs if k == "ServiceAccount"} == {"admission", "binder", "podgroup-controller",
                                                              "pod-grouper", "queue-controller", "scheduler"}
    for name in DEPLOYMENTS:
        d = objs[("Deployment", name)]
        assert d["metadata"]["labels"]["app"] == name
        assert d["spec"]["selector"] == {"matchLabels": {"app": name}}
        assert d["metadata"]["namespace"] == "kai-scheduler"
        assert d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kai-operator"
        pod = d["spec"]["template"]["spec"]
        # The chart's hardening, also when the Config names none.
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        container = pod["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["image"] == "kai-scheduler:v1"
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in objs[("Deployment", "binder")]["spec"]["template"][
        "spec"]["volumes"]
    assert objs[("Service", "kai-scheduler-default")]["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize(("spec", "name", "check"), [
    # replicas > 1: leader election and a rolling update
    ({"binder": {"replicas": 2}}, "binder",
     lambda d: d["spec"]["replicas"] == 2 and "--leader-elect" in args(d)
     and d["spec"]["strategy"]["type"] == "RollingUpdate"),
    ({"binder": {"replicas": 1}}, "binder",
     lambda d: "--leader-elect" not in args(d) and d["spec"]["strategy"] == {"type": "Recreate"}),
    ({"scheduler": {"replicas": 2}}, "kai-scheduler-default",
     lambda d: d["spec"]["replicas"] == 2 and "--leader-elect" in args(d)
     and "--lease-name=kai-scheduler-default" in args(d)),
    # image: the component's own tag wins over the global one; registry prefix
    ({"global": {"registry": "r.io/x", "tag": "t1"}, "binder": {"service": {"image": {"tag": "t2"}}}}, "binder",
     lambda d: d["spec"]["template"]["spec"]["containers"][0]["image"] == "r.io/x/kai-scheduler:t2"),
    ({"global": {"registry": "r.io/x", "tag": "t1"}}, "admission",
     lambda d: d["spec"]["template"]["spec"]["containers"][0]["image"] == "r.io/x/kai-scheduler:t1"),
    # args: KAI's global settings become flags
    ({"admission": {"gpuSharing": True}}, "admission", lambda d: "--gpu-sharing-enabled=true" in args(d)),
    ({"admission": {"gpuPodRuntimeClassName": ""}}, "admission",
     lambda d: "--gpu-fraction-runtime-class-name=" in args(d)),
    ({"binder": {"resourceReservation": {"namespace": "rr", "runtimeClassName": "nvidia",
                                         "podResources": {"requests": {"memory": "20Mi", "cpu": "2m"}}}}}, "binder",
     lambda d: {"--resource-reservation-namespace=rr", "--runtime-class-name=nvidia",
                '--resource-reservation-pod-resources={"requests":{"cpu":"2m","memory":"20Mi"}}'} <= set(args(d))),
    ({"global": {"queueLabelKey": "example.com/q"}}, "pod-grouper",
     lambda d: "--queue-label-key=example.com/q" in args(d)),
    ({"queueController": {"webhooks": {"enableValidation": False}}}, "queue-controller",
     lambda d: "--enable-webhook=false" in args(d)
     and all(v["name"] != "webhook-certs" for v in d["spec"]["template"]["spec"]["volumes"])),
    ({"scheduler": {"service": {"args": ["--x=1"]}, "staleGracePeriod": "60s"}}, "kai-scheduler-default",
     lambda d: args(d)[-2:] == ["--stale-grace-period=60s", "--x=1"]),
    # placement: global then own, tolerations concatenated, nodeSelector merged (global wins)
    ({"global": {"tolerations": [{"key": "a"}], "nodeSelector": {"pool": "sys"}},
      "binder": {"service": {"tolerations": [{"key": "b"}], "nodeSelector": {"pool": "x", "zone": "1"}}}}, "binder",
     lambda d: d["spec"]["template"]["spec"]["tolerations"] == [{"key": "a"}, {"key": "b"}]
     and d["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "sys", "zone": "1"}),
    ({"binder": {"service": {"resources": {"limits": {"memory": "2Gi"}}}}}, "binder",
     lambda d: d["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"memory": "2Gi"}}),
    ({"global": {"requireDefaultPodAntiAffinityTerm": True}}, "binder",
     lambda d: "podAntiAffinity" in d["spec"]["template"]["spec"]["affinity"]),
    ({"global": {"podSecurityContext": {}, "securityContext": {}}}, "binder",
     lambda d: "securityContext" not in d["spec"]["template"]["spec"]
     and "securityContext" not in d["spec"]["template"]["spec"]["containers"][0]),
])
def test_config_settings_reach_the_deployment(spec: dict[str, Any], name: str, check: Any) -> None:
    assert check(deployment(spec, name))


def test_a_disabled_component_renders_nothing() -> None:
    objs = objects({"binder": {"service": {"enabled": False}}})
    assert not [k for k in objs if k[1] == "binder"]


def test_the_default_shard_configures_the_default_scheduler() -> None:
    spec = {"global": {"nodePoolLabelKey": "example.com/pool"}}
    shard = {"placementStrategy": {"gpu": "spread", "cpu": "spread"}, "queueDepthPerAction": {"allocate": 5}}
    objs = objects(spec, {"default": shard})
    config = yaml.safe_load(objs[("ConfigMap", "kai-scheduler-default")]["data"]["config.yaml"])
    assert config["placementStrategy"] == {"gpu": "spread", "cpu": "spread"}
    assert config["args"] == {"nodepool-label-key": "example.com/pool"}
    assert config["queueDepthPerAction"] == {"allocate": 5}
    d = objs[("Deployment", "kai-scheduler-default")]
    assert "--config=/etc/config/config.yaml" in args(d)
    # A new spec rolls the scheduler (the checksum of its config).
    other = objects(spec, {"default": {}})[("Deployment", "kai-scheduler-default")]
    key = "checksum/config"
    assert d["spec"]["template"]["metadata"]["annotations"][key] != \
        other["spec"]["template"]["metadata"]["annotations"][key]


def test_each_node_pool_shard_gets_its_own_scheduler() -> None:
    objs = objects({"scheduler": {"replicas": 2}}, {"default": {}, "pool-b": {"partitionLabelValue": "b"}})
    d = objs[("Deployment", "kai-scheduler-pool-b")]
    assert d["metadata"]["labels"]["app"] == "kai-scheduler-pool-b"
    assert d["spec"]["template"]["metadata"]["labels"]["kai.scheduler/shard"] == "pool-b"
    assert {"--shard-name=pool-b", "--partition-label-value=b", "--leader-elect",
            "--lease-name=kai-scheduler-pool-b"} <= set(args(d))
    assert d["spec"]["replicas"] == 2
    assert objs[("Service", "kai-scheduler-pool-b")]["spec"]["selector"] == {"app": "kai-scheduler-pool-b"}
    assert ("Deployment", "kai-scheduler-pool-b") not in objects({}, {"default": {}})


def test_webhook_configurations_need_their_ca_bundle() -> None:
    s = render.Settings({"global": {"schedulerName": "kai-scheduler"}})
    names = {o["metadata"]["name"] for o in render.webhook_configurations(s, {"admission": "Q0E="})}
    assert names == {"mutating-kai-admission", "validating-kai-admission", "kai-topology-validation-v1alpha1"}
    every = render.webhook_configurations(s, {"admission": "A", "queueController": "B", "podGroupController": "C"})
    queue = next(o for o in every if o["metadata"]["name"] == "kai-queue-validation-v2")
    assert queue["webhooks"][0]["clientConfig"]["caBundle"] == "B"
    assert queue["webhooks"][0]["clientConfig"]["service"]["name"] == "queue-controller"


def test_a_budget_for_each_component_with_more_than_one_replica_and_its_budget_on() -> None:
    """KAI's service.podDisruptionBudget: a budget on a single replica would block every node drain."""
    on = {"enabled": True, "maxUnavailable": 2}
    spec = {"scheduler": {"replicas": 2, "service": {"podDisruptionBudget": on}},
            "binder": {"replicas": 2, "service": {"podDisruptionBudget": {"enabled": False}}},
            "admission": {"replicas": 3, "service": {"podDisruptionBudget": {"enabled": True, "minAvailable": 2}}},
            "podGrouper": {"replicas": 1, "service": {"podDisruptionBudget": on}}}
    budgets = {n: o["spec"] for (k, n), o in objects(spec).items() if k == "PodDisruptionBudget"}
    assert budgets == {"kai-scheduler-default": {"maxUnavailable": 2, "selector": {"matchLabels": {
                           "app": "kai-scheduler-default"}}},
                       "admission": {"minAvailable": 2, "selector": {"matchLabels": {"app": "admission"}}}}
    unwanted = {o["metadata"]["name"] for o in render.unwanted_budgets(render.Settings(spec))}
    assert unwanted == {"binder", "pod-grouper", "podgroup-controller", "queue-controller"}


def test_the_admission_service_name_is_what_the_webhooks_call() -> None:
    s = render.Settings({"admission": {"serviceName": "kai-admission"}})
    objs = objects(dict(s.spec))
    assert ("Service", "kai-admission") in objs and ("Service", "admission") not in objs
    assert objs[("Service", "kai-admission")]["spec"]["selector"] == {"app": "admission"}
    assert ("Deployment", "admission") in objs
    hooks = render.webhook_configurations(s, {"admission": "Y2E="})
    assert {w["clientConfig"]["service"]["name"] for c in hooks for w in c["webhooks"]} == {"kai-admission"}


def test_an_electing_component_gets_an_owned_lease() -> None:
    objs = objects({"scheduler": {"replicas": 2}})
    assert objs[("Lease", "kai-scheduler-default")]["spec"] == {}
    assert ("Lease", "kai-binder") not in objs, "one binder replica: no election, no Lease"


def test_an_electing_shard_owns_its_lease() -> None:
    s = render.Settings({"scheduler": {"replicas": 2}})
    objs = render.shard_objects(s, "pool-b", {"partitionLabelValue": "b"})
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert kinds == {("Deployment", "kai-scheduler-pool-b"), ("Service", "kai-scheduler-pool-b"),
                     ("Lease", "kai-scheduler-pool-b")}
    one = render.Settings({})
    assert all(o["kind"] != "Lease" for o in render.shard_objects(one, "pool-b", {"partitionLabelValue": "b"}))
