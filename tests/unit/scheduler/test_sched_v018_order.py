"""KAI v0.18 ordering and reclaim features, as `kai simulate` scenarios: the gpujoborder victim tie-break, and
the opt-in `queuePriorityInQuotaReclaim` and `steadyFairShareReclaim` proportion arguments, and the opt-in
back-off of failed scenario searches (`scenarioSearchBudgets`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.framework import PluginSetting
from operators.scheduler.decide.plugins.proportion.fairshare import QueueSpec, ShareInput, divide, fair_shares
from operators.scheduler.decide.plugins.proportion.steady import steady_shares
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.searchbackoff import Backoff, bounds
from operators.scheduler.decide.shardconfig import unhonoured_fields
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.units import GPU
from operators.scheduler.shell.simulate import run_simulation

LATER = "2025-01-01T01:00:00Z"
OLD = "2025-01-01T00:00:00Z"
NEWER = "2025-01-01T00:10:00Z"


def running(name: str, group: str, node_name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, group, gpus=gpus, node_name=node_name, phase="Running", **kw)


def preempt_config(mode: str | None) -> SchedulerConfig:
    """allocate + preempt, with gpujoborder enabled in `mode` (None: not configured, KAI's default)."""
    plugins: tuple[PluginSetting, ...] = ()
    if mode is not None:
        plugins = (PluginSetting("gpujoborder", enabled=True, arguments={"mode": mode} if mode else {}),)
    return SchedulerConfig(actions=("allocate", "preempt"), plugins=plugins)


def two_victims(small_created: str, large_created: str) -> list[dict[str, Any]]:
    """One node of 4 GPUs held by two equal-priority jobs (1 and 3 GPUs); a higher-priority 1-GPU preemptor.
    Evicting either victim frees enough, so only the victim order decides which goes."""
    return [node("n1", gpus=4), queue("q", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            podgroup("small", "q", created=small_created), running("small-0", "small", "n1", gpus=1,
                                                                   created=small_created),
            podgroup("large", "q", created=large_created), running("large-0", "large", "n1", gpus=3,
                                                                   created=large_created),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]


@pytest.mark.parametrize(("mode", "small_created", "large_created", "evicted"), [
    # Without the plugin the newest victim goes first.
    (None, NEWER, OLD, "small-0"),
    (None, OLD, NEWER, "large-0"),
    # evict-larger-first (the default mode): the job with more GPUs goes first, whatever the ages.
    ("", NEWER, OLD, "large-0"),
    ("evict-larger-first", NEWER, OLD, "large-0"),
    ("evict-larger-first", OLD, NEWER, "large-0"),
    # evict-smaller-first: the job with fewer GPUs goes first.
    ("evict-smaller-first", OLD, NEWER, "small-0"),
    ("evict-smaller-first", NEWER, OLD, "small-0"),
    # An unknown mode falls back to evict-larger-first, as KAI's does.
    ("prefer-larger", NEWER, OLD, "large-0"),
])
def test_gpu_tie_break_between_equal_priority_victims(mode: str | None, small_created: str, large_created: str,
                                                      evicted: str) -> None:
    d = cycle(two_victims(small_created, large_created), preempt_config(mode))
    assert [e.pod for e in d.evictions] == [evicted]
    assert [p.pod for p in d.pipelined] == ["p-0"]


def test_priority_decides_before_gpus() -> None:
    """The lower-priority victim (train, 50) goes first although the other (75) holds more GPUs and is newer
    (KAI: the job order's rules, priority first, are compared before any victim-order plugin)."""
    objs = [node("n1", gpus=4), queue("q", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            podgroup("small", "q"), running("small-0", "small", "n1", gpus=1),
            podgroup("large", "q", priority_class="build-preemptible", created=NEWER),
            running("large-0", "large", "n1", gpus=3, created=NEWER),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, preempt_config("evict-larger-first"))
    assert [e.pod for e in d.evictions] == ["small-0"]


def test_pending_job_order_is_unchanged() -> None:
    """The plugin orders victims only: two pending jobs of equal priority are still tried oldest first."""
    objs = [node("n1", gpus=2), queue("q", gpu=(2, -1, 1)), *PRIORITY_CLASSES,
            podgroup("small", "q", created=OLD), pod("small-0", "small", gpus=1, created=OLD),
            podgroup("large", "q", created=NEWER), pod("large-0", "large", gpus=2, created=NEWER)]
    d = cycle(objs, preempt_config("evict-larger-first"))
    assert [b.pod for b in d.binds] == ["small-0"]


@pytest.mark.parametrize(("mode", "evicted"), [(None, "small-0"), ("evict-larger-first", "large-0"),
                                               ("evict-smaller-first", "small-0")])
def test_gpu_tie_break_in_reclaim(mode: str | None, evicted: str) -> None:
    """q1 (no quota) runs two equal-priority jobs on the only node; q2's job reclaims one GPU from it."""
    objs = [node("n1", gpus=4), queue("q1", gpu=(0, -1, 1)), queue("q2", gpu=(1, -1, 1)), *PRIORITY_CLASSES,
            podgroup("large", "q1", created=OLD), running("large-0", "large", "n1", gpus=3, created=OLD),
            podgroup("small", "q1", created=NEWER), running("small-0", "small", "n1", gpus=1, created=NEWER),
            podgroup("p", "q2", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    plugins = (PluginSetting("gpujoborder", enabled=True, arguments={"mode": mode}),) if mode else ()
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim"), plugins=plugins))
    assert [e.pod for e in d.evictions] == [evicted]
    assert all(e.action == "reclaim" for e in d.evictions)


# --- queuePriorityInQuotaReclaim (proportion argument, opt-in) ---------------------------------------------------

def in_quota_objects(high_priority: int = 200, high_quota: float = 2) -> list[dict[str, Any]]:
    """2 GPUs; q-low (priority 100, quota 2) runs two 1-GPU jobs, within its quota; q-high (quota 2) waits with a
    1-GPU job. The quotas add up to more than the cluster."""
    return [node("n1", gpus=2), *PRIORITY_CLASSES,
            queue("q-low", gpu=(2, -1, 1), priority=100), queue("q-high", gpu=(high_quota, -1, 1),
                                                                 priority=high_priority),
            podgroup("a", "q-low", created=OLD), running("a-0", "a", "n1", created=OLD),
            podgroup("b", "q-low", created=NEWER), running("b-0", "b", "n1", created=NEWER),
            podgroup("p", "q-high", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]


def proportion_config(**arguments: Any) -> SchedulerConfig:
    return config_from_mapping({"plugins": {"proportion": {"arguments": arguments}}},
                               SchedulerConfig(actions=("allocate", "reclaim")))


def test_in_quota_work_is_protected_by_default() -> None:
    d = cycle(in_quota_objects(), proportion_config())
    assert not d.evictions


@pytest.mark.parametrize("flag", ["true", "True", "1", "t", True])
def test_higher_priority_queue_reclaims_in_quota_work_with_the_flag(flag: object) -> None:
    d = cycle(in_quota_objects(), proportion_config(queuePriorityInQuotaReclaim=flag))
    assert [e.pod for e in d.evictions] == ["b-0"]  # the newest of the equal victims
    assert [p.pod for p in d.pipelined] == ["p-0"]
    assert d.evictions[0].action == "reclaim"


def test_equal_queue_priority_does_not_reclaim_in_quota_work() -> None:
    d = cycle(in_quota_objects(high_priority=100), proportion_config(queuePriorityInQuotaReclaim="true"))
    assert not d.evictions


def test_the_reclaimer_must_stay_within_its_own_quota() -> None:
    """q-high's quota is 0: it may not take in-quota work even though it outranks q-low."""
    d = cycle(in_quota_objects(high_quota=0), proportion_config(queuePriorityInQuotaReclaim="true"))
    assert not d.evictions


def test_flag_value_is_parsed_as_kai_does() -> None:
    assert not proportion_config(queuePriorityInQuotaReclaim="false").queue_priority_in_quota_reclaim
    assert proportion_config(queuePriorityInQuotaReclaim="TRUE").queue_priority_in_quota_reclaim
    with pytest.raises(ValueError, match="queuePriorityInQuotaReclaim must be true or false"):
        proportion_config(queuePriorityInQuotaReclaim="yes")


def test_deserved_band_is_granted_by_priority_with_the_flag() -> None:
    """Quotas of 2 + 2 on 2 GPUs: without the flag each queue's fair share counts its whole quota (up to its
    request); with it the higher-priority queue is served first and the lower one gets what is left."""
    low = ShareInput("low", 2, UNLIMITED, 1.0, 2, 100)
    high = ShareInput("high", 2, UNLIMITED, 1.0, 1, 200)
    assert divide(2, [low, high]) == {"low": 2, "high": 1}
    assert divide(2, [low, high], priority_ordered=True) == {"low": 1, "high": 1}


# --- steadyFairShareReclaim (proportion argument, opt-in) --------------------------------------------------------

def at(minute: int) -> str:
    return f"2025-01-01T00:{minute:02d}:00Z"


def weighted_queues() -> list[dict[str, Any]]:
    """Three queues with quota 0 and over-quota weight 1 (B idle): steady fair shares of 10 GPUs each on 30."""
    return [queue(n, gpu=(0, -1, 1)) for n in ("qa", "qb", "qc")]


def fragmented_cluster() -> list[dict[str, Any]]:
    """The design's example on 30 GPUs (10 nodes of 3): qa runs 18 (six 3-GPU jobs, n0-n5), qc runs 9 and waits
    with a 2-GPU pod; the 3 free GPUs are one per node (n6-n8), so the pod fits nowhere."""
    objs: list[dict[str, Any]] = [*(node(f"n{i}", gpus=3) for i in range(10)), *PRIORITY_CLASSES,
                                  *weighted_queues()]
    for i in range(6):
        objs += [podgroup(f"a{i}", "qa", created=at(i)), running(f"a{i}-0", f"a{i}", f"n{i}", gpus=3, created=at(i))]
    for i, (node_name, gpus) in enumerate((("n6", 2), ("n7", 2), ("n8", 2), ("n9", 3))):
        objs += [podgroup(f"c{i}", "qc", created=at(10 + i)),
                 running(f"c{i}-0", f"c{i}", node_name, gpus=gpus, created=at(10 + i))]
    return [*objs, podgroup("p", "qc", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]


def steady_config(**arguments: Any) -> SchedulerConfig:
    return config_from_mapping({"plugins": {"proportion": {"arguments": arguments}}},
                               SchedulerConfig(actions=("allocate", "reclaim")))


def test_fragmented_free_gpus_leave_every_queue_within_its_fair_share() -> None:
    """Without the argument: fair shares equal demand (qa 18, qc 11), nobody is above theirs, qc's job waits."""
    d = cycle(fragmented_cluster(), steady_config())
    assert not d.evictions and not d.pipelined


def test_queue_below_its_steady_fair_share_reclaims_from_one_above() -> None:
    """qc (9 of its 10) reclaims qa's newest job: qa keeps 15 >= 10, and qc at 11 (1.1) stays less saturated than
    qa (1.5)."""
    d = cycle(fragmented_cluster(), steady_config(steadyFairShareReclaim="true"))
    assert [e.pod for e in d.evictions] == ["a5-0"]
    assert [(p.pod, p.node) for p in d.pipelined] == [("p-0", "n5")]
    assert "above its steady fair share of 10 GPU" in d.evictions[0].message


def test_cpu_only_jobs_do_not_use_the_steady_path() -> None:
    objs = [o for o in fragmented_cluster() if o["metadata"]["name"] != "p-0"]
    objs.append(pod("p-0", "p", gpus=0, cpu="200", created=LATER))  # fits no node: CPU-only, so no steady path
    d = cycle(objs, steady_config(steadyFairShareReclaim="true"))
    assert not d.evictions


def test_victim_queue_keeps_its_steady_fair_share() -> None:
    """On 30 GPUs (15 nodes of 2): qa runs 13 (a 4-GPU gang, newest, on n0-n1; 1-GPU jobs on n2-n9 and n14), qc
    runs 8 and waits with a 2-GPU pod. qa's surplus is 3: its newest job, the gang, would take it below 10 and is
    passed over for its newest 1-GPU job, whose node then has room."""
    objs: list[dict[str, Any]] = [*(node(f"n{i}", gpus=2) for i in range(15)), *PRIORITY_CLASSES,
                                  *weighted_queues()]
    for i, n in enumerate([2, 3, 4, 5, 6, 7, 8, 9, 14]):
        objs += [podgroup(f"a{i}", "qa", created=at(i)), running(f"a{i}-0", f"a{i}", f"n{n}", created=at(i))]
    objs += [podgroup("gang", "qa", 2, created=at(30)),
             running("gang-0", "gang", "n0", gpus=2, created=at(30)),
             running("gang-1", "gang", "n1", gpus=2, created=at(30))]
    for i in range(4):
        objs += [podgroup(f"c{i}", "qc", created=at(40 + i)),
                 running(f"c{i}-0", f"c{i}", f"n{10 + i}", gpus=2, created=at(40 + i))]
    objs += [podgroup("p", "qc", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]
    d = cycle(objs, steady_config(steadyFairShareReclaim="true"))
    assert [e.pod for e in d.evictions] == ["a8-0"]
    assert ("p-0", "n14") in [(p.pod, p.node) for p in d.pipelined]
    assert not cycle(objs, steady_config()).evictions


def test_steady_shares_follow_weights_not_demand() -> None:
    """A queue with an over-quota weight and a finite quota counts as asking for the whole cluster; one with
    unlimited quota (qd) keeps its real demand."""
    specs = {n: QueueSpec(n, "", (q, UNLIMITED, UNLIMITED), (UNLIMITED,) * 3, (1.0, 1.0, 1.0), (r * GPU, 0, 0))
             for n, q, r in (("qa", 0, 18), ("qb", 0, 0), ("qc", 0, 11), ("qd", UNLIMITED, 0))}
    total = (30 * GPU, 0, 0)
    assert {n: v[0] // GPU for n, v in fair_shares(specs, total).items()} == {"qa": 18, "qb": 0, "qc": 11, "qd": 0}
    assert {n: v[0] // GPU for n, v in steady_shares(specs, total).items()} == {"qa": 10, "qb": 10, "qc": 10,
                                                                                "qd": 0}


# --- failed-search back-off (scenarioSearchBudgets, opt-in) ------------------------------------------------------

def preempt_fails(preemptor_gpus: int = 4) -> list[dict[str, Any]]:
    """One 2-GPU node held by a train job; an inference job of the same queue (quota 8) asks for more than any
    node has, so its preempt search fails (evicting the victim is simulated, and still nothing fits)."""
    return [node("n1", gpus=2), queue("q", gpu=(8, -1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q"), running("v-0", "v", "n1", gpus=2),
            podgroup("p", "q", priority_class="inference", created=LATER),
            pod("p-0", "p", gpus=preemptor_gpus, created=LATER)]


def backoff_config(**budgets: Any) -> SchedulerConfig:
    return config_from_mapping({"scenarioSearchBudgets": budgets}, SchedulerConfig(actions=("allocate", "preempt")))


def run(objs: list[dict[str, Any]], config: SchedulerConfig, now: float, table: Any = None) -> Any:
    snapshot = snapshot_from_objects(objs)
    if table:
        snapshot = replace(snapshot, search_backoff=table)
    return run_cycle(snapshot, config, now)


def test_failed_search_backs_off_doubling_up_to_the_maximum() -> None:
    config = backoff_config(minFailedSearchBackoff={"preempt": "10s"}, maxFailedSearchBackoff={"preempt": "25s"})
    key = ("preempt", "uid-p")
    t0 = 1e9
    d = run(preempt_fails(), config, t0)
    assert d.search_outcomes == [("preempt", "uid-p", False)]
    assert d.search_backoff == {key: Backoff(t0 + 10, 10)}
    # Within the back-off the job is not searched again, and its back-off stands.
    d = run(preempt_fails(), config, t0 + 5, d.search_backoff)
    assert d.search_outcomes == []
    assert d.search_backoff == {key: Backoff(t0 + 10, 10)}
    # Once it ends, the next failure doubles it, and the maximum caps it.
    d = run(preempt_fails(), config, t0 + 10, d.search_backoff)
    assert d.search_outcomes == [("preempt", "uid-p", False)]
    assert d.search_backoff == {key: Backoff(t0 + 30, 20)}
    d = run(preempt_fails(), config, t0 + 30, d.search_backoff)
    assert d.search_backoff == {key: Backoff(t0 + 55, 25)}
    # A search that solves the job clears its back-off.
    d = run(preempt_fails(preemptor_gpus=1), config, t0 + 55, d.search_backoff)
    assert [e.pod for e in d.evictions] == ["v-0"]
    assert d.search_backoff == {}


def test_backoff_is_off_by_default_and_per_action() -> None:
    d = run(preempt_fails(), SchedulerConfig(actions=("allocate", "preempt")), 1e9)
    assert not d.search_outcomes and d.search_backoff == {}
    # `default` applies to every action without its own setting; 0 turns one action off; max defaults to min.
    config = backoff_config(minFailedSearchBackoff={"default": "1m", "preempt": "0s"})
    assert run(preempt_fails(), config, 1e9).search_backoff == {}
    config = backoff_config(minFailedSearchBackoff={"default": "1m"})
    assert run(preempt_fails(), config, 1e9).search_backoff == {("preempt", "uid-p"): Backoff(1e9 + 60, 60)}
    assert bounds({"default": 60.0}, {}, "reclaim") == (60.0, 60.0)
    assert bounds({"reclaim": 10.0}, {"reclaim": 5.0}, "reclaim") == (10.0, 10.0)


def test_a_deleted_podgroup_leaves_the_table() -> None:
    config = backoff_config(minFailedSearchBackoff={"preempt": "10s"})
    d = run(preempt_fails(), config, 1e9)
    assert d.search_backoff
    gone = [o for o in preempt_fails() if o["metadata"]["name"] not in ("p", "p-0")]
    assert run(gone, config, 1e9 + 1, d.search_backoff).search_backoff == {}


def test_reclaim_job_without_victims_backs_off() -> None:
    """KAI counts a reclaim search that finds no victim at all as failed: q1 runs within its quota, so nothing of
    it may be reclaimed."""
    objs = [node("n1", gpus=1), queue("q1", gpu=(1, -1, 1)), queue("q2", gpu=(1, -1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q1"), running("v-0", "v", "n1"),
            podgroup("p", "q2", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    config = config_from_mapping({"scenarioSearchBudgets": {"minFailedSearchBackoff": {"reclaim": "30s"}}},
                                 SchedulerConfig(actions=("allocate", "reclaim")))
    assert run(objs, config, 1e9).search_backoff == {("reclaim", "uid-p"): Backoff(1e9 + 30, 30)}


def test_search_budget_fields_other_than_the_backoff_are_named_not_honoured() -> None:
    spec = {"scenarioSearchBudgets": {"minFailedSearchBackoff": {"default": "10s"}, "maxJobSearchDuration": "1s"}}
    assert unhonoured_fields(spec) == ["spec.scenarioSearchBudgets.maxJobSearchDuration"]
    with pytest.raises(ValueError, match=r"scenarioSearchBudgets\.minFailedSearchBackoff must map action names"):
        config_from_mapping({"scenarioSearchBudgets": {"minFailedSearchBackoff": "10s"}})


# --- KAI's victim and pipelined-placement order ------------------------------------------------------------------

def test_kai_consolidate_and_reclaim_scenario() -> None:
    """KAI's integration scenario "4 jobs of queue0 - 3 running 1 pending will consolidate, 1 pending job from
    queue1 - reclaim": two 4-GPU nodes; queue0 (quota 4) runs job0 (2 GPUs, node0), job1 (2, node1) and job2 (1,
    node1) and waits with a 3-GPU job; queue1 (quota 4) waits with a 4-GPU job. KAI empties node1 for queue1:
    job1 moves to node0, job2 is evicted. Evicting only job0 would free node0 as well, but KAI validates the
    scenario after re-placing the victims that fit elsewhere (in job order, older first), and the victims are
    taken newest first."""
    objs = [node("node0", gpus=4), node("node1", gpus=4), queue("queue0", gpu=(4, -1, 1)),
            queue("queue1", gpu=(4, -1, 1)), *PRIORITY_CLASSES]
    for i, (node_name, gpus) in enumerate((("node0", 2), ("node1", 2), ("node1", 1))):
        objs += [podgroup(f"running_job{i}", "queue0", created=at(i)),
                 running(f"running_job{i}-0", f"running_job{i}", node_name, gpus=gpus, created=at(i))]
    objs += [podgroup("pending_job0", "queue0", created=at(3)), pod("pending_job0-0", "pending_job0", gpus=3,
                                                                    created=at(3)),
             podgroup("pending_job1", "queue1", created=at(4)), pod("pending_job1-0", "pending_job1", gpus=4,
                                                                    created=at(4))]
    result = run_simulation(objs, None, now=1.8e9, cycles=2)
    assert {p["pod"]: (p["status"], p["node"]) for p in result["placement"]} == {
        "running_job0-0": ("Running", "node0"), "running_job1-0": ("Running", "node0"),
        "running_job2-0": ("Pending", ""), "pending_job0-0": ("Pending", ""), "pending_job1-0": ("Running", "node1")}
