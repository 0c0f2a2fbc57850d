"""The topology plugin keeps each level's domain totals up to date by the changed nodes' differences instead of
summing a domain's nodes again (`Topology._domains_free`). Every total it hands a plan must be the sum over the
domain's nodes of what they have free at that moment, through placements, rollbacks, commits and evictions."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import node, pod, podgroup, queue
from test_sched_topology import RACK, ZONE, simulate

from operators.scheduler.decide.plugins.topology import plugin
from operators.scheduler.decide.plugins.topology.domains import with_free


def _cluster(seed: int) -> list[dict[str, Any]]:
    """Two zones of two racks of three 8-GPU nodes, partly used by preemptible and non-preemptible pods of two
    queues, and pending gangs bound to a rack or a zone (or preferring a rack), with plain pods among them."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [queue("a", gpu=(8, -1, 1)), queue("b", gpu=(8, -1, 1))]
    names = [f"z{z}-r{r}-{i}" for z in range(2) for r in range(2) for i in range(3)]
    objs += [node(n, gpus=8, labels={ZONE: n[:2], RACK: n[3:5]}) for n in names]
    k = 0
    for n in names:
        used = rng.randint(0, 8)
        while used > 0:
            g = min(used, rng.choice([1, 2, 4]))
            used -= g
            k += 1
            cls = rng.choice(["train", "build", "build-preemptible"])
            objs += [podgroup(f"r{k}", rng.choice("ab"), priority_class=cls,
                              created=f"2025-01-01T00:{k % 60:02d}:00Z"),
                     pod(f"r{k}-0", f"r{k}", gpus=g, node_name=n, phase="Running")]
    for j in range(rng.randint(3, 7)):
        size, gpus = rng.choice([1, 2, 3]), rng.choice([1, 2, 4, 8])
        group = podgroup(f"p{j}", rng.choice("ab"), size, priority_class=rng.choice(["train", "build-preemptible",
                                                                                       "inference"]),
                         created=f"2025-01-02T00:{j:02d}:00Z")
        level = rng.choice(["required-rack", "required-zone", "preferred-rack", ""])
        if level:
            kind, name = level.split("-")
            group["spec"]["topologyConstraint"] = {"topology": "dc", f"{kind}TopologyLevel": name}
        objs += [group, *(pod(f"p{j}-{i}", f"p{j}", gpus=gpus) for i in range(size))]
    return objs


def _checked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every `_domains_free` answer compared with a full sum over the nodes' free resources now."""
    checks = [0]
    real = plugin.Topology._domains_free

    def checked(self: plugin.Topology, session: Any, resolved: Any, level: int, free: Any) -> Any:
        got = real(self, session, resolved, level, free)
        summed = with_free(self._domains(session, resolved, level), plugin._free(session.nodes))
        assert [(d.values, d.free) for d in got] == [(d.values, d.free) for d in summed]
        checks[0] += 1
        return got

    monkeypatch.setattr(plugin.Topology, "_domains_free", checked)
    return checks


def test_domain_totals_follow_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = _checked(monkeypatch)
    evicted = placed = 0
    for seed in range(30):
        result = simulate(_cluster(seed), actions=["allocate", "consolidation", "reclaim", "preempt"])
        evicted += bool(result["evictions"])
        placed += bool(result["binds"] or result["pipelined"])
    # Totals were read after placements, rollbacks and evictions (not only on a fresh sum).
    assert checks[0] > 100 and evicted and placed, (checks[0], evicted, placed)
