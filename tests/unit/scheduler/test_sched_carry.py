"""The carry between cycles (decide/session/carry.py): a carried cycle decides exactly what a fresh one does."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from sched_builders import gang, node, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
from operators.scheduler.decide.decisions import Decisions, Unschedulable
from operators.scheduler.decide.session import carry as carry_module
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects

NOW = 1e9


def text(d: Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def cluster(nodes: int) -> Snapshot:
    # A gang too big for any node stays pending: explained every cycle, its text counting the nodes.
    objs = [*(node(f"n{i}", gpus=2) for i in range(nodes)), queue("q"), *gang("big", 2, gpus=3),
            *gang("fits", 1, gpus=1)]
    return snapshot_from_objects(objs)


def test_an_unchanged_job_reuses_its_explanation_and_decides_the_same() -> None:
    config = SchedulerConfig()
    snapshot = cluster(2)
    first, carry = run_carried_cycle(snapshot, config, NOW, None)
    again, carry2 = run_carried_cycle(snapshot, config, NOW, carry)
    assert carry2.reused == 1  # the pending gang's Unschedulable, taken from the first cycle
    [u] = again.unschedulable
    assert u is carry.explanations[("ns", "big")][1]
    assert text(again) == text(run_cycle(snapshot, config, NOW)) == text(first)


def test_changed_inputs_are_explained_afresh() -> None:
    config = SchedulerConfig()
    _, carry = run_carried_cycle(cluster(2), config, NOW, None)
    grown = cluster(3)  # new records, and a fit summary over three nodes
    # The same records but one pending pod re-parsed (an update): a new object, so no reuse either.
    pods = tuple(replace(p) if p.name == "big-0" else p for p in cluster(2).pods)
    for snapshot in (grown, replace(cluster(2), pods=pods)):
        carried, after = run_carried_cycle(snapshot, config, NOW, carry)
        assert after.reused == 0
        assert text(carried) == text(run_cycle(snapshot, config, NOW))


def test_another_config_starts_afresh() -> None:
    snapshot = cluster(2)
    _, carry = run_carried_cycle(snapshot, SchedulerConfig(), NOW, None)
    other = SchedulerConfig(partition="pool-a")
    carried, after = run_carried_cycle(snapshot, other, NOW, carry)
    assert after.reused == 0
    assert text(carried) == text(run_cycle(snapshot, other, NOW))


def test_a_stale_carry_would_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: a carry reused whatever its inputs gives the old text."""
    config = SchedulerConfig()
    _, carry = run_carried_cycle(cluster(2), config, NOW, None)

    def stale(self: carry_module.Carrying, key: Any, *args: Any) -> tuple[Unschedulable | None, Any]:
        old = self._old_explanations.get(key)
        return (old[1], old[0]) if old is not None else (None, (args[0], (), (), None, False))

    monkeypatch.setattr(carry_module.Carrying, "explanation", stale)
    grown = cluster(3)
    carried, _ = run_carried_cycle(grown, config, NOW, carry)
    assert text(carried) != text(run_cycle(grown, config, NOW))
