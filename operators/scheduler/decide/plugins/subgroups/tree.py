"""The SubGroup tree of a PodGroup and its gang rule (minMember / minSubGroup), as pure functions.

A PodGroup is a tree: the root (the PodGroup itself), parent SubGroups and leaf SubGroups. A leaf is satisfied
when at least `min_member` of its pods count; a parent (or the root) when at least `min_sub_group` of its direct
children are satisfied (None: all of them; 0: always, an elastic subtree). A PodGroup without SubGroups is a root
with one leaf, `default`, holding all its pods with the PodGroup's minMember.

What counts is up to the caller: allocated pods decide whether the job is satisfied (may run, is not stale);
alive pods that are not gated decide whether it is ready (enough pods exist to ever satisfy it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from operators.scheduler.decide.records import SubGroupSpec

ROOT = ""
DEFAULT_LEAF = "default"
INFEASIBLE = math.inf
# plans(): children combinations looked at per level (the cheapest children first), so wide trees stay cheap.
MAX_COMBINATIONS = 64


@dataclass(frozen=True, slots=True)
class TreeNode:
    name: str  # ROOT for the PodGroup itself
    children: tuple[str, ...]  # spec order; empty for a leaf
    min_member: int  # a leaf's minimum of pods
    min_sub_group: int | None  # a parent's minimum of satisfied children; None: all

    @property
    def is_leaf(self) -> bool:
        return not self.children and self.name != ROOT

    @property
    def need(self) -> int:
        """How many children must be satisfied (a parent); may exceed the children, then never met."""
        return len(self.children) if self.min_sub_group is None else self.min_sub_group


@dataclass(frozen=True, slots=True)
class Plan:
    """The cheapest way to satisfy the tree from the given counts.

    `feasible`: some choice of children satisfies every level with the pods that exist. `missing`: pods each
    chosen leaf still lacks (0 for a chosen leaf already satisfied), in tree order; `cost`: their sum.
    """

    feasible: bool
    missing: Mapping[str, int]
    cost: float


@dataclass(frozen=True, slots=True)
class SubGroupTree:
    nodes: Mapping[str, TreeNode]
    leaves: tuple[str, ...]  # tree order (depth first, children in spec order)
    has_subgroups: bool = True  # False: the implicit `default` leaf of a PodGroup without SubGroups

    @property
    def root(self) -> TreeNode:
        return self.nodes[ROOT]

    def label(self, name: str) -> str:
        return "the PodGroup" if name == ROOT or not self.has_subgroups else f"SubGroup {name}"

    # --- the gang rule ---------------------------------------------------------------------------------

    def satisfied(self, counts: Mapping[str, int], name: str = ROOT) -> bool:
        """Whether `name` (default: the whole PodGroup) meets its minimum with `counts` pods per leaf."""
        node = self.nodes[name]
        if node.is_leaf:
            return counts.get(name, 0) >= node.min_member
        return self.satisfied_children(counts, name) >= node.need

    def satisfied_children(self, counts: Mapping[str, int], name: str) -> int:
        return sum(1 for child in self.nodes[name].children if self.satisfied(counts, child))

    def plan(self, counts: Mapping[str, int], available: Mapping[str, int] | None = None,
             pod_cost: Mapping[str, float] | None = None) -> Plan:
        """Which leaves must reach their minimum for the PodGroup to be satisfied, choosing at every level the
        cheapest children (fewest pods still missing, weighted by `pod_cost` per leaf; ties in spec order).

        `counts`: pods that count already, per leaf. `available`: pods that could still be added per leaf (the
        rest pending, alive and not gated); None: unbounded. A leaf whose pods cannot reach its minimum is
        infeasible and never chosen while a feasible sibling is left.
        """
        missing: dict[str, int] = {}
        cost = self._choose(ROOT, counts, available, pod_cost or {}, missing)
        ordered = {leaf: missing[leaf] for leaf in self.leaves if leaf in missing}
        return Plan(cost != INFEASIBLE, ordered, cost)

    def plans(self, counts: Mapping[str, int], available: Mapping[str, int] | None = None,
              pod_cost: Mapping[str, float] | None = None, limit: int = 8) -> list[Plan]:
        """The feasible ways to satisfy the PodGroup, cheapest first, at most `limit`: the first is `plan`'s
        choice (when that is feasible), the others choose other children somewhere in the tree. Arguments as
        for `plan`."""
        out = []
        for cost, _, missing in self._options(ROOT, counts, available, pod_cost or {}, max(limit, 1)):
            out.append(Plan(True, {leaf: missing[leaf] for leaf in self.leaves if leaf in missing}, cost))
        return out[:limit]

    def _options(self, name: str, counts: Mapping[str, int], available: Mapping[str, int] | None,
                 pod_cost: Mapping[str, float], limit: int) -> list[tuple[float, int, dict[str, int]]]:
        """Feasible choices under `name`: (cost, rank, missing pods per chosen leaf), cheapest first, ties in the
        order `plan` prefers (children by cost then spec order)."""
        node = self.nodes[name]
        if node.is_leaf:
            cost, short = self._leaf_cost(name, counts, available, pod_cost)
            return [] if cost == INFEASIBLE else [(cost, 0, {name: short})]
        if node.need > len(node.children):
            return []
        children = []
        for index, child in enumerate(node.children):
            options = self._options(child, counts, available, pod_cost, limit)
            if options:
                children.append((options[0][0], index, options))
        children.sort(key=lambda c: (c[0], c[1]))
        found: list[tuple[float, int, dict[str, int]]] = []
        combos = itertools.islice(itertools.combinations(children, node.need), MAX_COMBINATIONS)
        for combo in combos:
            for picks in itertools.islice(itertools.product(*(c[2] for c in combo)), MAX_COMBINATIONS):
                missing: dict[str, int] = {}
                cost = 0.0
                for option_cost, _, chosen in picks:
                    cost += option_cost
                    missing.update(chosen)
                found.append((cost, len(found), missing))
        found.sort(key=lambda f: (f[0], f[1]))
        return found[:limit]

    def _leaf_cost(self, name: str, counts: Mapping[str, int], available: Mapping[str, int] | None,
                   pod_cost: Mapping[str, float]) -> tuple[float, int]:
        short = max(0, self.nodes[name].min_member - counts.get(name, 0))
        if available is not None and short > available.get(name, 0):
            return INFEASIBLE, short
        return short * pod_cost.get(name, 1.0), short

    def _choose(self, name: str, counts: Mapping[str, int], available: Mapping[str, int] | None,
                pod_cost: Mapping[str, float], out: dict[str, int]) -> float:
        node = self.nodes[name]
        if node.is_leaf:
            cost, short = self._leaf_cost(name, counts, available, pod_cost)
            out[name] = short
            return cost
        if node.need > len(node.children):
            return INFEASIBLE
        options: list[tuple[float, int, dict[str, int]]] = []
        for index, child in enumerate(node.children):
            chosen: dict[str, int] = {}
            options.append((self._choose(child, counts, available, pod_cost, chosen), index, chosen))
        options.sort(key=lambda option: (option[0], option[1]))
        total = 0.0
        for cost, _, chosen in options[:node.need]:
            total += cost
            out.update(chosen)
        return total

    def minimum_pods(self) -> int:
        """The fewest pods that can satisfy the PodGroup (its gang minimum); 0 for a fully elastic one."""
        plan = self.plan({})
        return sum(plan.missing.values()) if plan.feasible else sum(
            self.nodes[leaf].min_member for leaf in self.leaves)

    # --- explanations ----------------------------------------------------------------------------------

    def explain(self, counts: Mapping[str, int], available: Mapping[str, int] | None = None,
                what: str = "allocated") -> str:
        """What keeps the PodGroup from being satisfied with `counts`, level by level ('' when it is)."""
        if self.satisfied(counts):
            return ""
        parts: list[str] = []
        self._explain(ROOT if self.has_subgroups else DEFAULT_LEAF, counts, available, what, parts)
        return "; ".join(parts)

    def _explain(self, name: str, counts: Mapping[str, int], available: Mapping[str, int] | None, what: str,
                 parts: list[str]) -> None:
        node = self.nodes[name]
        if node.is_leaf:
            have = counts.get(name, 0)
            text = f"{self.label(name)} needs {node.min_member} pods, {have} {what}"
            if available is not None and have + available.get(name, 0) < node.min_member:
                text += f" and only {available.get(name, 0)} more exist"
            parts.append(text)
            return
        done = [child for child in node.children if self.satisfied(counts, child)]
        n = len(node.children)
        if node.need > n:
            parts.append(f"{self.label(name)} needs {node.need} child SubGroups to meet their minimum but has only "
                         f"{n} (minSubGroup {node.need} can never be met)")
            return
        parts.append(f"{self.label(name)} needs {node.need} of its {n} child SubGroups to meet their minimum, "
                     f"{len(done)} do" + (f" ({', '.join(done)})" if done else ""))
        options = []
        for index, child in enumerate(node.children):
            if child in done:
                continue
            chosen: dict[str, int] = {}
            options.append((self._choose(child, counts, available, {}, chosen), index, child))
        options.sort(key=lambda option: (option[0], option[1]))
        for _, _, child in options[:node.need - len(done)]:
            self._explain(child, counts, available, what, parts)


def build_tree(subgroups: Sequence[SubGroupSpec], min_member: int = 1,
               min_sub_group: int | None = None) -> SubGroupTree:
    """The tree of a PodGroup from its SubGroups (spec order), spec.minMember and spec.minSubGroup.

    A SubGroup whose parent is unknown, or that sits on a parent cycle, hangs from the root (the webhook refuses
    both; this keeps a hand-written snapshot schedulable). A SubGroup named as nobody's parent is a leaf.
    """
    if not subgroups:
        leaf = TreeNode(DEFAULT_LEAF, (), max(min_member, 1), None)
        return SubGroupTree({ROOT: TreeNode(ROOT, (DEFAULT_LEAF,), 0, None), DEFAULT_LEAF: leaf}, (DEFAULT_LEAF,),
                            has_subgroups=False)
    specs: dict[str, SubGroupSpec] = {}
    for spec in subgroups:
        specs.setdefault(spec.name, spec)
    parent_of: dict[str, str] = {}
    for name, spec in specs.items():
        parent = spec.parent if spec.parent in specs else ROOT
        seen, current = {name}, parent
        while current != ROOT:
            if current in seen:
                parent = ROOT
                break
            seen.add(current)
            up = specs[current].parent
            current = up if up in specs else ROOT
        parent_of[name] = parent
    children: dict[str, list[str]] = {ROOT: []}
    for name in specs:
        children.setdefault(parent_of[name], []).append(name)
    nodes = {ROOT: TreeNode(ROOT, tuple(children[ROOT]), 0, min_sub_group)}
    for name, spec in specs.items():
        kids = tuple(children.get(name, ()))
        nodes[name] = TreeNode(name, kids, max(spec.min_member, 0) if not kids else 0,
                               spec.min_sub_group if kids else None)
    leaves: list[str] = []

    def walk(name: str) -> None:
        for child in nodes[name].children:
            if nodes[child].children:
                walk(child)
            else:
                leaves.append(child)

    walk(ROOT)
    return SubGroupTree(nodes, tuple(leaves))
