"""The topology plugin's plans over each level's domains kept sorted fullest first (`plan_domains(ordered_at=...)`):
the candidates and the shortfall explanation must be the ones a plan filtering and sorting every domain gives,
and the sorted copy must follow every change of the totals. The domains a failed job tried are described at
session close only."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import pod, podgroup, queue
from test_sched_topology import RACK, ZONE, racks, running, simulate, unschedulable
from test_sched_topology_free_deltas import _cluster

from operators.scheduler.decide.plugins.topology import plugin
from operators.scheduler.decide.plugins.topology.domains import Domain, Resolved, Resources, plan_domains
from operators.scheduler.decide.records import TopologyRecord
from operators.scheduler.decide.units import GB, GPU, MILLI

TOPOLOGY = TopologyRecord("dc", ((ZONE, "zone"), (RACK, "rack")))


def _levels(rng: random.Random) -> dict[int, list[Domain]]:
    """Zones and racks with free totals drawn from a few values, so that many domains tie on GPUs, CPU or both."""
    out: dict[int, list[Domain]] = {0: [], 1: []}
    for z in range(rng.randint(0, 4)):
        for r in range(rng.randint(1, 6)):
            free = Resources(rng.choice([0, 1, 2, 2, 4, 8]) * GPU // rng.choice([1, 2]),
                             rng.choice([0, 4, 8, 8, 16]) * MILLI, rng.choice([0, 32, 64]) * GB)
            out[1].append(Domain(1, "rack", (f"z{z}", f"r{r}"), frozenset({f"z{z}-r{r}"}), free))
        free = Resources(*(sum(d.free[k] for d in out[1] if d.values[0] == f"z{z}") for k in range(3)))
        out[0].append(Domain(0, "zone", (f"z{z}",), frozenset({f"z{z}"}), free))
    return out


@pytest.mark.parametrize("seed", range(200))
def test_a_plan_over_sorted_levels_is_the_plan_over_every_domain(seed: int) -> None:
    rng = random.Random(seed)
    levels = _levels(rng)
    ordered = {level: sorted([(d.free, d.values, d) for d in domains]) for level, domains in levels.items()}
    for required, preferred in ((1, None), (0, None), (0, 1), (None, 1), (None, 0)):
        resolved = Resolved(TOPOLOGY, required, preferred)
        for _ in range(10):
            request = Resources(rng.choice([0, 1, 2, 3, 4, 8, 16]) * GPU // rng.choice([1, 2]),
                                rng.choice([0, 2, 8, 12]) * MILLI, rng.choice([0, 16, 64, 100]) * GB)
            scanned = plan_domains(resolved, lambda level: levels[level], request)
            assert plan_domains(resolved, lambda level: levels[level], request,
                                ordered_at=lambda level: ordered[level]) == scanned, (required, preferred, request)


def test_the_sorted_plans_were_exercised_with_candidates_and_shortfalls() -> None:
    # The test above must see both outcomes, and ties of GPUs broken by CPU and by the domain's id.
    outcomes = set()
    for seed in range(50):
        rng = random.Random(seed)
        levels = _levels(rng)
        ordered = {level: sorted([(d.free, d.values, d) for d in domains]) for level, domains in levels.items()}
        request = Resources(2 * GPU, 8 * MILLI, 0)
        made = plan_domains(Resolved(TOPOLOGY, 1, None), levels.__getitem__, request, ordered_at=ordered.__getitem__)
        outcomes.add("candidates" if made.candidates else "shortfall" if "best" in made.explanation else "none")
    assert outcomes == {"candidates", "shortfall", "none"}


def test_every_plan_the_plugin_makes_is_the_plan_over_every_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through allocate, consolidation, reclaim and preempt on 30 racked clusters: each plan made on the sorted
    levels equals the one made by filtering every domain, and each level's sorted copy is its domains sorted."""
    checks = [0]

    def checked(resolved: Any, domains_at: Any, request: Any, placed: Any = (), ordered_at: Any = None) -> Any:
        made = plan_domains(resolved, domains_at, request, placed, ordered_at)
        assert made == plan_domains(resolved, domains_at, request, placed)
        if ordered_at is not None:
            for level in range(2):
                assert list(ordered_at(level)) == sorted([(d.free, d.values, d) for d in domains_at(level)])
            checks[0] += 1
        return made

    monkeypatch.setattr(plugin, "plan_domains", checked)
    for seed in range(30):
        simulate(_cluster(seed), actions=["allocate", "consolidation", "reclaim", "preempt"])
    assert checks[0] > 100, checks


def test_the_tried_racks_are_described_at_close_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang that fits every rack in total but no rack's nodes: its explanation names the first three racks tried
    and how many more, described once at close (not at each attempt, for every candidate)."""
    described: list[str] = []
    real = Domain.describe

    def counted(self: Domain) -> str:
        described.append(self.id)
        return real(self)

    monkeypatch.setattr(Domain, "describe", counted)
    layout = racks(zones=2, per_zone=3)  # six racks of two 4-GPU nodes
    objs = [*layout, queue("q"), *(o for n in layout for o in running(f"u-{n['metadata']['name']}",
                                                                        n["metadata"]["name"], 1,
                                                                        priority_class="build"))]
    group = podgroup("g", "q", 2)
    group["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
    result = simulate([*objs, group, pod("g-0", "g", gpus=4), pod("g-1", "g", gpus=2)], actions=["allocate"])
    message = unschedulable(result, "g")["message"]
    assert "(tried rack r0 (in z0), rack r1 (in z0), rack r2 (in z0) and 3 more)" in message
    assert described == ["z0/r0", "z0/r1", "z0/r2"]
