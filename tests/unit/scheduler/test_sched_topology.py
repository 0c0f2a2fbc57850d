"""The topology plugin through `kai simulate`: required and preferred levels, sub-groups, explanations, and the
disruptive actions (reclaim, preempt, consolidation) choosing victims inside one domain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.shell.simulate import main, run_simulation
from tests.support import EXAMPLES

ZONE, RACK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-rack"
TOPOLOGY = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": ZONE, "alias": "zone"}, {"nodeLabel": RACK, "alias": "rack"},
                                {"nodeLabel": "kubernetes.io/hostname"}]}}


def racks(gpus: int = 4, *, zones: int = 2, per_zone: int = 2, per_rack: int = 2) -> list[dict[str, Any]]:
    """Nodes z<zone>-r<rack>-<i>, each in zone z<zone> and rack r<rack> (rack names repeat across zones)."""
    return [node(f"z{z}-r{r}-{i}", gpus=gpus, labels={ZONE: f"z{z}", RACK: f"r{r}"})
            for z in range(zones) for r in range(per_zone) for i in range(per_rack)]


def gang(name: str, n: int, gpus: int, *, required: str = "", preferred: str = "", topology: str = "dc",
         queue_name: str = "q", priority_class: str = "train", created: str = "2025-01-01T00:00:00Z",
         ) -> list[dict[str, Any]]:
    group = podgroup(name, queue_name, n, priority_class=priority_class, created=created)
    constraint = {"topology": topology}
    if required:
        constraint["requiredTopologyLevel"] = required
    if preferred:
        constraint["preferredTopologyLevel"] = preferred
    group["spec"]["topologyConstraint"] = constraint
    return [group, *(pod(f"{name}-{i}", name, gpus=gpus, created=created) for i in range(n))]


def running(name: str, node_name: str, gpus: int, *, queue_name: str = "q", priority_class: str = "train",
            created: str = "2025-01-01T00:00:00Z") -> list[dict[str, Any]]:
    return [podgroup(name, queue_name, 1, priority_class=priority_class, created=created),
            pod(name, name, gpus=gpus, node_name=node_name, phase="Running", created=created)]


def rack_of(node_name: str) -> str:
    return node_name.rsplit("-", 1)[0]  # z<zone>-r<rack>


def simulate(objs: list[dict[str, Any]], config: SchedulerConfig | None = None,
             actions: list[str] | None = None) -> dict[str, Any]:
    return run_simulation([*PRIORITY_CLASSES, TOPOLOGY, *objs], config or SchedulerConfig(), actions=actions,
                          now=1e9)


def binds(result: dict[str, Any]) -> dict[str, str]:
    return {b["pod"]: b["node"] for b in result["binds"]}


def unschedulable(result: dict[str, Any], group: str) -> dict[str, Any]:
    return next(u for u in result["unschedulable"] if u["podGroup"] == group)


# --- allocate -----------------------------------------------------------------------------------------------


def holes() -> list[dict[str, Any]]:
    """A non-preemptible 2-GPU pod on the first node of every rack: each rack has 6 GPUs free, split 2 + 4."""
    out: list[dict[str, Any]] = []
    for n in racks():
        name = n["metadata"]["name"]
        if name.endswith("-0"):
            out += running(f"hole-{name}", name, 2, priority_class="build")
    return out


def test_without_a_constraint_binpacking_spreads_the_gang_over_racks() -> None:
    """The baseline the topology tests depend on: the 2-GPU holes of four racks are filled first."""
    result = simulate([*racks(), queue("q"), *holes(), *gang("g", 3, 2)])  # a topology, but no level asked
    assert len(binds(result)) == 3 and len({rack_of(n) for n in binds(result).values()}) == 3


def test_required_rack_places_the_whole_gang_in_one_rack_fullest_first() -> None:
    result = simulate([*racks(), queue("q"), *holes(), *gang("g", 3, 2, required="rack")])
    placed = binds(result)
    assert set(placed) == {"g-0", "g-1", "g-2"}
    assert {rack_of(n) for n in placed.values()} == {"z0-r0"}  # all racks tie at 6 free: the first by name


def test_required_rack_by_node_label_prefers_the_fullest_rack_that_fits() -> None:
    objs = [*racks(), queue("q"), *holes(), *running("more", "z1-r0-1", 1)]  # z1/r0 has 5 GPUs free
    result = simulate([*objs, *gang("g", 2, 2, required=RACK)])
    assert {rack_of(n) for n in binds(result).values()} == {"z1-r0"}


def test_no_rack_can_hold_the_gang_it_stays_pending_with_the_level_and_the_shortfall() -> None:
    result = simulate([*racks(), queue("q"), *holes(), *gang("g", 4, 2, required="rack")])
    assert binds(result) == {}
    u = unschedulable(result, "g")
    assert [r["reason"] for r in u["reasons"]] == ["Not enough resources for the workload"]
    assert u["reasons"][0]["message"] == (
        "no domain of level rack can hold the job (8 GPUs, 4 CPU cores, 4.295 GB memory); best rack r0 (in z0) "
        "lacks 2 GPUs")
    assert all("no domain of level rack can hold the job" in m for m in u["podMessages"].values())


def test_preferred_rack_falls_back_to_one_zone_then_to_the_cluster() -> None:
    zone = simulate([*racks(), queue("q"), *holes(), *gang("g", 4, 2, preferred="rack")])
    assert len(binds(zone)) == 4 and {rack_of(n)[:2] for n in binds(zone).values()} == {"z0"}
    fits = simulate([*racks(), queue("q"), *holes(), *gang("g", 2, 2, preferred="rack")])
    assert len({rack_of(n) for n in binds(fits).values()}) == 1
    cluster = simulate([*racks(), queue("q"), *holes(), *gang("g", 7, 2, preferred="rack")])
    placed = binds(cluster)
    assert len(placed) == 7 and {rack_of(n)[:2] for n in placed.values()} == {"z0", "z1"}


def test_required_zone_with_preferred_rack_never_leaves_the_zone() -> None:
    ok = simulate([*racks(), queue("q"), *holes(), *gang("g", 4, 2, required="zone", preferred="rack")])
    assert len(binds(ok)) == 4 and len({rack_of(n)[:2] for n in binds(ok).values()}) == 1
    too_big = simulate([*racks(), queue("q"), *holes(), *gang("g", 7, 2, required="zone", preferred="rack")])
    assert binds(too_big) == {}
    assert "no domain of level zone can hold the job" in unschedulable(too_big, "g")["message"]


def test_unknown_topology_or_level_is_explained_not_crashed() -> None:
    missing = simulate([*racks(), queue("q"), *gang("g", 1, 1, required="rack", topology="nope")])
    u = unschedulable(missing, "g")
    assert u["reasons"][0]["reason"] == "PodSchedulingErrors"
    assert u["reasons"][0]["message"].startswith("Requested topology nope does not exist: create the Topology")
    level = simulate([*racks(), queue("q"), *gang("g", 1, 1, preferred="row")])
    assert 'topology "dc" has no level "row"' in unschedulable(level, "g")["message"]
    assert binds(level) == {}


def test_nodes_without_the_labels_are_outside_every_domain() -> None:
    objs = [node("plain", gpus=8), *racks(gpus=1, zones=1, per_zone=1), queue("q"),
            *gang("g", 2, 2, required="rack")]
    result = simulate(objs)
    assert binds(result) == {}  # the unlabelled 8-GPU node could hold it, but it is in no rack
    assert "no domain of level rack can hold the job (4 GPUs" in unschedulable(result, "g")["message"]


def test_a_gang_that_fits_a_rack_in_total_but_not_its_nodes_says_which_racks_were_tried() -> None:
    # Each rack: two nodes with 3 GPUs free each (6 in total); the gang is one pod of 4 and one of 2.
    objs = [*racks(), queue("q"), *(o for n in racks() for o in running(f"u-{n['metadata']['name']}",
                                                                      n["metadata"]["name"], 1,
                                                                      priority_class="build"))]
    group = podgroup("g", "q", 2)
    group["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
    result = simulate([*objs, group, pod("g-0", "g", gpus=4), pod("g-1", "g", gpus=2)])
    assert binds(result) == {}
    message = unschedulable(result, "g")["message"]
    assert "no domain of level rack could hold the job's pods on its nodes (tried rack r0 (in z0)" in message
    assert "and 1 more" in message


def test_subgroups_each_land_in_one_rack_of_their_own_level() -> None:
    group = podgroup("g", "q", 4, subgroups=[
        {"name": "a", "minMember": 2, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}},
        {"name": "b", "minMember": 2, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}}])
    pods = [pod(f"g-{s}{i}", "g", gpus=2, subgroup=s) for s in ("a", "b") for i in range(2)]
    result = simulate([*racks(), queue("q"), *holes(), group, *pods])
    placed = binds(result)
    assert len(placed) == 4
    assert len({rack_of(placed[f"g-a{i}"]) for i in range(2)}) == 1
    assert len({rack_of(placed[f"g-b{i}"]) for i in range(2)}) == 1


def test_a_subgroup_no_rack_can_hold_is_named() -> None:
    group = podgroup("g", "q", 4, subgroups=[
        {"name": "small", "minMember": 1},
        {"name": "big", "minMember": 4, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}}])
    pods = [pod("g-s", "g", gpus=1, subgroup="small"), *(pod(f"g-b{i}", "g", gpus=2, subgroup="big")
                                                        for i in range(4))]
    result = simulate([*racks(), queue("q"), *holes(), group, *pods])
    assert binds(result) == {}
    assert "sub-group big: no domain of level rack can hold the job (8 GPUs" in unschedulable(result, "g")["message"]


def test_the_plugin_can_be_disabled() -> None:
    config = config_from_mapping({"plugins": {"topology": {"enabled": False}}})
    result = simulate([*racks(), queue("q"), *holes(), *gang("g", 4, 2, required="rack")], config)
    assert len(binds(result)) == 4  # the constraint is ignored: placed across racks


# --- disruptive actions ---------------------------------------------------------------------------------------


def full(priority_class: str = "train", queue_name: str = "q") -> list[dict[str, Any]]:
    """Every node runs two 2-GPU pods (one job each), newest on the z1 racks and the first node of each rack."""
    out: list[dict[str, Any]] = []
    for n in racks():
        name = n["metadata"]["name"]
        for k in range(2):
            day = 10 + (10 if name.startswith("z1") else 0) + (5 if name.endswith("-0") else 0) + k
            out += running(f"v-{name}-{k}", name, 2, queue_name=queue_name, priority_class=priority_class,
                           created=f"2025-01-{day:02d}T00:00:00Z")
    return out


def evicted_racks(result: dict[str, Any]) -> set[str]:
    return {rack_of(e["pod"].removeprefix("v-").rsplit("-", 1)[0]) for e in result["evictions"]}


def test_preempt_evicts_victims_of_one_rack_only() -> None:
    preemptor = gang("p", 2, 4, required="rack", priority_class="build", created="2025-02-01T00:00:00Z")
    result = simulate([*racks(), queue("q"), *full(), *preemptor], actions=["preempt"])
    assert len(evicted_racks(result)) == 1, result["evictions"]
    assert len(result["evictions"]) == 4
    pipelined = {p["node"] for p in result["pipelined"] if p["pod"].startswith("p-")}
    assert {rack_of(n) for n in pipelined} == evicted_racks(result)
    # Without the constraint the same preemption takes victims wherever they are newest (two racks).
    free = gang("p", 2, 4, priority_class="build", created="2025-02-01T00:00:00Z")
    plain = simulate([*racks(), queue("q"), *full(), *free], actions=["preempt"])
    assert len(plain["evictions"]) == 4 and len(evicted_racks(plain)) == 2


def test_reclaim_takes_back_one_rack() -> None:
    queues = [queue("a", gpu=(8, -1, 1)), queue("b", gpu=(8, -1, 1))]
    reclaimer = gang("p", 2, 4, required="rack", queue_name="a", created="2025-02-01T00:00:00Z")
    result = simulate([*racks(), *queues, *full(queue_name="b"), *reclaimer], actions=["reclaim"])
    assert len(result["evictions"]) == 4 and len(evicted_racks(result)) == 1, result["evictions"]
    assert all(e["action"] == "reclaim" for e in result["evictions"])


def test_consolidation_frees_one_rack_for_a_rack_bound_gang() -> None:
    # Rack z0/r0: two nodes with 2 GPUs used each; z0/r1 likewise; the gang needs one rack with 2 x 4 GPUs free.
    objs = [*racks(zones=1), queue("q")]
    for n in racks(zones=1):
        objs += running(f"v-{n['metadata']['name']}-0", n["metadata"]["name"], 2)
    preemptor = gang("p", 2, 4, required="rack", created="2025-02-01T00:00:00Z")
    result = simulate([*objs, *preemptor], actions=["consolidation"])
    assert result["evictions"], result["unschedulable"]
    pipelined = {p["pod"]: p["node"] for p in result["pipelined"]}
    assert {rack_of(pipelined["p-0"]), rack_of(pipelined["p-1"])} == {rack_of(pipelined["p-0"])}
    freed = rack_of(pipelined["p-0"])
    moved = {p["node"] for name, p in ((p["pod"], p) for p in result["pipelined"]) if name.startswith("v-")}
    assert all(rack_of(n) != freed for n in moved)


def test_consolidation_never_moves_a_rack_bound_job_out_of_its_rack() -> None:
    """A running gang bound to rack r1 is the newest victim; moving it would split it over two racks."""
    def scenario() -> list[dict[str, Any]]:
        bound = podgroup("v", "q", 2, created="2025-01-20T00:00:00Z")
        bound["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
        return [*racks(zones=1), queue("q"), *running("x", "z0-r0-0", 2), *running("y", "z0-r0-1", 4), bound,
                pod("v-0", "v", gpus=2, node_name="z0-r1-0", phase="Running"),
                pod("v-1", "v", gpus=2, node_name="z0-r1-1", phase="Running"),
                *gang("p", 1, 4, created="2025-02-01T00:00:00Z")]

    result = simulate(scenario(), actions=["consolidation"])
    moved = {p["pod"]: p["node"] for p in result["pipelined"]}
    assert "p-0" in moved and not {"v-0", "v-1"} & set(moved), moved
    assert [e["pod"] for e in result["evictions"]] == ["x"]
    unconstrained = simulate(scenario(), config_from_mapping({"plugins": {"topology": {"enabled": False}}}),
                             actions=["consolidation"])
    split = {p["pod"]: rack_of(p["node"]) for p in unconstrained["pipelined"] if p["pod"].startswith("v-")}
    assert len(set(split.values())) == 2, split  # what the plugin prevents


def test_nested_subgroup_constraints_stay_inside_their_parents_domain() -> None:
    """workers (zone) holds a and b (rack each): both racks in one zone, the head anywhere."""
    rack = {"topology": "dc", "requiredTopologyLevel": "rack"}
    group = podgroup("g", "q", 5, subgroups=[
        {"name": "head", "minMember": 1},
        {"name": "workers", "minMember": 4, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "zone"}},
        {"name": "a", "minMember": 2, "parent": "workers", "topologyConstraint": rack},
        {"name": "b", "minMember": 2, "parent": "workers", "topologyConstraint": rack}])
    pods = [pod("g-head", "g", subgroup="head"), *(pod(f"g-{s}{i}", "g", gpus=3, subgroup=s)
                                                  for s in ("a", "b") for i in range(2))]
    # z0/r0 is full: z0 can only hold one 6-GPU sub-group, so both go to zone z1, one rack each.
    full_rack = [*running("f0", "z0-r0-0", 4, priority_class="build"),
                 *running("f1", "z0-r0-1", 4, priority_class="build")]
    result = simulate([*racks(), queue("q"), *full_rack, group, *pods])
    placed = binds(result)
    assert len(placed) == 5, result["unschedulable"]
    a = {rack_of(placed[f"g-a{i}"]) for i in range(2)}
    b = {rack_of(placed[f"g-b{i}"]) for i in range(2)}
    assert len(a) == 1 and len(b) == 1 and a != b, (a, b)
    assert {r[:2] for r in a | b} == {"z1"}


def test_kai_simulate_reads_the_example_topology_from_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI path: the example Topology file and a rack-bound gang, as YAML streams."""
    example = EXAMPLES / "topology" / "cluster-topology.yaml"
    nodes = [node(f"n{i}", gpus=4, labels={ZONE: "z0", RACK: f"r{i // 2}"}) for i in range(4)]
    bound = gang("g", 2, 3, required="rack", topology="cluster-topology")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([*nodes, queue("q"), *running("x", "n0", 2), *bound]))
    assert main(["-f", str(example), "-f", str(cluster), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Rack r0 (the fullest that covers 6 GPUs) has no two 3-GPU holes, so the next rack, r1, is tried.
    assert {b["pod"]: b["node"] for b in out["binds"]} == {"g-0": "n2", "g-1": "n3"}
    too_big = tmp_path / "big.yaml"
    too_big.write_text(yaml.safe_dump_all([*nodes, queue("q"), *gang("g", 3, 3, required="rack",
                                                                     topology="cluster-topology")]))
    assert main(["-f", str(example), "-f", str(too_big), "-o", "text"]) == 0
    text = capsys.readouterr().out
    assert "pending     ns/g: Not enough resources for the workload: no domain of level rack can hold the job" in text


def test_elastic_growth_stays_in_the_rack_of_the_running_pods() -> None:
    """Two pods of a rack-bound job run in z1/r1; a third (above minMember) joins them, not the fuller z0/r0."""
    group = podgroup("g", "q", 2)
    group["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
    objs = [*racks(), queue("q"), *running("busy", "z0-r0-0", 3, priority_class="build"), group,
            pod("g-0", "g", gpus=1, node_name="z1-r1-0", phase="Running"),
            pod("g-1", "g", gpus=1, node_name="z1-r1-1", phase="Running"), pod("g-2", "g", gpus=1)]
    placed = binds(simulate(objs, actions=["allocate"]))
    assert rack_of(placed["g-2"]) == "z1-r1", placed
    off = config_from_mapping({"plugins": {"topology": {"enabled": False}}})
    assert binds(simulate(objs, off, actions=["allocate"]))["g-2"] == "z0-r0-0"  # bin-packing alone: the fuller


def test_domain_free_totals_kept_per_session_decide_as_summing_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy cluster: running pods everywhere, gangs requiring or preferring a rack, preemptors, failed attempts
    # rolled back and pipelined moves. The plugin sums a domain again only where a node changed; forcing a full
    # sum at every look must give the same decisions, byte for byte.
    from operators.scheduler.decide.plugins.topology import plugin

    objs: list[dict[str, Any]] = [queue("q"), queue("r"), *racks(4, zones=2, per_zone=3, per_rack=3)]
    nodes = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
    for i, name in enumerate(nodes):
        objs += running(f"run-{i}", name, 1 + i % 3, queue_name="q" if i % 2 else "r",
                        created=f"2025-01-01T00:{i:02d}:00Z")
    for j in range(8):
        objs += gang(f"g{j}", 2 + j % 3, 1 + j % 2, **({"required": "rack"} if j % 2 else {"preferred": "rack"}),
                     queue_name="q" if j % 3 else "r", priority_class="inference" if j % 4 == 0 else "train",
                     created=f"2025-01-02T00:0{j}:00Z")
    objs += [podgroup("solo", "r", 1), pod("solo-0", "solo", gpus=3)]
    # And one where a rolled-back attempt must give its rack's resources back: g-big (3 x 2 GPUs) fits r0's
    # total of 6 free GPUs but not its nodes (3 + 3), and fails after placing two pods; g-small then takes r0.
    small = [queue("q"), *racks(4, zones=1, per_zone=2, per_rack=2),
             *running("r0a", "z0-r0-0", 1), *running("r0b", "z0-r0-1", 1),
             *running("r1a", "z0-r1-0", 4), *running("r1b", "z0-r1-1", 4),
             *gang("g-big", 3, 2, required="rack", created="2025-01-02T00:00:00Z"),
             *gang("g-small", 2, 2, required="rack", created="2025-01-03T00:00:00Z")]
    assert {b["pod"] for b in simulate(small, actions=["allocate"])["binds"]} == {"g-small-0", "g-small-1"}
    incremental = [json.dumps(simulate(o), sort_keys=True) for o in (objs, small)]
    real_free_now = plugin.Topology._free_now

    def full(self: plugin.Topology, session: Any) -> Any:
        self._free = None
        return real_free_now(self, session)

    monkeypatch.setattr(plugin.Topology, "_free_now", full)
    assert [json.dumps(simulate(o), sort_keys=True) for o in (objs, small)] == incremental
    assert json.loads(incremental[0])["binds"] and json.loads(incremental[0])["evictions"]
