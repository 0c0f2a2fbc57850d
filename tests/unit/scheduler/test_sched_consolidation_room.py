"""Consolidation's `Room` short cut (actions/solver.py): a scenario whose evictions leave the nodes fewer pod slots
than the job has pods is not simulated. It must never skip a scenario that could place the job, nor change what a
failed attempt leaves behind (the fit summaries made once per shape and cycle)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, preemptible_fill, queue
from test_sched_topology import gang as topology_gang
from test_sched_topology import racks, running, simulate, unschedulable

from operators.scheduler.decide.actions.solver import Room, Solver
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def test_room_slots_are_the_fewest_over_pods_and_resources() -> None:
    # n0: 8 GPUs and 16 cores, 3 GPUs and 2 cores taken; n1 has no room for a pod (max 1 pod, 1 running).
    objs = [node("n0", gpus=8, cpu="16"), node("n1", gpus=8, cpu="16"), queue("q"), *PRIORITY_CLASSES,
            podgroup("r", "q"), pod("r-0", "r", gpus=3, cpu="2", node_name="n0", phase="Running"),
            podgroup("s", "q"), pod("s-0", "s", gpus=1, cpu="1", node_name="n1", phase="Running"),
            podgroup("p", "q", 3), *(pod(f"p-{i}", "p", gpus=g, cpu=c) for i, (g, c) in
                                     enumerate([(2, "4"), (4, "3"), (2, "5")]))]
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    job = next(j for j in s.jobs if j.name == "p")
    tasks = s.tasks_to_allocate(job)
    room = Room(tasks, s.placer.mask(tasks[0]))
    assert (room.need, room.gpu, room.cpu) == (3, 2, 3000)  # the smallest request per axis
    n0, n1 = s.nodes
    assert room.slots(n0) == min(5 // 2, 14 // 3)  # 2: GPUs bind first
    n1.max_pods = n1.n_pods
    assert room.slots(n1) == 0


def fragmented(seed: int) -> list[dict[str, Any]]:
    """Preemptible single-pod jobs on nodes with 0-4 GPUs free each, and pending preemptible gangs of 1-4 pods
    (some only consolidation can place, some no movement can)."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("q")]
    n_nodes = rng.randint(3, 5)
    objs += [node(f"n{i}", gpus=8, cpu=str(rng.choice([16, 64]))) for i in range(n_nodes)]
    objs += preemptible_fill(rng, "q", n_nodes, 4, "r")
    for j in range(rng.randint(1, 3)):
        name, size = f"p{j}", rng.choice([1, 2, 2, 3, 4])
        gpus = rng.choice([2, 4, 4, 8])
        objs.append(podgroup(name, "q", size, priority_class="build-preemptible",
                             created=f"2025-01-01T01:{j:02d}:00Z"))
        objs += [pod(f"{name}-{k}", name, gpus=gpus, created=f"2025-01-01T01:{j:02d}:00Z") for k in range(size)]
    return objs


def decided(objs: list[dict[str, Any]], actions: tuple[str, ...]) -> tuple[Any, ...]:
    d = cycle(objs, SchedulerConfig(actions=actions))
    return d.to_dict(), sorted(d.counters.items())


@pytest.mark.parametrize("actions", [("allocate", "consolidation"), ("consolidation", "allocate")],
                         ids=["after-allocate", "before-allocate"])
def test_room_changes_no_decision(monkeypatch: pytest.MonkeyPatch, actions: tuple[str, ...]) -> None:
    """Decisions, explanations and counters equal those of simulating every scenario, on clusters where the short
    cut fires and where consolidation moves pods. Before allocate, no fit summary is made before consolidation's
    first failed attempt, and allocate's explanations reuse it: the attempts that make one must still run."""
    fired = [0]
    placed = [0]
    real_apply, real_place_all = Solver._apply, Solver._place_all

    def spy_place_all(self: Solver, *args: Any) -> bool:
        placed[0] += 1
        return real_place_all(self, *args)

    def spy_apply(self: Solver, *args: Any) -> bool:
        before = placed[0]
        out = real_apply(self, *args)
        fired[0] += placed[0] == before  # refused without trying a placement: the short cut
        return out

    moved = skipped_summary = 0
    for seed in range(40):
        objs = fragmented(seed)
        with monkeypatch.context() as m:
            m.setattr(Solver, "_place_all", spy_place_all)
            m.setattr(Solver, "_apply", spy_apply)
            fast = decided(objs, actions)
        with monkeypatch.context() as m:
            m.setattr(Solver, "_room_for", lambda *args: None)
            slow = decided(objs, actions)
        assert fast == slow, seed
        moved += bool(fast[0]["evictions"])
        skipped_summary += bool(fast[0]["unschedulable"])
    assert fired[0] and moved and skipped_summary


def test_room_never_refuses_a_scenario_that_places_the_job() -> None:
    # p (4 GPUs) fits n0 once a-0 (2 GPUs) moves to n1's 2 free GPUs: after that scenario's eviction the nodes
    # have exactly one slot for p's one pod (a bound refusing at equality would keep p pending; evicting b-0 too
    # gives two slots, but b-0 fits nowhere else).
    objs = [node("n0", gpus=8), node("n1", gpus=8), queue("q"), *PRIORITY_CLASSES,
            podgroup("a", "q", priority_class="build-preemptible", created="2025-01-01T00:00:02Z"),
            pod("a-0", "a", gpus=2, node_name="n0", phase="Running"),
            podgroup("b", "q", priority_class="build-preemptible"),
            pod("b-0", "b", gpus=4, node_name="n0", phase="Running"),
            podgroup("c", "q", priority_class="build-preemptible"),
            pod("c-0", "c", gpus=6, node_name="n1", phase="Running"),
            podgroup("p", "q", priority_class="build-preemptible", created="2025-01-01T01:00:00Z"),
            pod("p-0", "p", gpus=4, created="2025-01-01T01:00:00Z")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "consolidation")))
    assert {p.pod: p.node for p in d.pipelined} == {"p-0": "n0", "a-0": "n1"}
    assert [(e.pod, e.action) for e in d.evictions] == [("a-0", "consolidation")]


def test_a_failed_attempt_that_makes_a_fit_summary_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # p (6 GPUs, 2 cores) fits no node; evicting v leaves n0 short of GPUs only (4 free), so the nodes have no
    # slot for p and the short cut would refuse that scenario. Run before allocate, consolidation's failed attempt
    # there is the cycle's first of p's shape: its fit summary (n0 short of GPUs only, on the simulated state) is
    # the one allocate's explanation reuses, so the attempt must run.
    objs = [node("n0", gpus=8, cpu="8"), node("n1", gpus=8, cpu="8"), queue("q"), *PRIORITY_CLASSES,
            podgroup("v", "q", priority_class="build-preemptible"),
            pod("v-0", "v", gpus=2, cpu="6", node_name="n0", phase="Running"),
            podgroup("w", "q", priority_class="build-preemptible"),
            pod("w-0", "w", gpus=4, cpu="1", node_name="n0", phase="Running"),
            podgroup("x", "q", priority_class="build-preemptible"),
            pod("x-0", "x", gpus=4, cpu="1", node_name="n1", phase="Running"),
            podgroup("p", "q", priority_class="build-preemptible", created="2025-01-01T01:00:00Z"),
            pod("p-0", "p", gpus=6, cpu="2", created="2025-01-01T01:00:00Z")]
    actions = ("consolidation", "allocate")
    fast = decided(objs, actions)
    with monkeypatch.context() as m:
        m.setattr(Solver, "_room_for", lambda *args: None)
        slow = decided(objs, actions)
    assert fast == slow
    [u] = fast[0]["unschedulable"]
    assert "2 node(s) didn't have enough resources: GPUs" in u["message"], u["message"]


def test_a_topology_job_is_explained_by_allocates_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two racks of four 4-GPU nodes; every node holds one victim and has 1-2 GPUs free, so no node holds a 4-GPU
    # pod: rack r0 (8 GPUs free) covers g, r1 (7) does not. A scenario moves one victim job (the cap) and leaves
    # one 4-GPU slot for g's two pods, so the short cut refuses every scenario. Without it, consolidation's
    # simulations try rack r1 once its victim is evicted, a state nobody sees: either way g's explanation names
    # the rack allocate tried (r0), as it says why allocate failed.
    objs = [*racks(4, zones=1, per_zone=2, per_rack=4), queue("q"),
            # The newest victims are tried first: r1's, the oldest, last.
            *(p for i, name in enumerate(["z0-r1-0", "z0-r1-1", "z0-r1-2", "z0-r1-3", "z0-r0-0", "z0-r0-1",
                                          "z0-r0-2", "z0-r0-3"])
              for p in running(f"u{i}", name, 3 if name == "z0-r1-3" else 2, priority_class="build-preemptible",
                               created=f"2025-01-01T00:00:0{i}Z")),
            *topology_gang("g", 2, 4, required="rack", priority_class="build-preemptible",
                           created="2025-01-02T00:00:00Z")]
    actions = ["allocate", "consolidation"]
    config = SchedulerConfig(max_consolidation_preemptees=1)
    placed = [0]
    real_place_all = Solver._place_all

    def spy_place_all(self: Solver, *args: Any) -> bool:
        placed[0] += 1
        return real_place_all(self, *args)

    with monkeypatch.context() as m:
        m.setattr(Solver, "_place_all", spy_place_all)
        fast = simulate(objs, config, actions=actions)
        tried_with_cut = placed[0]
        m.setattr(Solver, "_room_for", lambda *args: None)
        slow = simulate(objs, config, actions=actions)
        tried_without = placed[0] - tried_with_cut
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    # The short cut bounds the topology-bound gang like any job: every scenario is refused before a placement.
    assert tried_without > 0 and tried_with_cut == 0, (tried_with_cut, tried_without)
    assert not fast["evictions"]
    message = unschedulable(fast, "g")["message"]
    assert "(tried rack r0 (in z0))" in message and "r1" not in message, message



def test_a_topology_job_placed_at_exactly_its_room() -> None:
    # Rack r0 has 8 GPUs free (2 + 4 + 2: v, preemptible, on z0-r0-0 and w on z0-r0-2), so allocate tries g (2 x 4
    # GPUs, required rack) there and fails at its second pod (that failure makes the shape's fit summary); rack r1
    # has 2 free. Consolidation evicts v and moves it to a 2-GPU hole: then the nodes hold exactly g's two pods
    # (one slot on each of z0-r0-0 and z0-r0-1), so a Room that counted one pod too many for a job asking for a
    # feature would keep g pending.
    objs = [*racks(4, zones=1, per_zone=2, per_rack=3), queue("q"),
            *running("v", "z0-r0-0", 2, priority_class="build-preemptible"),
            *running("w", "z0-r0-2", 2, priority_class="build"),
            *running("x", "z0-r1-0", 2, priority_class="build"),
            *running("y", "z0-r1-1", 4, priority_class="build"),
            *running("z", "z0-r1-2", 4, priority_class="build"),
            *topology_gang("g", 2, 4, required="rack", priority_class="build-preemptible",
                           created="2025-01-02T00:00:00Z")]
    result = simulate(objs, SchedulerConfig(), actions=["allocate", "consolidation"])
    assert [(e["pod"], e["action"]) for e in result["evictions"]] == [("v", "consolidation")], result["evictions"]
    pipelined = {p["pod"]: p["node"] for p in result["pipelined"]}
    assert {pipelined.get("g-0"), pipelined.get("g-1")} == {"z0-r0-0", "z0-r0-1"}, pipelined
