"""Preferred inter-pod affinity as a node score: kube-scheduler's InterPodAffinity score.

For the pod being placed, every topology domain (a topologyKey=value pair of node labels) gets a count:

* + weight of each preferred affinity term of the pod, - weight of each preferred anti-affinity term, once
  per placed pod the term selects, in the domain of that pod's node;
* + weight / - weight of each preferred affinity / anti-affinity term of a placed pod that selects the pod,
  and + `HARD_POD_AFFINITY_WEIGHT` for each required affinity term of a placed pod that selects it, in the
  domain of the placed pod's node (symmetry: the placed pod's wishes count for the newcomer's node).

A term selects a pod when the pod's namespace is among the term's namespaces and its labels match the
selector. A node's raw score is the sum of the counts of the domains it belongs to (one per topology key it
carries); a node without the key is in no domain of that key. When no domain got a count, nothing is scored
(every node scores 0), as kube-scheduler skips the plugin for that pod.

`normalize` maps raw scores over the candidate nodes to 0..`MAX_NODE_SCORE` (max-min, truncated like
kube-scheduler's NormalizeScore; all equal -> 0).

Cost: the pod's own terms look only at the placed pods carrying the selector's first In/Exists label key;
the placed pods' terms toward the pod are looked up by the pod's labels (`PodIndex.terms_toward`); then each
candidate node costs one label lookup per topology key counted. Never placed pods x nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from operators.scheduler.decide.model import NodeState
from operators.scheduler.decide.placement.predicates import PodIndex
from operators.scheduler.decide.records import PodRecord, WeightedPodAffinityTerm

HARD_POD_AFFINITY_WEIGHT = 1  # kube-scheduler's default hardPodAffinityWeight, which KAI keeps
MAX_NODE_SCORE = 100

# topology key -> topology value -> count
TopologyCounts = dict[str, dict[str, int]]


def has_preference(rec: PodRecord, index: PodIndex | None) -> bool:
    """Whether scoring `rec` can give nodes different scores: it has preferred terms, or a placed pod has a
    term toward it. False means every node scores 0, so the plain node order stands."""
    c = rec.constraints
    if c.preferred_pod_affinity or c.preferred_pod_anti_affinity:
        return index is not None
    return index is not None and next(index.terms_toward(rec), None) is not None


def _add(counts: TopologyCounts, labels: Mapping[str, str], key: str, weight: int) -> None:
    value = labels.get(key)
    if value is None:
        return
    domain = counts.get(key)
    if domain is None:
        counts[key] = {value: weight}
    else:
        domain[value] = domain.get(value, 0) + weight


def _own_terms(counts: TopologyCounts, terms: Iterable[WeightedPodAffinityTerm], sign: int,
               nodes: Sequence[NodeState], index: PodIndex) -> None:
    for wt in terms:
        weight = sign * wt.weight
        key = wt.term.topology_key
        for _, node in index.matching(wt.term):
            _add(counts, nodes[node].rec.labels, key, weight)


def topology_counts(rec: PodRecord, nodes: Sequence[NodeState], index: PodIndex,
                    hard_weight: int = HARD_POD_AFFINITY_WEIGHT) -> TopologyCounts:
    """Per topology domain, the count `rec` gives it (see the module docstring). Empty: nothing to score."""
    counts: TopologyCounts = {}
    c = rec.constraints
    if c.preferred_pod_affinity:
        _own_terms(counts, c.preferred_pod_affinity, 1, nodes, index)
    if c.preferred_pod_anti_affinity:
        _own_terms(counts, c.preferred_pod_anti_affinity, -1, nodes, index)
    for _, node, term, weight, required in index.terms_toward(rec):
        if required:
            if hard_weight > 0:
                _add(counts, nodes[node].rec.labels, term.topology_key, hard_weight)
        else:
            _add(counts, nodes[node].rec.labels, term.topology_key, weight)
    return counts


def raw_scores(counts: TopologyCounts, candidates: Iterable[int], nodes: Sequence[NodeState]) -> dict[int, int]:
    """Node index -> sum of the counts of the node's domains."""
    out: dict[int, int] = {}
    items = list(counts.items())
    for i in candidates:
        labels = nodes[i].rec.labels
        score = 0
        for key, domain in items:
            value = labels.get(key)
            if value is not None:
                score += domain.get(value, 0)
        out[i] = score
    return out


def normalize(raw: Mapping[int, int]) -> dict[int, int]:
    """Raw scores -> 0..MAX_NODE_SCORE over the given nodes: (score - min) / (max - min), truncated; 0 when
    all are equal."""
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    spread = high - low
    if spread <= 0:
        return dict.fromkeys(raw, 0)
    return {i: int(MAX_NODE_SCORE * ((score - low) / spread)) for i, score in raw.items()}


def affinity_scores(rec: PodRecord, candidates: Iterable[int], nodes: Sequence[NodeState],
                    index: PodIndex | None, hard_weight: int = HARD_POD_AFFINITY_WEIGHT) -> dict[int, int]:
    """Normalized scores of the candidate nodes; empty when `rec` has nothing to score (all nodes 0)."""
    if index is None:
        return {}
    counts = topology_counts(rec, nodes, index, hard_weight)
    if not counts:
        return {}
    return normalize(raw_scores(counts, candidates, nodes))
