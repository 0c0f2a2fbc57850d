"""The plugin framework: the enabled set and order come from configuration; extension points change decisions."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, bound, cycle, gang, node, pod, podgroup, queue
from sched_extra_plugins import Recorder

from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.framework import Framework


def plugins(**entries: Any) -> SchedulerConfig:
    return config_from_mapping({"plugins": entries})


def test_an_extra_score_plugin_loaded_by_configuration_changes_placement() -> None:
    # Binpack puts a 1-GPU pod on the fuller node (b); the extra scorer prefers the labelled node (a).
    objs = [node("a", 8, labels={"fast": "yes"}), node("b", 4), queue("q"), podgroup("p"),
            pod("p", "p", gpus=1, labels={"wants": "fast"}), podgroup("o"), pod("o", "o", gpus=1)]
    assert bound(cycle(objs)) == {"p": "b", "o": "b"}
    cfg = plugins(preferlabel={"class": "sched_extra_plugins:PreferLabel",
                               "arguments": {"label": "fast", "weight": 100}})
    assert bound(cycle(objs, cfg)) == {"p": "a", "o": "b"}  # `o` asks for nothing: the indexed order


def test_a_weight_too_small_to_outweigh_node_availability_changes_nothing() -> None:
    objs = [node("a", 1, labels={"fast": "yes"}), node("b", 8), queue("q"), pod("r", None, gpus=1, node_name="a",
                                                                                  phase="Running"),
            podgroup("p"), pod("p", "p", gpus=1, labels={"wants": "fast"})]
    cfg = plugins(preferlabel={"class": "sched_extra_plugins:PreferLabel", "arguments": {"label": "fast",
                                                                                       "weight": 5}})
    assert bound(cycle(objs, cfg)) == {"p": "b"}  # a is full


def test_node_subsets_keep_a_gang_inside_one_subset_and_try_the_next() -> None:
    objs = [node("a1", 2, labels={"zone": "z1"}), node("a2", 2, labels={"zone": "z1"}),
            node("b1", 4, labels={"zone": "z2"}), node("b2", 4, labels={"zone": "z2"}), queue("q"),
            *gang("g", 3, gpus=2)]
    free = bound(cycle(objs))
    assert len(free) == 3 and {"a1", "a2"} <= set(free.values())  # binpack fills the small nodes first
    cfg = plugins(zones={"class": "sched_extra_plugins:ZoneSubsets", "arguments": {"zones": ["z1", "z2"]}})
    # z1 holds only two of the three pods: the whole gang goes to z2.
    assert set(bound(cycle(objs, cfg)).values()) == {"b1", "b2"}
    cfg = plugins(zones={"class": "sched_extra_plugins:ZoneSubsets", "arguments": {"zones": ["z1"]}})
    d = cycle(objs, cfg)
    assert not d.binds and [u.pod_group for u in d.unschedulable] == ["g"]


def test_a_job_gate_keeps_a_job_out_of_an_action() -> None:
    objs = [node("a"), queue("q"), podgroup("hold-1"), pod("h", "hold-1", gpus=1), podgroup("run-1"),
            pod("r", "run-1", gpus=1)]
    cfg = plugins(gate={"class": "sched_extra_plugins:NoAllocateFor",
                        "arguments": {"action": "allocate", "prefix": "hold"}})
    assert bound(cycle(objs, cfg)) == {"r": "a"}
    assert bound(cycle(objs)) == {"h": "a", "r": "a"}


def test_event_handlers_see_every_placement_and_its_rollback() -> None:
    Recorder.net.clear()
    Recorder.kinds.clear()
    # A 3-pod gang fits only partly: its placements are rolled back; the single pod stays.
    objs = [node("a", 2), queue("q"), *gang("g", 3, gpus=1), podgroup("s"), pod("s", "s", gpus=1)]
    d = cycle(objs, plugins(rec={"class": "sched_extra_plugins:Recorder"}))
    assert bound(d) == {"s": "a"}
    assert {k: v for k, v in Recorder.net.items() if v} == {"s": 1}
    assert "rollback" in Recorder.kinds and Recorder.kinds.count("allocate") >= 3


def test_disabling_priority_drops_it_from_job_order() -> None:
    objs = [node("a", 1), queue("q"), *PRIORITY_CLASSES,
            podgroup("old", created="2025-01-01T00:00:00Z"), pod("old", "old", gpus=1),
            podgroup("high", priority_class="inference", created="2025-01-02T00:00:00Z"), pod("high", "high", gpus=1)]
    assert bound(cycle(objs)) == {"high": "a"}
    assert bound(cycle(objs, plugins(priority={"enabled": False}))) == {"old": "a"}


def test_plugin_order_comes_from_priorities() -> None:
    default = [p.name for p in Framework.build(()).plugins]
    assert default[:2] == ["predicates", "backgroundpods"]
    assert [n for n in default if n in ("proportion", "semipreemptible", "priority")] == [
        "proportion", "semipreemptible", "priority"]
    cfg = plugins(elastic={"priority": 990})
    assert [p.name for p in Framework.build(cfg.plugins).plugins][:2] == ["elastic", "predicates"]


@pytest.mark.parametrize(("entries", "message"), [
    ({"mycustomplugin": {"priority": 1050}}, "unknown plugin 'mycustomplugin'"),
    ({"gang": {"enabled": False}}, "plugin gang cannot be disabled"),
    ({"x": {"class": "no_such_module:Thing"}}, "cannot import no_such_module"),
    ({"x": {"class": "sched_extra_plugins"}}, "'package.module:Class'"),
    ({"x": {"class": "sched_builders:node"}}, "is not a subclass"),
    ({"proportion": {"arguments": {"kValue": "lots"}}}, "kValue must be a number"),
    ({"x": {"class": "sched_extra_plugins:PreferLabel", "arguments": {"weight": "heavy"}}}, "plugins cannot start"),
])
def test_unusable_plugin_settings_are_refused_with_what_to_change(entries: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_mapping({"plugins": entries})


@pytest.mark.parametrize(("cls", "message"), [
    ("MisspeltPoint", r"plugins cannot start: plugin x: .*unexpected keyword argument 'node_filer'"),
    ("MisspeltMethod", "plugins cannot start: plugin x registers hook node_filter but does not implement filter_node"),
])
def test_a_misspelt_hook_is_an_error_when_the_configuration_loads(cls: str, message: str) -> None:
    # Hooks are registered explicitly (Plugin.hooks): a point that does not exist, or a registered object without
    # the point's method, stops the configuration from loading instead of being silently ignored.
    with pytest.raises(ValueError, match=message):
        config_from_mapping({"plugins": {"x": {"class": f"sched_extra_plugins:{cls}"}}})


def test_plugin_settings_of_layers_merge_per_plugin() -> None:
    base = plugins(minruntime={"enabled": False}, preferlabel={"class": "sched_extra_plugins:PreferLabel",
                                                              "arguments": {"label": "fast"}})
    cfg = config_from_mapping({"plugins": {"preferlabel": {"arguments": {"weight": 3}}}}, base)
    names = [p.name for p in Framework.build(cfg.plugins).plugins]
    assert "minruntime" not in names and "preferlabel" in names
    plugin = Framework.build(cfg.plugins).plugin("preferlabel")
    assert plugin is not None and plugin.arguments == {"label": "fast", "weight": 3}


class _Mark:
    """An action from outside the registry: records the jobs it saw."""

    name = "mark"
    enabled = True
    seen: list[str] = []

    def execute(self, session: Any) -> None:
        self.seen.extend(j.name for j in session.jobs)


def test_a_registered_action_is_configurable_by_name() -> None:
    from operators.scheduler.decide import actions

    with pytest.raises(ValueError, match="unknown actions: mark"):
        config_from_mapping({"actions": {"mark": {"priority": 600}}})
    actions.register_action(_Mark, 50)
    try:
        cfg = config_from_mapping({"actions": {"mark": {"priority": 600}}})
        assert cfg.actions[0] == "mark"
        _Mark.seen.clear()
        objs = [node("a"), queue("q"), podgroup("p"), pod("p", "p", gpus=1)]
        assert bound(cycle(objs, cfg)) == {"p": "a"} and _Mark.seen == ["p"]
    finally:
        del actions.ACTIONS["mark"], actions.PRIORITIES["mark"]


def _preempt_case() -> list[dict[str, Any]]:
    # n1 holds two 1-GPU train jobs; an inference job needs 1 GPU (one victim) and a 2-GPU one needs both.
    return [node("n1", 2), queue("q"), *PRIORITY_CLASSES,
            podgroup("v1", created="2025-01-01T00:00:00Z"), pod("v1", "v1", gpus=1, node_name="n1", phase="Running"),
            podgroup("v2", created="2025-01-01T00:01:00Z"), pod("v2", "v2", gpus=1, node_name="n1", phase="Running"),
            podgroup("p", priority_class="inference", created="2025-01-02T00:00:00Z"), pod("p", "p", gpus=1)]


def evicted(objs: list[dict[str, Any]], cfg: SchedulerConfig) -> list[str]:
    return sorted(e.pod for e in cycle(objs, cfg).evictions)


def test_victim_filters_and_job_gates_steer_disruptive_actions() -> None:
    preempt = config_from_mapping({"actions": {"consolidation": {"enabled": False}, "reclaim": {"enabled": False}}})
    objs = _preempt_case()
    default = evicted(objs, preempt)
    assert len(default) == 1
    spare = config_from_mapping({"plugins": {"spare": {"class": "sched_extra_plugins:Spare",
                                                       "arguments": {"spare": default}}}}, preempt)
    assert evicted(objs, spare) == sorted({"v1", "v2"} - set(default))
    both = config_from_mapping({"plugins": {"spare": {"class": "sched_extra_plugins:Spare",
                                                      "arguments": {"spare": ["v1", "v2"]}}}}, preempt)
    assert evicted(objs, both) == []
    gate = config_from_mapping({"plugins": {"gate": {"class": "sched_extra_plugins:NoAllocateFor",
                                                     "arguments": {"action": "preempt", "prefix": "p"}}}}, preempt)
    assert evicted(objs, gate) == []


def test_scenario_validators_refuse_scenarios() -> None:
    preempt = config_from_mapping({"actions": {"consolidation": {"enabled": False}, "reclaim": {"enabled": False}}})
    objs = [*_preempt_case()[:-1], pod("p", "p", gpus=2)]  # needs both victims
    assert evicted(objs, preempt) == ["v1", "v2"]
    one = config_from_mapping({"plugins": {"cap": {"class": "sched_extra_plugins:AtMostVictims",
                                                   "arguments": {"max": 1}}}}, preempt)
    assert evicted(objs, one) == []
    two = config_from_mapping({"plugins": {"cap": {"class": "sched_extra_plugins:AtMostVictims",
                                                   "arguments": {"max": 2}}}}, preempt)
    assert evicted(objs, two) == ["v1", "v2"]


def test_a_node_subset_given_again_reuses_its_masks() -> None:
    from operators.scheduler.decide.session import Session
    from operators.scheduler.decide.snapshot import snapshot_from_objects

    objs = [node("a"), node("b"), node("c"), queue("q"), podgroup("p"), pod("p", "p", gpus=1)]
    session = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    task = session.jobs[0].tasks[0]
    placer = session.placer
    placer.restrict([0, 2])
    first = placer.mask(task)
    assert list(first) == [1, 0, 1]
    placer.restrict([1])
    assert list(placer.mask(task)) == [0, 1, 0]
    placer.restrict(iter([2, 0]))  # the same subset as the first, in another order
    assert placer.mask(task) is first
    placer.restrict(None)
    assert list(placer.mask(task)) == [1, 1, 1]


def test_a_node_subset_as_a_tuple_or_a_range() -> None:
    from operators.scheduler.decide.session import Session
    from operators.scheduler.decide.snapshot import snapshot_from_objects

    objs = [node("a"), node("b"), node("c"), queue("q"), podgroup("p"), pod("p", "p", gpus=1)]
    session = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    task = session.jobs[0].tasks[0]
    placer = session.placer
    domain = (0, 2)
    placer.restrict(domain)
    first = placer.mask(task)
    assert list(first) == [1, 0, 1]
    placer.restrict((1,))
    assert list(placer.mask(task)) == [0, 1, 0]
    placer.restrict(domain)  # the same tuple again: found by identity
    assert placer.mask(task) is first
    placer.restrict((2, 0))  # another tuple of the same nodes: found by its indexes
    assert placer.mask(task) is first
    placer.restrict(range(1, 3))
    assert list(placer.mask(task)) == [0, 1, 1]


def test_plugins_with_nothing_to_do_in_a_session_leave_its_hooks() -> None:
    from operators.scheduler.decide.plugins.gang.plugin import Gang
    from operators.scheduler.decide.session import Session
    from operators.scheduler.decide.snapshot import snapshot_from_objects

    plain = [node("a"), queue("q"), podgroup("p"), pod("p", "p", gpus=1)]
    fw = Session(snapshot_from_objects(plain), SchedulerConfig(), 1e9).framework
    # No topology constraint, no minSubGroup, no preemption delay, no inter-pod affinity: none of their hooks.
    assert not fw.node_subsets and not fw.job_gates and not fw.scorers and not fw.node_filters
    assert not fw.on_allocate and not fw.on_deallocate and not fw.session_close
    assert type(fw.gang) is Gang
    # Each feature in use keeps its plugin.
    delayed = podgroup("d")
    delayed["spec"]["preemptionDelay"] = "60s"
    elastic = podgroup("e", subgroups=[{"name": "x", "minMember": 1}, {"name": "y", "minMember": 1}])
    elastic["spec"]["minSubGroup"] = 1
    fw = Session(snapshot_from_objects([*plain, delayed, pod("d", "d", gpus=1), elastic,
                                        pod("e", "e", gpus=1, subgroup="x")]), SchedulerConfig(), 1e9).framework
    assert len(fw.job_gates) == 1 and fw.gang is fw.plugin("subgroups")
    assert not fw.node_subsets and not fw.scorers
