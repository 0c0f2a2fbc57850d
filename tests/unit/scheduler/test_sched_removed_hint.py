"""What left since the last snapshot (`Snapshot.removed`): the live loop's views say it exactly, and the carried
session open (decide/session/persist.py) checks it, so a list that misses a record still opens exactly."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from sched_builders import node, pod, podgroup
from test_sched_persist import CONFIG, NOW, base, finish, one, state

from operators.core.cache import NODES, PODGROUPS, PODS, Informer
from operators.scheduler.decide.cycle import run_carried_cycle
from operators.scheduler.decide.session import Carry, Session
from operators.scheduler.decide.simulation import apply_decisions
from operators.scheduler.decide.snapshot import Removed, Snapshot, snapshot_from_objects
from operators.scheduler.shell.snapshotview import SnapshotViews


def views() -> tuple[SnapshotViews, Informer[Any], Informer[Any], Informer[Any]]:
    nodes: Informer[Any] = Informer(object(), NODES, lambda o: o)
    pods: Informer[Any] = Informer(object(), PODS, lambda o: o)
    podgroups: Informer[Any] = Informer(object(), PODGROUPS, lambda o: o)
    return SnapshotViews(nodes, pods, podgroups), nodes, pods, podgroups


def snap(v: SnapshotViews) -> Snapshot:
    return v.snapshot(node_pool_label="pool", partition="")


def left_of(before: tuple[Any, ...], after: tuple[Any, ...]) -> set[int]:
    now = set(map(id, after))
    return {id(r) for r in before if id(r) not in now}


def test_the_views_say_every_record_object_that_left_an_equal_replacement_too() -> None:
    v, nodes, pods, podgroups = views()
    nodes.put("n0", one(node("n0")), "ADDED")
    recs = {f"p{i}": one(pod(f"p{i}", f"g{i}")) for i in range(4)}
    for k, r in recs.items():
        pods.put(k, r, "ADDED")
    for i in range(2):
        podgroups.put(f"g{i}", one(podgroup(f"g{i}")), "ADDED")
    first = snap(v)
    assert first.removed is not None and first.removed.pods == ()
    pods.put("p0", replace(recs["p0"], node_name="n0"), "MODIFIED")  # updated
    pods.put("p1", replace(recs["p1"]), "MODIFIED")  # equal, a new object: listeners hear nothing
    pods.put("p2", None, "DELETED")
    pods.put("p9", one(pod("p9", "g9")), "ADDED")
    podgroups.put("g1", None, "DELETED")
    second = snap(v)
    removed = second.removed
    assert removed is not None
    assert removed.pods_from is first.pods and removed.podgroups_from is first.podgroups
    assert {id(r) for r in removed.pods} == left_of(first.pods, second.pods) and len(removed.pods) == 3
    assert {id(r) for r in removed.podgroups} == left_of(first.podgroups, second.podgroups)
    third = snap(v)  # nothing written: the same tuples, nothing left
    assert third.pods is second.pods and third.removed is not None
    assert third.removed.pods_from is second.pods and third.removed.pods == ()


def churned(snapshot: Snapshot, rng: random.Random, serial: int) -> Snapshot:
    pods, podgroups = list(snapshot.pods), list(snapshot.podgroups)
    pods.pop(rng.randrange(len(pods)))  # a pod gone
    i = rng.randrange(len(pods))
    pods[i] = replace(pods[i])  # equal, a new object
    podgroups.append(one(podgroup(f"new{serial}", "q")))
    pods.append(one(pod(f"new{serial}-0", f"new{serial}", gpus=1)))
    j = rng.randrange(len(podgroups) - 1)
    podgroups[j] = replace(podgroups[j])  # a PodGroup re-made equal
    return replace(snapshot, pods=tuple(pods), podgroups=tuple(podgroups))


def told(before: Snapshot, after: Snapshot, drop: int | None) -> Snapshot:
    """`after` saying what left since `before`, the `drop`th record of the pods' list left unsaid."""
    now_pods, now_pgs = set(map(id, after.pods)), set(map(id, after.podgroups))
    pods = [p for p in before.pods if id(p) not in now_pods]
    if drop is not None:
        del pods[drop % len(pods)]
    return replace(after, removed=Removed(before.pods, tuple(pods), before.podgroups,
                                          tuple(g for g in before.podgroups if id(g) not in now_pgs)))


def open_with(snapshot: Snapshot, carry: Carry) -> tuple[Carry, bool]:
    """Open carried, compare with a fresh open field by field, finish the cycle; whether it diffed in full."""
    fresh = Session(snapshot, CONFIG, NOW)
    expected = state(fresh)
    fresh.release()
    session = Session(snapshot, CONFIG, NOW, carry)
    opened = session.carrying.opened
    assert opened is not None and opened.rebuilt_jobs >= 0  # opened from the previous session's objects
    diffed = opened.diffed
    assert state(session) == expected
    return finish(session)[1], diffed


def test_a_told_open_equals_a_fresh_one_and_a_list_missing_a_record_is_caught() -> None:
    rng = random.Random(8)
    for drop in (None, 0, 1):
        snapshot = snapshot_from_objects(base())
        decisions, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
        for step in range(4):
            after = churned(apply_decisions(snapshot, decisions), rng, step)
            after = told(snapshot, after, drop)
            carry, diffed = open_with(after, carry)
            assert diffed == (drop is not None)  # told everything: no full diff; a record unsaid: found by it
            snapshot = after
            decisions, carry = run_carried_cycle(snapshot, CONFIG, NOW, carry)


def test_a_list_from_another_snapshot_is_not_used() -> None:
    snapshot = snapshot_from_objects(base())
    _, carry = run_carried_cycle(snapshot, CONFIG, NOW, None)
    after = churned(snapshot, random.Random(3), 0)
    exact = told(snapshot, after, None).removed
    assert exact is not None
    # The same records said to have left, but of an equal copy of the previous pods: not that snapshot's list.
    other = replace(after, removed=replace(exact, pods_from=tuple(list(snapshot.pods))))
    carry, diffed = open_with(other, carry)
    assert diffed


def test_a_view_keeps_what_left_only_up_to_the_tuple_it_last_returned() -> None:
    """A standby's views are never read: they keep nothing however many records are replaced; a read view keeps at
    most as many as its last tuple (a list that falls short is checked by the carried open: the tests above)."""
    v, nodes, pods, _ = views()
    nodes.put("n0", one(node("n0")), "ADDED")
    for i in range(3):
        pods.put(f"p{i}", one(pod(f"p{i}", "g0")), "ADDED")
    for _ in range(50):  # a standby: updates, never a snapshot
        for i in range(3):
            pods.put(f"p{i}", replace(pods.store[f"p{i}"]), "MODIFIED")
    first = snap(v)
    assert first.removed is not None and first.removed.pods == ()
    for _ in range(50):
        pods.put("p0", replace(pods.store["p0"]), "MODIFIED")
    second = snap(v)
    assert second.removed is not None and len(second.removed.pods) == len(first.pods)
