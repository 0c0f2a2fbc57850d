"""Topology domains on their own: level resolution, domains, capacity, candidate order, explanations."""

from __future__ import annotations

import pytest

from operators.scheduler.decide.plugins.topology.domains import (
    ConstraintError,
    Resources,
    domains_of,
    level_index,
    plan,
    resolve,
)
from operators.scheduler.decide.records import TopologyConstraintSpec, TopologyRecord
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.units import GPU

ZONE, RACK, HOST = "topology.kubernetes.io/zone", "example.com/rack", "kubernetes.io/hostname"
DC = TopologyRecord("dc", ((ZONE, "zone"), (RACK, "rack"), (HOST, "")))


def cluster(free_gpus: dict[str, float]) -> tuple[dict[str, dict[str, str]], dict[str, Resources]]:
    """2 zones x 2 racks x 2 nodes named z<zone>-r<rack>-n<i>; rack names repeat across zones."""
    labels: dict[str, dict[str, str]] = {}
    for zone in ("a", "b"):
        for rack in ("r1", "r2"):
            for i in range(2):
                name = f"z{zone}-{rack}-n{i}"
                labels[name] = {ZONE: zone, RACK: rack, HOST: name}
    free = {name: Resources(gpu=round(free_gpus.get(name, 8.0) * GPU), cpu=64000, memory=512 * 10**9)
            for name in labels}
    return labels, free


def test_levels_resolve_by_node_label_or_alias() -> None:
    assert level_index(DC, "rack") == 1
    assert level_index(DC, RACK) == 1
    assert level_index(DC, HOST) == 2
    assert level_index(DC, "") is None
    assert level_index(DC, "row") is None
    resolved = resolve(TopologyConstraintSpec("dc", required=RACK, preferred="kubernetes.io/hostname"), [DC])
    assert resolved is not None and (resolved.required, resolved.preferred) == (1, 2)


def test_unknown_topology_or_level_is_an_explained_error() -> None:
    with pytest.raises(ConstraintError, match="Requested topology nope does not exist"):
        resolve(TopologyConstraintSpec("nope", required="rack"), [DC])
    with pytest.raises(ConstraintError) as err:
        resolve(TopologyConstraintSpec("dc", preferred="row"), [DC])
    assert 'has no level "row" (the preferred placement)' in err.value.message
    assert "zone (topology.kubernetes.io/zone), rack (example.com/rack), kubernetes.io/hostname" in err.value.message
    with pytest.raises(ConstraintError, match="no topology is named"):
        resolve(TopologyConstraintSpec("", required="rack"), [DC])
    # A topology without any level asks for nothing.
    assert resolve(TopologyConstraintSpec("dc"), [DC]) is None


def test_a_preferred_level_at_or_above_the_required_one_is_dropped() -> None:
    resolved = resolve(TopologyConstraintSpec("dc", required="rack", preferred="zone"), [DC])
    assert resolved is not None and (resolved.required, resolved.preferred) == (1, None)


def test_domains_are_nested_and_nodes_without_a_label_are_outside() -> None:
    labels, free = cluster({"za-r1-n0": 2})
    labels["loose"] = {ZONE: "a", HOST: "loose"}  # no rack label: in zone a, in no rack, in no host domain
    free["loose"] = Resources(gpu=8 * GPU)
    zones = domains_of(DC, 0, labels, free)
    assert [d.id for d in zones] == ["a", "b"]
    assert "loose" in zones[0].nodes and zones[0].free.gpu == (2 + 8 * 3 + 8) * GPU
    racks = domains_of(DC, 1, labels, free)
    assert [d.id for d in racks] == ["a/r1", "a/r2", "b/r1", "b/r2"]  # r1 of zone a is not r1 of zone b
    assert racks[0].nodes == {"za-r1-n0", "za-r1-n1"} and racks[0].free.gpu == 10 * GPU
    assert all("loose" not in d.nodes for d in racks)
    assert racks[0].describe() == "rack r1 (in a)"
    hosts = domains_of(DC, 2, labels, free)
    assert len(hosts) == 8 and hosts[0].level_name == HOST


def test_required_level_lists_fitting_domains_fullest_first_ties_by_name() -> None:
    labels, free = cluster({"za-r1-n0": 0, "za-r1-n1": 4, "zb-r2-n0": 6, "zb-r2-n1": 0, "za-r2-n0": 3})
    # Free GPUs per rack: a/r1 4, a/r2 11, b/r1 16, b/r2 6.
    resolved = resolve(TopologyConstraintSpec("dc", required="rack"), [DC])
    assert resolved is not None
    got = plan(resolved, labels, free, Resources(gpu=6 * GPU))
    assert [c.domain.id for c in got.candidates if c.domain] == ["b/r2", "a/r2", "b/r1"]
    assert got.candidates[0].nodes == {"zb-r2-n0", "zb-r2-n1"}
    tie = plan(resolved, *cluster({}), Resources(gpu=16 * GPU))
    assert [c.domain.id for c in tie.candidates if c.domain] == ["a/r1", "a/r2", "b/r1", "b/r2"]


def test_required_level_nothing_fits_names_the_level_and_the_best_domains_shortfall() -> None:
    labels, free = cluster({n: 7 for n in cluster({})[0] if not n.startswith("za-r1")})  # a/r1: 16, others 14
    resolved = resolve(TopologyConstraintSpec("dc", required="rack"), [DC])
    assert resolved is not None
    got = plan(resolved, labels, free, Resources(gpu=18 * GPU, cpu=1000))
    assert got.candidates == ()
    assert got.explanation == ("no domain of level rack can hold the job (18 GPUs, 1 CPU core); best rack r1 "
                               "(in a) lacks 2 GPUs")
    empty = plan(resolved, {"n": {ZONE: "a"}}, {"n": Resources(gpu=8 * GPU)}, Resources(gpu=1 * GPU))
    assert empty.explanation == "no node carries the labels of level rack"


def test_preferred_level_falls_back_to_coarser_levels_then_the_cluster() -> None:
    labels, free = cluster({"za-r1-n0": 1, "za-r1-n1": 1, "za-r2-n0": 4, "za-r2-n1": 4})
    resolved = resolve(TopologyConstraintSpec("dc", preferred="rack"), [DC])
    assert resolved is not None
    got = plan(resolved, labels, free, Resources(gpu=8 * GPU))
    described = [c.describe() for c in got.candidates]
    # Racks that fit, fullest first; then zones; then the whole cluster.
    assert described == ["rack r2 (in a)", "rack r1 (in b)", "rack r2 (in b)", "zone a", "zone b",
                         "the whole cluster"]
    assert got.candidates[-1].nodes is None
    # Too big for any rack: zones, then the cluster.
    big = plan(resolved, labels, free, Resources(gpu=20 * GPU))
    assert [c.describe() for c in big.candidates] == ["zone b", "the whole cluster"]


def test_preferred_with_required_stops_at_the_required_level() -> None:
    labels, free = cluster({})
    resolved = resolve(TopologyConstraintSpec("dc", required="zone", preferred="rack"), [DC])
    assert resolved is not None
    got = plan(resolved, labels, free, Resources(gpu=20 * GPU))
    assert [c.describe() for c in got.candidates] == ["zone a", "zone b"]  # no rack holds 20, no cluster-wide
    none = plan(resolved, labels, free, Resources(gpu=40 * GPU))
    assert none.candidates == () and none.explanation.startswith("no domain of level zone can hold the job")


def test_placed_pods_pin_the_domain() -> None:
    labels, free = cluster({})
    resolved = resolve(TopologyConstraintSpec("dc", required="rack"), [DC])
    assert resolved is not None
    got = plan(resolved, labels, free, Resources(gpu=4 * GPU), placed=["zb-r1-n1"])
    assert [c.domain.id for c in got.candidates if c.domain] == ["b/r1"]
    split = plan(resolved, labels, free, Resources(gpu=4 * GPU), placed=["zb-r1-n1", "za-r1-n0"])
    assert split.candidates == () and "span more than one rack" in split.explanation


def test_snapshot_parses_topologies_and_constraints() -> None:
    snapshot = snapshot_from_objects([
        {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
         "spec": {"levels": [{"nodeLabel": ZONE, "alias": "zone"}, {"nodeLabel": RACK}]}},
        {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "n"},
         "spec": {"minMember": 2, "queue": "q",
                  "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "zone"},
                  "subGroups": [{"name": "w", "minMember": 2, "topologyConstraint": {
                      "topology": "dc", "preferredTopologyLevel": RACK}}, {"name": "h", "minMember": 1,
                                                                           "topologyConstraint": {}}]}},
    ])
    assert snapshot.topologies == (TopologyRecord("dc", ((ZONE, "zone"), (RACK, ""))),)
    (pg,) = snapshot.podgroups
    assert pg.topology == TopologyConstraintSpec("dc", required="zone")
    assert pg.subgroups[0].topology == TopologyConstraintSpec("dc", preferred=RACK)
    assert pg.subgroups[1].topology is None  # the pod-grouper writes {} for "no constraint"
