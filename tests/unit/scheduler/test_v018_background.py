"""backgroundpods (KAI v0.18, on by default): background pods are out of planning and fair share for the session;
at close they go back where they still fit, and the rest are evicted for real."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.framework import parse_plugin_settings
from operators.scheduler.decide.plugins.backgroundpods.selector import parse_selector

BG = {"kai.scheduler/background": "true"}
LATER = "2025-01-01T01:00:00Z"


def background(name: str, gpus: int = 1, node_name: str = "n1", queue_name: str = "maint",
               labels: dict[str, str] | None = None, namespace: str = "ns") -> list[dict[str, Any]]:
    return [podgroup(name, queue_name, namespace=namespace),
            pod(f"{name}-0", name, gpus=gpus, node_name=node_name, phase="Running", labels=labels or BG,
                namespace=namespace)]


def base(gpus: int = 8) -> list[dict[str, Any]]:
    return [node("n1", gpus=gpus), queue("maint", gpu=(0, -1, 0)), queue("team", gpu=(8, -1, 1)),
            *PRIORITY_CLASSES]


def running(name: str, gpus: int, queue_name: str = "team") -> list[dict[str, Any]]:
    return [podgroup(name, queue_name), pod(f"{name}-0", name, gpus=gpus, node_name="n1", phase="Running")]


def pending(name: str, gpus: int, queue_name: str = "team") -> list[dict[str, Any]]:
    return [podgroup(name, queue_name, created=LATER), pod(f"{name}-0", name, gpus=gpus, created=LATER)]


def test_background_pod_yields_its_gpu_to_a_queue_pod_in_one_cycle() -> None:
    # 7 GPUs busy, a background pod holds the 8th; a team pod needs one GPU.
    d = cycle([*base(), *running("busy", 7), *background("bg"), *pending("job", 1)])
    assert [(e.pod, e.action, e.message) for e in d.evictions] == [
        ("bg-0", "backgroundpods", "Evicted to make room for a workload on this node")]
    assert e_for(d) == {"bg-0": ""}
    assert [(p.pod, p.node) for p in d.pipelined] == [("job-0", "n1")]
    assert not d.binds


def e_for(d: Any) -> dict[str, str]:
    return {e.pod: e.for_pod_group for e in d.evictions}


def test_background_pod_stays_where_it_still_fits() -> None:
    # Room elsewhere on the node: the team pod binds on idle GPUs and the background pod is not disturbed.
    d = cycle([*base(), *running("busy", 5), *background("bg"), *pending("job", 1)])
    assert not d.evictions
    assert [b.pod for b in d.binds] == ["job-0"]


def test_nothing_pending_leaves_background_pods_alone() -> None:
    d = cycle([*base(), *background("bg", gpus=8)])
    assert not d.evictions and not d.binds and not d.pipelined
    assert {q.name: q.allocated["gpu"] for q in d.queues}["maint"] == 8  # its place back, so its allocation


def test_only_the_background_pods_that_no_longer_fit_are_evicted_in_name_order() -> None:
    # Three background pods of one GPU each fill the node with 5 busy GPUs; the team job takes two of the three
    # released GPUs, so one background pod fits back: the first by namespace / name.
    d = cycle([*base(), *running("busy", 5), *background("b-a"), *background("b-b"), *background("b-c"),
               *pending("job", 2)])
    assert sorted(e.pod for e in d.evictions) == ["b-b-0", "b-c-0"]
    assert [p.pod for p in d.pipelined] == ["job-0"]


def test_background_pods_are_left_out_of_fair_share() -> None:
    # maint (quota 0, weight 0) runs 4 background GPUs; a preemptible team job wanting 8 GPUs gets them all:
    # neither reclaim fairness nor the fair share stand for the background work.
    d = cycle([node("n1", gpus=8), queue("maint", gpu=(0, -1, 1)), queue("team", gpu=(0, -1, 1)),
               *PRIORITY_CLASSES, *[o for i in range(4) for o in background(f"bg{i}")],
               podgroup("job", "team", 2, created=LATER),
               pod("job-0", "job", gpus=4, created=LATER), pod("job-1", "job", gpus=4, created=LATER)])
    assert sorted(e.pod for e in d.evictions) == [f"bg{i}-0" for i in range(4)]
    assert {e.action for e in d.evictions} == {"backgroundpods"}
    assert sorted(p.pod for p in d.pipelined) == ["job-0", "job-1"]
    shares = {q.name: q for q in d.queues}
    assert shares["maint"].fair_share["gpu"] == 0 and shares["team"].fair_share["gpu"] == 8


def test_a_pod_without_the_label_is_an_ordinary_victim_only() -> None:
    # The same layout without the label: the team pod waits (no quota to reclaim with, same priority).
    d = cycle([*base(), *running("busy", 7), *background("bg", labels={"x": "y"}), *pending("job", 1)],
              SchedulerConfig(actions=("allocate",)))
    assert not d.evictions and not d.pipelined


@pytest.mark.parametrize(("busy", "evicted"), [(6, []), (7, ["bg-0"])])
def test_fractional_background_pod(busy: int, evicted: list[str]) -> None:
    # Half a GPU in the background: with an idle GPU left the team's half binds there and the background pod
    # stays; on a full node the team's half is pipelined onto the released device and the background pod goes.
    objs = [*base(), *running("busy", busy), podgroup("bg", "maint"),
            pod("bg-0", "bg", fraction="0.5", node_name="n1", phase="Running", labels=BG, gpu_group="g1"),
            podgroup("job", "team", created=LATER), pod("job-0", "job", fraction="0.5", created=LATER)]
    d = cycle(objs)
    assert [e.pod for e in d.evictions] == evicted
    assert [b.pod for b in d.binds] + [p.pod for p in d.pipelined] == ["job-0"]


def test_disabled_plugin_keeps_background_pods_as_ordinary_pods() -> None:
    config = SchedulerConfig(plugins=parse_plugin_settings({"backgroundpods": {"enabled": False}}))
    d = cycle([*base(), *running("busy", 7), *background("bg"), *pending("job", 1)], config)
    assert [(e.pod, e.action) for e in d.evictions] == [("bg-0", "reclaim")]  # an ordinary victim, by reclaim


def test_namespaces_and_selector_arguments() -> None:
    settings = parse_plugin_settings({"backgroundpods": {"arguments": {
        "labelSelector": "role in (maintenance),tier!=gold", "namespaces": "ops, infra"}}})
    config = SchedulerConfig(plugins=settings, actions=("allocate",))
    role = {"role": "maintenance"}
    objs = [*base(), *running("busy", 6), *background("bg", labels=role, namespace="ops"),
            *background("other", labels=role, namespace="ns"), *pending("job", 1)]
    d = cycle(objs, config)
    assert [e.pod for e in d.evictions] == ["bg-0"]  # `other` is outside the namespaces


@pytest.mark.parametrize(("text", "labels", "match"), [
    ("kai.scheduler/background=true", BG, True),
    ("kai.scheduler/background==true", {"kai.scheduler/background": "false"}, False),
    ("a,!b", {"a": "1"}, True),
    ("a,!b", {"a": "1", "b": "2"}, False),
    ("a notin (x, y),c!=d", {"a": "z", "c": "e"}, True),
    ("", {}, True),
])
def test_selector_grammar(text: str, labels: dict[str, str], match: bool) -> None:
    assert parse_selector(text).matches(labels) is match


def test_bad_selector_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="label selector"):
        parse_plugin_settings({"backgroundpods": {"arguments": {"labelSelector": "a=(b"}}})


@pytest.mark.parametrize(("text", "labels", "evicted"), [
    # No key required: every pod without `keep` is a background pod, `busy` too; in name order bg-0 goes back to
    # its GPU and busy-0 no longer fits.
    ("!keep", {"app": "x"}, ["busy-0"]),
    ("tier!=gold,role=maintenance", {"role": "maintenance"}, ["bg-0"]),  # the key required second
    ("role=maintenance", {"app": "x"}, []),  # no pod carries the required key: nothing is looked at per job
])
def test_selector_without_or_with_a_required_key(text: str, labels: dict[str, str], evicted: list[str]) -> None:
    settings = parse_plugin_settings({"backgroundpods": {"arguments": {"labelSelector": text}}})
    config = SchedulerConfig(plugins=settings, actions=("allocate",))
    d = cycle([*base(), *running("busy", 7), *background("bg", labels=labels), *pending("job", 1)], config)
    assert [e.pod for e in d.evictions] == evicted
