"""kai_queue_* gauges."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from operators.queuecontroller.metrics import (
    MetricsConfig,
    QueueMetrics,
    queue_metric_labels,
    queue_metric_values,
)


def queue(name: str = "team-a", labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"resources": {"cpu": {"quota": 2500, "limit": -1}, "gpu": {"quota": -1},
                                   "memory": {"quota": 1024}}},
            "status": status}


def test_values() -> None:
    allocated = {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "1.33333"}
    values = queue_metric_values(queue(allocated=allocated, requested={"cpu": "4", "nvidia.com/gpu": "3"},
                                       allocatedNonPreemptible={"cpu": "500m"}))
    assert values == {
        "queue_info": 1.0,
        "queue_deserved_gpus": -1.0,
        "queue_quota_cpu_cores": 2.5,
        "queue_quota_memory_bytes": 1024e6,
        "queue_limit_gpus": 0.0,  # not set: Go's zero value, as KAI exposes it
        "queue_limit_cpu_cores": -1.0,
        "queue_limit_memory_bytes": 0.0,
        "queue_allocated_gpus": 1.3333,
        "queue_allocated_cpu_cores": 1.5,
        "queue_allocated_memory_bytes": float(2 * 2**30),
        "queue_allocated_non_preemptible_gpus": 0.0,
        "queue_allocated_non_preemptible_cpu_cores": 0.5,
        "queue_allocated_non_preemptible_memory_bytes": 0.0,
        "queue_requested_gpus": 3.0,
        "queue_requested_cpu_cores": 4.0,
        "queue_requested_memory_bytes": 0.0,
    }
    empty = queue_metric_values({"metadata": {"name": "x"}})
    assert empty["queue_allocated_gpus"] == 0.0 and empty["queue_quota_cpu_cores"] == 0.0


def test_extra_labels_with_defaults() -> None:
    config = MetricsConfig(label_to_metric_label={"org/team": "team", "org/cost": "cost_center"},
                           label_default_values={"org/cost": "none"})
    assert queue_metric_labels(queue(labels={"org/team": "ml"}), config) == {
        "queue_name": "team-a", "queue_metadata_name": "team-a", "queue_display_name": "", "cost_center": "none",
        "team": "ml"}


def test_registry_update_and_remove() -> None:
    registry = CollectorRegistry()
    metrics = QueueMetrics(MetricsConfig(label_to_metric_label={"org/team": "team"}), registry)
    metrics.update(queue(labels={"org/team": "ml"}, allocated={"nvidia.com/gpu": "2"}))
    series = {"queue_name": "team-a", "queue_metadata_name": "team-a", "queue_display_name": "", "team": "ml"}
    assert registry.get_sample_value("kai_queue_allocated_gpus", series) == 2.0
    assert registry.get_sample_value("kai_queue_info", series) == 1.0
    metrics.update(queue(labels={"org/team": "vision"}))
    assert registry.get_sample_value("kai_queue_info", series) is None
    metrics.remove("team-a")
    assert registry.get_sample_value("kai_queue_info", {**series, "team": "vision"}) is None
    metrics.remove("never-seen")


def test_kai_queue_name_labels_carry_the_display_name() -> None:
    registry = CollectorRegistry()
    metrics = QueueMetrics(MetricsConfig(), registry)
    shown = queue()
    shown["spec"]["displayName"] = "Team A"
    metrics.update(shown)
    labels = {"queue_name": "team-a", "queue_metadata_name": "team-a", "queue_display_name": "Team A"}
    assert registry.get_sample_value("kai_queue_info", labels) == 1.0
    metrics.update(queue())  # displayName removed: the old series goes
    assert registry.get_sample_value("kai_queue_info", labels) is None
    assert registry.get_sample_value("kai_queue_info", {**labels, "queue_display_name": ""}) == 1.0
