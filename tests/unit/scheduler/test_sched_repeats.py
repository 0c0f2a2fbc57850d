"""Allocate's repeated failures (decide/session/repeats.py): replayed, not run, and deciding what a fresh cycle does."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from sched_builders import PRIORITY_CLASSES, gang, node, pod, podgroup, queue

from operators.scheduler.decide.actions import common
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects

NOW = 1e9
EARLY = "2024-01-01T00:00:00Z"  # before the builders' default creation time: tried first
LATER = "2024-01-01T00:00:01Z"  # tried second


def text(d: Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def stuck(nodes: int = 2, *, fits: bool = False) -> Snapshot:
    """Jobs too big for any node (pending every cycle), and with `fits` one that binds, tried between them."""
    objs = [*(node(f"n{i}", gpus=2) for i in range(nodes)), queue("q"), *gang("big", 2, gpus=3),
            podgroup("wide", created=EARLY), pod("wide-0", "wide", gpus=4, created=EARLY)]
    if fits:
        objs += [podgroup("fits", created=LATER), pod("fits-0", "fits", gpus=1, created=LATER)]
    return snapshot_from_objects(objs)


def remade(snapshot: Snapshot) -> Snapshot:
    """Every record an equal new object (as a relist or a re-parse gives them)."""
    return replace(snapshot, nodes=tuple(replace(n) for n in snapshot.nodes),
                   pods=tuple(replace(p) for p in snapshot.pods))


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs allocate actually tried (its attempts, not the replays)."""
    tried: list[str] = []
    real = common.allocate_job

    def counting(session, stmt, job, **kwargs):  # type: ignore[no-untyped-def]
        tried.append(job.name)
        return real(session, stmt, job, **kwargs)

    monkeypatch.setattr("operators.scheduler.decide.actions.allocate.allocate_job", counting)
    return tried


def test_a_repeated_failure_is_replayed_not_tried(attempts: list[str]) -> None:
    config = SchedulerConfig()
    first, carry = run_carried_cycle(stuck(), config, NOW, None)
    assert sorted(attempts) == ["big", "wide"] and carry.replayed == 0
    attempts.clear()
    snapshot = remade(stuck())  # equal records, new objects; a later `now`
    again, after = run_carried_cycle(snapshot, config, NOW + 10, carry)
    assert attempts == [] and after.replayed == 2  # the whole action replayed
    assert text(again) == text(run_cycle(snapshot, config, NOW + 10)) == text(first)
    # Carried on: the next equal cycle replays again.
    _, third = run_carried_cycle(snapshot, config, NOW + 20, after)
    assert third.replayed == 2


def test_failures_before_the_first_commit_are_replayed(attempts: list[str]) -> None:
    config = SchedulerConfig()
    snapshot = stuck(fits=True)
    _, carry = run_carried_cycle(snapshot, config, NOW, None)
    attempts.clear()
    again, after = run_carried_cycle(snapshot, config, NOW + 10, carry)
    # `wide` failed on the state at open: replayed; `fits` binds (a commit); `big`, after it, is tried.
    assert after.replayed == 1 and "wide" not in attempts and {"fits", "big"} <= set(attempts)
    assert [b.pod for b in again.binds] == ["fits-0"]
    assert text(again) == text(run_cycle(snapshot, config, NOW + 10))


@pytest.mark.parametrize("change", ["node added", "pod gone", "config"])
def test_a_changed_input_forces_the_attempt(attempts: list[str], change: str) -> None:
    config = SchedulerConfig()
    _, carry = run_carried_cycle(stuck(), config, NOW, None)
    attempts.clear()
    snapshot = stuck()
    if change == "node added":  # a node where `wide` fits
        snapshot = replace(snapshot, nodes=(*snapshot.nodes, *snapshot_from_objects([node("n9", gpus=4)]).nodes))
    elif change == "pod gone":
        snapshot = replace(snapshot, pods=tuple(p for p in snapshot.pods if p.name != "big-1"))
    else:
        config = SchedulerConfig(partition="pool-a")
    again, after = run_carried_cycle(snapshot, config, NOW + 10, carry)
    assert after.replayed == 0 and "wide" in attempts
    assert text(again) == text(run_cycle(snapshot, config, NOW + 10))
    if change == "node added":
        assert [b.pod for b in again.binds] == ["wide-0"]


def test_a_wrong_replay_would_show() -> None:
    """The comparison above can fail: replaying on a changed snapshot (its check defeated) keeps `wide` pending."""
    config = SchedulerConfig()
    _, carry = run_carried_cycle(stuck(), config, NOW, None)
    grown = stuck()
    grown = replace(grown, nodes=(*grown.nodes, *snapshot_from_objects([node("n9", gpus=4)]).nodes))
    assert carry.repeats is not None
    lying = replace(carry, repeats=replace(carry.repeats, snapshot=grown))
    carried, _ = run_carried_cycle(grown, config, NOW + 10, lying)
    assert text(carried) != text(run_cycle(grown, config, NOW + 10))


def guarded(started: str) -> Snapshot:
    """A running train job (last started at `started`) and a pending inference job that can only preempt it."""
    notes = {"kai.scheduler/last-start-timestamp": started}
    return snapshot_from_objects([
        *PRIORITY_CLASSES, node("n0", gpus=2), queue("q"),
        podgroup("low", annotations=notes), pod("low-0", "low", gpus=2, node_name="n0", phase="Running"),
        podgroup("high", priority_class="inference"), pod("high-0", "high", gpus=2)])


def test_a_search_that_repeats_is_replayed_until_a_protection_ends() -> None:
    config = SchedulerConfig(default_preempt_min_runtime=100.0)
    start = 1e9 - 50  # protected by its minimum runtime until 1e9 + 50
    snapshot = guarded("2001-09-09T01:45:50Z")  # `start`
    first, carry = run_carried_cycle(snapshot, config, NOW, None)
    assert not first.evictions and carry.repeats is not None and "preempt" in dict(carry.repeats.runs)
    again, after = run_carried_cycle(remade(snapshot), config, NOW + 10, carry)
    assert after.replayed_actions >= 1  # preempt (and any other search that ran) reproduced, not run
    assert text(again) == text(run_cycle(snapshot, config, NOW + 10)) == text(first)
    # Past the deadline the answer changes: preempt runs (a replay never evicts), and evicts.
    late, _ = run_carried_cycle(snapshot, config, start + 101, after)
    assert [e.pod for e in late.evictions] == ["low-0"]
    assert text(late) == text(run_cycle(snapshot, config, start + 101))
