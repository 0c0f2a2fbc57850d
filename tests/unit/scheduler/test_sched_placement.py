"""Predicates, node order (binpack / spread) and fractional GPU placement."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import bound, cycle, gang, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig


def one(name: str, **kw: Any) -> list[dict[str, Any]]:
    return [podgroup(name), pod(name, name, **kw)]


def affinity(terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                          {"nodeSelectorTerms": terms}}}}


NODES = [node("a", labels={"zone": "z1", "size": "4"}), node("b", labels={"zone": "z2", "size": "8"}),
         node("c", labels={"zone": "z3"})]


@pytest.mark.parametrize(("spec", "expected"), [
    ({"nodeSelector": {"zone": "z2"}}, {"b"}),
    (affinity([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z3"]}]}]), {"c"}),
    (affinity([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1", "z2"]}]}]), {"c"}),
    (affinity([{"matchExpressions": [{"key": "size", "operator": "Exists"}]},
               {"matchExpressions": [{"key": "nope", "operator": "Exists"}]}]), {"a"}),
    (affinity([{"matchExpressions": [{"key": "size", "operator": "DoesNotExist"}]}]), {"c"}),
    (affinity([{"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["5"]}]}]), {"b"}),
    (affinity([{"matchExpressions": [{"key": "size", "operator": "Lt", "values": ["5"]}]}]), {"a"}),
    (affinity([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]), {"c"}),
    (affinity([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a", "b"]}]}]), {"c"}),
])
def test_node_affinity_and_selector(spec: dict[str, Any], expected: set[str]) -> None:
    d = cycle([*NODES, queue("q"), *one("p", spec_extra=spec)])
    assert set(bound(d).values()) == expected


def test_unsatisfiable_selector_explained() -> None:
    d = cycle([*NODES, queue("q"), *one("p", spec_extra={"nodeSelector": {"zone": "mars"}})])
    assert d.unschedulable[0].pod_messages["p"] == (
        "no nodes with enough resources were found: 3 node(s) didn't match Pod's node affinity/selector.")


TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize(("tolerations", "fits"), [
    ([], False),
    ([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}], True),
    ([{"key": "gpu", "operator": "Exists"}], True),
    ([{"operator": "Exists"}], True),
    ([{"key": "gpu", "operator": "Equal", "value": "false"}], False),
    ([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], False),
])
def test_taints_and_tolerations(tolerations: list[dict[str, str]], fits: bool) -> None:
    d = cycle([node("t", taints=[TAINT]), queue("q"), *one("p", spec_extra={"tolerations": tolerations})])
    assert (d.binds != []) is fits
    if not fits:
        assert "1 node(s) had untolerated taint {gpu: true}" in d.unschedulable[0].pod_messages["p"]


def test_prefer_no_schedule_taint_is_ignored() -> None:
    d = cycle([node("t", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]), queue("q"),
               *one("p")])
    assert bound(d) == {"p": "t"}


def test_not_ready_and_unschedulable_nodes() -> None:
    d = cycle([node("down", ready=False), node("cordoned", unschedulable=True), queue("q"), *one("p")])
    assert d.binds == []
    assert d.unschedulable[0].pod_messages["p"] == (
        "no nodes with enough resources were found: 1 node has NotReady condition. \n"
        "1 node(s) were unschedulable.")


def test_max_pods() -> None:
    d = cycle([node("full", pods=1), queue("q"), podgroup("r"),
               pod("r0", "r", node_name="full", phase="Running"), *one("p")])
    assert d.binds == []
    assert "1 node(s) pod number exceeded" in d.unschedulable[0].pod_messages["p"]


def test_host_ports() -> None:
    ports = {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
    objs = [node("a"), node("b"), queue("q"), podgroup("r"),
            pod("r0", "r", node_name="a", phase="Running", spec_extra=ports), *one("p", spec_extra=ports)]
    assert bound(cycle(objs)) == {"p": "b"}
    objs = [node("a"), queue("q"), podgroup("r"), pod("r0", "r", node_name="a", phase="Running", spec_extra=ports),
            *one("p", spec_extra=ports)]
    assert "1 node(s) didn't have free ports for the requested pod ports" in cycle(objs).unschedulable[0].message


def pod_aff(kind: str, labels: dict[str, str], key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}}


def test_inter_pod_affinity() -> None:
    objs = [node("a"), node("b"), queue("q"), podgroup("db"),
            pod("db0", "db", node_name="b", phase="Running", labels={"app": "db"}),
            *one("web", spec_extra=pod_aff("podAffinity", {"app": "db"}))]
    assert bound(cycle(objs)) == {"web": "b"}


def test_inter_pod_affinity_unsatisfied() -> None:
    objs = [node("a"), queue("q"), *one("web", spec_extra=pod_aff("podAffinity", {"app": "db"}))]
    assert "1 node(s) didn't match pod affinity rules" in cycle(objs).unschedulable[0].message


def test_inter_pod_anti_affinity_spreads_a_gang() -> None:
    spec = pod_aff("podAntiAffinity", {"app": "w"})
    objs = [node("a"), node("b"), queue("q"), *gang("g", 2, labels={"app": "w"}, spec_extra=spec)]
    assert sorted(bound(cycle(objs)).values()) == ["a", "b"]
    objs = [node("a"), queue("q"), *gang("g", 2, labels={"app": "w"}, spec_extra=spec)]
    d = cycle(objs)
    assert d.binds == [] and "node(s) didn't match pod anti-affinity rules" in d.unschedulable[0].message


def test_existing_pods_anti_affinity() -> None:
    objs = [node("a"), node("b"), queue("q"), podgroup("x"),
            pod("loner", "x", node_name="a", phase="Running", spec_extra=pod_aff("podAntiAffinity", {"app": "w"})),
            *one("p", labels={"app": "w"})]
    assert bound(cycle(objs)) == {"p": "b"}


def test_missing_configmap() -> None:
    vol = {"volumes": [{"name": "v", "configMap": {"name": "settings"}}]}
    objs = [node("a"), queue("q"), *one("p", spec_extra=vol)]
    assert "1 Missing required configmaps: [settings]" in cycle(objs).unschedulable[0].message
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "ns"}}
    assert bound(cycle([*objs, cm])) == {"p": "a"}


def test_binpack_prefers_fullest_node() -> None:
    objs = [node("a", gpus=8), node("b", gpus=8), queue("q"), podgroup("r"),
            pod("r0", "r", gpus=6, node_name="b", phase="Running"), *one("p", gpus=1)]
    assert bound(cycle(objs)) == {"p": "b"}


def test_spread_prefers_emptiest_node() -> None:
    objs = [node("a", gpus=8), node("b", gpus=8), queue("q"), podgroup("r"),
            pod("r0", "r", gpus=2, node_name="a", phase="Running"), *one("p", gpus=1)]
    assert bound(cycle(objs, SchedulerConfig(gpu_placement="spread"))) == {"p": "b"}
    assert bound(cycle(objs)) == {"p": "a"}


def test_cpu_strategy_is_separate() -> None:
    objs = [node("a", gpus=0, cpu="8"), node("b", gpus=0, cpu="8"), queue("q"), podgroup("r"),
            pod("r0", "r", cpu="4", node_name="a", phase="Running"), *gang("g", 2, cpu="1")]
    assert sorted(bound(cycle(objs)).values()) == ["a", "a"]
    spread = SchedulerConfig(cpu_placement="spread")
    assert sorted(bound(cycle(objs, spread)).values()) == ["b", "b"]  # b stays emptier after the first pod


def test_cpu_task_prefers_cpu_only_node() -> None:
    objs = [node("a-gpu", gpus=8, cpu="4"), node("z-cpu", gpus=0, cpu="64"), queue("q"), *one("p")]
    assert bound(cycle(objs)) == {"p": "z-cpu"}


def test_gpu_task_prefers_idle_over_releasing() -> None:
    objs = [node("a", gpus=1), node("b", gpus=1), queue("q"), podgroup("old"),
            pod("leaving", "old", gpus=1, node_name="a", phase="Running", deleting=True), *one("p", gpus=1)]
    assert bound(cycle(objs)) == {"p": "b"}


def frac(name: str, fraction: str, **kw: Any) -> list[dict[str, Any]]:
    return one(name, fraction=fraction, **kw)


def test_two_halves_share_one_gpu() -> None:
    d = cycle([node("a", gpus=2), queue("q"), *frac("h1", "0.5"), *frac("h2", "0.5")])
    assert len(d.binds) == 2
    b1, b2 = d.binds
    assert b1.resource_type == "Fraction" and b1.gpu_portion == "0.50" and b1.gpu_count == 1
    assert b1.gpu_groups == b2.gpu_groups and len(b1.gpu_groups[0]) == 36


def test_two_sixty_percent_never_share() -> None:
    d = cycle([node("a", gpus=2), queue("q"), *frac("f1", "0.6"), *frac("f2", "0.6")])
    assert len(d.binds) == 2 and d.binds[0].gpu_groups != d.binds[1].gpu_groups
    d = cycle([node("a", gpus=1), queue("q"), *frac("f1", "0.6"), *frac("f2", "0.6")])
    assert len(d.binds) == 1
    assert "1 node(s) didn't have enough resources: GPUs" in d.unschedulable[0].message


def test_fraction_joins_running_shared_gpu() -> None:
    objs = [node("a", gpus=2), node("b", gpus=2), queue("q"), podgroup("r"),
            pod("r0", "r", fraction="0.5", node_name="b", phase="Running", gpu_group="grp-1"), *frac("h", "0.5")]
    d = cycle(objs)
    assert [(b.node, b.gpu_groups) for b in d.binds] == [("b", ("grp-1",))]


def test_gpu_memory_converted_with_node_memory() -> None:
    objs = [node("a", gpus=1, gpu_memory=40000), queue("q"), *one("m1", gpu_memory="10000"),
            *one("m2", gpu_memory="30000"), *one("m3", gpu_memory="100")]
    d = cycle(objs)
    portions = {b.pod: b.gpu_portion for b in d.binds}
    assert portions == {"m1": "0.25", "m2": "0.75"}  # 0.25 + 0.75 fill the device; m3 does not fit
    assert len({b.gpu_groups for b in d.binds}) == 1


def test_gpu_memory_needs_known_node_memory() -> None:
    d = cycle([node("a", gpus=1, gpu_memory=None), queue("q"), *one("m", gpu_memory="1000")])
    assert d.binds == []
    assert "gpu memory count on the node was not synced yet, task: <ns/m>, node: <a>" in d.unschedulable[0].message


def test_gpu_memory_larger_than_device() -> None:
    d = cycle([node("a", gpus=1, gpu_memory=16000), queue("q"), *one("m", gpu_memory="20000")])
    assert "1 node(s) didn't have enough resources: GPU memory" in d.unschedulable[0].message


def test_multi_device_fraction() -> None:
    d = cycle([node("a", gpus=2), queue("q"), *one("f", fraction="0.5", devices=2)])
    [b] = d.binds
    assert b.gpu_count == 2 and len(set(b.gpu_groups)) == 2


def test_fraction_prefers_partly_used_gpu_over_fuller_node() -> None:
    # gpusharingorder (+1000) beats nodeplacement: the shared GPU on b wins although a is fuller.
    objs = [node("a", gpus=2), node("b", gpus=8), queue("q"), podgroup("r"),
            pod("r0", "r", gpus=1, node_name="a", phase="Running"),
            pod("r1", "r", fraction="0.25", node_name="b", phase="Running", gpu_group="g-b"), *frac("f", "0.5")]
    assert [(b.node, b.gpu_groups) for b in cycle(objs).binds] == [("b", ("g-b",))]


def test_group_ids_are_deterministic() -> None:
    objs = [node("a", gpus=2), queue("q"), *frac("h1", "0.5")]
    assert cycle(objs).binds[0].gpu_groups == cycle(objs).binds[0].gpu_groups
