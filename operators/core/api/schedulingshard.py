"""SchedulingShard and Config, `kai.scheduler/v1` (cluster-scoped): KAI's per-shard and install-wide settings.

Typed here (and in the CRD schema) are the fields the scheduler honours; every other field KAI defines is
accepted and kept (`x-kubernetes-preserve-unknown-fields`), and the scheduler names it in a status condition.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from operators.core.api.base import ObjectMeta, WireModel

GROUP = "kai.scheduler"
VERSION = "v1"
SHARD_API_VERSION: Literal["kai.scheduler/v1"] = "kai.scheduler/v1"
CONFIG_NAME = "kai-config"  # only the Config of this name is read, as KAI's operator does

_KEEP_UNKNOWN = ConfigDict(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})

Strategy = Literal["binpack", "spread"]


class PlacementStrategy(WireModel):
    gpu: Strategy | None = Field(default=None, description="GPU placement: binpack (default) or spread.")
    cpu: Strategy | None = Field(default=None, description="CPU placement: binpack (default) or spread.")


class MinRuntime(WireModel):
    preempt_min_runtime: str | None = Field(
        default=None, description="Default minimum runtime before a job may be preempted (e.g. 5m).")
    reclaim_min_runtime: str | None = Field(
        default=None, description="Default minimum runtime before a job may be reclaimed (e.g. 10m).")


class PluginConfig(WireModel):
    enabled: bool | None = None
    priority: int | None = Field(default=None, description="Higher runs first.")
    arguments: dict[str, str] | None = Field(default=None, description="Replaces the plugin's default arguments.")


class ActionConfig(WireModel):
    enabled: bool | None = None
    priority: int | None = Field(default=None, description="Higher runs first.")


class UsageParams(WireModel):
    """KAI's usagedb UsageParams: how historical usage is aggregated (durations are Go durations)."""

    half_life_period: str | None = Field(
        default=None, description="Half-life of the usage decay (e.g. 10m); unset or 0: no decay.")
    window_size: str | None = Field(default=None, description="Time window of usage considered (default 168h).")
    window_type: str | None = Field(default=None, description="sliding (default), tumbling or cron.")
    tumbling_window_start_time: str | None = Field(
        default=None, description="Start of the first tumbling window (RFC 3339).",
        json_schema_extra={"format": "date-time"})
    cron_string: str | None = Field(default=None, description="Cron expression of the cron window's resets.")
    fetch_interval: str | None = Field(default=None, description="How often usage is fetched (default 1m).")
    staleness_period: str | None = Field(
        default=None, description="Usage older than this is not used: plain fair share (default 5m).")
    wait_timeout: str | None = Field(default=None, description="Wait for the first fetch at start (default 1m).")
    extra_params: dict[str, str] | None = Field(
        default=None, description="Client-specific: usageQueryTimeout, queryResolution, <gpu|cpu|memory>"
                                  "AllocationMetric, <gpu|cpu|memory>CapacityMetric.")


class UsageDBConfig(WireModel):
    """KAI's usagedb UsageDBConfig: where the time-based fair share reads each queue's historical usage."""

    client_type: str = Field(description="Usage database client; this scheduler supports prometheus.")
    connection_string: str | None = Field(
        default=None, description="Prometheus URL; unset: from the Config's prometheus settings.")
    connection_string_env_var: str | None = Field(
        default=None, description="Environment variable of the scheduler holding the connection string.")
    usage_params: UsageParams | None = None


class SchedulingShardSpec(WireModel):
    model_config = _KEEP_UNKNOWN

    args: dict[str, str] | None = Field(default=None, description="Scheduler flags without the leading --.")
    placement_strategy: PlacementStrategy | None = None
    partition_label_value: str | None = Field(
        default=None, description="Node pool served: objects labelled <nodePoolLabelKey>=<value>; empty: unlabelled.")
    queue_depth_per_action: dict[str, int] | None = Field(
        default=None, description="Maximum jobs tried per queue by each action.")
    min_runtime: MinRuntime | None = None
    k_value: float | None = Field(default=None, description="Proportion plugin k (default 1.0).")
    usage_db_config: UsageDBConfig | None = Field(
        default=None, alias="usageDBConfig", description="Time-based fair share: the usage database.")
    plugins: dict[str, PluginConfig] | None = None
    actions: dict[str, ActionConfig] | None = None


class Condition(WireModel):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = Field(default=None, ge=0, json_schema_extra={"format": "int64"})
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    reason: str = Field(min_length=1, max_length=1024)
    message: str = Field(max_length=32768)


class ConditionsStatus(WireModel):
    conditions: list[Condition] | None = None


class SchedulingShard(WireModel):
    api_version: Literal["kai.scheduler/v1"] = SHARD_API_VERSION
    kind: Literal["SchedulingShard"] = "SchedulingShard"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SchedulingShardSpec = Field(default_factory=SchedulingShardSpec)
    status: ConditionsStatus | None = None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> SchedulingShard:
        return cls.model_validate(obj)


class GlobalConfig(WireModel):
    model_config = _KEEP_UNKNOWN

    node_pool_label_key: str | None = Field(
        default=None, description="Label selecting each shard's nodes and workloads (kai.scheduler/node-pool).")


class ConfigSpec(WireModel):
    model_config = _KEEP_UNKNOWN

    namespace: str | None = Field(default=None, description="Namespace the components run in.")
    global_: GlobalConfig | None = Field(default=None, alias="global")


class Config(WireModel):
    api_version: Literal["kai.scheduler/v1"] = SHARD_API_VERSION
    kind: Literal["Config"] = "Config"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ConfigSpec = Field(default_factory=ConfigSpec)
    status: ConditionsStatus | None = None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> Config:
        return cls.model_validate(obj)
