"""kai_queue_* gauges of the queue-controller, one series per queue.

`queue_metric_values` and `queue_metric_labels` are pure; `QueueMetrics` holds the prometheus gauges.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from operators.core import dra
from operators.core.api.queue import queue_record, queue_status_record
from operators.core.units import GPU, MILLI

UNLIMITED = -1.0
# Gauge name (without the namespace prefix) -> help text.
GAUGES: dict[str, str] = {
    "queue_info": "Queues known to the queue-controller (always 1)",
    "queue_deserved_gpus": "GPU quota of the queue (-1 = unlimited)",
    "queue_quota_cpu_cores": "CPU quota of the queue in cores (-1 = unlimited)",
    "queue_quota_memory_bytes": "Memory quota of the queue in bytes (-1 = unlimited)",
    "queue_allocated_gpus": "GPUs allocated to the queue's workloads",
    "queue_allocated_cpu_cores": "CPU cores allocated to the queue's workloads",
    "queue_allocated_memory_bytes": "Memory allocated to the queue's workloads, in bytes",
    # KAI v0.18's additions.
    "queue_allocated_non_preemptible_gpus": "GPUs allocated to the queue's non-preemptible workloads",
    "queue_allocated_non_preemptible_cpu_cores": "CPU cores allocated to the queue's non-preemptible workloads",
    "queue_allocated_non_preemptible_memory_bytes": "Memory allocated to the queue's non-preemptible workloads, "
                                                    "in bytes",
    "queue_requested_gpus": "GPUs requested by the queue's running and pending workloads",
    "queue_requested_cpu_cores": "CPU cores requested by the queue's running and pending workloads",
    "queue_requested_memory_bytes": "Memory requested by the queue's running and pending workloads, in bytes",
    "queue_limit_gpus": "GPU limit of the queue (-1 = unlimited)",
    "queue_limit_cpu_cores": "CPU limit of the queue in cores (-1 = unlimited)",
    "queue_limit_memory_bytes": "Memory limit of the queue in bytes (-1 = unlimited)",
}


QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """`--metrics-namespace`, `--queue-label-to-metric-label` (queue label key -> metric label name) and
    `--queue-label-to-default-metric-value` (queue label key -> value when the queue lacks the label)."""

    namespace: str = "kai"
    label_to_metric_label: Mapping[str, str] = field(default_factory=dict)
    label_default_values: Mapping[str, str] = field(default_factory=dict)

    @property
    def label_names(self) -> tuple[str, ...]:
        extra = (self.label_to_metric_label[key] for key in sorted(self.label_to_metric_label))
        return (*QUEUE_LABELS, *extra)


def _spec_values(queue: Mapping[str, Any], field_name: str) -> tuple[float, float, float]:
    """(GPUs, CPU cores, memory bytes) of the spec's quotas or limits; -1 (unlimited) stays -1."""
    rec = queue_record(queue)
    gpu, cpu, memory = rec.quota if field_name == "quota" else rec.limit
    # Micro-GPUs divided (not multiplied by 1e-6): the quotient is the decimal the spec wrote.
    return gpu if gpu == UNLIMITED else gpu / GPU, _scaled(float(cpu), 1 / MILLI), float(memory)


def _scaled(value: float, factor: float) -> float:
    return value if value == UNLIMITED else value * factor


def _amounts(queue: Mapping[str, Any], field_name: str) -> tuple[float, float, float]:
    """(GPUs, CPU cores, memory bytes) of a status resource list, rounded to 4 decimals as KAI does."""
    listed = queue_status_record(queue).listed(field_name)
    gpu_names = sorted(name for name in listed if name.endswith("/gpu"))
    gpus = float(listed[gpu_names[0]]) if gpu_names else 0.0
    # DRA GPUs (listed under their device class, KAI's PodGroup status) count as GPUs too.
    gpus += sum(float(amount) for name, amount in listed.items() if dra.is_dra_gpu_resource(name))
    return (round(gpus, 4), round(float(listed.get("cpu", Decimal(0))), 4),
            round(float(listed.get("memory", Decimal(0))), 4))


def queue_metric_values(queue: Mapping[str, Any]) -> dict[str, float]:
    """Gauge name (unprefixed) -> value for one queue, from its spec and status."""
    quota, limit = _spec_values(queue, "quota"), _spec_values(queue, "limit")
    out = {
        "queue_info": 1.0,
        "queue_deserved_gpus": quota[0], "queue_quota_cpu_cores": quota[1], "queue_quota_memory_bytes": quota[2],
        "queue_limit_gpus": limit[0], "queue_limit_cpu_cores": limit[1], "queue_limit_memory_bytes": limit[2],
    }
    for status_field, prefix in (("allocated", "queue_allocated"),
                                 ("allocatedNonPreemptible", "queue_allocated_non_preemptible"),
                                 ("requested", "queue_requested")):
        gpus, cores, memory = _amounts(queue, status_field)
        out |= {f"{prefix}_gpus": gpus, f"{prefix}_cpu_cores": cores, f"{prefix}_memory_bytes": memory}
    return out


def queue_metric_labels(queue: Mapping[str, Any], config: MetricsConfig) -> dict[str, str]:
    metadata = queue.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = str(metadata.get("name") or "")
    # KAI (since v0.17): `queue_name` kept for old dashboards, `queue_metadata_name` the join key with the
    # scheduler's queue metrics, `queue_display_name` the spec's displayName (empty when unset).
    out = {"queue_name": name, "queue_metadata_name": name,
           "queue_display_name": queue_record(queue).display_name}
    for key in sorted(config.label_to_metric_label):
        default = config.label_default_values.get(key, "")
        out[config.label_to_metric_label[key]] = str(labels.get(key, default))
    return out


class QueueMetrics:
    """The queue gauges in a registry; `update` on each reconcile, `remove` when the queue is gone."""

    def __init__(self, config: MetricsConfig | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.config = config or MetricsConfig()
        self.registry = registry if registry is not None else CollectorRegistry()
        self._gauges = {name: Gauge(name, doc, self.config.label_names, namespace=self.config.namespace,
                                    registry=self.registry) for name, doc in GAUGES.items()}
        self._series: dict[str, tuple[str, ...]] = {}

    def update(self, queue: Mapping[str, Any]) -> None:
        labels = queue_metric_labels(queue, self.config)
        values = tuple(labels[name] for name in self.config.label_names)
        if self._series.get(labels["queue_name"], values) != values:
            self.remove(labels["queue_name"])  # a relabelled queue must not leave its old series behind
        self._series[labels["queue_name"]] = values
        for name, value in queue_metric_values(queue).items():
            self._gauges[name].labels(*values).set(value)

    def remove(self, queue_name: str) -> None:
        values = self._series.pop(queue_name, None)
        if values is None:
            return
        for gauge in self._gauges.values():
            with contextlib.suppress(KeyError):  # never set for this series
                gauge.remove(*values)
