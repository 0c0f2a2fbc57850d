"""KAI v0.18 ordering and reclaim features, as `kai simulate` scenarios: the gpujoborder victim tie-break and
the opt-in `queuePriorityInQuotaReclaim`."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.framework import PluginSetting
from operators.scheduler.decide.plugins.proportion.fairshare import ShareInput, divide
from operators.scheduler.decide.records import UNLIMITED

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
