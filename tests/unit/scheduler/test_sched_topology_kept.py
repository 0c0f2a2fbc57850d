"""The topology plugin's domains kept from session to session (`Persisting.kept`): reused while a carried open keeps
the nodes and the Topologies are equal, built again when a Topology changes or the session opens in full."""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
from operators.scheduler.decide.snapshot import snapshot_from_objects

ZONE, RACK, ALT = "topology.kubernetes.io/zone", "example.com/rack", "example.com/alt-rack"
CONFIG = SchedulerConfig()
NOW = 1e9


def topology(rack_label: str) -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": ZONE, "alias": "zone"}, {"nodeLabel": rack_label, "alias": "rack"}]}}


def cluster(rack_label: str) -> list[dict[str, Any]]:
    """Four 4-GPU nodes: racks r0 = {a, b} and r1 = {c, d} by RACK, or {a, c} and {b, d} by ALT; a and b are full,
    so a 2-node gang bound to one rack fits in r1 by RACK and nowhere by ALT."""
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("q"), topology(rack_label)]
    for name, rack, alt in (("a", "r0", "x0"), ("b", "r0", "x1"), ("c", "r1", "x0"), ("d", "r1", "x1")):
        objs.append(node(name, gpus=4, labels={ZONE: "z0", RACK: rack, ALT: alt}))
    for name in ("a", "b"):
        objs += [podgroup(f"run-{name}"), pod(f"run-{name}", f"run-{name}", gpus=4, node_name=name,
                                              phase="Running")]
    group = podgroup("gang", min_member=2, created="2025-02-01T00:00:00Z")
    group["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
    objs += [group, *(pod(f"gang-{i}", "gang", gpus=4) for i in range(2))]
    return objs


def test_the_domains_are_kept_while_the_nodes_and_topologies_are_and_built_again_for_a_changed_topology() -> None:
    by_alt = snapshot_from_objects(cluster(ALT))
    first, carry = run_carried_cycle(by_alt, CONFIG, NOW, None)
    assert not first.binds  # no ALT rack has two free nodes
    opened = carry.opened
    assert opened is not None
    kept = opened.kept["topology"]
    structure = kept["structure"]
    assert structure  # the plugin built the rack level's domains and left them in the store
    again, carry = run_carried_cycle(by_alt, CONFIG, NOW + 1, carry)
    assert again.to_dict() == run_cycle(by_alt, CONFIG, NOW + 1).to_dict()
    assert carry.opened is not None and carry.opened.rebuilt_jobs >= 0  # a carried open
    assert carry.opened.kept["topology"]["structure"] is structure  # the same domains, not built again
    # The same nodes (the same records), the Topology's rack level now RACK: the gang fits in r1.
    by_rack = replace(snapshot_from_objects(cluster(RACK)), nodes=by_alt.nodes, pods=by_alt.pods,
                      podgroups=by_alt.podgroups)
    fresh = run_cycle(by_rack, CONFIG, NOW + 2)
    assert sorted(b.pod for b in fresh.binds) == ["gang-0", "gang-1"]
    carried, carry = run_carried_cycle(by_rack, CONFIG, NOW + 2, carry)
    assert carry.opened is not None and carry.opened.rebuilt_jobs >= 0  # still a carried open
    assert carried.to_dict() == fresh.to_dict()


def test_a_cycle_with_topology_bound_sub_groups_leaves_no_cyclic_garbage() -> None:
    objs = cluster(RACK)
    group = podgroup("subs", min_member=2, subgroups=[
        {"name": "a", "minMember": 1, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}},
        {"name": "b", "minMember": 1, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}}])
    objs += [group, *(pod(f"subs-{s}", "subs", gpus=1, subgroup=s) for s in ("a", "b"))]
    snapshot = snapshot_from_objects(objs)
    gc.collect()
    decisions = run_cycle(snapshot, CONFIG, NOW)  # the cycle runs with the collector off
    assert {b.pod for b in decisions.binds} >= {"subs-a", "subs-b"}  # the sub-groups were planned
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        left = [o for o in gc.garbage if callable(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []  # reference counting freed the session's functions; none waited for a collection
