"""SchedulingShard / Config applied to the scheduler: effective settings, unhonoured fields, conditions, pools.

Pure functions only; the live watch is tests/integration/test_shards.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.core.api import Config, SchedulingShard
from operators.core.conditions import merge_conditions
from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.shardconfig import (
    effective_config,
    served_pools,
    status_conditions,
    unhonoured_config_fields,
    unhonoured_fields,
    unserved_pools,
)
from operators.scheduler.decide.snapshot import pod_record, podgroup_record, snapshot_from_objects
from tests.unit.scheduler.sched_builders import bound, node, pod, podgroup, queue

POOL = "kai.scheduler/node-pool"


def test_shard_fields_override_flags_and_file() -> None:
    base = SchedulerConfig(gpu_placement="binpack", actions=("allocate", "reclaim"))
    spec = {"placementStrategy": {"gpu": "spread", "cpu": "spread"}, "queueDepthPerAction": {"allocate": 5},
            "minRuntime": {"preemptMinRuntime": "5m", "reclaimMinRuntime": "10m"}, "kValue": 2,
            "partitionLabelValue": "a", "args": {"default-staleness-grace-period": "-1s"},
            "actions": {"reclaim": {"enabled": False}, "preempt": {"priority": 50}}}
    eff = effective_config(base, spec, {"global": {"nodePoolLabelKey": "example.com/pool"}})
    cfg = eff.config
    assert not eff.error
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("spread", "spread")
    assert cfg.actions == ("allocate", "preempt") and "consolidation" not in cfg.effective_actions
    assert cfg.queue_depth_per_action == {"allocate": 5}
    assert (cfg.default_preempt_min_runtime, cfg.default_reclaim_min_runtime) == (300, 600)
    assert cfg.k_value == 2 and cfg.partition == "a" and cfg.stale_grace_period == -1
    assert cfg.node_pool_label == "example.com/pool" and cfg.node_pool_name == "a"


def test_plugin_arguments_replace_the_dedicated_fields() -> None:
    spec = {"minRuntime": {"preemptMinRuntime": "5m"}, "placementStrategy": {"gpu": "binpack"},
            "plugins": {"minruntime": {"arguments": {"defaultPreemptMinRuntime": "1m",
                                                     "reclaimResolveMethod": "queue"}},
                        "nodeplacement": {"arguments": {"gpu": "spread"}},
                        "proportion": {"arguments": {"kValue": "3", "relcaimerSaturationMultiplier": "1.5"}}}}
    cfg = config_from_mapping(spec)
    assert cfg.default_preempt_min_runtime == 60 and cfg.reclaim_min_runtime_resolve == "queue"
    assert cfg.gpu_placement == "spread" and cfg.k_value == 3 and cfg.reclaimer_saturation_multiplier == 1.5


@pytest.mark.parametrize(("spec", "message"), [
    ({"queueDepthPerAction": {"consolidation": 3}, "actions": {"consolidation": {"enabled": False}}},
     "consolidation isn't one of them, making the queueDepthPerAction invalid"),
    ({"minRuntime": {"preemptMinRuntime": "five minutes"}}, "invalid duration"),
    ({"actions": {"backfill": {}}}, "unknown actions: backfill"),
    ({"plugins": {"nodeplacement": {"arguments": {"gpu": "pack"}}}}, "placement strategy must be"),
])
def test_an_unusable_spec_keeps_the_last_good_settings_and_says_why(spec: dict[str, Any], message: str) -> None:
    good = config_from_mapping({"placementStrategy": {"gpu": "spread"}})
    eff = effective_config(SchedulerConfig(), spec, None, last_good=good)
    assert eff.config is good
    assert message in eff.error and eff.error.startswith("spec rejected, running with the last valid settings")


def test_no_shard_object_means_flags_and_file_alone() -> None:
    base = SchedulerConfig(gpu_placement="spread")
    assert effective_config(base, None, None).config is base


def test_unhonoured_fields_are_named() -> None:
    spec = {"placementStrategy": {"gpu": "spread"}, "usageDBConfig": {"clientType": "prometheus"},
            "goMemLimitRatio": 0.8, "futureField": {"a": 1}, "args": {"schedule-period": "2s", "leader-elect": "true"},
            "plugins": {"minruntime": {"arguments": {"defaultReclaimMinRuntime": "1m"}},
                        "snapshot": {"enabled": False}, "predicates": {"enabled": True},
                        "gpupack": {"priority": 900, "arguments": {"x": "y"}}}}
    assert unhonoured_fields(spec) == [
        "spec.futureField", "spec.goMemLimitRatio", "spec.args.leader-elect",
        "spec.plugins.gpupack.priority", "spec.plugins.gpupack.arguments.x", "spec.plugins.snapshot.enabled"]
    assert unhonoured_fields({"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}}) == []
    assert unhonoured_config_fields({"namespace": "kai-scheduler", "global": {
        "nodePoolLabelKey": "k", "schedulerName": "x"}, "binder": {"replicas": 2}}) == [
        "spec.binder", "spec.global.schedulerName"]


def test_conditions_as_kai_operator_writes_them() -> None:
    wanted = status_conditions(3, "", ["spec.usageDBConfig"])
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in wanted] == [
        ("Deployed", "True", "deployed", "Resources deployed"),
        ("Available", "True", "available", "System available"),
        ("FieldsNotHonoured", "True", "NotHonoured",
         "Accepted but not honoured by this scheduler: spec.usageDBConfig")]
    assert {c["observedGeneration"] for c in wanted} == {3}
    failed = status_conditions(4, "spec rejected: x", [])
    assert failed[1]["status"] == "False" and "spec rejected: x" in failed[1]["message"]
    assert failed[2]["status"] == "False" and failed[2]["reason"] == "AllHonoured"


def test_merge_conditions_only_on_change_and_keeps_transition_times() -> None:
    first = merge_conditions([], status_conditions(1, "", []), "T1")
    assert first is not None and {c["lastTransitionTime"] for c in first} == {"T1"}
    assert merge_conditions(first, status_conditions(1, "", []), "T2") is None
    other = {"type": "Reconciling", "status": "False", "reason": "reconciled", "message": "m",
             "lastTransitionTime": "T0"}
    second = merge_conditions([*first, other], status_conditions(2, "", []), "T2")
    assert second is not None
    by_type = {c["type"]: c for c in second}
    assert by_type["Deployed"]["lastTransitionTime"] == "T1" and by_type["Deployed"]["observedGeneration"] == 2
    assert by_type["Reconciling"] == other
    third = merge_conditions(second, status_conditions(2, "bad", []), "T3")
    assert third is not None and {c["type"]: c for c in third}["Available"]["lastTransitionTime"] == "T3"


def test_a_pool_nobody_serves_is_explained_on_its_podgroup_and_pending_pods() -> None:
    labelled = {POOL: "gpu-x"}
    pg = podgroup("orphan")
    pg["metadata"]["labels"] = labelled
    served_pg = podgroup("served")
    served_pg["metadata"]["labels"] = {POOL: "a"}
    pgs = [podgroup_record(o) for o in (pg, served_pg, podgroup("plain"))]
    pods = [pod_record(o) for o in (pod("orphan-0", "orphan", labels=labelled), pod("served-0", "served"),
                                    pod("plain-0", "plain"))]
    served = served_pools([{"partitionLabelValue": "a"}, {}, None])
    assert served == {"a", ""}
    (u,) = unserved_pools(pgs, pods, POOL, served)
    assert (u.pod_group, u.node_pool, u.has_allocated_pods) == ("orphan", "gpu-x", False)
    assert [r.reason for r in u.reasons] == ["NodePoolNotServed"]
    assert "no SchedulingShard serves node pool 'gpu-x'" in u.message and "partitionLabelValue: gpu-x" in u.message
    assert set(u.pod_messages) == {"orphan-0"}
    assert unserved_pools(pgs, pods, POOL, {"a", "gpu-x"}) == []


def test_two_shards_share_queues_and_split_nodes_and_podgroups() -> None:
    objs: list[dict[str, Any]] = [queue("q"), node("a-1", labels={POOL: "a"}), node("b-1", labels={POOL: "b"}),
                                  node("plain")]
    for name, pool in (("ja", "a"), ("jb", "b"), ("jd", "")):
        pg = podgroup(name)
        if pool:
            pg["metadata"]["labels"] = {POOL: pool}
        objs += [pg, pod(f"{name}-0", name, gpus=1, labels={POOL: pool} if pool else None)]
    for partition, want in (("a", {"ja-0": "a-1"}), ("b", {"jb-0": "b-1"}), ("", {"jd-0": "plain"})):
        snap = snapshot_from_objects(objs, partition=partition)
        assert [q.name for q in snap.queues] == ["q"]
        assert bound(run_cycle(snap, SchedulerConfig(partition=partition), 1e9)) == want


def test_a_labelled_queue_belongs_to_its_shard_only() -> None:
    q = queue("qa")
    q["metadata"]["labels"] = {POOL: "a"}
    assert [x.name for x in snapshot_from_objects([q], partition="a").queues] == ["qa"]
    assert snapshot_from_objects([q]).queues == ()


def test_models_round_trip_kai_objects() -> None:
    shard = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": "default"},
             "spec": {"partitionLabelValue": "", "placementStrategy": {"gpu": "binpack", "cpu": "spread"},
                      "queueDepthPerAction": {"allocate": 3}, "usageDBConfig": {"clientType": "prometheus"},
                      "plugins": {"minruntime": {"enabled": True, "priority": 600, "arguments": {"a": "b"}}},
                      "actions": {"consolidation": {"enabled": False}}},
             "status": {"conditions": [{"type": "Deployed", "status": "True", "reason": "deployed",
                                        "message": "Resources deployed", "observedGeneration": 1,
                                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    assert SchedulingShard.model_validate(shard).to_wire() == shard
    config = {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
              "spec": {"namespace": "kai-scheduler", "global": {"nodePoolLabelKey": "k", "replicaCount": 2},
                       "binder": {"replicas": 1}}}
    assert Config.model_validate(config).to_wire() == config


def test_a_malformed_spec_never_stops_scheduling() -> None:
    for spec in ({"placementStrategy": "spread"}, {"args": {"max-evictions-per-job": "many"}},
                 {"plugins": {"minruntime": "off"}}, {"queueDepthPerAction": {"allocate": "deep"}}):
        eff = effective_config(SchedulerConfig(), spec, None)
        assert eff.config == SchedulerConfig() and eff.error, spec
