"""The scheduler's Prometheus metrics (contracts §13) with live values, after a workload on the dev cluster.

The workload makes every metric move: one isolated kwok node with 4 GPUs is filled by four 1-GPU training pods
(allocate: BindRequests, binds), then a 1-GPU inference pod of the same queue preempts one of them (the preempt
action's solver simulates scenarios; the victim's PodGroup counts an evicted pod). A second inference pod is then
over the queue's non-preemptible quota: its preemption attempt fails before any scenario, and counts so.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from operators.devcluster.cluster import component_ports, load_state
from operators.devcluster.nodes import NodeShape, node_manifest
from tests.support import Cluster, labelled

pytestmark = pytest.mark.cluster

T = TypeVar("T")
GPU = "nvidia.com/gpu"
Samples = dict[str, list[tuple[dict[str, str], float]]]
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 90) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            got = check()
        except (AssertionError, OSError, KeyError) as exc:
            last = exc
        else:
            if got:
                return got
            last = got
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def scrape(cluster: Cluster) -> Samples:
    """The scheduler's series by the names on the wire (prometheus-client's parser would rename counters)."""
    state = load_state(cluster.name)
    assert state is not None
    port = component_ports(state.ports["apiserver"] - 443)["scheduler"]["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: Samples = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = {k: v.encode().decode("unicode_escape") for k, v in LABEL.findall(m.group(2) or "")}
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum of the series of `name` whose labels include `labels`; None if there is no such series."""
    got = [v for lab, v in samples.get(name, []) if all(lab.get(k) == want for k, want in labels.items())]
    return sum(got) if got else None


def queue(name: str, parent: str = "", gpu_quota: float = 1) -> dict[str, Any]:
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                          "cpu": free, "memory": free}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def deployment(name: str, queue_name: str, replicas: int, priority_class: str,
               selector: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": priority_class}
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {GPU: "1"}}}
    spec = {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0, "nodeSelector": selector,
            "containers": [container]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def bare_pod(name: str, queue_name: str, priority_class: str, selector: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": priority_class}
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {GPU: "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0, "nodeSelector": selector,
                     "containers": [container]}}


def running(cluster: Cluster, namespace: str, selector: str) -> int:
    items = cluster.get_json("pods", "-l", selector, namespace=namespace)["items"]
    return sum(1 for p in items if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")
               and not p["metadata"].get("deletionTimestamp"))


def test_scheduler_metrics_have_live_values(cluster: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    selector = {"kai.test/metrics": namespace}
    node = node_manifest(f"{namespace}-gpu-0", NodeShape(gpus=4), labels=selector)
    dept, team = f"mdept-{suffix}", f"mteam-{suffix}"
    before = scrape(cluster)
    cluster.kubectl("apply", "-f", "-", namespace=namespace,
                    input=labelled([node, queue(dept), queue(team, dept)]))
    cluster.kubectl("apply", "-f", "-", namespace=namespace,
                    input=labelled([deployment("train", team, 4, "train", selector)]))
    wait_for("4 training pods running", lambda: running(cluster, namespace, "app=train") == 4 or None, 120)
    cluster.kubectl("apply", "-f", "-", namespace=namespace,
                    input=labelled([deployment("inference", team, 1, "inference", selector)]))
    wait_for("the inference pod running", lambda: running(cluster, namespace, "app=inference") == 1 or None, 120)

    def evicted() -> Samples | None:
        got = scrape(cluster)
        return got if value(got, "kai_pod_group_evicted_pods_total", namespace=namespace) else None
    after = wait_for("the eviction counted", evicted, 30)

    # Gauges of the last cycle.
    for name in ("kai_e2e_scheduling_latency_milliseconds", "kai_open_session_latency_milliseconds",
                 "kai_close_session_latency_milliseconds"):
        assert (value(after, name) or 0) > 0, name
    assert (value(after, "kai_plugin_scheduling_latency_milliseconds", plugin="proportion",
                  OnSession="OnSessionOpen") or 0) > 0
    assert value(after, "kai_action_scheduling_latency_milliseconds", action="allocate") is not None
    # Histograms: this test's 5 binds at least.
    for name in ("kai_task_scheduling_latency_milliseconds", "kai_task_bind_latency_milliseconds"):
        grown = (value(after, f"{name}_count") or 0) - (value(before, f"{name}_count") or 0)
        assert grown >= 5, (name, grown)
        assert (value(after, f"{name}_sum") or 0) > 0, name
        assert value(after, f"{name}_bucket", le="2560.0") is not None, name
    # Counters, under KAI's names exactly (no `_total` added).
    simulated = (value(after, "kai_scenarios_simulation_by_action", action="preempt") or 0) - (
        value(before, "kai_scenarios_simulation_by_action", action="preempt") or 0)
    assert simulated >= 1
    for action in ("reclaim", "preempt", "consolidation"):
        assert value(after, "kai_scenarios_filtered_by_action", action=action) is not None, action
        assert value(after, "kai_scenarios_duplicate_by_action", action=action) is not None, action
    [(labels, count)] = [(lab, v) for lab, v in after["kai_pod_group_evicted_pods_total"]
                         if lab["namespace"] == namespace]
    assert count == 1 and labels["action"] == "preempt" and labels["podgroup"].startswith("pg-train-"), labels
    assert labels["uid"] and labels["nodepool"], labels
    assert (value(after, "kai_podgroups_scheduled_by_action", action="allocate") or 0) >= 1
    assert (value(after, "kai_total_preemption_attempts") or 0) >= 1
    # KAI v0.18's per-action eviction counters: the preempted pod counts once its delete was accepted; the
    # other actions' counters are exposed (at 0 or above) from the start.
    evictions = (value(after, "kai_total_preemption_evictions") or 0) - (
        value(before, "kai_total_preemption_evictions") or 0)
    assert evictions >= 1, evictions
    for name in ("kai_total_reclaim_evictions", "kai_total_consolidation_evictions"):
        assert value(before, name) is not None, name
    assert value(after, "kai_queue_fair_share_gpu", queue_name=team) is not None
    # KAI's usage gauge is the historical usage from the usage database: this cluster has none, so 0 (the
    # allocation is the queue-controller's kai_queue_allocated_gpus).
    assert value(after, "kai_queue_gpu_usage", queue_name=team) == 0
    # Each PodGroup's wait until its first start, under its queue (one PodGroup per Deployment: train, inference).
    started = (value(after, "kai_queue_time_to_first_start_seconds_count", queue_name=team) or 0)
    assert started >= 2, started
    assert value(after, "kai_queue_time_to_first_start_seconds_bucket", queue_name=team, le="+Inf") == started

    # A second non-preemptible (inference) pod: the queue's quota of 1 GPU is used by the first one, and no victim
    # can change that, so its preemption attempt fails before the search.
    reason = {"reason": "non_preemptible_over_quota"}
    failed_before = value(after, "kai_preemption_failures_total", **reason)
    assert failed_before is not None
    cluster.kubectl("apply", "-f", "-", namespace=namespace,
                    input=labelled([bare_pod("inference-2", team, "inference", selector)]))
    wait_for("the failed preemption counted", lambda: (value(scrape(cluster), "kai_preemption_failures_total",
                                                              **reason) or 0) > failed_before or None, 30)
