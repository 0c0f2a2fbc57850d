"""Time-based fair share: the usageDBConfig settings, the window/decay arithmetic and KAI's weighting, by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from sched_builders import bound, pod, podgroup, queue
from sched_builders import node as gpu_node

from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.plugins.proportion.fairshare import ShareInput, divide
from operators.scheduler.decide.plugins.proportion.usage import (
    decay,
    normalized,
    usage_from_documents,
    usage_pairs,
    window_start,
    windowed_sum,
)
from operators.scheduler.decide.shardconfig import effective_config, unhonoured_config_fields, unhonoured_fields
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.usageconfig import WEEK, UsageDBSettings, parse_usage_db_config, with_connection
from operators.scheduler.shell.simulate import run_simulation
from tests.support import EXAMPLES

G = 1_000_000  # one GPU in the core's units


# --- settings -------------------------------------------------------------------------------------------------
def test_kai_defaults_and_fields() -> None:
    s = parse_usage_db_config({"clientType": "prometheus", "connectionString": "http://p:9090"})
    assert s == UsageDBSettings(connection_string="http://p:9090")
    assert (s.window_size, s.window_type, s.half_life, s.fetch_interval, s.staleness_period) == (
        WEEK, "sliding", None, 60.0, 300.0)
    assert s.allocation_metrics[0] == "kai_queue_allocated_gpus"
    s = parse_usage_db_config({"clientType": "prometheus", "connectionStringEnvVar": "PROM", "usageParams": {
        "windowSize": "2h", "halfLifePeriod": "10m", "fetchInterval": "10s", "stalenessPeriod": "5s",
        "extraParams": {"queryResolution": "15s", "usageQueryTimeout": "bad", "gpuCapacityMetric": "vector(8)"}}})
    assert s is not None
    assert (s.window_size, s.half_life, s.fetch_interval, s.query_resolution, s.query_timeout) == (
        7200.0, 600.0, 10.0, 15.0, 10.0)
    assert s.staleness_period == 10.0  # never below the fetch interval (KAI)
    assert s.capacity_metrics[0] == "vector(8)" and s.capacity_metrics[1].startswith("sum(kube_node")
    zero = parse_usage_db_config({"clientType": "prometheus", "connectionString": "x",
                                  "usageParams": {"halfLifePeriod": "0s"}})
    assert zero is not None and zero.half_life is None  # 0: no decay
    assert parse_usage_db_config(None) is None


@pytest.mark.parametrize(("raw", "message"), [
    ({"clientType": "influxdb", "connectionString": "x"}, "clientType 'influxdb' is not supported"),
    ({"clientType": "", "connectionString": "x"}, "clientType '' is not supported"),
    ({"clientType": "prometheus", "connectionString": "x", "connectionStringEnvVar": "Y"}, "only one is allowed"),
    ({"clientType": "prometheus", "connectionString": "x", "usageParams": {"windowType": "cron"}},
     "windowType 'cron' is not supported"),
    ({"clientType": "prometheus", "connectionString": "x", "usageParams": {"windowType": "tumbling"}},
     "needs tumblingWindowStartTime"),
    ({"clientType": "prometheus", "connectionString": "x",
      "usageParams": {"windowType": "tumbling", "tumblingWindowStartTime": "2024-01-01 00:00"}},
     "tumblingWindowStartTime must be RFC3339"),
    ({"clientType": "prometheus", "connectionString": "x", "usageParams": {"windowSize": "1w"}},
     "usageParams.windowSize"),
])
def test_refused(raw: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        parse_usage_db_config(raw)


def test_unknown_client_is_refused_on_the_shard_and_the_last_settings_stay() -> None:
    good = effective_config(SchedulerConfig(), {"usageDBConfig": {"clientType": "prometheus",
                                                                   "connectionString": "http://p:9090"}}, None)
    assert not good.error and good.config.usage_db is not None
    bad = effective_config(SchedulerConfig(), {"usageDBConfig": {"clientType": "influxdb"}}, None,
                           last_good=good.config)
    assert "usageDBConfig.clientType 'influxdb' is not supported (supported: prometheus)" in bad.error
    assert bad.config is good.config
    assert "spec.usageDBConfig" not in unhonoured_fields({"usageDBConfig": {"clientType": "prometheus"}})


def test_connection_string_from_the_config() -> None:
    bare = UsageDBSettings()
    assert with_connection(bare, {"namespace": "kai", "prometheus": {"enabled": True}}).connection_string == (
        "http://usage-prometheus.kai.svc.cluster.local:9090")
    assert with_connection(bare, {"prometheus": {"externalPrometheusUrl": "http://ext:9090"}}).connection_string == (
        "http://ext:9090")
    with pytest.raises(ValueError, match="connection string not configured"):
        with_connection(bare, {})
    eff = effective_config(SchedulerConfig(), {"usageDBConfig": {"clientType": "prometheus"}}, None)
    assert "connection string not configured" in eff.error
    # The Config's external URL is read; KAI's own Prometheus deployment is not made here.
    assert unhonoured_config_fields({"prometheus": {"externalPrometheusUrl": "u", "enabled": False}}) == [
        "spec.prometheus.enabled"]


# --- window and decay -------------------------------------------------------------------------------------------
def test_windowed_sum_by_hand() -> None:
    samples = [(float(t), 2.0) for t in range(0, 601, 60)]
    # Window (300, 600], resolution 60: steps 600, 540, 480, 420, 360.
    assert windowed_sum(samples, 600.0, 300.0, 60.0) == 10.0
    # Half-life 60 s: 2 x (1 + 1/2 + 1/4 + 1/8 + 1/16) = 3.875.
    assert windowed_sum(samples, 600.0, 300.0, 60.0, half_life=60.0) == pytest.approx(3.875)
    assert decay(600.0, 600.0) == 0.5 and decay(5.0, None) == 1.0
    # A step sees the latest sample at most 5 minutes old: one sample at t=0 counts for steps 60..300 only.
    assert windowed_sum([(0.0, 1.0)], 600.0, 0.0, 60.0) == 5.0


def test_tumbling_window_start() -> None:
    assert window_start(1000.0, 300.0) == 700.0  # sliding
    assert window_start(1000.0, 300.0, tumbling_start=100.0) == 700.0  # resets at 100, 400, 700
    assert window_start(1000.0, 300.0, tumbling_start=150.0) == 750.0
    assert window_start(1000.0, 300.0, tumbling_start=2000.0) == 1000.0  # not started: empty window


def test_normalized_to_capacity() -> None:
    # KAI's example: 10 GPUs for 10 hours, a queue used 24 GPU-hours: 0.24.
    assert normalized({"a": (24.0, 0.0, 0.0)}, (100.0, 0.0, 0.0)) == {"a": (0.24, 0.0, 0.0)}


# --- KAI's weighting -------------------------------------------------------------------------------------------
def split(usage_a: float, usage_b: float = 0.0, k: float = 1.0, gpus: int = 8) -> tuple[int, int]:
    shares = divide(gpus * G, [ShareInput("a", 0, -1, 1.0, gpus * G, usage=usage_a),
                               ShareInput("b", 0, -1, 1.0, gpus * G, usage=usage_b)], k, G)
    return shares["a"] // G, shares["b"] // G


def test_usage_weighs_the_over_quota_share() -> None:
    # w = 0.5 each; weight max(0, w + k (w - u)).
    assert split(0.0) == (4, 4)  # no usage: plain fair share
    assert split(0.5) == (3, 5)  # 0.5 vs 1.0: 2.67 / 5.33 -> 2 + 5, the last GPU to the larger remainder (a)
    assert split(0.8) == (1, 7)  # 0.2 vs 1.0: 1.33 / 6.67 -> 1 + 6, the last to b
    assert split(1.0) == (0, 8)  # weight floored at 0
    assert split(0.25, 0.25) == (4, 4)  # equal usage changes nothing
    assert split(0.5, k=0.0) == (4, 4)  # kValue 0: usage has no effect
    assert split(0.5, k=3.0) == (2, 6)  # 0.5 vs 2.0: 1.6 / 6.4 -> 1 + 6, the last to a (0.6 > 0.4)


def test_usage_does_not_touch_deserved_quota() -> None:
    shares = divide(8 * G, [ShareInput("a", 4 * G, -1, 1.0, 8 * G, usage=1.0),
                            ShareInput("b", 0, -1, 1.0, 8 * G)], 1.0, G)
    assert shares == {"a": 4 * G, "b": 4 * G}  # a keeps its quota; the 4 over-quota GPUs all go to b


def two_queues() -> list[dict]:  # type: ignore[type-arg]
    objs = [gpu_node("n1", gpus=8), queue("a", gpu=(0, -1, 1)), queue("b", gpu=(0, -1, 1))]
    for q in ("a", "b"):
        for i in range(8):
            objs += [podgroup(f"{q}{i}", q), pod(f"{q}{i}", f"{q}{i}", gpus=1)]
    return objs


def test_cycle_splits_in_the_heavy_users_disfavour() -> None:
    snapshot = snapshot_from_objects(two_queues())
    plain = bound(run_cycle(snapshot, SchedulerConfig(), 1e9))
    assert sum(p.startswith("a") for p in plain) == 4 and len(plain) == 8
    used = replace(snapshot, queue_usage=usage_pairs({"a": (0.5,)}))
    decisions = run_cycle(used, SchedulerConfig(), 1e9)
    binds = bound(decisions)
    assert (sum(p.startswith("a") for p in binds), sum(p.startswith("b") for p in binds)) == (3, 5)
    fair = {q.name: q.fair_share["gpu"] for q in decisions.queues}
    assert fair == {"a": 3, "b": 5}


def test_simulate_history_input() -> None:
    # 8 GPUs of capacity over a 1 h window at 1 m resolution; a held 8 GPUs for the last 30 minutes: 0.5.
    settings = config_from_mapping(yaml.safe_load((EXAMPLES / "time-based-fairshare/shard.yaml").read_text()))
    docs = [{"kind": "QueueUsage", "history": {"capacity": {"gpu": 8}, "queues": {
        "a": [{"from": "30m", "to": "0s", "gpu": 8}], "b": [{"from": "2h", "to": "1h", "gpu": 8}]}}}]
    usage = usage_from_documents(docs, settings.usage_db, 3600.0 * 100)
    assert usage == {"a": (0.5, 0.0, 0.0), "b": (0.0, 0.0, 0.0)}  # b's usage is outside the window
    # With a 30 m half-life the recent half weighs more: sum_{i<30} 0.5^(i/30) / sum_{i<60} 0.5^(i/30) = 2/3.
    halved = replace(settings.usage_db, half_life=1800.0)
    assert usage_from_documents(docs, halved, 3600.0 * 100)["a"][0] == pytest.approx(2 / 3)
    assert usage_from_documents([{"kind": "QueueUsage", "usage": {"a": {"gpu": 0.3}}}], None, 0.0) == {
        "a": (0.3, 0.0, 0.0)}


def test_simulate_example_scenario() -> None:
    objs = [d for d in yaml.safe_load_all((EXAMPLES / "time-based-fairshare/simulate.yaml").read_text()) if d]
    config = config_from_mapping(yaml.safe_load((EXAMPLES / "time-based-fairshare/shard.yaml").read_text()))
    result = run_simulation(objs, config)
    fair = {q["name"]: q["fairShare"]["gpu"] for q in result["queues"]}
    assert fair == {"team-a": 3, "team-b": 5}
    plain = run_simulation([d for d in objs if d.get("kind") != "QueueUsage"], config)
    assert {q["name"]: q["fairShare"]["gpu"] for q in plain["queues"]} == {"team-a": 4, "team-b": 4}


# --- kai queues -------------------------------------------------------------------------------------------------
def test_kai_queues_shows_usage_and_its_effect() -> None:
    from operators.insight.queues import format_text, queue_tree

    snapshot = replace(snapshot_from_objects(two_queues()), queue_usage=usage_pairs({"a": (0.5,)}))
    tree = {q["name"]: q["resources"]["gpu"] for q in queue_tree(snapshot, SchedulerConfig(), 1e9)}
    assert (tree["a"]["usage"], tree["a"]["fairShare"], tree["a"]["plainFairShare"]) == (0.5, 3, 4)
    assert (tree["b"]["usage"], tree["b"]["fairShare"], tree["b"]["plainFairShare"]) == (0.0, 5, 4)
    text = format_text(queue_tree(snapshot, SchedulerConfig(), 1e9))
    header, row_a = text.splitlines()[:2]
    assert header.split()[:7] == ["QUEUE", "GPU-QUOTA", "GPU-LIMIT", "GPU-WEIGHT", "GPU-FAIR", "GPU-USAGE",
                                  "GPU-PLAIN"]
    assert row_a.split()[:7] == ["a", "0", "-", "1", "3", "0.500", "4"]
    plain = format_text(queue_tree(snapshot_from_objects(two_queues()), SchedulerConfig(), 1e9))
    assert "USAGE" not in plain  # without a usage database the view is unchanged


def test_a_negative_k_value_is_zero() -> None:
    # KAI: "kValue must be > 0.0 ... Setting as 0": usage then has no effect.
    assert config_from_mapping({"kValue": -2}).k_value == 0.0
    assert config_from_mapping({"plugins": {"proportion": {"arguments": {"kValue": "-1"}}}}).k_value == 0.0


def test_a_tumbling_window_starts_at_an_rfc3339_time() -> None:
    settings = parse_usage_db_config({"clientType": "prometheus", "connectionString": "x", "usageParams": {
        "windowType": "tumbling", "tumblingWindowStartTime": "2024-01-01T01:00:00+01:00"}})
    assert settings is not None and settings.tumbling_start == 1704067200.0  # 2024-01-01T00:00:00Z
