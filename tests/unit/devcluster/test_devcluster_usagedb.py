"""`kai dev up --usage-db`: the Prometheus scrape configuration and the shard's usageDBConfig it writes."""

from __future__ import annotations

from operators.devcluster import usagedb
from operators.scheduler.decide.usageconfig import parse_usage_db_config


def test_scrape_config_has_one_job_per_endpoint() -> None:
    cfg = usagedb.scrape_config({"scheduler": "127.0.0.1:1", "queue-controller": "127.0.0.1:2"})
    assert cfg["global"]["scrape_interval"] == "1s"
    assert [(j["job_name"], j["static_configs"][0]["targets"]) for j in cfg["scrape_configs"]] == [
        ("queue-controller", ["127.0.0.1:2"]), ("scheduler", ["127.0.0.1:1"])]


def test_shard_config_is_one_the_scheduler_accepts() -> None:
    raw = usagedb.usage_db_config("http://127.0.0.1:16090", (32, 256, 4 * 512 * 2**30), halfLifePeriod="10m",
                                  extraParams={"queryResolution": "5s"})
    settings = parse_usage_db_config(raw)
    assert settings is not None
    assert settings.capacity_metrics == ("vector(32)", "vector(256)", "vector(2199023255552)")
    assert settings.allocation_metrics[0] == "kai_queue_allocated_gpus"
    assert (settings.window_size, settings.half_life, settings.query_resolution) == (3600.0, 600.0, 5.0)
