"""Session open's per-job identity: each job's key is its PodGroup's "namespace/name" (formatted once per record,
kept right when a record is replaced), and a PodGroup without SubGroups gets one default podset whose minimum is
its minMember, at least 1."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.session.accounting import DEFAULT_SUBGROUP
from operators.scheduler.decide.snapshot import snapshot_from_objects


def test_each_job_key_is_its_podgroups_namespace_and_name() -> None:
    objs = [*PRIORITY_CLASSES, node("n0"), queue("q")]
    for ns in ("a", "b"):
        for g in ("x", "y"):
            objs.append(podgroup(g, namespace=ns))
            objs.append(pod(f"{g}-0", g, namespace=ns))
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    assert sorted(j.key for j in s.jobs) == ["a/x", "a/y", "b/x", "b/y"]
    for j in s.jobs:
        assert j.key == f"{j.rec.namespace}/{j.rec.name}" == j.rec.key
        assert [t.rec.namespace for t in j.tasks] == [j.rec.namespace]


def test_a_replaced_podgroup_record_has_its_own_key() -> None:
    snap = snapshot_from_objects([*PRIORITY_CLASSES, queue("q"), podgroup("x", namespace="a")])
    pg = snap.podgroups[0]
    assert pg.key == "a/x"
    assert replace(pg, name="z").key == "a/z"
    assert replace(pg, namespace="c").key == "c/x"
    assert replace(pg, last_start="t").key == "a/x"
    assert replace(pg, name="z") != pg and replace(pg, last_start=pg.last_start) == pg


@pytest.mark.parametrize(("min_member", "want"), [(0, 1), (1, 1), (3, 3)])
def test_the_default_podsets_minimum_is_min_member_at_least_one(min_member: int, want: int) -> None:
    objs = [*PRIORITY_CLASSES, node("n0"), queue("q"), podgroup("g", min_member=min_member), pod("g-0", "g")]
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    (job,) = s.jobs
    (ps,) = job.podsets
    assert (ps.name, ps.min_available) == (DEFAULT_SUBGROUP, want)
    # Straight from the record, below the parser's floor: what the open derives, not what the parser allows.
    for raw, floor in ((-2, 1), (0, 1), (2, 2)):
        snap = replace(s.snapshot, podgroups=tuple(replace(p, min_member=raw) for p in s.snapshot.podgroups))
        (j,) = Session(snap, SchedulerConfig(), 1e9).jobs
        assert j.podsets[0].min_available == floor
