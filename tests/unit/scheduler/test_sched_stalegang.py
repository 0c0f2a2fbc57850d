"""stale-gang eviction: a gang below its minimum (no Succeeded pod) is evicted whole after the grace period."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sched_builders import cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.session import rfc3339

NOW = 1_800_000_000.0
STAMP = "kai.scheduler/stale-podgroup-timestamp"


def gang(stamp_age: float | None, members: int = 2, *, phases: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A 3-member gang with `members` running pods (others are gone); annotation `stamp_age` seconds old."""
    annotations = {STAMP: rfc3339(NOW - stamp_age)} if stamp_age is not None else {}
    objs: list[dict[str, Any]] = [node("n1", gpus=8), queue("q"),
                                  podgroup("g", "q", 3, annotations=annotations)]
    for i in range(members):
        objs.append(pod(f"g-{i}", "g", gpus=1, node_name="n1", phase="Running"))
    for j, phase in enumerate(phases):
        objs.append(pod(f"g-x{j}", "g", gpus=1, node_name="n1", phase=phase))
    return objs


@pytest.mark.parametrize(("stamp_age", "grace", "evicted", "stamp"), [
    (None, 60.0, False, "set"),  # first seen stale: stamped now, not evicted
    (30.0, 60.0, False, "kept"),
    (59.0, 60.0, False, "kept"),
    (60.0, 60.0, True, "kept"),
    (3600.0, 60.0, True, "kept"),
    (3600.0, -1.0, False, "kept"),  # negative grace period: never evicted
    (5.0, 0.0, True, "kept"),
])
def test_evicted_after_grace_and_not_before(stamp_age: float | None, grace: float, evicted: bool,
                                            stamp: str) -> None:
    d = cycle(gang(stamp_age), replace(SchedulerConfig(), stale_grace_period=grace), now=NOW)
    assert sorted(e.pod for e in d.evictions) == (["g-0", "g-1"] if evicted else [])
    stamps = [a for a in d.annotations if a.key == STAMP]
    assert stamps == [] if stamp == "kept" else [a.value for a in stamps] == [rfc3339(NOW)]
    if evicted:
        [s] = d.stale
        assert s.message == "Job is stale. 2 pods are active, minMember is 3"
        e = d.evictions[0]
        assert e.action == "stalegangeviction" and e.for_pod_group == ""
        assert e.message.startswith("Workload doesn't meet the minimum required number of pods (3), evicting "
                                    "remaining pod: ns/g-0. ")
        assert "Gang ns/g has had 2 of 3 required pods active" in e.message
    else:
        assert not d.stale


@pytest.mark.parametrize(("members", "phases"), [
    (3, ()),  # healthy again: the stamp is cleared
    (2, ("Succeeded",)),  # a succeeded member: the job is finishing, not stale
])
def test_not_stale_clears_the_stamp(members: int, phases: tuple[str, ...]) -> None:
    d = cycle(gang(3600.0, members, phases=phases), now=NOW)
    assert not d.evictions and not d.stale
    assert [(a.key, a.value) for a in d.annotations if a.key == STAMP] == [(STAMP, None)]


def test_subgroup_variant_of_the_messages() -> None:
    objs = [node("n1", gpus=8), queue("q"),
            podgroup("g", "q", 3, annotations={STAMP: rfc3339(NOW - 120)},
                     subgroups=[{"name": "head", "minMember": 1}, {"name": "workers", "minMember": 2}]),
            pod("head", "g", node_name="n1", phase="Running", subgroup="head"),
            pod("w-0", "g", gpus=1, node_name="n1", phase="Running", subgroup="workers")]
    d = cycle(objs, now=NOW)
    [s] = d.stale
    assert s.message == "Job is stale. 2 pods are active, minMember is 3, subGroup workers minMember is 2 and 1 " \
                        "pods are active"
    assert sorted(e.pod for e in d.evictions) == ["head", "w-0"]
    assert d.evictions[0].message.startswith(
        "Workload doesn't meet the minimum required number of pods (2) in sub-group workers, evicting remaining "
        "pod: ns/")
