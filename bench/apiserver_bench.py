"""End-to-end throughput of the suite, side by side with the API server's own limit, measured in the same run.

Against a running dev cluster (`kai dev up --name apibench --port-base 26000 --nodes 200 --detach`), on loopback:

(a) API server limit: a plain client (kubernetes_asyncio, `--concurrency` requests in flight) creates `--pods`
    single-CPU pods that no scheduler owns (`schedulerName: none`) and POSTs each one's `pods/binding` itself,
    round-robin over the kwok nodes. `create+bind` pods/s is what the API server accepts for the writes scheduling
    needs (the suite's path does more: BindRequest create, binder's binding + status writes, PodGroup writes);
    `until Running` adds kwok marking the pods Running.
(b) The suite: the same number of single-CPU pods with `schedulerName: kai-scheduler` in a queue with unlimited
    quota, created by the same client; timed from the first create until every pod is Running (admission,
    pod-grouper, podgroup-controller, scheduler, binder, kwok).

Both runs use fresh namespaces that are deleted at the end. The scheduler's last-cycle latency
(`kai_e2e_scheduling_latency_milliseconds`) is sampled from its /metrics every second during (b).
Prints a table and writes a plot. Run: python bench/apiserver_bench.py [--cluster apibench] [--pods 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from operators.core.kube import api_client, raw, raw_stream
from operators.devcluster.cluster import component_ports, load_state


@dataclass
class Run:
    name: str
    pods: int
    writes_s: float = 0.0  # first create -> last create (and bind, for the raw run) answered
    running_s: float = 0.0  # first create -> every pod Running
    cycle_ms: list[float] = field(default_factory=list)
    progress: list[tuple[float, int]] = field(default_factory=list)  # (seconds since the first create, Running)

    def rate(self, seconds: float) -> float:
        return self.pods / seconds if seconds > 0 else 0.0


def pod(name: str, scheduler: str, queue: str = "") -> dict[str, Any]:
    labels = {"app": "apibench"}
    if queue:
        labels["kai.scheduler/queue"] = queue
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}


async def bounded(concurrency: int, calls: list[Callable[[], Awaitable[None]]]) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


async def wait_running(api: Any, namespace: str, count: int, timeout: float, run: Run, started: float) -> float:
    """Watch the namespace's pods until `count` are Running; returns the monotonic time it happened."""
    listing = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods")
    running = {p["metadata"]["name"] for p in listing["items"] if p["status"].get("phase") == "Running"}
    version = listing["metadata"]["resourceVersion"]
    run.progress.append((time.monotonic() - started, len(running)))
    deadline = time.monotonic() + timeout
    while len(running) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(running)}/{count} pods Running in {namespace} after {timeout:.0f}s")
        resp = await raw_stream(api, "GET", f"/api/v1/namespaces/{namespace}/pods",
                                query={"watch": "true", "resourceVersion": version,
                                       "timeoutSeconds": str(max(int(left), 1))}, timeout=left + 5)
        async with resp:
            async for line in resp.content:
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    break
                version = obj["metadata"]["resourceVersion"]
                name = obj["metadata"]["name"]
                if event["type"] != "DELETED" and obj["status"].get("phase") == "Running" and name not in running:
                    running.add(name)
                    run.progress.append((time.monotonic() - started, len(running)))
                if len(running) >= count:
                    break
    return time.monotonic()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name + "".join(f",{k}={v}" for k, v in sorted(sample.labels.items()))
            out[key] = float(sample.value)
    return out


async def sample_cycles(port: int, into: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            got = await asyncio.to_thread(scrape, port)
            into.append(got.get("kai_e2e_scheduling_latency_milliseconds", 0.0))
        except OSError:
            pass
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def raw_limit(api: Any, count: int, concurrency: int, timeout: float) -> Run:
    namespace = f"apibench-raw-{uuid.uuid4().hex[:6]}"
    await raw(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    nodes = await raw(api, "GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})
    names = sorted(n["metadata"]["name"] for n in nodes["items"]) or sorted(
        n["metadata"]["name"] for n in (await raw(api, "GET", "/api/v1/nodes"))["items"])
    run = Run("API server: create + pods/binding", count)
    base = f"/api/v1/namespaces/{namespace}/pods"

    async def create_and_bind(i: int) -> None:
        name = f"raw-{i:05d}"
        await raw(api, "POST", base, body=pod(name, "none"))
        await raw(api, "POST", f"{base}/{name}/binding",
                  body={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": names[i % len(names)]}})

    started = time.monotonic()
    await bounded(concurrency, [partial(create_and_bind, i) for i in range(count)])
    run.writes_s = time.monotonic() - started
    run.running_s = await wait_running(api, namespace, count, timeout, run, started) - started
    await raw(api, "DELETE", f"/api/v1/namespaces/{namespace}")
    return run


async def suite(api: Any, count: int, concurrency: int, timeout: float, metrics_port: int) -> Run:
    suffix = uuid.uuid4().hex[:6]
    namespace, queue = f"apibench-kai-{suffix}", f"apibench-{suffix}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await raw(api, "POST", "/apis/scheduling.run.ai/v2/queues",
              body={"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
                    "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    await raw(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    await asyncio.sleep(2)  # the scheduler's informer sees the queue before its pods
    run = Run("KAI suite: pods Running end to end", count)
    base = f"/api/v1/namespaces/{namespace}/pods"
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_cycles(metrics_port, run.cycle_ms, stop))
    started = time.monotonic()

    async def create(i: int) -> None:
        await raw(api, "POST", base, body=pod(f"kai-{i:05d}", "kai-scheduler", queue))

    try:
        await bounded(concurrency, [partial(create, i) for i in range(count)])
        run.writes_s = time.monotonic() - started
        run.running_s = await wait_running(api, namespace, count, timeout, run, started) - started
    finally:
        stop.set()
        await sampler
        await raw(api, "DELETE", f"/api/v1/namespaces/{namespace}")
        await raw(api, "DELETE", f"/apis/scheduling.run.ai/v2/queues/{queue}")
    return run


def plot(runs: list[Run], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4))
    labels = ["API server\ncreate+bind", "API server\nuntil Running", "KAI suite\ncreates", "KAI suite\nuntil Running"]
    raw_run, kai = runs
    values = [raw_run.rate(raw_run.writes_s), raw_run.rate(raw_run.running_s), kai.rate(kai.writes_s),
              kai.rate(kai.running_s)]
    left.bar(labels, values, color=["#777", "#aaa", "#76b900", "#4a7a00"])
    for i, v in enumerate(values):
        left.text(i, v, f"{v:.0f}", ha="center", va="bottom")
    left.set_ylabel("pods / s")
    left.set_title(f"{kai.pods} single-CPU pods, same cluster, same run")
    for r, colour in ((raw_run, "#777"), (kai, "#76b900")):
        middle.plot([t for t, _ in r.progress], [n for _, n in r.progress], color=colour,
                    label=r.name.split(":")[0])
    middle.set_xlabel("seconds since the first create")
    middle.set_ylabel("pods Running")
    middle.set_title("progress (counted once the creates are done)")
    middle.legend()
    right.plot(range(len(kai.cycle_ms)), kai.cycle_ms, marker=".")
    right.set_xlabel("seconds into the KAI run (1 s samples)")
    right.set_ylabel("last cycle e2e latency, ms")
    right.set_title("kai_e2e_scheduling_latency_milliseconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--cluster", default="apibench")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for pods to be Running")
    parser.add_argument("--plot", default="bench/apiserver_bench.png")
    args = parser.parse_args()
    if not 1 <= args.pods <= 5000:
        parser.error("--pods must be within 1..5000")
    state = load_state(args.cluster)
    if state is None:
        raise SystemExit(f"no dev cluster {args.cluster!r}: kai dev up --name {args.cluster} --port-base 26000 "
                         "--nodes 200 --detach")
    ports = component_ports(state.ports["apiserver"] - 443)
    port, binder_port = ports["scheduler"]["metrics"], ports["binder"]["metrics"]
    api = await api_client(state.kubeconfig)
    async with api:
        raw_run = await raw_limit(api, args.pods, args.concurrency, args.timeout)
        before = scrape(port) | scrape(binder_port)
        kai = await suite(api, args.pods, args.concurrency, args.timeout, port)
    final = scrape(port) | scrape(binder_port)
    runs = [raw_run, kai]
    print(f"\n{'run':38} {'pods':>5} {'writes s':>9} {'writes/s':>9} {'Running s':>10} {'Running/s':>10}")
    for r in runs:
        print(f"{r.name:38} {r.pods:>5} {r.writes_s:>9.2f} {r.rate(r.writes_s):>9.1f} {r.running_s:>10.2f} "
              f"{r.rate(r.running_s):>10.1f}")
    print(f"\nKAI suite end to end = {kai.rate(kai.running_s) / raw_run.rate(raw_run.writes_s):.0%} of the API "
          "server's create+bind limit")
    busy = [c for c in kai.cycle_ms if c > 0]
    if busy:
        print(f"scheduler cycle (kai_e2e_scheduling_latency_milliseconds, {len(busy)} samples): "
              f"median {statistics.median(busy):.0f} ms, max {max(busy):.0f} ms")
    print("stages of the KAI run (histogram deltas over the run):")
    for name, what in (("kai_task_scheduling_latency_milliseconds", "pod created -> BindRequest (scheduler)"),
                       ("kai_task_bind_latency_milliseconds", "BindRequest -> pod bound (binder, as seen)"),
                       ("kai_binder_bind_latency_milliseconds", "binder's own bind call")):
        n = final.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = final.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        if n:
            print(f"  {what:45} mean {total / n:>7.0f} ms over {n:.0f} pods  ({name})")
    actions = {k.split("action=")[1]: v for k, v in final.items()
               if k.startswith("kai_action_scheduling_latency_milliseconds,")}
    print("last cycle per action (ms): " + ", ".join(f"{a} {v:.1f}" for a, v in sorted(actions.items())))
    plot(runs, args.plot)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    asyncio.run(main())
