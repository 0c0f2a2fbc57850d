"""Metric names and types are KAI's exactly (its scheduler and queue-controller lists): dashboards and alerts
written for KAI query these series, and a counter of Go's client has no `_total` suffix added."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Histogram

from operators.core.metrics import Counter, exposition
from operators.queuecontroller.metrics import QueueMetrics

# KAI v0.18's scheduler metrics (namespace `kai`): name -> type.
KAI_SCHEDULER = {
    "kai_e2e_scheduling_latency_milliseconds": "gauge",
    "kai_open_session_latency_milliseconds": "gauge",
    "kai_close_session_latency_milliseconds": "gauge",
    "kai_plugin_scheduling_latency_milliseconds": "gauge",
    "kai_action_scheduling_latency_milliseconds": "gauge",
    "kai_task_scheduling_latency_milliseconds": "histogram",
    "kai_task_bind_latency_milliseconds": "histogram",
    "kai_podgroups_scheduled_by_action": "counter",
    "kai_podgroups_acted_on_by_action": "counter",
    "kai_scenarios_simulation_by_action": "counter",
    "kai_scenarios_filtered_by_action": "counter",
    "kai_total_preemption_attempts": "counter",
    "kai_queue_fair_share_cpu_cores": "gauge",
    "kai_queue_fair_share_memory_gb": "gauge",
    "kai_queue_fair_share_gpu": "gauge",
    "kai_queue_cpu_usage": "gauge",
    "kai_queue_memory_usage": "gauge",
    "kai_queue_gpu_usage": "gauge",
    "kai_usage_query_latency_milliseconds": "histogram",
    "kai_pod_group_evicted_pods_total": "counter",
    # v0.18: victim pods evicted per solver action.
    "kai_total_preemption_evictions": "counter",
    "kai_total_reclaim_evictions": "counter",
    "kai_total_consolidation_evictions": "counter",
    # KAI PR #2111's name (not in a KAI release yet); its reasons are KAI's search results.
    "kai_preemption_failures_total": "counter",
    # Ours: no KAI release or main has a wait-until-first-start histogram (issue 24's item, under `kai_`).
    "kai_queue_time_to_first_start_seconds": "histogram",
}
# KAI v0.18's queue-controller metrics (v0.18 added non-preemptible, requested and limit).
KAI_QUEUE_CONTROLLER = {name: "gauge" for name in (
    "kai_queue_info", "kai_queue_deserved_gpus", "kai_queue_quota_cpu_cores", "kai_queue_quota_memory_bytes",
    "kai_queue_allocated_gpus", "kai_queue_allocated_cpu_cores", "kai_queue_allocated_memory_bytes",
    "kai_queue_allocated_non_preemptible_gpus", "kai_queue_allocated_non_preemptible_cpu_cores",
    "kai_queue_allocated_non_preemptible_memory_bytes", "kai_queue_requested_gpus", "kai_queue_requested_cpu_cores",
    "kai_queue_requested_memory_bytes", "kai_queue_limit_gpus", "kai_queue_limit_cpu_cores",
    "kai_queue_limit_memory_bytes")}

ROOT = Path(__file__).resolve().parents[3]
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)


def declared(text: str) -> dict[str, str]:
    return dict(TYPE_LINE.findall(text))


def sample_names(text: str) -> set[str]:
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}


@functools.cache
def scheduler_exposition() -> str:
    # A fresh interpreter (once: the two tests read the same text): the scheduler's metrics live in the default
    # registry of the process that runs it.
    code = ("import operators.scheduler.shell.loop\nfrom operators.core.metrics import exposition\n"
            "print(exposition().decode())")
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          cwd=ROOT).stdout


def test_scheduler_exposes_kais_metric_names_and_types() -> None:
    got = declared(scheduler_exposition())
    assert {n: got.get(n) for n in KAI_SCHEDULER} == KAI_SCHEDULER


def test_scheduler_counter_samples_carry_no_added_suffix() -> None:
    text = scheduler_exposition()
    names = sample_names(text)
    # The solver's actions are exposed at 0 from the start, under KAI's names.
    assert "kai_scenarios_simulation_by_action" in names and "kai_scenarios_filtered_by_action" in names
    # KAI v0.18's per-action eviction counters carry no labels and are exposed at 0 from the start.
    for action in ("preemption", "reclaim", "consolidation"):
        assert f"kai_total_{action}_evictions 0.0" in text.splitlines()
    # Failed preemption attempts, by reason, from the start; the counter's name already ends in `_total`.
    assert 'kai_preemption_failures_total{reason="generators_exhausted"} 0.0' in text.splitlines()
    assert not [n for n in names if n.endswith(("_total_total", "_created"))]
    assert not [n for n in names if n.startswith("kai_") and n.removesuffix("_total") in KAI_SCHEDULER
                and n not in KAI_SCHEDULER]


def test_queue_controller_exposes_kais_metric_names() -> None:
    registry = CollectorRegistry()
    metrics = QueueMetrics(registry=registry)
    metrics.update({"metadata": {"name": "team-a"},
                    "spec": {"resources": {"gpu": {"quota": 2, "limit": 3}, "cpu": {"quota": -1, "limit": 8000}}},
                    "status": {"requested": {"nvidia.com/gpu": "5", "cpu": "2500m"},
                               "allocatedNonPreemptible": {"memory": "1Gi"}}})
    text = exposition(registry).decode()
    assert {n: declared(text).get(n) for n in KAI_QUEUE_CONTROLLER} == KAI_QUEUE_CONTROLLER
    labels = 'queue_display_name="",queue_metadata_name="team-a",queue_name="team-a"'  # KAI's three queue labels
    for line in (f'kai_queue_deserved_gpus{{{labels}}} 2.0', f'kai_queue_limit_gpus{{{labels}}} 3.0',
                 f'kai_queue_limit_cpu_cores{{{labels}}} 8.0',
                 f'kai_queue_quota_cpu_cores{{{labels}}} -1.0',
                 f'kai_queue_requested_gpus{{{labels}}} 5.0',
                 f'kai_queue_requested_cpu_cores{{{labels}}} 2.5',
                 f'kai_queue_allocated_non_preemptible_memory_bytes{{{labels}}} 1.073741824e+09'):
        assert line in text, line


def test_counter_keeps_its_declared_name_with_and_without_labels() -> None:
    registry = CollectorRegistry()
    plain = Counter("kai_total_preemption_attempts", "doc", registry=registry)
    labelled = Counter("kai_pod_group_evicted_pods_total", "doc", ["action"], registry=registry)
    namespaced = Counter("by_action", "doc", ["action"], namespace="kai", registry=registry)
    Counter("kai_never_used", "doc", ["action"], registry=registry)
    plain.inc(2)
    labelled.labels("preempt").inc(3)
    namespaced.labels("allocate").inc()
    Histogram("kai_h_milliseconds", "doc", buckets=[5], registry=registry).observe(1)
    text = exposition(registry).decode()
    assert "kai_total_preemption_attempts 2.0\n" in text
    assert 'kai_pod_group_evicted_pods_total{action="preempt"} 3.0\n' in text
    assert 'kai_by_action{action="allocate"} 1.0\n' in text
    # A labelled counter without series is still declared under its name (so a dashboard query resolves).
    assert declared(text) == {"kai_total_preemption_attempts": "counter", "kai_pod_group_evicted_pods_total": "counter",
                              "kai_by_action": "counter", "kai_never_used": "counter",
                              "kai_h_milliseconds": "histogram"}
    assert "_created" not in text


def test_label_values_are_escaped() -> None:
    registry = CollectorRegistry()
    Counter("kai_c", "doc", ["v"], registry=registry).labels('a"b\\c\nd').inc()
    assert 'kai_c{v="a\\"b\\\\c\\nd"} 1.0' in exposition(registry).decode()


def test_no_component_declares_a_counter_with_the_clients_naming() -> None:
    # prometheus-client's own Counter appends `_total`; every component uses operators.core.metrics.Counter.
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "operators").rglob("*.py")
                 if re.search(r"from prometheus_client import[^\n]*\bCounter\b", p.read_text())]
    assert not offenders
