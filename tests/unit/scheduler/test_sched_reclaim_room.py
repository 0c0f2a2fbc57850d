"""The `Room` short cut on reclaim's and preempt's scenarios (actions/solver.py): a scenario whose evictions leave
the nodes fewer pod slots than the job has pods is not simulated (the job is placed alone, so no order of placing
it can succeed). It must never skip a scenario that places the job, and must change no decision."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, preemptible_fill, queue

from operators.scheduler.decide.actions import solver as solver_module
from operators.scheduler.decide.actions.solver import Solver
from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"


def contested(seed: int) -> list[dict[str, Any]]:
    """Queue qa (quota 2 GPUs) fills nodes of 8 GPUs with preemptible pods of 1-4 GPUs; queue qb (quota the rest)
    asks for gangs of 1-4 pods of 2-8 GPUs: some reclaim places, some no eviction can (more pods than nodes)."""
    rng = random.Random(seed)
    n_nodes = rng.randint(2, 4)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("qa", gpu=(2, -1, 1)),
                                  queue("qb", gpu=(8 * n_nodes - 2, -1, 1))]
    objs += [node(f"n{i}", gpus=8, cpu=str(rng.choice([16, 64]))) for i in range(n_nodes)]
    objs += preemptible_fill(rng, "qa", n_nodes, 5, "a")
    for j in range(rng.randint(1, 3)):
        name, size = f"b{j}", rng.choice([1, 2, 3, 4, 5])
        gpus = rng.choice([2, 4, 8])
        created = f"2025-01-01T01:{j:02d}:00Z"
        objs.append(podgroup(name, "qb", size, created=created))
        objs += [pod(f"{name}-{k}", name, gpus=gpus, created=created) for k in range(size)]
    return objs


def decided(objs: list[dict[str, Any]]) -> tuple[Any, ...]:
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    return d.to_dict(), sorted(d.counters.items())


def consolidation_only(self: Solver, job: Any, tasks: Any, _room_for: Any = Solver._room_for) -> Any:
    """The short cut as before: consolidation's searches only."""
    return _room_for(self, job, tasks) if self.action == "consolidation" else None


def test_room_changes_no_reclaim_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decisions, explanations and counters equal those of simulating every scenario, on clusters where the short
    cut refuses scenarios and where reclaim evicts."""
    fired = [0]
    placing = [0]
    real_apply, real_allocate = Solver._apply, solver_module.allocate_job

    def spy_allocate(*args: Any, **kwargs: Any) -> bool:
        placing[0] += 1
        return real_allocate(*args, **kwargs)

    def spy_apply(self: Solver, *args: Any) -> bool:
        before = placing[0]
        out = real_apply(self, *args)
        fired[0] += self.action == "reclaim" and placing[0] == before  # refused without placing: the short cut
        return out

    evicted = 0
    for seed in range(40):
        objs = contested(seed)
        with monkeypatch.context() as m:
            m.setattr(solver_module, "allocate_job", spy_allocate)
            m.setattr(Solver, "_apply", spy_apply)
            fast = decided(objs)
        with monkeypatch.context() as m:
            m.setattr(Solver, "_room_for", consolidation_only)
            slow = decided(objs)
        assert fast == slow, seed
        evicted += bool(fast[0]["evictions"])
    assert fired[0] and evicted


def test_room_counts_the_slots_the_evictions_free() -> None:
    # qb's gang (2 pods of 4 GPUs) fits n0 only once a0-0 (8 GPUs) is evicted: before the eviction the nodes have no
    # slot for it, after it exactly two (a bound read before the evictions, or refusing at equality, keeps b
    # pending). A single pod would not do: its scenarios are not bounded.
    objs = [node("n0", gpus=8), queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(8, -1, 1)), *PRIORITY_CLASSES,
            podgroup("a0", "qa", priority_class="build-preemptible"),
            pod("a0-0", "a0", gpus=8, node_name="n0", phase="Running"),
            podgroup("b", "qb", 2, created=LATER), *(pod(f"b-{k}", "b", gpus=4, created=LATER) for k in range(2))]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    assert [(e.pod, e.action) for e in d.evictions] == [("a0-0", "reclaim")]
    assert {p.pod: p.node for p in d.pipelined} == {"b-0": "n0", "b-1": "n0"}


def test_room_counts_the_slots_of_a_gang_spread_over_the_evicted_nodes() -> None:
    # b's two pods (4 GPUs each) need both nodes' evictions: n0 and n1 each free 4 GPUs (one slot each), so after
    # the whole-prefix scenario the nodes have exactly two slots (a bound counting one touched node, or none of
    # them, keeps b pending).
    objs = [node("n0", gpus=8), node("n1", gpus=8), queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(16, -1, 1)),
            *PRIORITY_CLASSES,
            podgroup("keep0", "qa", priority_class="build", created="2025-01-01T00:00:01Z"),
            pod("keep0-0", "keep0", gpus=4, node_name="n0", phase="Running"),
            podgroup("keep1", "qa", priority_class="build", created="2025-01-01T00:00:02Z"),
            pod("keep1-0", "keep1", gpus=4, node_name="n1", phase="Running"),
            podgroup("a0", "qa", priority_class="build-preemptible", created="2025-01-01T00:00:03Z"),
            pod("a0-0", "a0", gpus=4, node_name="n0", phase="Running"),
            podgroup("a1", "qa", priority_class="build-preemptible", created="2025-01-01T00:00:04Z"),
            pod("a1-0", "a1", gpus=4, node_name="n1", phase="Running"),
            podgroup("b", "qb", 2, created=LATER), *(pod(f"b-{k}", "b", gpus=4, created=LATER) for k in range(2))]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    assert sorted((e.pod, e.action) for e in d.evictions) == [("a0-0", "reclaim"), ("a1-0", "reclaim")]
    assert sorted(p.node for p in d.pipelined if p.pod.startswith("b-")) == ["n0", "n1"]
