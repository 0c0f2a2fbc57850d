"""The chart's Config `kai-config`, SchedulingShard `default`, and node-pool shards (values `schedulingShards`)."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import yaml

from operators.scheduler.decide.config import config_from_mapping
from operators.scheduler.decide.shardconfig import unhonoured_config_fields, unhonoured_fields
from operators.scheduler.shell.main import parser as scheduler_parser
from tests.helm_chart import CHART, NS, allows, by_kind, helm_binary, render, rules_of

SHARDS = {"global": {"leaderElection": True}, "schedulingShards": [
    {"name": "a", "partitionLabelValue": "pool-a", "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
     "queueDepthPerAction": {"allocate": 10}, "args": {"schedule-period": "2s"}},
    {"name": "b", "partitionLabelValue": "pool-b", "minRuntime": {"preemptMinRuntime": "5m"},
     "actions": {"consolidation": {"enabled": False}}, "plugins": {"proportion": {"arguments": {"kValue": "2"}}}},
]}


def test_config_and_default_shard_like_kai() -> None:
    docs = render("scheduler.placementStrategy=spread", "scheduler.config.queueDepthPerAction.allocate=5",
                  "global.nodePoolLabelKey=example.com/pool")
    config = by_kind(docs, "Config")["kai-config"]
    assert config["apiVersion"] == "kai.scheduler/v1"
    assert config["spec"] == {"namespace": NS, "global": {"nodePoolLabelKey": "example.com/pool"}}
    assert unhonoured_config_fields(config["spec"]) == [], "the chart's Config sets only what is read"
    shard = by_kind(docs, "SchedulingShard")["default"]
    assert shard["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert shard["spec"]["partitionLabelValue"] == ""
    loaded = config_from_mapping(shard["spec"])
    assert (loaded.gpu_placement, loaded.cpu_placement, loaded.partition) == ("spread", "spread", "")
    assert dict(loaded.queue_depth_per_action) == {"allocate": 5}
    # The shard object and the scheduler's config file say the same.
    # (The file also carries the node-pool label key, which the shard takes from the Config object.)
    data = by_kind(docs, "ConfigMap")["kai-scheduler-default"]["data"]
    file = config_from_mapping(yaml.safe_load(data["config.yaml"]))
    assert file.node_pool_label == config["spec"]["global"]["nodePoolLabelKey"]
    assert replace(file, node_pool_label=loaded.node_pool_label) == loaded
    assert unhonoured_fields(shard["spec"]) == []
    assert not by_kind(render("config.create=false"), "Config")


def test_each_node_pool_shard_gets_its_object_deployment_lease_and_service() -> None:
    docs = render(values=SHARDS)
    deployments = by_kind(docs, "Deployment")
    shards = by_kind(docs, "SchedulingShard")
    assert set(shards) == {"default", "a", "b"}
    wanted_a = {k: v for k, v in SHARDS["schedulingShards"][0].items() if k != "name"}
    assert shards["a"]["spec"] == wanted_a
    services = by_kind(docs, "Service")
    roles = by_kind(docs, "Role")
    for name, pool in (("a", "pool-a"), ("b", "pool-b")):
        deployment = deployments[f"kai-scheduler-{name}"]
        pod = deployment["spec"]["template"]
        assert pod["spec"]["serviceAccountName"] == "scheduler"
        assert pod["metadata"]["labels"]["app"] == f"kai-scheduler-{name}"
        (container,) = pod["spec"]["containers"]
        assert container["args"][:2] == ["run", "scheduler"]
        args = scheduler_parser().parse_args(container["args"][2:])
        assert (args.shard_name, args.partition_label_value) == (name, pool)
        assert args.leader_elect and args.lease_name == f"kai-scheduler-{name}"
        assert services[f"kai-scheduler-{name}"]["spec"]["selector"] == {"app": f"kai-scheduler-{name}"}
        lease = roles[f"kai-scheduler-{name}-leader-election"]["rules"][1]
        assert lease["resourceNames"] == [f"kai-scheduler-{name}"]
        spec = shards[name]["spec"]
        assert spec["partitionLabelValue"] == pool
        assert unhonoured_fields(spec) == [], spec
        config_from_mapping(spec)  # loads as the scheduler will
    assert config_from_mapping(shards["b"]["spec"]).k_value == 2
    monitors = by_kind(render("metrics.serviceMonitor.enabled=true", values=SHARDS), "ServiceMonitor")
    relabel = monitors["kai-scheduler-a"]["spec"]["endpoints"][0]["relabelings"]
    assert relabel == [{"targetLabel": "shard", "replacement": "a"}]


def test_every_scheduler_may_read_shards_and_report_on_them() -> None:
    rules = rules_of(render(), "scheduler")
    for resource, verb in (("schedulingshards", "watch"), ("configs", "watch"), ("schedulingshards/status", "patch"),
                           ("configs/status", "patch")):
        assert allows(rules, "kai.scheduler", resource, verb), (resource, verb)
    assert not allows(rules, "kai.scheduler", "schedulingshards", "patch")


def test_bad_shard_values_fail_with_a_clear_error() -> None:
    for shards, message in (([{"name": "a"}], "partitionLabelValue is required"),
                            ([{"name": "default", "partitionLabelValue": "x"}], "unique name other than default"),
                            ([{"name": "a", "partitionLabelValue": "x"}, {"name": "a", "partitionLabelValue": "z"}],
                             "unique name")):
        proc = subprocess.run([helm_binary(), "template", "kai-scheduler", str(CHART), "-n", NS, "-f", "-"],
                              input=yaml.safe_dump({"schedulingShards": shards}), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
