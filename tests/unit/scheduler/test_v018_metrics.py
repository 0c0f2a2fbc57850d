"""issue 24's metrics from the pure core and the writer: why a preemption attempt failed (the
`preemption_failures/<reason>` counters a cycle hands to `kai_preemption_failures_total{reason}`), and the wait of a
PodGroup until its first start (`kai_queue_time_to_first_start_seconds{queue_name}`)."""

from __future__ import annotations

from typing import Any

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.shell import metrics

LATER = "2025-01-01T01:00:00Z"
PREEMPT_ONLY = SchedulerConfig(actions=("allocate", "preempt"))


def running(name: str, group: str, node_name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, group, gpus=gpus, node_name=node_name, phase="Running", **kw)


def contested(gpu_quota: int) -> list[dict[str, Any]]:
    """A 2-GPU node held by a preemptible 1-GPU job and an inference peer; an inference job asks for 2 GPUs."""
    return [node("n1", gpus=2), queue("q", gpu=(gpu_quota, -1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q"), running("v-0", "v", "n1", gpus=1),
            podgroup("peer", "q", priority_class="inference"), running("peer-0", "peer", "n1", gpus=1),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]


def failures(counters: dict[str, int]) -> dict[str, int]:
    return {k.removeprefix("preemption_failures/"): v for k, v in counters.items()
            if k.startswith("preemption_failures/")}


def test_a_successful_preemption_counts_no_failure() -> None:
    objs = [node("n1", gpus=2), queue("q", gpu=(2, -1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q"), running("v-0", "v", "n1", gpus=2),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=1, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert [e.pod for e in d.evictions] == ["v-0"]
    assert failures(d.counters) == {}


def test_no_scenario_fits_counts_generators_exhausted() -> None:
    # The only lower-priority victim holds 1 GPU of 2; the preemptor needs 2 and the other GPU is held by a job
    # of its own priority: no victim set frees enough (the quota of 4 leaves room for both inference jobs).
    d = cycle(contested(4), PREEMPT_ONLY)
    assert not d.evictions
    assert failures(d.counters) == {"generators_exhausted": 1}


def test_non_preemptible_over_quota_is_refused_before_the_search() -> None:
    # inference is non-preemptible: 1 GPU running plus 2 asked is over the queue's quota of 2, whatever leaves.
    d = cycle(contested(2), PREEMPT_ONLY)
    assert not d.evictions
    assert failures(d.counters) == {"non_preemptible_over_quota": 1}


def test_a_limit_no_victim_can_lift_counts_over_limit() -> None:
    # The queue's limit is 1 GPU: a 2-GPU preemptor is refused before any scenario is tried.
    objs = [node("n1", gpus=2), queue("q", gpu=(1, 1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q"), running("v-0", "v", "n1", gpus=1),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]
    d = cycle(objs, PREEMPT_ONLY)
    assert not d.evictions
    assert failures(d.counters) == {"over_limit": 1}


def test_record_cycle_and_first_start_feed_the_series() -> None:
    sample = metrics.PREEMPTION_FAILURES.labels("over_limit")._value.get()
    objs = [node("n1", gpus=2), queue("q", gpu=(1, 1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "q"), running("v-0", "v", "n1", gpus=1),
            podgroup("p", "q", priority_class="inference", created=LATER), pod("p-0", "p", gpus=2, created=LATER)]
    metrics.record_cycle(cycle(objs, PREEMPT_ONLY), 0.0, 0.0, 0.0)
    assert metrics.PREEMPTION_FAILURES.labels("over_limit")._value.get() == sample + 1
    metrics.record_first_start("team-metrics", created=100.0, now=103.5)
    metrics.record_first_start("team-metrics", created=100.0, now=50.0)  # a clock behind the creation: 0
    series = {s.name: s.value for m in metrics.FIRST_START_WAIT.collect() for s in m.samples
              if s.labels.get("queue_name") == "team-metrics" and s.labels.get("le") in (None, "1.0", "4.0")}
    assert series["kai_queue_time_to_first_start_seconds_count"] == 2
    assert series["kai_queue_time_to_first_start_seconds_sum"] == 3.5


def test_queue_usage_gauges_carry_the_usage_database_answer_not_the_allocation() -> None:
    # KAI's kai_queue_*_usage: the historical usage (time-based fair share), 0 for a queue it has none for, even
    # while that queue holds GPUs.
    objs = [node("n1", gpus=2), queue("used", gpu=(1, -1, 1)), queue("idle", gpu=(1, -1, 1)), *PRIORITY_CLASSES,
            podgroup("v", "idle"), running("v-0", "v", "n1", gpus=2)]
    metrics.record_queues(cycle(objs, PREEMPT_ONLY).queues)
    metrics.record_queue_usage({"used": (0.25, 0.5, 0.125)})

    def usage(resource: str, queue_name: str) -> float:
        return float(metrics.USAGE[resource].labels(queue_name, queue_name, "")._value.get())

    assert (usage("gpu", "used"), usage("cpu", "used"), usage("memory", "used")) == (0.25, 0.5, 0.125)
    assert usage("gpu", "idle") == 0.0
