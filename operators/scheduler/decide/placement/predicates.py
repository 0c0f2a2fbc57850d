"""Node predicates: static ones (per signature, cached per cycle) and dynamic ones (ports, inter-pod affinity).

Reason strings are the short forms KAI aggregates into its per-node histogram.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from operators.scheduler.decide.model import NodeState
from operators.scheduler.decide.records import Constraints, PodAffinityTerm, PodRecord, Taint

NOT_READY = "node has NotReady condition"
UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
HOST_PORTS = "node(s) didn't have free ports for the requested pod ports"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
POD_NUMBER = "node(s) pod number exceeded"
_HARD_EFFECTS = ("NoSchedule", "NoExecute")
# The taint a cordoned node stands for (kube-scheduler's NodeUnschedulable): a pod tolerating it may land there.
CORDON_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def cordon_ok(c: Constraints, node: NodeState) -> bool:
    """Not cordoned, or the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule` (KAI v0.18)."""
    return not node.rec.unschedulable or any(t.tolerates(CORDON_TAINT) for t in c.tolerations)


def untolerated_taint(c: Constraints, node: NodeState) -> str | None:
    for taint in node.rec.taints:
        if taint.effect not in _HARD_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in c.tolerations):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


def node_affinity_ok(c: Constraints, node: NodeState) -> bool:
    labels = node.rec.labels
    for key, value in c.node_selector:
        if labels.get(key) != value:
            return False
    if c.node_affinity is not None:
        return any(term.matches(node.rec.name, labels) for term in c.node_affinity)
    return True


def missing_configmaps(c: Constraints, configmaps: frozenset[str]) -> str | None:
    missing = [name.split("/", 1)[1] for name in c.configmaps if name not in configmaps]
    return f"Missing required configmaps: [{' '.join(missing)}]" if missing else None


def static_reason(c: Constraints, node: NodeState, configmaps: frozenset[str]) -> str | None:
    """First failing static predicate, in KAI's filter order; None when the node passes."""
    if not node.rec.ready:
        return NOT_READY
    if not cordon_ok(c, node):
        return UNSCHEDULABLE
    if c.configmaps:
        missing = missing_configmaps(c, configmaps)
        if missing:
            return missing
    taint = untolerated_taint(c, node)
    if taint:
        return taint
    if not node_affinity_ok(c, node):
        return NODE_AFFINITY
    return None


def feasible_mask(c: Constraints, nodes: Sequence[NodeState], configmaps: frozenset[str],
                  base: bytearray) -> bytearray:
    """1 for nodes passing the static predicates. `base` marks Ready, schedulable, untainted nodes."""
    if c.configmaps and missing_configmaps(c, configmaps):
        return bytearray(len(nodes))
    if not c.node_selector and c.node_affinity is None:
        mask = bytearray(base)
        for node in nodes:  # only tainted or cordoned nodes need a second look
            if node.ok and (node.rec.taints or node.rec.unschedulable) and not mask[node.idx]:
                mask[node.idx] = untolerated_taint(c, node) is None and cordon_ok(c, node)
        return mask
    mask = bytearray(len(nodes))
    for node in nodes:
        if node.ok and node_affinity_ok(c, node) and untolerated_taint(c, node) is None and cordon_ok(c, node):
            mask[node.idx] = 1
    return mask


def ports_ok(c: Constraints, node: NodeState) -> bool:
    if not c.host_ports or not node.ports:
        return True
    for proto, port, ip in c.host_ports:
        for (uproto, uport, uip), count in node.ports.items():
            if count and uproto == proto and uport == port and (
                    uip == ip or "0.0.0.0" in (uip, ip)):
                return False
    return True


# A placed pod's term that scores nodes for others: (holder, its node index, term, signed weight, required).
HolderTerm = tuple[PodRecord, int, PodAffinityTerm, int, bool]


def _term_buckets(term: PodAffinityTerm) -> list[tuple[str, ...]]:
    """Where a holder's term is filed, so a pod finds the terms that may select it by its own labels."""
    for r in term.selector.requirements:
        if r.operator == "In":
            return [("in", r.key, v) for v in r.values]
        if r.operator == "Exists":
            return [("exists", r.key)]
    return [("any",)]


class PodIndex:
    """Placed pods by label key, for inter-pod (anti-)affinity. Built only when some pod has such terms.

    `anti_holders` are the placed pods with required anti-affinity (they filter nodes for others). The terms
    that score nodes for others (preferred affinity and anti-affinity, and required affinity) are filed by
    their selector's first In value or Exists key, so looking up the terms that may select a pod costs the
    pod's label count plus the terms found, not the number of placed pods.
    """

    def __init__(self) -> None:
        self.by_key: dict[str, dict[int, tuple[PodRecord, int]]] = {}
        self.by_label: dict[tuple[str, str], dict[int, tuple[PodRecord, int]]] = {}
        self.pods: dict[int, tuple[PodRecord, int]] = {}
        self.anti_holders: dict[int, tuple[PodRecord, int]] = {}
        self.holder_terms: dict[tuple[str, ...], dict[tuple[int, int], HolderTerm]] = {}
        self.n_score_holders = 0

    def add(self, rec: PodRecord, node: int) -> None:
        entry = (rec, node)
        if id(rec) in self.pods:
            self.remove(rec)
        self.pods[id(rec)] = entry
        by_key, by_label = self.by_key, self.by_label
        for key, value in rec.labels.items():
            by_key.setdefault(key, {})[id(rec)] = entry
            by_label.setdefault((key, value), {})[id(rec)] = entry
        c = rec.constraints
        if c.pod_anti_affinity:
            self.anti_holders[id(rec)] = entry
        scoring = _scoring_terms(rec)
        if scoring:
            self.n_score_holders += 1
            for i, (term, weight, required) in enumerate(scoring):
                for bucket in _term_buckets(term):
                    self.holder_terms.setdefault(bucket, {})[(id(rec), i)] = (rec, node, term, weight, required)

    def remove(self, rec: PodRecord) -> None:
        if self.pods.pop(id(rec), None) is None:
            return
        for key, value in rec.labels.items():
            bucket = self.by_key.get(key)
            if bucket:
                bucket.pop(id(rec), None)
            bucket = self.by_label.get((key, value))
            if bucket:
                bucket.pop(id(rec), None)
        self.anti_holders.pop(id(rec), None)
        scoring = _scoring_terms(rec)
        if scoring:
            self.n_score_holders -= 1
            for i, (term, _, _) in enumerate(scoring):
                for where in _term_buckets(term):
                    filed = self.holder_terms.get(where)
                    if filed is not None:
                        filed.pop((id(rec), i), None)
                        if not filed:
                            del self.holder_terms[where]

    def terms_toward(self, rec: PodRecord) -> Iterator[HolderTerm]:
        """The scoring terms of placed pods that select `rec` (namespace and selector), each once."""
        if not self.n_score_holders:
            return
        filed = self.holder_terms
        buckets: list[tuple[str, ...]] = [("any",)]
        for key, value in rec.labels.items():
            buckets.append(("in", key, value))
            buckets.append(("exists", key))
        for bucket in buckets:
            for entry in filed.get(bucket, {}).values():
                term = entry[2]
                if rec.namespace in term.namespaces and term.selector.matches(rec.labels):
                    yield entry

    def matching(self, term: PodAffinityTerm) -> Iterator[tuple[PodRecord, int]]:
        """Placed pods (with their node index) that `term` selects, each once.

        Only the pods carrying one of the values of the selector's first In requirement (or else the key of its
        first Exists requirement) are looked at; a selector with neither (empty, or only NotIn/DoesNotExist)
        can select unlabelled pods too, so it looks at every pod.
        """
        groups: list[dict[int, tuple[PodRecord, int]]] = []
        for r in term.selector.requirements:
            if r.operator == "In":
                # A pod has one value per key: the groups of distinct values are disjoint.
                groups = [g for v in dict.fromkeys(r.values) if (g := self.by_label.get((r.key, v)))]
                break
            if r.operator == "Exists":
                groups = [g] if (g := self.by_key.get(r.key)) else []
                break
        else:
            groups = [self.pods]
        namespaces, matches = term.namespaces, term.selector.matches
        for group in groups:
            for rec, node in group.values():
                if rec.namespace in namespaces and matches(rec.labels):
                    yield rec, node

    def matching_nodes(self, term: PodAffinityTerm) -> list[int]:
        return list(dict.fromkeys(node for _, node in self.matching(term)))


def _scoring_terms(rec: PodRecord) -> list[tuple[PodAffinityTerm, int, bool]]:
    """(term, signed weight, required) of a pod's terms that score nodes for other pods."""
    c = rec.constraints
    if not (c.pod_affinity or c.preferred_pod_affinity or c.preferred_pod_anti_affinity):
        return []
    out = [(t, 0, True) for t in c.pod_affinity]
    out.extend((w.term, w.weight, False) for w in c.preferred_pod_affinity)
    out.extend((w.term, -w.weight, False) for w in c.preferred_pod_anti_affinity)
    return out


def _domain(labels: Mapping[str, str], key: str) -> str | None:
    return labels.get(key)


def interpod_reason(rec: PodRecord, node: NodeState, nodes: Sequence[NodeState], index: PodIndex) -> str | None:
    c = rec.constraints
    labels = node.rec.labels
    for term in c.pod_affinity:
        value = _domain(labels, term.topology_key)
        matches = index.matching_nodes(term)
        if not matches:
            # The first pod of a self-affine group may go anywhere its topology key exists.
            if value is not None and rec.namespace in term.namespaces and term.selector.matches(rec.labels):
                continue
            return POD_AFFINITY
        if value is None or not any(_domain(nodes[m].rec.labels, term.topology_key) == value for m in matches):
            return POD_AFFINITY
    for term in c.pod_anti_affinity:
        value = _domain(labels, term.topology_key)
        if value is None:
            continue
        if any(_domain(nodes[m].rec.labels, term.topology_key) == value for m in index.matching_nodes(term)):
            return POD_ANTI_AFFINITY
    for other, other_node in index.anti_holders.values():
        for term in other.constraints.pod_anti_affinity:
            if rec.namespace not in term.namespaces or not term.selector.matches(rec.labels):
                continue
            value = _domain(nodes[other_node].rec.labels, term.topology_key)
            if value is not None and _domain(labels, term.topology_key) == value:
                return EXISTING_ANTI_AFFINITY
    return None
