"""The fault-injection suite's checks catch what they are for (no cluster): each is shown a broken state."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from operators.core import keys
from tests.chaos import chaos_kit as kit

NS = "fill"


def pod(name: str, *, node: str = "", pg: str = "pg", fraction: bool = False, groups: tuple[str, ...] = (),
        namespace: str = NS, uid: str = "", phase: str = "Running") -> dict[str, Any]:
    annotations = {keys.POD_GROUP_NAME: pg}
    if fraction:
        annotations[keys.GPU_FRACTION] = "0.5"
        annotations[keys.SHARED_GPU_CONFIGMAP] = f"{name}-shared-gpu"
    labels = {keys.GPU_GROUP_LABEL: groups[0]} if groups else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                         "annotations": annotations, "labels": labels},
            "spec": {"nodeName": node or None, "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]},
            "status": {"phase": phase if node else "Pending"}}


def podgroup(name: str, min_member: int, queue: str = "q") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"minMember": min_member, "queue": queue},
            "status": {}}


def world(**kw: Any) -> kit.World:
    base: dict[str, Any] = {"pods": [], "reservations": [], "podgroups": [], "queues": [], "bindrequests": [],
                            "configmaps": [], "nodes": [], "priorityclasses": []}
    base.update(kw)
    return kit.World(**base)


def test_a_gang_with_some_but_not_all_pods_bound_is_partial() -> None:
    pods = [pod("a-0", node="n", pg="a"), pod("a-1", node="n", pg="a"), pod("a-2", pg="a"),
            pod("b-0", pg="b"), pod("c-0", node="n", pg="c")]
    groups = [podgroup("a", 3), podgroup("b", 1), podgroup("c", 1)]
    assert kit.partial_gangs(pods, groups) == {f"{NS}/a": (2, 3)}


def test_reservations_users_and_configmaps_must_match() -> None:
    users = [pod("u1", node="n", fraction=True, groups=("g1",)), pod("u2", node="n", fraction=True, groups=("g2",))]
    reservations = [pod("r1", node="n", groups=("g1",), namespace=keys.RESERVATION_NAMESPACE, pg=""),
                    pod("r3", node="n", groups=("g3",), namespace=keys.RESERVATION_NAMESPACE, pg="")]
    cms = [{"metadata": {"name": n, "ownerReferences": [{"kind": "Pod", "name": "u1", "uid": "uid-u1"}]}}
           for n in ("u1-shared-gpu-0", "u1-shared-gpu-0-evar")]
    cms.append({"metadata": {"name": "gone-shared-gpu-0",
                             "ownerReferences": [{"kind": "Pod", "name": "gone", "uid": "uid-gone"}]}})
    found = kit.sharing_violations(world(pods=users, reservations=reservations, configmaps=cms))
    text = "\n".join(found)
    assert "g3 have no user" in text
    assert "u2'] use GPU group g2, which has no reservation pod" in text
    assert "gone-shared-gpu-0 is orphaned" in text
    assert "u2 lacks its ConfigMaps" in text
    assert "u1 lacks" not in text and "g1" not in text
    assert len(found) == 4, found


def test_two_reservations_of_one_group_are_reported() -> None:
    users = [pod("u1", node="n", fraction=True, groups=("g1",))]
    reservations = [pod(f"r{i}", node="n", groups=("g1",), namespace=keys.RESERVATION_NAMESPACE, pg="")
                    for i in range(2)]
    cms = [{"metadata": {"name": n, "ownerReferences": [{"kind": "Pod", "name": "u1", "uid": "uid-u1"}]}}
           for n in ("u1-shared-gpu-0", "u1-shared-gpu-0-evar")]
    assert kit.sharing_violations(world(pods=users, reservations=reservations, configmaps=cms)) == [
        "GPU group g1 has 2 reservation pods: ['r0', 'r1']"]


def test_bindings_are_counted_per_pod_from_the_audit_log(tmp_path: Path) -> None:
    def line(name: str, code: int, namespace: str = NS) -> str:
        return json.dumps({"objectRef": {"resource": "pods", "subresource": "binding", "namespace": namespace,
                                         "name": name}, "responseStatus": {"code": code}})

    log = tmp_path / "audit.log"
    log.write_text("\n".join([line("p", 201), line("p", 201), line("q", 201), line("q", 409),
                              line("other", 201, "elsewhere")]) + "\n")
    codes, lines = kit.audit_bindings(log, NS)
    assert lines == 5
    assert dict(codes) == {"p": [201, 201], "q": [201, 409]}


def test_a_bindrequest_for_another_node_or_twice_succeeded_is_reported() -> None:
    def br(name: str, pod_name: str, node: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"podName": pod_name, "selectedNode": node},
                "status": {"phase": keys.BIND_PHASE_SUCCEEDED}}

    found = kit.bindrequest_violations(world(pods=[pod("p", node="n1"), pod("q", node="n1")],
                                             bindrequests=[br("b1", "p", "n1"), br("b2", "p", "n1"),
                                                           br("b3", "q", "n2")]))
    assert found == ["BindRequest b3 Succeeded for node n2, but pod q is on n1",
                     "pod p has 2 Succeeded BindRequests: ['b1', 'b2']"]


def test_a_stored_status_that_differs_from_the_recount_is_reported() -> None:
    group = podgroup("pg", 1)
    group["status"] = {"running": 1, "pending": 0,
                       "resourcesStatus": {"allocated": {"cpu": "50m", "memory": "64Mi"},
                                           "requested": {"cpu": "50m", "memory": "64Mi"}}}
    right = world(pods=[pod("p", node="n")], podgroups=[group])
    assert kit.status_mismatches(right, NS, []) == []
    wrong = world(pods=[pod("p", node="n"), pod("p2", node="n")], podgroups=[group])
    found = kit.status_mismatches(wrong, NS, [])
    assert len(found) == 2 and "resourcesStatus" in found[0] and "running/pending" in found[1], found


def test_the_schedule_is_the_seeds_and_kills_every_leader_away_from_the_api_restart() -> None:
    one, again = kit.make_schedule(random.Random(7), 240, 16), kit.make_schedule(random.Random(7), 240, 16)
    assert one == again
    assert one != kit.make_schedule(random.Random(8), 240, 16)
    api = [f for f in one if f.target == "kube-apiserver"]
    kills = [f for f in one if f.target != "kube-apiserver"]
    assert len(api) == 1 and len(kills) == 16
    assert {f.target for f in kills if f.role == "leader"} >= set(kit.ELECTED)
    assert any(f.target == "admission" for f in kills)
    assert all(not api[0].at - 10 < f.at < api[0].at + 30 for f in kills)


def test_the_fill_fits_its_nodes_and_has_every_kind_of_workload() -> None:
    fill = kit.make_fill(random.Random(1), 2000, ["a", "b"])
    assert fill.pods >= 2000
    assert {k.split("(")[0] for k in fill.kinds} == {"raycluster", "job"}
    assert any("0.5" in k for k in fill.kinds) and any("half-gpu workers" in k for k in fill.kinds)
    assert kit.nodes_for(fill, 16) * 16 >= fill.gpus * 1.4
