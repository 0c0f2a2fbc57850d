"""A SchedulingShard's `usageDBConfig` (KAI's time-based fair share): parsed with KAI's defaults. Pure.

KAI's rules: the client type must be a known one (here `prometheus`); exactly one of `connectionString` and
`connectionStringEnvVar`, and when neither is set the Config's prometheus settings give the URL; window 1 week
sliding, no decay unless `halfLifePeriod` > 0, fetch every minute, usage stale after 5 minutes (never less than
the fetch interval), query timeout 10 s and resolution 1 m (`extraParams`), the queue-controller's
`kai_queue_allocated_*` metrics over kube-state-metrics' node capacity. Cron windows need a cron library this
scheduler does not carry: they are refused, as an unknown client type is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from operators.core.durations import parse_seconds
from operators.core.times import parse_rfc3339

CLIENT_TYPES = ("prometheus",)
WINDOW_TYPES = ("sliding", "tumbling")
# KAI's default metrics per resource (gpu, cpu, memory), overridable through extraParams.
ALLOCATION_METRICS = ("kai_queue_allocated_gpus", "kai_queue_allocated_cpu_cores", "kai_queue_allocated_memory_bytes")
CAPACITY_METRICS = ('sum(kube_node_status_capacity{resource="nvidia_com_gpu"})',
                    'sum(kube_node_status_capacity{resource="cpu"})',
                    'sum(kube_node_status_capacity{resource="memory"})')
_METRIC_PARAMS = ("gpu", "cpu", "memory")
WEEK = 7 * 24 * 3600.0


@dataclass(frozen=True)
class UsageDBSettings:
    """Where and how the scheduler reads historical usage; durations in seconds."""

    client_type: str = "prometheus"
    connection_string: str = ""
    connection_string_env_var: str = ""
    window_size: float = WEEK
    window_type: str = "sliding"
    tumbling_start: float | None = None  # epoch seconds of the first tumbling window
    half_life: float | None = None  # None: no decay
    fetch_interval: float = 60.0
    staleness_period: float = 300.0
    wait_timeout: float = 60.0
    query_timeout: float = 10.0
    query_resolution: float = 60.0
    allocation_metrics: tuple[str, str, str] = ALLOCATION_METRICS
    capacity_metrics: tuple[str, str, str] = CAPACITY_METRICS


def _seconds(params: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = params.get(key)
    if value is None or value == "":
        return default
    try:
        return parse_seconds(value)
    except ValueError as exc:
        raise ValueError(f"usageDBConfig.usageParams.{key}: {exc}") from None


def parse_usage_db_config(raw: Any) -> UsageDBSettings | None:
    """`spec.usageDBConfig` -> settings; None when absent. Raises ValueError naming the field it refuses."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"usageDBConfig must be an object, got {raw!r}")
    client = str(raw.get("clientType") or "")
    if client not in CLIENT_TYPES:
        raise ValueError(f"usageDBConfig.clientType {client!r} is not supported (supported: {', '.join(CLIENT_TYPES)})")
    conn, env = str(raw.get("connectionString") or ""), str(raw.get("connectionStringEnvVar") or "")
    if conn and env:
        raise ValueError("usageDBConfig: both connectionString and connectionStringEnvVar are set, only one is allowed")
    params = raw.get("usageParams") or {}
    extra = {str(k): str(v) for k, v in (params.get("extraParams") or {}).items()}
    window_type = str(params.get("windowType") or "sliding")
    if window_type not in WINDOW_TYPES:
        raise ValueError(f"usageDBConfig.usageParams.windowType {window_type!r} is not supported "
                         f"(supported: {', '.join(WINDOW_TYPES)})")
    start = None
    if window_type == "tumbling":
        text = params.get("tumblingWindowStartTime")
        if not text:
            raise ValueError("usageDBConfig.usageParams: windowType tumbling needs tumblingWindowStartTime")
        start = parse_rfc3339(text)  # a metav1.Time in KAI's usageParams
        if start is None:
            raise ValueError(f"usageDBConfig.usageParams.tumblingWindowStartTime must be RFC3339, got {text!r}")
    half_life = _seconds(params, "halfLifePeriod", None)
    fetch = _seconds(params, "fetchInterval", 60.0) or 60.0
    staleness = _seconds(params, "stalenessPeriod", 300.0) or 300.0
    settings = UsageDBSettings(
        client_type=client, connection_string=conn, connection_string_env_var=env,
        window_size=_seconds(params, "windowSize", WEEK) or WEEK, window_type=window_type, tumbling_start=start,
        half_life=half_life if half_life and half_life > 0 else None,
        fetch_interval=fetch, staleness_period=max(staleness, fetch),
        wait_timeout=_seconds(params, "waitTimeout", 60.0) or 60.0,
        query_timeout=_extra_seconds(extra, "usageQueryTimeout", 10.0),
        query_resolution=_extra_seconds(extra, "queryResolution", 60.0),
        allocation_metrics=_metrics(extra, "AllocationMetric", ALLOCATION_METRICS),
        capacity_metrics=_metrics(extra, "CapacityMetric", CAPACITY_METRICS))
    return settings


def _extra_seconds(extra: Mapping[str, str], key: str, default: float) -> float:
    # KAI falls back to the default when an extra duration does not parse.
    try:
        return parse_seconds(extra[key]) if key in extra else default
    except ValueError:
        return default


def _metrics(extra: Mapping[str, str], suffix: str, default: tuple[str, str, str]) -> tuple[str, str, str]:
    g, c, m = (extra.get(f"{r}{suffix}") or d for r, d in zip(_METRIC_PARAMS, default, strict=True))
    return g, c, m


def with_connection(settings: UsageDBSettings, config_spec: Mapping[str, Any] | None) -> UsageDBSettings:
    """Fill an unset connection string from the Config `kai-config`, as KAI's operator does: its own Prometheus
    (`spec.prometheus.enabled`) or `spec.prometheus.externalPrometheusUrl`. Raises ValueError when neither is set."""
    if settings.connection_string or settings.connection_string_env_var:
        return settings
    prom = (config_spec or {}).get("prometheus") or {}
    if prom.get("enabled") is True:
        namespace = (config_spec or {}).get("namespace") or "kai-scheduler"
        return replace(settings, connection_string=f"http://usage-prometheus.{namespace}.svc.cluster.local:9090")
    if prom.get("externalPrometheusUrl"):
        return replace(settings, connection_string=str(prom["externalPrometheusUrl"]))
    raise ValueError("usageDBConfig: prometheus connection string not configured: set connectionString or "
                     "connectionStringEnvVar, or the Config's spec.prometheus (enabled or externalPrometheusUrl)")
