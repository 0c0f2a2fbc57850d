"""Topology validation: the pure rules and the AdmissionReview answer of the admission webhook."""

from __future__ import annotations

from typing import Any

import pytest

from operators.admission.main import TOPOLOGY_PATH, parser, routes
from operators.admission.review import validate_topology_review
from operators.admission.topology import HOSTNAME_NOT_LAST, validate_topology

ZONE, RACK, HOST = "topology.kubernetes.io/zone", "example.com/rack", "kubernetes.io/hostname"


def topology(*levels: tuple[str, str | None] | dict[str, Any] | str, name: str = "dc") -> dict[str, Any]:
    out: list[Any] = []
    for level in levels:
        if isinstance(level, dict | str):
            out.append(level)
            continue
        label, alias = level
        out.append({"nodeLabel": label} | ({"alias": alias} if alias is not None else {}))
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": out}}


def review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u-1", "operation": operation,
                               "kind": {"group": "kai.scheduler", "version": "v1alpha1", "kind": "Topology"},
                               "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_a_well_formed_hierarchy_is_valid() -> None:
    assert validate_topology(topology((ZONE, "zone"), (RACK, "rack"), (HOST, "host"))) == []
    assert validate_topology(topology((RACK, None))) == []


@pytest.mark.parametrize(("obj", "needle"), [
    ({"kind": "Topology", "metadata": {"name": "x"}}, "spec is required"),
    (topology(), "spec.levels must list at least one level"),
    (topology({"alias": "zone"}), "spec.levels[0].nodeLabel must be a non-empty node label key"),
    (topology((ZONE, None), ("  ", None)), "spec.levels[1].nodeLabel must be a non-empty"),
    (topology((ZONE, None), "not-an-object"), "spec.levels[1] must be an object"),
    (topology((ZONE, None), (RACK, None), (ZONE, None)),
     "spec.levels[2].nodeLabel: node label 'topology.kubernetes.io/zone' is already level 0"),
    (topology((ZONE, "a"), (RACK, "a")), "spec.levels[1].alias: alias 'a' is already used by level 0"),
    (topology((ZONE, RACK), (RACK, None)),
     "spec.levels[0].alias: alias 'example.com/rack' equals the nodeLabel of level 1"),
    (topology((ZONE, ZONE)), "alias 'topology.kubernetes.io/zone' equals the nodeLabel of level 0"),
    (topology((ZONE, "")), "spec.levels[0].alias must be a non-empty string"),
    (topology((HOST, None), (RACK, None)), HOSTNAME_NOT_LAST),
    (topology(*[(f"example.com/l{i}", None) for i in range(17)]), "at most 16"),
])
def test_invalid_topologies_are_named_precisely(obj: dict[str, Any], needle: str) -> None:
    errors = validate_topology(obj)
    assert any(needle in e for e in errors), errors


def test_every_problem_is_reported_at_once() -> None:
    errors = validate_topology(topology((ZONE, "x"), (RACK, "x"), (ZONE, None)))
    assert len(errors) == 2, errors


def test_node_labels_are_immutable_but_aliases_may_change() -> None:
    old = topology((ZONE, "zone"), (RACK, "rack"))
    assert validate_topology(topology((ZONE, "z"), (RACK, None)), old) == []
    reordered = validate_topology(topology((RACK, "rack"), (ZONE, "zone")), old)
    assert reordered and "node labels of a Topology cannot change" in reordered[0], reordered
    assert "only aliases may change" in reordered[0]
    added = validate_topology(topology((ZONE, "zone"), (RACK, "rack"), (HOST, None)), old)
    assert added and HOST in added[0]
    removed = validate_topology(topology((ZONE, "zone")), old)
    assert removed and "cannot change" in removed[0]


def test_review_allows_valid_and_denies_invalid_with_the_topology_named() -> None:
    ok = validate_topology_review(review("CREATE", topology((ZONE, "zone"), (RACK, "rack"))))
    assert ok["response"]["allowed"] is True and ok["response"]["uid"] == "u-1"
    bad = validate_topology_review(review("CREATE", topology((ZONE, "x"), (RACK, "x"), name="dc-1")))
    assert bad["response"]["allowed"] is False
    assert bad["response"]["status"]["code"] == 403
    assert bad["response"]["status"]["message"].startswith("Topology dc-1: spec.levels[1].alias: alias 'x'")


def test_review_checks_updates_against_the_old_object() -> None:
    old = topology((ZONE, "zone"), (RACK, "rack"))
    alias_change = validate_topology_review(review("UPDATE", topology((ZONE, "az"), (RACK, "rack")), old))
    assert alias_change["response"]["allowed"] is True
    label_change = validate_topology_review(review("UPDATE", topology((ZONE, "zone"), (HOST, "rack")), old))
    assert label_change["response"]["allowed"] is False
    assert "cannot change" in label_change["response"]["status"]["message"]
    # The same object on CREATE has no history to contradict.
    assert validate_topology_review(review("CREATE", topology((ZONE, "zone"), (HOST, "rack"))))["response"][
        "allowed"] is True


def test_review_of_something_else_is_a_bad_request() -> None:
    pod = review("CREATE", {"kind": "Pod", "metadata": {"name": "p"}})
    answer = validate_topology_review(pod)
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 400
    assert validate_topology_review(review("DELETE", topology()))["response"]["allowed"] is True


def test_the_admission_server_routes_topologies() -> None:
    handler = routes(parser().parse_args([]))[TOPOLOGY_PATH]
    answer = handler(review("CREATE", topology((ZONE, "a"), (RACK, "a"))))
    assert answer["response"]["allowed"] is False
