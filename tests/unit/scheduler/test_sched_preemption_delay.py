"""The preemption delay through the scheduler: preempt, reclaim and consolidation held for the window, free
capacity untouched, the eviction stamp and its re-arm, `kai simulate --now`, and the provisioning hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide import provisioning
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.records import parse_time
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.shell.simulate import main, run_simulation

T0 = "2025-01-01T00:00:00Z"
START = parse_time(T0)
STAMP = "kai.scheduler/last-eviction-timestamp"


def preemption(delay: str | None = "60s", *, pod_delay: str | None = None,
               annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A 2-GPU node held by a low-priority pod; a high-priority pod created at T0 needs it."""
    urgent = podgroup("urgent", priority_class="inference", created=T0, annotations=annotations)
    if delay is not None:
        urgent["spec"]["preemptionDelay"] = delay
    urgent_pod = pod("urgent-0", "urgent", gpus=2, created=T0)
    if pod_delay is not None:
        urgent_pod["metadata"]["annotations"]["kai.scheduler/preemption-delay"] = pod_delay
    return [node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES,
            podgroup("low", created="2024-12-31T00:00:00Z"), pod("low-0", "low", gpus=2, node_name="n1",
                                                               phase="Running"),
            urgent, urgent_pod]


def simulate(objs: list[dict[str, Any]], seconds_after_t0: float) -> dict[str, Any]:
    return run_simulation(objs, None, None, START + seconds_after_t0)


def test_held_during_the_window_with_the_time_left_on_the_podgroup() -> None:
    held = simulate(preemption("60s"), 15)
    assert held["evictions"] == []
    [u] = held["unschedulable"]
    assert u["podGroup"] == "urgent"
    message = ("waiting until 2025-01-01T00:01:00Z before evicting other workloads (preemption delay 1m from "
               "2025-01-01T00:00:00Z, its creation or last eviction); it may still use free resources")
    assert {"reason": "PreemptionDelay", "message": message} in u["reasons"]
    assert message in u["message"]


def test_after_the_window_it_evicts_and_stamps_its_podgroup() -> None:
    after = simulate(preemption("60s"), 61)
    assert [(e["pod"], e["action"], e["forPodGroup"]) for e in after["evictions"]] == [
        ("low-0", "preempt", "ns/urgent")]
    assert {"namespace": "ns", "podGroup": "urgent", "key": STAMP, "value": "2025-01-01T00:01:01Z"} in (
        after["annotations"])


def test_without_a_delay_nothing_changes() -> None:
    result = simulate(preemption(None), 0)
    assert [e["pod"] for e in result["evictions"]] == ["low-0"]
    assert not [a for a in result.get("annotations", []) if a["key"] == STAMP]


def test_the_stamp_re_arms_the_window() -> None:
    # Created long ago, but it evicted 20s ago: 40s to go.
    objs = preemption("60s", annotations={STAMP: "2025-01-01T01:00:00Z"})
    held = simulate(objs, 3600 + 20)
    assert held["evictions"] == []
    assert "waiting until 2025-01-01T01:01:00Z" in held["unschedulable"][0]["message"]
    assert [e["pod"] for e in simulate(objs, 3600 + 60)["evictions"]] == ["low-0"]


def test_the_pods_annotation_applies_when_the_podgroup_has_none() -> None:
    objs = preemption(None, pod_delay="2m")
    assert simulate(objs, 100)["evictions"] == []
    assert [e["pod"] for e in simulate(objs, 120)["evictions"]] == ["low-0"]


def test_free_capacity_is_used_at_once() -> None:
    objs = preemption("10m")
    objs[0] = node("n1", gpus=4)
    result = simulate(objs, 1)
    assert [b["pod"] for b in result["binds"]] == ["urgent-0"] and result["evictions"] == []


def test_reclaim_is_held_too() -> None:
    objs: list[dict[str, Any]] = [node("n1", gpus=4), queue("qa", gpu=(2, -1, 1)), queue("qb", gpu=(2, -1, 1)),
                                  *PRIORITY_CLASSES]
    for i in range(4):
        objs += [podgroup(f"a{i}", "qa", created="2024-12-31T00:00:00Z"),
                 pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n1", phase="Running")]
    b = podgroup("b", "qb", created=T0)
    b["spec"]["preemptionDelay"] = "30s"
    objs += [b, pod("b-0", "b", gpus=2, created=T0)]
    assert simulate(objs, 10)["evictions"] == []
    after = simulate(objs, 30)
    assert {e["action"] for e in after["evictions"]} == {"reclaim"} and len(after["evictions"]) == 2


def test_an_evicted_podgroup_with_a_delay_is_stamped_too() -> None:
    objs = preemption(None)
    [low] = [o for o in objs if o["kind"] == "PodGroup" and o["metadata"]["name"] == "low"]
    low["spec"]["preemptionDelay"] = "5m"  # the victim
    result = simulate(objs, 0)
    assert [e["pod"] for e in result["evictions"]] == ["low-0"]
    assert [(a["podGroup"], a["value"]) for a in result["annotations"] if a["key"] == STAMP] == [
        ("low", "2025-01-01T00:00:00Z")]


def test_kai_simulate_now_shows_the_hold_then_the_eviction(tmp_path: Path, capsys: Any) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(preemption("60s")))
    assert main(["-f", str(f), "-o", "json", "--now", "2025-01-01T00:00:30Z"]) == 0
    held = json.loads(capsys.readouterr().out)
    assert held["evictions"] == [] and "waiting until 2025-01-01T00:01:00Z" in held["unschedulable"][0]["message"]
    assert main(["-f", str(f), "-o", "json", "--now", "2025-01-01T00:01:00Z"]) == 0
    assert [e["pod"] for e in json.loads(capsys.readouterr().out)["evictions"]] == ["low-0"]


def test_a_gang_waiting_for_provisioning_evicts_once_its_delay_passed() -> None:
    opt_in = {"kai.scheduler/provisioning-class": "check-capacity.autoscaling.x-k8s.io"}
    objs: list[dict[str, Any]] = [node("n1", gpus=8), queue("qa", gpu=(4, -1, 1)), queue("qb", gpu=(4, -1, 1)),
                                  *PRIORITY_CLASSES]
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa", created="2024-12-31T00:00:00Z"),
                 pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n1", phase="Running")]
    b = podgroup("b", "qb", 2, created=T0, annotations=opt_in)
    b["spec"]["preemptionDelay"] = "1m"
    objs += [b, pod("b-0", "b", gpus=2, created=T0), pod("b-1", "b", gpus=2, created=T0)]

    def run(now: float) -> tuple[Any, Any]:
        snapshot = snapshot_from_objects(objs)
        decisions = run_cycle(snapshot, SchedulerConfig(), now)
        plan = provisioning.plan(snapshot, decisions, [], now)
        return plan, provisioning.apply(decisions, plan, "default")

    plan, held = run(START + 10)  # within the delay: no eviction is even tried
    assert "ns/b" in plan.holds and not held.evictions
    plan, after = run(START + 60)  # the delay passed: evictions for it go ahead while the request is pending
    assert plan.holds["ns/b"].may_evict and len(plan.create) == 1
    assert [e.for_pod_group for e in after.evictions] == ["ns/b"] * 4
    assert [a.pod_group for a in after.annotations if a.key == STAMP] == ["b"]
    (u,) = [u for u in after.unschedulable if u.pod_group == "b"]
    assert "its preemption delay has passed, so it may evict other workloads meanwhile" in u.message


def test_consolidation_is_held_too() -> None:
    later = "2025-01-01T01:00:00Z"
    p3 = podgroup("p3", "q", created=later)
    p3["spec"]["preemptionDelay"] = "90s"
    objs = [node("n0", gpus=4), node("n1", gpus=4), queue("q", gpu=(0, -1, 1)), *PRIORITY_CLASSES,
            podgroup("a", "q"), pod("a-0", "a", gpus=2, node_name="n0", phase="Running"),
            podgroup("b", "q"), pod("b-0", "b", gpus=2, node_name="n1", phase="Running"),
            p3, pod("p3-0", "p3", gpus=3, created=later)]
    held = simulate(objs, 3600 + 30)
    assert held["evictions"] == [] and "waiting until 2025-01-01T01:01:30Z" in held["unschedulable"][0]["message"]
    moved = simulate(objs, 3600 + 90)
    assert [e["action"] for e in moved["evictions"]] == ["consolidation"]


def test_simulated_cycles_carry_the_stamp_into_the_next_cycle() -> None:
    from operators.scheduler.decide.simulation import apply_decisions

    snapshot = snapshot_from_objects(preemption("60s"))
    decisions = run_cycle(snapshot, SchedulerConfig(), START + 61)
    after = apply_decisions(snapshot, decisions)
    [urgent] = [g for g in after.podgroups if g.name == "urgent"]
    assert urgent.last_eviction == START + 61
