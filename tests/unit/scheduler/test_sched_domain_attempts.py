"""A topology-bound gang whose first pod's shape fits no node tries one domain, not each (actions/common.py
`subsets_to_try`): the same decisions and explanations as trying every domain, and a shape that fits some domain
is still tried domain after domain. And a job's domain plan is made again only when a domain total of a level it
reads changed value (plugins/topology/plugin.py), with the same decisions as planning every time."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from sched_builders import node, podgroup, queue
from test_sched_topology import binds, gang, racks, running, simulate, unschedulable

from operators.scheduler.decide.actions import common
from operators.scheduler.decide.model import Task


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Attempts per PodGroup (each call of `_attempt` is one node subset tried)."""
    counts: dict[str, int] = {}
    real = common._attempt

    def attempt(session: Any, stmt: Any, job: Any, tasks: list[Task], pipeline_only: bool) -> bool:
        counts[job.rec.name] = counts.get(job.rec.name, 0) + 1
        return real(session, stmt, job, tasks, pipeline_only)

    monkeypatch.setattr(common, "_attempt", attempt)
    return counts


def _every_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    def every(failed: set[tuple[object, ...]], tasks: list[Task], subsets: list[Iterable[int]],
              ) -> list[Iterable[int]]:
        return subsets

    monkeypatch.setattr(common, "subsets_to_try", every)


def _cluster() -> list[dict[str, Any]]:
    # Four racks of four 4-GPU nodes (16 GPUs each): a 2 x 8-GPU gang fits every rack's total and no node.
    # `first` (unconstrained, older) fails on the whole cluster first, so its shape is in the failed memory.
    first = gang("first", 1, 8, created="2025-01-01T00:00:00Z")
    first[0] = podgroup("first", "q", 1, created="2025-01-01T00:00:00Z")  # no topology constraint
    return [*racks(4, zones=2, per_zone=2, per_rack=4), queue("q"), *first,
            *gang("bound", 2, 8, required="rack", created="2025-01-02T00:00:00Z"),
            *gang("fits", 2, 4, required="rack", created="2025-01-03T00:00:00Z")]


def test_a_shape_that_fits_no_node_tries_one_domain_with_the_same_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counting(monkeypatch)
    once = simulate(_cluster(), actions=["allocate"])
    assert counts["bound"] == 1  # four racks are candidates; one attempt stands for them
    assert "bound-0" not in binds(once) and {"fits-0", "fits-1"} <= set(binds(once))
    message = unschedulable(once, "bound")["message"]
    assert "no domain of level rack could hold the job's pods on its nodes" in message
    counts.clear()
    _every_subset(monkeypatch)
    every = simulate(_cluster(), actions=["allocate"])
    assert counts["bound"] == 4
    assert json.dumps(every, sort_keys=True) == json.dumps(once, sort_keys=True)


def test_a_shape_that_failed_only_inside_a_domain_is_tried_in_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rack r0 is the fullest with 6 GPUs free, 2 per node: a 2 x 3-GPU gang fits its total, not its nodes. That
    # failure inside a domain is not the failed memory's (it says nothing of the other racks): r1 is tried next.
    objs = [*racks(4, zones=1, per_zone=2, per_rack=3), queue("q"),
            *(p for i in range(3) for p in running(f"r0-{i}", f"z0-r0-{i}", 2)),
            *gang("g", 2, 3, required="rack", created="2025-01-02T00:00:00Z")]
    counts = _counting(monkeypatch)
    result = simulate(objs, actions=["allocate"])
    assert counts["g"] == 2
    assert {n.rsplit("-", 1)[0] for p, n in binds(result).items() if p.startswith("g-")} == {"z0-r1"}


def test_the_rule_keeps_every_subset_unless_the_first_shape_failed() -> None:
    task = Task.__new__(Task)
    object.__setattr__(task, "fit_key", ("shape",))
    subsets: list[Iterable[int]] = [range(0, 2), range(2, 4), range(4, 6)]
    assert common.subsets_to_try(set(), [task], subsets) == subsets
    assert common.subsets_to_try({("other",)}, [task], subsets) == subsets
    assert common.subsets_to_try({("shape",)}, [task], subsets) == [range(4, 6)]
    assert common.subsets_to_try({("shape",)}, [task], subsets[:1]) == subsets[:1]


# --- the plans a session makes again on unchanged domain totals ----------------------------------------------------


def _counting_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from operators.scheduler.decide.plugins.topology import plugin

    made = [0]
    real = plugin.plan_domains

    def plan_domains(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(plugin, "plan_domains", plan_domains)
    return made


def _split_racks(between: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Two racks of two 4-GPU nodes, each rack with 3 + 1 GPUs free: a 2 x 2-GPU gang fits each rack's total, places
    # its first pod and fails at the second (rolled back: the totals are the same again). `between` is tried after
    # gang a and before gang b (same shape and constraint); one 4-GPU node carries no topology label.
    objs = [*racks(4, zones=1, per_zone=2, per_rack=2), node("loose", gpus=4), queue("q")]
    for r in range(2):
        objs += running(f"h{r}a", f"z0-r{r}-0", 1) + running(f"h{r}b", f"z0-r{r}-1", 3)
    return [*objs, *gang("a", 2, 2, required="rack", created="2025-01-02T00:00:00Z"), *between,
            *gang("b", 2, 2, required="rack", created="2025-01-04T00:00:00Z")]


def test_a_plan_is_made_again_only_when_a_domain_total_of_its_level_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting_plans(monkeypatch)
    alone = simulate(_split_racks([]), actions=["allocate"])
    assert made[0] == 1 and not {"a-0", "b-0"} & set(binds(alone))  # b reuses a's plan: no total changed
    made[0] = 0
    outside = simulate(_split_racks(gang("c", 1, 4, created="2025-01-03T00:00:00Z")), actions=["allocate"])
    assert binds(outside).get("c-0") == "loose" and made[0] == 1  # a node in no rack changed: still reused
    made[0] = 0
    inside = simulate(_split_racks(gang("c", 1, 1, created="2025-01-03T00:00:00Z")), actions=["allocate"])
    assert binds(inside)["c-0"].startswith("z0-r") and made[0] == 2  # a rack's total changed: b plans again


def test_reused_plans_decide_as_plans_made_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from operators.scheduler.decide.plugins.topology import plugin

    cases = [_split_racks([]), _split_racks(gang("c", 1, 1, created="2025-01-03T00:00:00Z")), _cluster()]
    memo = [json.dumps(simulate(c), sort_keys=True) for c in cases]
    real = plugin.Topology._plan

    def every(self: plugin.Topology, *args: Any) -> Any:
        self._plans.clear()
        return real(self, *args)

    monkeypatch.setattr(plugin.Topology, "_plan", every)
    assert [json.dumps(simulate(c), sort_keys=True) for c in cases] == memo
