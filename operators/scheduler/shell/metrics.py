"""The scheduler's metrics (KAI's names): definitions, and what a cycle and its writes record in them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import Gauge, Histogram

from operators.core.metrics import Counter
from operators.core.units import GB, MB, MILLI, MS_PER_SECOND
from operators.scheduler.decide.decisions import Decisions, QueueShare, Unschedulable

_BUCKETS = [5 * 2**k for k in range(10)]

E2E_LATENCY = Gauge("kai_e2e_scheduling_latency_milliseconds", "Duration of the last scheduling cycle")
OPEN_SESSION = Gauge("kai_open_session_latency_milliseconds", "Snapshot assembly time of the last cycle")
CLOSE_SESSION = Gauge("kai_close_session_latency_milliseconds", "Time spent writing the last cycle's decisions")
ACTION_LATENCY = Gauge("kai_action_scheduling_latency_milliseconds", "Decision time of the last cycle",
                       ["action"])
TASK_LATENCY = Histogram("kai_task_scheduling_latency_milliseconds", "Pod creation to BindRequest",
                         buckets=_BUCKETS)
BIND_LATENCY = Histogram("kai_task_bind_latency_milliseconds",
                         "BindRequest creation to the pod bound, as the pod informer sees it", buckets=_BUCKETS)
PLUGIN_LATENCY = Gauge("kai_plugin_scheduling_latency_milliseconds", "Plugin time of the last cycle",
                       ["plugin", "OnSession"])
SIMULATIONS = Counter("kai_scenarios_simulation_by_action", "Victim scenarios simulated", ["action"])
FILTERED = Counter("kai_scenarios_filtered_by_action", "Victim scenarios refused without simulation",
                   ["action"])
EVICTED_PODS = Counter("kai_pod_group_evicted_pods_total", "Pods evicted per PodGroup",
                       ["podgroup", "namespace", "uid", "nodepool", "action"])
DUPLICATES = Counter("kai_scenarios_duplicate_by_action",
                     "Victim scenarios skipped as equivalent to one that already failed for the same job", ["action"])
_COUNTERS = {"scenarios_simulation": SIMULATIONS, "scenarios_filtered": FILTERED, "scenarios_duplicate": DUPLICATES}
for _action in ("reclaim", "preempt", "consolidation"):  # the solver's actions: exposed from the start, at 0
    SIMULATIONS.labels(_action)
    FILTERED.labels(_action)
    DUPLICATES.labels(_action)
# KAI PR #2111's counter (no KAI release has it yet): failed preemption attempts by reason. The reasons are KAI's
# scenario-search results, plus the checks no victim can change; exposed at 0 from the start.
PREEMPTION_FAILURES = Counter("kai_preemption_failures_total", "Preemption attempts that failed, by reason",
                              ["reason"])
for _reason in ("generators_exhausted", "deadline_exhausted", "non_preemptible_over_quota", "over_limit"):
    PREEMPTION_FAILURES.labels(_reason)
# Ours (no KAI release or main has one): per queue, PodGroup creation to its first start (the first cycle that
# starts it, when the scheduler stamps its first last-start-timestamp). Seconds, 1s to ~4.5h.
FIRST_START_WAIT = Histogram("kai_queue_time_to_first_start_seconds",
                             "PodGroup creation to its first start, per queue", ["queue_name"],
                             buckets=[2**k for k in range(15)])
SCHEDULED = Counter("kai_podgroups_scheduled_by_action", "PodGroups that got pods bound", ["action"])
ACTED_ON = Counter("kai_podgroups_acted_on_by_action", "PodGroups evicted from", ["action"])
EVICTIONS = Counter("kai_total_preemption_attempts", "Pods evicted by the scheduler")
# KAI v0.18's eviction counters: victim pods of each solver action whose delete the API server accepted (a pod
# already gone, a refused request, and evictions outside these actions are not counted); exposed at 0 from start.
ACTION_EVICTIONS = {action: Counter(f"kai_total_{name}_evictions", f"Victim pods evicted by the {action} action")
                    for action, name in (("preempt", "preemption"), ("reclaim", "reclaim"),
                                         ("consolidation", "consolidation"))}
# KAI (since v0.17): `queue_name` kept for old dashboards, `queue_metadata_name` (the join key with the
# queue-controller's metrics) and `queue_display_name` (spec.displayName, empty when unset).
QUEUE_LABELS = ["queue_name", "queue_metadata_name", "queue_display_name"]
FAIR_SHARE = {r: Gauge(f"kai_queue_fair_share_{n}", f"Fair share of {r}", QUEUE_LABELS)
              for r, n in (("gpu", "gpu"), ("cpu", "cpu_cores"), ("memory", "memory_gb"))}
# KAI's usage gauges carry each queue's historical usage as the usage database answered it (time-based fair share:
# a fraction of the cluster's capacity over the window), 0 without a usage database; allocation is the
# queue-controller's `kai_queue_allocated_*`.
USAGE = {r: Gauge(f"kai_queue_{r}_usage", f"Historical {r} usage of the queue (usage database; 0 without one)",
                  QUEUE_LABELS) for r in ("gpu", "cpu", "memory")}
DESERVED = Gauge("kai_queue_deserved_gpus_scheduler", "Deserved GPUs as the scheduler computes them", QUEUE_LABELS)
_QUEUE_SERIES: dict[str, tuple[str, str, str]] = {}  # queue -> its label values (a renamed display drops the old)
# KAI times its usage-database queries here; without a usage database (time-based fair share is not
# supported) no query is made and the histogram stays at zero, as KAI's does without one.
USAGE_QUERY_LATENCY = Histogram("kai_usage_query_latency_milliseconds", "Usage database query latency",
                                buckets=_BUCKETS)
# Beyond KAI: pods left Pending by the last cycle, by the first reason of their PodGroup.
PENDING_PODS = Gauge("kai_pending_pods", "Pods left pending by the last cycle, by reason", ["reason"])
CYCLES = Counter("kai_scheduler_cycles_total", "Scheduling cycles run")
LOOP_LAG = Gauge("kai_scheduler_eventloop_lag_seconds", "Event loop lag")


def pending_pods_by_reason(unschedulable: Iterable[Unschedulable]) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in unschedulable:
        reason = u.reasons[0].reason if u.reasons else "Unschedulable"
        out[reason] = out.get(reason, 0) + max(len(u.pod_messages), 1)
    return out


def set_pending(unschedulable: Iterable[Unschedulable]) -> None:
    PENDING_PODS.clear()
    for reason, count in pending_pods_by_reason(unschedulable).items():
        PENDING_PODS.labels(reason).set(count)


def record_cycle(decisions: Decisions, open_s: float, close_s: float, total_s: float) -> None:
    """One cycle: its phases' latencies (seconds of the shell's own work added to the decision's timings), the
    scenario counters, and the pods it left pending."""
    CYCLES.inc()
    OPEN_SESSION.set(open_s * MS_PER_SECOND + decisions.timings.get("open-session", 0.0))
    for phase, ms in decisions.timings.items():
        if phase.startswith("plugin/"):
            PLUGIN_LATENCY.labels(phase.removeprefix("plugin/"), "OnSessionOpen").set(ms)
        elif phase not in ("open-session", "close-session"):
            ACTION_LATENCY.labels(phase).set(ms)
    for name, count in decisions.counters.items():
        what, _, action = name.partition("/")
        if what in _COUNTERS:
            _COUNTERS[what].labels(action).inc(count)
        elif what == "preemption_failures":
            PREEMPTION_FAILURES.labels(action).inc(count)
    CLOSE_SESSION.set(close_s * MS_PER_SECOND + decisions.timings.get("close-session", 0.0))
    E2E_LATENCY.set(total_s * MS_PER_SECOND)
    set_pending(decisions.unschedulable)


def record_first_start(queue: str, created: float, now: float) -> None:
    """A PodGroup started for the first time: its wait since creation, under its queue."""
    FIRST_START_WAIT.labels(queue).observe(max(now - created, 0.0))


# Queue shares come in the Queue API's units (millicores, MB); the gauges export cores and GB.
_EXPORT_SCALE = {"cpu": MILLI, "memory": GB // MB}


def record_queues(queues: Iterable[QueueShare]) -> None:
    """Per queue: fair share (cpu and memory in cores and GB from the Queue API's units) and deserved GPUs."""
    for share in queues:
        series = (share.name, share.name, share.display_name)
        old = _QUEUE_SERIES.get(share.name)
        if old is not None and old != series:
            for gauge in (*FAIR_SHARE.values(), *USAGE.values(), DESERVED):
                with contextlib.suppress(KeyError):
                    gauge.remove(*old)
        _QUEUE_SERIES[share.name] = series
        for resource, gauge in FAIR_SHARE.items():
            gauge.labels(*series).set(share.fair_share.get(resource, 0.0) / _EXPORT_SCALE.get(resource, 1))
        DESERVED.labels(*series).set(share.deserved.get("gpu", 0.0))


def record_queue_usage(usage: Mapping[str, Sequence[float]]) -> None:
    """Per queue seen by `record_queues`: its historical (gpu, cpu, memory) usage, 0 when the database has none."""
    for name, series in _QUEUE_SERIES.items():
        for gauge, value in zip(USAGE.values(), usage.get(name, (0.0, 0.0, 0.0)), strict=True):
            gauge.labels(*series).set(value)
