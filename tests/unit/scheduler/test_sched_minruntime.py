"""Min-runtime: queue preemptMinRuntime / reclaimMinRuntime (inherited upward) protect recently started jobs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.core.api.queue import queue_record
from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.session import rfc3339

NOW = 1_800_000_000.0
LATER = "2025-01-01T01:00:00Z"
LAST_START = "kai.scheduler/last-start-timestamp"


def with_runtime(q: dict[str, Any], preempt: str | None = None, reclaim: str | None = None) -> dict[str, Any]:
    if preempt is not None:
        q["spec"]["preemptMinRuntime"] = preempt
    if reclaim is not None:
        q["spec"]["reclaimMinRuntime"] = reclaim
    return q


def started(age: float | None) -> dict[str, str]:
    return {LAST_START: rfc3339(NOW - age)} if age is not None else {}


def preempt_case(parent_rt: str | None, leaf_rt: str | None, age: float | None, members: int = 1,
                 min_member: int = 1, want: int = 1) -> list[dict[str, Any]]:
    objs = [node("n1", gpus=members), with_runtime(queue("dept"), preempt=parent_rt),
            with_runtime(queue("q", "dept", gpu=(4, -1, 1)), preempt=leaf_rt), *PRIORITY_CLASSES,
            podgroup("v", "q", min_member, annotations=started(age))]
    objs += [pod(f"v-{i}", "v", gpus=1, node_name="n1", phase="Running") for i in range(members)]
    objs += [podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=want, created=LATER)]
    return objs


@pytest.mark.parametrize(("parent_rt", "leaf_rt", "age", "evicted"), [
    (None, None, 10.0, True),  # no min-runtime anywhere
    ("60s", None, 30.0, False),  # inherited from the parent: protected
    ("60s", None, 90.0, True),  # ran long enough
    ("60s", "10s", 30.0, True),  # the leaf's own value wins over the parent's
    ("1m", "5m", 120.0, False),
    ("60s", None, None, True),  # no last-start annotation: not protected
])
def test_preempt_min_runtime(parent_rt: str | None, leaf_rt: str | None, age: float | None, evicted: bool) -> None:
    d = cycle(preempt_case(parent_rt, leaf_rt, age), SchedulerConfig(actions=("allocate", "preempt")), now=NOW)
    assert [e.pod for e in d.evictions] == (["v-0"] if evicted else [])


def test_default_from_config() -> None:
    cfg = config_from_mapping({"minRuntime": {"preemptMinRuntime": "2m"}, "args": {}},
                              SchedulerConfig(actions=("allocate", "preempt")))
    assert cfg.default_preempt_min_runtime == 120.0
    assert not cycle(preempt_case(None, None, 60.0), cfg, now=NOW).evictions
    assert cycle(preempt_case(None, None, 180.0), cfg, now=NOW).evictions


def test_protected_elastic_victim_loses_only_pods_above_min() -> None:
    objs = preempt_case("60s", None, 10.0, members=3, min_member=1, want=2)
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")), now=NOW)
    assert sorted(e.pod for e in d.evictions) == ["v-1", "v-2"]
    objs = preempt_case("60s", None, 10.0, members=3, min_member=1, want=3)
    assert not cycle(objs, SchedulerConfig(actions=("allocate", "preempt")), now=NOW).evictions


def reclaim_case(method_rt: dict[str, str | None], age: float) -> list[dict[str, Any]]:
    """dept{qa, qb} and top-level qc; qa runs 4 one-GPU jobs on 4 GPUs, qb (or qc) wants one."""
    objs = [node("n1", gpus=4), with_runtime(queue("dept", gpu=(0, -1, 1)), reclaim=method_rt.get("dept")),
            with_runtime(queue("qa", "dept", gpu=(0, -1, 1)), reclaim=method_rt.get("qa")),
            queue("qb", "dept", gpu=(2, -1, 1)), queue("qc", gpu=(2, -1, 1)), *PRIORITY_CLASSES]
    for i in range(4):
        objs += [podgroup(f"a{i}", "qa", annotations=started(age)),
                 pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n1", phase="Running")]
    return objs


@pytest.mark.parametrize(("reclaimer", "runtimes", "resolve", "evicted"), [
    ("qb", {"qa": "60s"}, "lca", False),  # LCA dept; victim-side child qa defines it
    ("qb", {"dept": "60s"}, "lca", False),  # walks up from qa to dept
    ("qc", {"qa": "60s"}, "lca", True),  # LCA is the root: starts at dept, qa's value is below it
    ("qc", {"qa": "60s"}, "queue", False),  # `queue`: from the victim's leaf upward
    ("qc", {"dept": "60s"}, "lca", False),
    ("qb", {}, "lca", True),
])
def test_reclaim_min_runtime_resolution(reclaimer: str, runtimes: dict[str, str | None], resolve: str,
                                        evicted: bool) -> None:
    objs = reclaim_case(runtimes, 30.0)
    objs += [podgroup("b", reclaimer, created=LATER), pod("b-0", "b", gpus=1, created=LATER)]
    cfg = replace(SchedulerConfig(actions=("allocate", "reclaim")), reclaim_min_runtime_resolve=resolve)
    d = cycle(objs, cfg, now=NOW)
    assert bool(d.evictions) is evicted


def test_queue_record_parses_durations() -> None:
    q = queue_record(with_runtime(queue("q"), preempt="1m30s", reclaim="bogus"))
    assert q.preempt_min_runtime == 90.0 and q.reclaim_min_runtime is None
    assert queue_record(queue("q")).preempt_min_runtime is None
