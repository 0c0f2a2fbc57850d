"""The SubGroup tree's gang rule: minMember at the leaves, minSubGroup at every level above."""

from __future__ import annotations

from operators.scheduler.decide.plugins.subgroups.tree import DEFAULT_LEAF, ROOT, build_tree
from operators.scheduler.decide.records import SubGroupSpec, podgroup_record


def leaves(n: int, size: int = 2, parent: str = "", prefix: str = "w") -> list[SubGroupSpec]:
    return [SubGroupSpec(f"{prefix}{i}", size, parent) for i in range(n)]


def test_without_subgroups_the_podgroup_is_one_leaf_with_its_min_member() -> None:
    tree = build_tree((), min_member=3)
    assert tree.leaves == (DEFAULT_LEAF,) and not tree.has_subgroups
    assert not tree.satisfied({DEFAULT_LEAF: 2})
    assert tree.satisfied({DEFAULT_LEAF: 3})
    assert tree.minimum_pods() == 3
    assert tree.explain({DEFAULT_LEAF: 1}) == "the PodGroup needs 3 pods, 1 allocated"


def test_without_min_sub_group_every_child_is_needed() -> None:
    tree = build_tree(leaves(2))
    assert not tree.satisfied({"w0": 2, "w1": 1})
    assert tree.satisfied({"w0": 2, "w1": 2})
    assert tree.minimum_pods() == 4


def test_min_sub_group_three_of_four_leaves() -> None:
    tree = build_tree(leaves(4), min_sub_group=3)
    assert tree.root.need == 3
    assert not tree.satisfied({"w0": 2, "w1": 2, "w2": 1, "w3": 1})
    assert tree.satisfied({"w0": 2, "w1": 2, "w3": 2})
    assert tree.minimum_pods() == 6
    # Cheapest: keep the satisfied leaves, then the one closest to its minimum (ties in spec order).
    plan = tree.plan({"w0": 2, "w2": 1})
    assert plan.feasible and dict(plan.missing) == {"w0": 0, "w1": 2, "w2": 1} and plan.cost == 3
    assert tree.explain({"w0": 2, "w2": 1}) == (
        "the PodGroup needs 3 of its 4 child SubGroups to meet their minimum, 1 do (w0); "
        "SubGroup w2 needs 2 pods, 1 allocated; SubGroup w1 needs 2 pods, 0 allocated")


def test_a_leaf_without_enough_pods_is_not_chosen() -> None:
    tree = build_tree(leaves(4), min_sub_group=3)
    # w1 has a single pod left: the plan takes w0, w2, w3.
    plan = tree.plan({}, available={"w0": 2, "w1": 1, "w2": 2, "w3": 2})
    assert plan.feasible and list(plan.missing) == ["w0", "w2", "w3"]
    short = tree.plan({}, available={"w0": 2, "w1": 1, "w2": 1, "w3": 2})
    assert not short.feasible
    assert tree.explain({}, available={"w0": 2, "w1": 1, "w2": 1, "w3": 2}, what="exist") == (
        "the PodGroup needs 3 of its 4 child SubGroups to meet their minimum, 0 do; "
        "SubGroup w0 needs 2 pods, 0 exist; SubGroup w3 needs 2 pods, 0 exist; "
        "SubGroup w1 needs 2 pods, 0 exist and only 1 more exist")


def test_pod_cost_steers_the_choice() -> None:
    tree = build_tree(leaves(3, size=1), min_sub_group=1)
    assert list(tree.plan({}).missing) == ["w0"]
    assert list(tree.plan({}, pod_cost={"w0": 8, "w1": 4, "w2": 1}).missing) == ["w2"]


def test_zero_is_a_fully_elastic_level() -> None:
    tree = build_tree(leaves(3), min_sub_group=0)
    assert tree.satisfied({})
    assert tree.minimum_pods() == 0
    assert tree.explain({}) == ""


def test_two_levels_are_gated_at_every_level() -> None:
    # The PodGroup needs 2 of 3 racks; rack-a needs 1 of its 2 leaves, rack-b both, rack-c 0 (elastic).
    specs = [SubGroupSpec("rack-a", 1, "", 1), SubGroupSpec("rack-b", 1, ""), SubGroupSpec("rack-c", 1, "", 0),
             *leaves(2, parent="rack-a", prefix="a"), *leaves(2, parent="rack-b", prefix="b"),
             *leaves(1, parent="rack-c", prefix="c")]
    tree = build_tree(specs, min_sub_group=2)
    assert tree.leaves == ("a0", "a1", "b0", "b1", "c0")
    assert tree.nodes["rack-b"].need == 2
    # rack-c is satisfied with nothing; rack-a needs one full leaf.
    assert not tree.satisfied({"a0": 1})
    assert tree.satisfied({"a1": 2})
    assert tree.satisfied({"b0": 2, "b1": 2, "a0": 0}) and tree.satisfied_children({"b0": 2, "b1": 2}, ROOT) == 2
    assert not tree.satisfied({"b0": 2})
    assert tree.minimum_pods() == 2
    assert list(tree.plan({}).missing) == ["a0"]  # rack-c needs no leaf
    assert tree.explain({"a0": 1}) == (
        "the PodGroup needs 2 of its 3 child SubGroups to meet their minimum, 1 do (rack-c); "
        "SubGroup rack-a needs 1 of its 2 child SubGroups to meet their minimum, 0 do; SubGroup a0 needs 2 pods, "
        "1 allocated")


def test_a_min_sub_group_above_the_children_is_never_met_and_says_so() -> None:
    tree = build_tree(leaves(2), min_sub_group=3)
    assert not tree.satisfied({"w0": 2, "w1": 2})
    assert not tree.plan({"w0": 2, "w1": 2}).feasible
    assert tree.explain({"w0": 2, "w1": 2}) == (
        "the PodGroup needs 3 child SubGroups to meet their minimum but has only 2 (minSubGroup 3 can never be met)")


def test_unknown_parents_and_cycles_hang_from_the_root() -> None:
    tree = build_tree([SubGroupSpec("a", 1, "b"), SubGroupSpec("b", 1, "a"), SubGroupSpec("c", 1, "nope")])
    assert set(tree.root.children) >= {"c"}
    assert set(tree.leaves) | {n for n in tree.nodes if tree.nodes[n].children} >= {"a", "b", "c"}
    assert tree.satisfied({leaf: 1 for leaf in tree.leaves})


def test_records_parse_min_sub_group_and_optional_min_member() -> None:
    rec = podgroup_record({"metadata": {"name": "pg", "namespace": "ns"}, "spec": {
        "minSubGroup": 1, "subGroups": [{"name": "p", "minSubGroup": 2}, {"name": "x", "parent": "p", "minMember": 3},
                                        {"name": "y", "parent": "p", "minMember": 1}]}})
    assert rec.min_sub_group == 1
    assert rec.subgroups[0] == SubGroupSpec("p", 1, "", 2)
    tree = build_tree(rec.subgroups, rec.min_member, rec.min_sub_group)
    assert tree.leaves == ("x", "y") and tree.minimum_pods() == 4
    assert tree.explain({"x": 3}) == (
        "the PodGroup needs 1 of its 1 child SubGroups to meet their minimum, 0 do; "
        "SubGroup p needs 2 of its 2 child SubGroups to meet their minimum, 1 do (x); SubGroup y needs 1 pods, "
        "0 allocated")


def test_plans_list_every_feasible_choice_cheapest_first_starting_with_plan() -> None:
    # Two racks (one needed); rack-a needs both its leaves, rack-b one of its two.
    specs = [SubGroupSpec("rack-a", 0, "", None), SubGroupSpec("rack-b", 0, "", 1),
             SubGroupSpec("a0", 2, "rack-a"), SubGroupSpec("a1", 2, "rack-a"),
             SubGroupSpec("b0", 3, "rack-b"), SubGroupSpec("b1", 1, "rack-b")]
    tree = build_tree(specs, 1, 1)
    plans = tree.plans({"a0": 2})
    assert [(dict(p.missing), p.cost) for p in plans] == [({"b1": 1}, 1.0), ({"a0": 0, "a1": 2}, 2.0),
                                                           ({"b0": 3}, 3.0)]
    assert dict(plans[0].missing) == dict(tree.plan({"a0": 2}).missing)
    # A leaf without enough pods is never part of a plan; a limit keeps the cheapest.
    assert [dict(p.missing) for p in tree.plans({"a0": 2}, {"a1": 2, "b0": 0, "b1": 1}, limit=1)] == [{"b1": 1}]
    assert [dict(p.missing) for p in tree.plans({}, {"a0": 0, "a1": 0, "b0": 0, "b1": 0})] == []
