"""The placer searches a small node subset (a topology domain) by its own nodes (`Placer.within`): the nodes of the
subset in the index's order, from the same start, instead of the whole order past the nodes outside. The nodes it
tries, and so every decision, must be those of the whole order restricted to the subset."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import node, pod, podgroup, queue
from test_sched_topology import RACK, ZONE, simulate

from operators.scheduler.decide.placement import scoring, search


def _cluster(seed: int) -> list[dict[str, Any]]:
    """Four zones of four racks of two nodes (8-GPU nodes, and a CPU-only node in some racks), partly used by
    whole-GPU, half-GPU and CPU-only pods; pending gangs of every such shape bound to a rack or a zone, preferring a
    rack, or free."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [queue("a", gpu=(32, -1, 1)), queue("b", gpu=(32, -1, 1))]
    names = []
    for z in range(4):
        for r in range(4):
            for i in range(2):
                name = f"z{z}-r{r}-{i}"
                names.append(name)
                cpu_only = i == 1 and rng.random() < 0.3
                objs.append(node(name, gpus=0 if cpu_only else 8, cpu="32",
                                 labels={ZONE: f"z{z}", RACK: f"r{r}"}))
    k = 0
    for n in names:
        for _ in range(rng.randint(0, 4)):
            k += 1
            shape = rng.choice(["whole", "half", "cpu"])
            objs += [podgroup(f"r{k}", rng.choice("ab"), priority_class=rng.choice(["train", "build"]),
                              created=f"2025-01-01T00:{k % 60:02d}:00Z"),
                     pod(f"r{k}-0", f"r{k}", gpus=rng.choice([1, 2, 3]) if shape == "whole" else 0,
                         fraction="0.5" if shape == "half" else None, cpu=str(rng.choice([1, 4, 8])),
                         node_name=n, phase="Running")]
    for j in range(rng.randint(4, 9)):
        size, shape = rng.choice([1, 2, 3, 4]), rng.choice(["whole", "half", "cpu"])
        group = podgroup(f"p{j}", rng.choice("ab"), size, priority_class=rng.choice(["train", "build-preemptible"]),
                         created=f"2025-01-02T00:{j:02d}:00Z")
        level = rng.choice(["required-rack", "required-zone", "preferred-rack", ""])
        if level:
            kind, name = level.split("-")
            group["spec"]["topologyConstraint"] = {"topology": "dc", f"{kind}TopologyLevel": name}
        objs += [group, *(pod(f"p{j}-{i}", f"p{j}", gpus=rng.choice([1, 2, 4]) if shape == "whole" else 0,
                              fraction="0.5" if shape == "half" else None, cpu=str(rng.choice([1, 4, 12])))
                          for i in range(size))]
    return objs


ACTIONS = ["allocate", "consolidation", "reclaim", "preempt"]


def test_every_order_within_a_subset_is_the_whole_order_restricted_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = [0]
    whole = {"gpu_order_within": "gpu_order", "shared_order_within": "shared_order",
             "cpu_order_within": "cpu_order"}
    for name, full in whole.items():
        real, complete = getattr(scoring.NodeIndex, name), getattr(scoring.NodeIndex, full)

        def checked(self: scoring.NodeIndex, *args: Any, _real: Any = real, _complete: Any = complete) -> Any:
            *head, within = args
            got = _real(self, *args)
            members = set(within)
            assert got == [i for i in _complete(self, *head) if i in members]
            checks[0] += 1
            return got

        monkeypatch.setattr(scoring.NodeIndex, name, checked)
    monkeypatch.setattr(search, "SMALL_SUBSET", 1)  # every subset searched by its own nodes
    for seed in range(30):
        simulate(_cluster(seed), actions=ACTIONS)
    assert checks[0] > 200, checks


@pytest.mark.parametrize("seed", range(15))
def test_the_decisions_are_the_same_searching_subsets_by_their_nodes_or_by_the_whole_order(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = _cluster(seed)
    monkeypatch.setattr(search, "SMALL_SUBSET", 1)
    by_nodes = simulate(objs, actions=ACTIONS)
    monkeypatch.setattr(search, "SMALL_SUBSET", 10**9)
    assert simulate(objs, actions=ACTIONS) == by_nodes


def test_a_rack_bound_gang_walks_its_rack_not_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 free 8-GPU nodes in 8 racks; the gang's pods each try only its rack's nodes (8 of them: 1/8 of the
    cluster), not the 64 of the whole order."""
    walked: list[int] = []
    real = search.Placer._scan

    def scan(self: search.Placer, task: Any, order: Any, *args: Any, **kwargs: Any) -> Any:
        order = list(order)
        walked.append(len(order))
        return real(self, task, order, *args, **kwargs)

    monkeypatch.setattr(search.Placer, "_scan", scan)
    objs: list[dict[str, Any]] = [queue("q")]
    objs += [node(f"n{r}-{i}", gpus=8, labels={ZONE: "z0", RACK: f"r{r}"}) for r in range(8) for i in range(8)]
    group = podgroup("g", "q", 2)
    group["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
    result = simulate([*objs, group, pod("g-0", "g", gpus=8), pod("g-1", "g", gpus=8)], actions=["allocate"])
    assert {b["node"] for b in result["binds"]} == {"n0-0", "n0-1"}
    assert walked == [8, 7], walked  # the rack's nodes with 8 GPUs free, then those left for the second pod
