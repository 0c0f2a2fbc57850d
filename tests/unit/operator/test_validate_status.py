"""Refusals (operators/operator/validate.py) and conditions (operators/operator/status.py)."""

from __future__ import annotations

from typing import Any

import pytest

from operators.core.conditions import merge_conditions
from operators.operator import status, validate
from operators.operator.validate import ShardRef


@pytest.mark.parametrize(("spec", "field"), [
    ({"placementStrategy": {"gpu": "pack"}}, "spec.placementStrategy.gpu"),
    ({"plugins": {"nosuchplugin": {}}}, "spec.plugins.nosuchplugin"),
    ({"actions": {"allocat": {"enabled": True}}}, "spec.actions.allocat"),
    ({"actions": {"reclaim": {"enabled": False}}, "queueDepthPerAction": {"reclaim": 3}},
     "spec.queueDepthPerAction.reclaim"),
    ({"minRuntime": {"preemptMinRuntime": "five minutes"}}, "spec.minRuntime.preemptMinRuntime"),
    ({"minRuntime": {"reclaimMinRuntime": "-5m"}}, "spec.minRuntime.reclaimMinRuntime"),
    ({"partitionLabelValue": "a"}, "spec.partitionLabelValue"),
])
def test_a_shard_problem_names_its_field(spec: dict[str, Any], field: str) -> None:
    others = [ShardRef("older", "a", "2026-01-01T00:00:00Z")]
    problems = validate.shard_problems("new", spec, "2026-02-01T00:00:00Z", others)
    assert [p.field for p in problems] == [field]


@pytest.mark.parametrize("spec", [
    {}, {"placementStrategy": {"gpu": "spread", "cpu": "binpack"}, "plugins": {"gpupack": {"enabled": False},
                                                                               "mine": {"class": "m:C"}}},
    {"queueDepthPerAction": {"allocate": 5}, "minRuntime": {"reclaimMinRuntime": "1h30m"}},
    # Go's time.ParseDuration grammar, as KAI reads these fields: a bare 0, fractions, micro-seconds.
    {"minRuntime": {"preemptMinRuntime": "0", "reclaimMinRuntime": ".5h1.5m250µs"}},
])
def test_a_valid_shard_has_no_problem(spec: dict[str, Any]) -> None:
    assert validate.shard_problems("s", spec, "2026-01-01T00:00:00Z", []) == []


def test_of_two_shards_on_one_pool_the_older_runs() -> None:
    older, newer = ShardRef("a", "p", "2026-01-01T00:00:00Z"), ShardRef("b", "p", "2026-01-02T00:00:00Z")
    assert validate.shard_problems("a", {"partitionLabelValue": "p"}, older.created, [older, newer]) == []
    assert validate.shard_problems("b", {"partitionLabelValue": "p"}, newer.created, [older, newer])


@pytest.mark.parametrize(("spec", "field"), [
    ({"global": {"nodePoolLabelKey": "not a key!"}}, "spec.global.nodePoolLabelKey"),
    ({"scheduler": {"replicas": -1}}, "spec.scheduler.replicas"),
    ({"binder": {"service": {"image": {"pullPolicy": "Sometimes"}}}}, "spec.binder.service.image.pullPolicy"),
])
def test_a_config_problem_names_its_field(spec: dict[str, Any], field: str) -> None:
    assert [p.field for p in validate.config_problems(spec)] == [field]


def deployment(name: str, replicas: int, available: int, generation: int = 1, observed: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": observed, "availableReplicas": available, "updatedReplicas": available}}


def test_available_once_every_owned_deployment_is() -> None:
    state = status.rollout([deployment("a", 2, 2), deployment("b", 1, 0)], ["a", "b", "c"])
    assert (state.present, state.available, state.waiting) == (2, 1, ("b", "c"))
    conds = {c["type"]: c for c in status.conditions(3, [], applied=True, state=state)}
    assert conds["Deployed"]["status"] == "False" and conds["Available"]["status"] == "False"
    assert conds["Available"]["observedGeneration"] == 3
    state = status.rollout([deployment("a", 2, 2), deployment("b", 1, 1, generation=2, observed=1)], ["a", "b"])
    assert state.waiting == ("b",), "a rollout the controller has not seen yet is not available"
    ok = {c["type"]: c["status"] for c in status.conditions(3, [], applied=True,
                                                            state=status.rollout([deployment("a", 1, 1)], ["a"]))}
    assert ok == {"SpecValid": "True", "Reconciling": "False", "Deployed": "True", "Available": "True"}


def test_a_refusal_touches_only_its_own_condition() -> None:
    problem = validate.Problem("spec.plugins.x", "unknown plugin")
    wanted = status.conditions(4, [problem], applied=False, state=status.Rollout(0, 0, 0))
    assert [c["type"] for c in wanted] == ["SpecValid"]
    assert "spec.plugins.x" in wanted[0]["message"]
    existing = [{"type": "Available", "status": "True", "reason": "available", "message": "m",
                 "observedGeneration": 3, "lastTransitionTime": "t0"}]
    merged = merge_conditions(existing, wanted, "t1")
    assert merged is not None and merged[1] == existing[0]
    assert merge_conditions(merged, wanted, "t2") is None, "unchanged conditions are not written again"


def test_config_fields_the_operator_does_not_render_are_named() -> None:
    from operators.operator.unhonoured import config_fields

    spec = {"namespace": "kai-scheduler", "global": {"nodePoolLabelKey": "k", "openshift": True},
            "prometheus": {"enabled": True},
            "binder": {"replicas": 2, "volumeBindingTimeoutSeconds": 5,
                       "service": {"enabled": True, "image": {"name": "binder", "tag": "t"}, "k8sClientConfig": {}}},
            "admission": {"service": {"image": {"name": ""}}}}
    assert config_fields(spec) == ["spec.prometheus", "spec.global.openshift",
                                   "spec.binder.volumeBindingTimeoutSeconds", "spec.binder.service.k8sClientConfig",
                                   "spec.binder.service.image.name"]
    conds = status.conditions(1, [], applied=True, state=status.Rollout(0, 0, 0), unhonoured=["spec.prometheus"])
    assert conds[-1]["type"] == "FieldsNotHonoured" and "spec.prometheus" in conds[-1]["message"]


def test_the_operator_withdraws_exactly_the_conditions_it_writes() -> None:
    assert status.owned_types(config=False) == {"Reconciling", "Deployed", "Available", "SpecValid"}
    assert status.owned_types(config=True) == {"Reconciling", "Deployed", "Available", "SpecValid",
                                               "FieldsNotHonoured"}, "the shard's FieldsNotHonoured is the scheduler's"
