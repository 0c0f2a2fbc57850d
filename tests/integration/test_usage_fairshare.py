"""Time-based fair share against a real Prometheus (Debian's package), on a node-pool shard of its own.

The shard `<ns>-u` has one 8-GPU node and its own scheduler; a Prometheus started here scrapes the
queue-controller every second, and the shard reads usage from it (60 s sliding window at 1 s resolution, capacity
`vector(8)`: KAI's extraParams override, the local control plane has no kube-state-metrics).

1. Queue A holds all 8 GPUs for ~20 s: its usage is about a third of the window's capacity.
2. A and B (equal weight, no quota) each ask for 8 GPUs: the split is KAI's over-quota weighting
   max(0, w + k (w - usage)), w = 0.5, k = 1, printed with the usage read from Prometheus: A gets 3, B 5
   (plain fair share would give 4 each).
3. Prometheus stopped: past the staleness period the shard says `UsageDBAvailable=False` and the split goes back
   to plain fair share, 4 and 4 (reclaim moves one GPU). Started again, the condition is cleared.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from operators.devcluster import cluster as dev
from operators.devcluster import nodes, shards, usagedb
from operators.scheduler.decide.plugins.proportion.fairshare import ShareInput, divide
from operators.scheduler.decide.usageconfig import parse_usage_db_config
from operators.scheduler.shell.usagedb import fetch_usage
from tests.support import TEST_LABEL, Cluster, apply, queue, wait_for

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
POOL = "kai.scheduler/node-pool"
WINDOW = 60  # seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def usage_shard(cluster: Cluster, namespace: str) -> Iterator[tuple[str, Any, int]]:
    """Shard `<ns>-u` (1 node of 8 GPUs, its own scheduler) and a Prometheus scraping the queue-controller."""
    state = dev.load_state(cluster.name)
    assert state is not None
    name, prom = f"{namespace}-u", f"prometheus-{namespace}"
    port = free_port()
    try:
        shards.start_shards(state, [name], nodes_per_shard=1, shape=nodes.NodeShape(), timeout=120,
                            node_labels={TEST_LABEL: "true"})
        yield name, state, port
    finally:
        usagedb.stop(state, prom)
        shards.stop_shards(state, [name])
        cluster.kubectl("delete", "schedulingshard", name, "--ignore-not-found")
        cluster.kubectl("delete", "lease", f"kai-scheduler-{name}", "-n", "kai-scheduler", "--ignore-not-found")


def gpu_pod(name: str, queue_name: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name, POOL: pool}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {GPU: "1"}}}]}}


def bound(cluster: Cluster, namespace: str) -> dict[str, int]:
    """Running (bound, not deleting) pods per queue."""
    out: dict[str, int] = {}
    for p in cluster.get_json("pods", namespace=namespace)["items"]:
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
            q = p["metadata"]["labels"]["kai.scheduler/queue"]
            out[q] = out.get(q, 0) + 1
    return out


def usage_condition(cluster: Cluster, shard: str) -> dict[str, Any] | None:
    conditions = (cluster.get_json("schedulingshard", shard).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "UsageDBAvailable"), None)


def test_usage_in_prometheus_weighs_the_split_and_its_loss_degrades_to_plain_fair_share(
        cluster: Cluster, namespace: str, usage_shard: tuple[str, Any, int]) -> None:
    shard, state, port = usage_shard
    prom = f"prometheus-{namespace}"
    base = state.ports["apiserver"] - 443
    target = {"queue-controller": f"127.0.0.1:{dev.component_ports(base)['queue-controller']['metrics']}"}
    url = usagedb.start(state, target, port=port, timeout=60, name=prom)
    config = usagedb.usage_db_config(url, (8, 64, 512 * 2**30), windowSize=f"{WINDOW}s", fetchInterval="1s",
                                     stalenessPeriod="3s", extraParams={"queryResolution": "1s"})
    a, b = f"{namespace}-a", f"{namespace}-b"
    apply(cluster, namespace, [{**queue(q, gpu=(0, -1, 1)), "metadata": {"name": q, "labels": {POOL: shard}}}
                               for q in (a, b)])

    # 1. A's history: all 8 GPUs for ~20 s, scraped from the queue-controller's kai_queue_allocated_gpus.
    apply(cluster, namespace, [gpu_pod(f"a-old-{i}", a, shard) for i in range(8)])
    wait_for("A holds the 8 GPUs", lambda: bound(cluster, namespace).get(a) == 8, 60)
    settings = parse_usage_db_config(config)
    assert settings is not None

    def measured() -> dict[str, tuple[float, float, float]]:
        async def go() -> dict[str, tuple[float, float, float]]:
            async with aiohttp.ClientSession() as session:
                return await fetch_usage(session, settings, url, time.time())
        return asyncio.run(go())

    wait_for("A's usage reaches a third of the window", lambda: measured().get(a, (0.0,))[0] >= 0.34, 45)
    cluster.kubectl("delete", "pods", "--all", "--wait=false", namespace=namespace)
    wait_for("A's pods gone", lambda: not cluster.get_json("pods", namespace=namespace)["items"], 30)

    # 2. Both queues ask for the 8 GPUs; the shard reads usage from Prometheus. Its scheduler is paused while
    # the 16 pods and their PodGroups are created, so that one allocation divides them (bare pods evicted by a
    # reclaim would be gone for good, changing the requests).
    usagedb.point_shard([cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}"], shard, config)
    wait_for("usage read", lambda: (c := usage_condition(cluster, shard)) and c["status"] == "True", 30)
    process = shards.process_name(shard)
    argv = dev.stop_component(state, process)
    apply(cluster, namespace, [gpu_pod(f"{q[-1]}-{i}", q, shard) for q in (a, b) for i in range(8)])
    wait_for("16 PodGroups", lambda: len(cluster.get_json("podgroups", namespace=namespace)["items"]) == 16, 30)
    dev.start_component(state, process, argv)

    def split_matches_kai() -> str | None:
        got = bound(cluster, namespace)
        usage = measured()
        u_a, u_b = usage.get(a, (0.0,))[0], usage.get(b, (0.0,))[0]
        shares = divide(8, [ShareInput(a, 0, -1, 1.0, 8, usage=u_a), ShareInput(b, 0, -1, 1.0, 8, usage=u_b)])
        w_a, w_b = max(0.0, 0.5 + (0.5 - u_a)), max(0.0, 0.5 + (0.5 - u_b))
        report = (f"usage A={u_a:.3f} B={u_b:.3f}; weights max(0, w + k(w - u)) A={w_a:.3f} B={w_b:.3f}; "
                  f"8 GPUs x {w_a / (w_a + w_b):.3f} = {8 * w_a / (w_a + w_b):.2f} -> fair share "
                  f"A={shares[a]} B={shares[b]} (plain 4/4); bound A={got.get(a, 0)} B={got.get(b, 0)}")
        print(report)
        ok = got.get(a, 0) == shares[a] and got.get(b, 0) == shares[b] and shares[a] < 4
        return report if ok else None

    report = wait_for("the split in A's disfavour as KAI's formula gives", split_matches_kai, 45, interval=1)
    assert bound(cluster, namespace) == {a: 3, b: 5}, report
    # The restarted scheduler waited for its first usage answer: the first allocation divided, nothing reclaimed.
    assert len(cluster.get_json("pods", namespace=namespace)["items"]) == 16, report
    # `kai queues` shows the usage and its effect: the fair share with it and without it (PLAIN).
    shown = subprocess.run([sys.executable, "-m", "operators.cli", "queues", "-o", "json", f"--shard={shard}",
                            f"--partition-label-value={shard}"], capture_output=True, text=True, check=True,
                           env={**os.environ, "KUBECONFIG": cluster.kubeconfig}, timeout=60)
    gpu = {q["name"]: q["resources"]["gpu"] for q in json.loads(shown.stdout)["queues"]}
    assert gpu[a]["usage"] > gpu[b]["usage"] and gpu[a]["fairShare"] == 3 and gpu[a]["plainFairShare"] == 4, (
        json.dumps({a: gpu[a], b: gpu[b]}))

    # 3. Prometheus gone: plain fair share, with the condition; back: cleared.
    usagedb.stop(state, prom)
    down = wait_for("UsageDBAvailable=False",
                    lambda: (c := usage_condition(cluster, shard)) and c["status"] == "False" and c, 30)
    assert down["reason"] == "UsageDBUnavailable" and "plain fair share" in down["message"], down
    wait_for("plain fair share: 4 and 4", lambda: bound(cluster, namespace) == {a: 4, b: 4}, 60)
    usagedb.start(state, target, port=port, timeout=60, name=prom)
    up = wait_for("UsageDBAvailable=True again",
                  lambda: (c := usage_condition(cluster, shard)) and c["status"] == "True" and c, 30)
    assert up["reason"] == "UsageFetched", json.dumps(up)
