"""Session open takes the PodGroups in (namespace, name) order, sorted as two stable passes (name, then
namespace): the same list as one sort on the pair, for namespaces that prefix one another, names that sort
differently from their "namespace/name" keys, and records equal in both (kept in their given order)."""

from __future__ import annotations

import random
from dataclasses import replace
from operator import attrgetter

from sched_builders import PRIORITY_CLASSES, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.session.opening import by_namespace_name
from operators.scheduler.decide.snapshot import snapshot_from_objects

# '-' sorts before '/', '.' and '0' around it: "a-b/x" < "a/x" as strings, but ("a", "x") < ("a-b", "x").
_NAMESPACES = ("a", "a-b", "a.b", "a0", "ab", "b", "a-", "")
_NAMES = ("x", "x-1", "x/1", "x0", "y", "", "X")


def test_the_order_is_one_sort_on_the_pair() -> None:
    rnd = random.Random(26)
    snap = snapshot_from_objects([*PRIORITY_CLASSES, queue("q")] + [
        podgroup(name, namespace=ns) for ns in _NAMESPACES if ns for name in _NAMES if name])
    records = list(snap.podgroups)
    for _ in range(30):
        # Duplicates (equal namespace and name, distinct records) show the order of equal keys is kept.
        drawn = [rnd.choice(records) for _ in range(rnd.randrange(0, 60))]
        drawn += [replace(rnd.choice(drawn), last_start=str(i)) for i in range(len(drawn) // 4)] if drawn else []
        rnd.shuffle(drawn)
        got = by_namespace_name(drawn)
        want = sorted(drawn, key=attrgetter("namespace", "name"))
        assert [id(r) for r in got] == [id(r) for r in want]


def test_a_session_opens_its_jobs_in_namespace_then_name_order() -> None:
    objs = [*PRIORITY_CLASSES, queue("q")]
    pairs = [("a-b", "x"), ("a", "y"), ("a", "x-1"), ("b", "a"), ("a-b", "a"), ("a", "x")]
    for ns, name in pairs:
        objs.append(podgroup(name, namespace=ns))
        objs.append(pod(f"{name}-0", name, namespace=ns))
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    assert [(j.rec.namespace, j.rec.name) for j in s.jobs] == sorted(pairs)
    assert [j.key for j in s.jobs] == ["a/x", "a/x-1", "a/y", "a-b/a", "a-b/x", "b/a"]
