"""Preferred inter-pod affinity score (kube-scheduler's InterPodAffinity score and its normalization).

The cluster cases are kube-scheduler's own scoring examples: regions China/India and zones az1/az2 as topology
keys, pods labelled security=S1/S2, expected scores after normalization to 0..100.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.scheduler.decide.model import NodeState
from operators.scheduler.decide.placement.predicates import PodIndex
from operators.scheduler.decide.plugins.podaffinity import score as aff
from operators.scheduler.decide.records import node_record, pod_record

CHINA = {"region": "China"}
INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
S1 = {"security": "S1"}
S2 = {"security": "S2"}


def _sel(values: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "security", "operator": "In", "values": values}]}


def _weighted(weight: int, selector: dict[str, Any], key: str, namespaces: list[str] | None = None
              ) -> dict[str, Any]:
    term: dict[str, Any] = {"labelSelector": selector, "topologyKey": key}
    if namespaces is not None:
        term["namespaces"] = namespaces
    return {"weight": weight, "podAffinityTerm": term}


def _affinity(pref: list[dict[str, Any]] | None = None, anti: list[dict[str, Any]] | None = None,
              required: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if pref or required:
        out["podAffinity"] = {}
        if pref:
            out["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = pref
        if required:
            out["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if anti:
        out["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": anti}
    return out


STAY_WITH_S1_IN_REGION = _affinity(pref=[_weighted(5, _sel(["S1"]), "region")])
STAY_WITH_S2_IN_REGION = _affinity(pref=[_weighted(6, _sel(["S2"]), "region")])
AWAY_FROM_S1_IN_AZ = _affinity(anti=[_weighted(5, _sel(["S1"]), "az")])
AWAY_FROM_S2_IN_AZ = _affinity(anti=[_weighted(5, _sel(["S2"]), "az")])
STAY_S1_REGION_AWAY_S2_AZ = _affinity(pref=[_weighted(8, _sel(["S1"]), "region")],
                                      anti=[_weighted(5, _sel(["S2"]), "az")])
OPERATORS = _affinity(pref=[
    _weighted(8, {"matchExpressions": [{"key": "security", "operator": "NotIn", "values": ["S1"]},
                                       {"key": "security", "operator": "In", "values": ["S2"]}]}, "region"),
    _weighted(2, {"matchExpressions": [{"key": "security", "operator": "Exists"},
                                       {"key": "wrongkey", "operator": "DoesNotExist"}]}, "region"),
])
HARD_AFFINITY = _affinity(required=[
    {"labelSelector": _sel(["S1", "value2"]), "topologyKey": "region"},
    {"labelSelector": {"matchExpressions": [{"key": "security", "operator": "Exists"},
                                            {"key": "wrongkey", "operator": "DoesNotExist"}]},
     "topologyKey": "region"},
])


def _pod(name: str, labels: dict[str, str], affinity: dict[str, Any] | None = None, node: str = "",
         namespace: str = "ns") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if affinity:
        spec["affinity"] = affinity
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def _nodes(labels: list[dict[str, str]]) -> list[NodeState]:
    out = []
    for i, lab in enumerate(labels):
        rec = node_record({"metadata": {"name": f"machine{i + 1}", "labels": lab},
                           "status": {"allocatable": {"cpu": "8", "memory": "8Gi"},
                                      "conditions": [{"type": "Ready", "status": "True"}]}})
        out.append(NodeState(i, rec, True, 8000, 8 << 30, 0, 110, 8000, 8 << 30, 0))
    return out


def _scores(incoming: dict[str, Any], placed: list[dict[str, Any]], node_labels: list[dict[str, str]],
            hard_weight: int = aff.HARD_POD_AFFINITY_WEIGHT) -> list[int]:
    nodes = _nodes(node_labels)
    by_name = {n.name: n.idx for n in nodes}
    index = PodIndex()
    for obj in placed:
        rec = pod_record(obj)
        index.add(rec, by_name[rec.node_name])
    got = aff.affinity_scores(pod_record(incoming), range(len(nodes)), nodes, index, hard_weight)
    return [got.get(i, 0) for i in range(len(nodes))]


KUBE_SCHEDULER_CASES = [
    pytest.param(_pod("p", S1), [], [CHINA, INDIA, AZ1], [0, 0, 0], id="no-affinity"),
    pytest.param(_pod("p", S1, STAY_WITH_S1_IN_REGION),
                 [_pod("a", S1, node="machine1"), _pod("b", S2, node="machine2"), _pod("c", S1, node="machine3")],
                 [CHINA, INDIA, AZ1], [100, 0, 0], id="affinity-topology-key-and-match"),
    pytest.param(_pod("p", S1, STAY_WITH_S1_IN_REGION), [_pod("a", S1, node="machine1")],
                 [CHINA, CHINA_AZ1, INDIA], [100, 100, 0], id="affinity-whole-region-scores"),
    pytest.param(_pod("p", S1, STAY_WITH_S1_IN_REGION),
                 [_pod(f"x{i}", S1, node=n) for i, n in enumerate(
                     ["machine1", "machine1", "machine2", "machine3", "machine4", "machine5"])],
                 [CHINA, INDIA, CHINA, CHINA, INDIA], [100, 0, 100, 100, 0], id="affinity-more-matches-wins"),
    pytest.param(_pod("p", S1, OPERATORS),
                 [_pod("a", S1, node="machine1"), _pod("b", S2, node="machine2"), _pod("c", S1, node="machine3")],
                 [CHINA, INDIA, AZ1], [20, 100, 0], id="affinity-operators"),
    pytest.param(_pod("p", S1),
                 [_pod("a", {}, STAY_WITH_S1_IN_REGION, node="machine1"),
                  _pod("b", {}, STAY_WITH_S2_IN_REGION, node="machine2")],
                 [CHINA, INDIA, AZ1], [100, 0, 0], id="symmetry-preferred"),
    pytest.param(_pod("p", S1),
                 [_pod("a", {}, HARD_AFFINITY, node="machine1"), _pod("b", {}, HARD_AFFINITY, node="machine2")],
                 [CHINA, INDIA, AZ1], [100, 100, 0], id="symmetry-required-hard-weight"),
    pytest.param(_pod("p", S1, AWAY_FROM_S1_IN_AZ),
                 [_pod("a", S1, node="machine1"), _pod("b", S2, node="machine2")],
                 [AZ1, CHINA], [0, 100], id="anti-affinity-match"),
    pytest.param(_pod("p", S1, AWAY_FROM_S1_IN_AZ),
                 [_pod("a", S1, node="machine1"), _pod("b", S1, node="machine2")],
                 [AZ1, CHINA], [0, 100], id="anti-affinity-topology-key-missing"),
    pytest.param(_pod("p", S1, AWAY_FROM_S1_IN_AZ),
                 [_pod("a", S1, node="machine1"), _pod("b", S1, node="machine1"), _pod("c", S2, node="machine2")],
                 [AZ1, INDIA], [0, 100], id="anti-affinity-more-matches-loses"),
    pytest.param(_pod("p", S2),
                 [_pod("a", S1, AWAY_FROM_S1_IN_AZ, node="machine1"), _pod("b", S2, AWAY_FROM_S2_IN_AZ,
                                                                          node="machine2")],
                 [AZ1, AZ2], [100, 0], id="anti-affinity-symmetry"),
    pytest.param(_pod("p", S1, STAY_S1_REGION_AWAY_S2_AZ),
                 [_pod("a", S1, node="machine1"), _pod("b", S1, node="machine2")],
                 [CHINA, AZ1], [100, 0], id="affinity-and-anti-affinity"),
    pytest.param(_pod("p", S1, STAY_S1_REGION_AWAY_S2_AZ),
                 [_pod(f"x{i}", S1, node=n) for i, n in enumerate(
                     ["machine1", "machine1", "machine2", "machine3", "machine3", "machine4", "machine5"])],
                 [CHINA_AZ1, INDIA, CHINA, CHINA, INDIA], [100, 0, 100, 100, 0], id="same-service-region"),
]


@pytest.mark.parametrize(("incoming", "placed", "node_labels", "expected"), KUBE_SCHEDULER_CASES)
def test_kube_scheduler_examples(incoming: dict[str, Any], placed: list[dict[str, Any]],
                                 node_labels: list[dict[str, str]], expected: list[int]) -> None:
    assert _scores(incoming, placed, node_labels) == expected


def test_hard_pod_affinity_weight_zero_ignores_required_terms() -> None:
    placed = [_pod("a", {}, HARD_AFFINITY, node="machine1"), _pod("b", {}, HARD_AFFINITY, node="machine2")]
    assert _scores(_pod("p", S1), placed, [CHINA, INDIA, AZ1], hard_weight=0) == [0, 0, 0]
    assert _scores(_pod("p", S1), placed, [CHINA, INDIA, AZ1], hard_weight=1) == [100, 100, 0]


def test_raw_counts_sum_incoming_and_symmetric_terms() -> None:
    # Incoming prefers S1 in its region (5 per pod), a placed S1 pod prefers the incoming pod (6) and a
    # placed S2 pod in India wants it away at zone level (-3), a required term toward it adds 1.
    placed = [
        _pod("a", S1, _affinity(pref=[_weighted(6, _sel(["S1"]), "region")]), node="machine1"),
        _pod("b", S1, node="machine1"),
        _pod("c", S2, _affinity(anti=[_weighted(3, _sel(["S1"]), "az")]), node="machine2"),
        _pod("d", S2, _affinity(required=[{"labelSelector": _sel(["S1"]), "topologyKey": "region"}]),
             node="machine3"),
    ]
    nodes = _nodes([CHINA, {"region": "India", "az": "az2"}, INDIA, AZ2])
    index = PodIndex()
    for obj in placed:
        rec = pod_record(obj)
        index.add(rec, int(rec.node_name[-1]) - 1)
    counts = aff.topology_counts(pod_record(_pod("p", S1, STAY_WITH_S1_IN_REGION)), nodes, index)
    assert counts == {"region": {"China": 5 + 5 + 6, "India": 1}, "az": {"az2": -3}}
    raw = aff.raw_scores(counts, range(4), nodes)
    assert raw == {0: 16, 1: 1 - 3, 2: 1, 3: -3}
    assert aff.normalize(raw) == {0: 100, 1: 5, 2: 21, 3: 0}


def test_namespaces_limit_what_a_term_selects() -> None:
    other = [_pod("a", S1, node="machine1", namespace="other")]
    # The incoming pod's term defaults to its own namespace: the pod in "other" does not count.
    assert _scores(_pod("p", S1, STAY_WITH_S1_IN_REGION), other, [CHINA, INDIA]) == [0, 0]
    listed = _affinity(pref=[_weighted(5, _sel(["S1"]), "region", namespaces=["other"])])
    assert _scores(_pod("p", S1, listed), other, [CHINA, INDIA]) == [100, 0]
    # A placed pod's term defaults to the placed pod's namespace: it does not select a pod in "ns".
    holder = [_pod("a", {}, STAY_WITH_S1_IN_REGION, node="machine1", namespace="other")]
    assert _scores(_pod("p", S1), holder, [CHINA, INDIA]) == [0, 0]


def test_selector_without_in_or_exists_sees_unlabelled_pods() -> None:
    away_from_unlabelled = _affinity(anti=[_weighted(
        4, {"matchExpressions": [{"key": "security", "operator": "DoesNotExist"}]}, "region")])
    placed = [_pod("a", {}, node="machine1"), _pod("b", S1, node="machine2")]
    assert _scores(_pod("p", S1, away_from_unlabelled), placed, [CHINA, INDIA]) == [0, 100]


def test_normalize() -> None:
    assert aff.normalize({}) == {}
    assert aff.normalize({0: 7, 1: 7}) == {0: 0, 1: 0}
    assert aff.normalize({0: -5, 1: 0, 2: 10}) == {0: 0, 1: 33, 2: 100}


def test_has_preference_and_index_removal() -> None:
    nodes = _nodes([CHINA, INDIA])
    index = PodIndex()
    holder = pod_record(_pod("a", {}, STAY_WITH_S1_IN_REGION, node="machine1"))
    plain = pod_record(_pod("p", S1))
    assert not aff.has_preference(plain, index)
    assert not aff.has_preference(plain, None)
    index.add(holder, 0)
    assert aff.has_preference(plain, index)
    assert not aff.has_preference(pod_record(_pod("q", S2)), index)
    assert aff.affinity_scores(plain, range(2), nodes, index) == {0: 100, 1: 0}
    index.add(holder, 1)  # moved: its term now counts for India only
    assert aff.affinity_scores(plain, range(2), nodes, index) == {0: 0, 1: 100}
    index.remove(holder)
    assert not aff.has_preference(plain, index)
    assert aff.affinity_scores(plain, range(2), nodes, index) == {}
    assert index.holder_terms == {} and index.n_score_holders == 0
    # A pod with its own preferred terms always asks to be scored.
    assert aff.has_preference(pod_record(_pod("r", S1, STAY_WITH_S1_IN_REGION)), index)


def test_preferred_terms_are_parsed_into_constraints_equality_and_hash() -> None:
    a = pod_record(_pod("a", S1, STAY_S1_REGION_AWAY_S2_AZ)).constraints
    b = pod_record(_pod("b", S1, STAY_S1_REGION_AWAY_S2_AZ)).constraints
    c = pod_record(_pod("c", S1, _affinity(pref=[_weighted(9, _sel(["S1"]), "region")],
                                           anti=[_weighted(5, _sel(["S2"]), "az")]))).constraints
    plain = pod_record(_pod("d", S1)).constraints
    assert a == b and hash(a) == hash(b)
    assert a != c and a != plain
    assert len({a, b, c, plain}) == 3
    (pref,) = a.preferred_pod_affinity
    (anti,) = a.preferred_pod_anti_affinity
    assert (pref.weight, pref.term.topology_key, pref.term.namespaces) == (8, "region", ("ns",))
    assert (anti.weight, anti.term.topology_key) == (5, "az")
    assert a.has_preferred and not plain.has_preferred
    assert not a.pod_affinity and not a.pod_anti_affinity  # preferred terms never filter


def test_hard_constraints_drop_only_the_preferred_terms() -> None:
    required = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": _sel(["S2"]), "topologyKey": "region"}]}}
    a = pod_record(_pod("a", S1, {**STAY_S1_REGION_AWAY_S2_AZ, **required})).constraints
    b = pod_record(_pod("b", S1, {**STAY_WITH_S1_IN_REGION, **required})).constraints
    plain = pod_record(_pod("c", S1, required)).constraints
    assert a != b and a.hard == b.hard == plain and hash(a.hard) == hash(plain)
    assert a.hard is a.hard  # computed once
    assert plain.hard is plain
    assert a.hard.pod_anti_affinity == a.pod_anti_affinity and not a.hard.has_preferred
