"""Throughput of the suite against the API server's own limit, measured in the same run.

Against a running dev cluster (`kai dev up --name apibench --port-base 26000 --nodes 200 --detach`), on loopback:

ceiling   a plain client (`--concurrency` requests in flight) creates `--pods` single-CPU pods that no scheduler
          owns and POSTs each one's `pods/binding` itself: create+bind pods/s is what the API server accepts for
          the writes scheduling needs. Its namespace is deleted, and the deletion waited for, before the suite runs.
single    `--pods` single-CPU pods of `kai-scheduler`, each its own job.
gangs     `--pods / 10` gangs of 10 pods (a RayCluster that KubeRay leaves alone - `spec.managedBy` names another
          manager - owning one head and nine worker pods, so the pod-grouper makes one PodGroup of 10).
mixed     `--pods` pods, every fifth one asking for half a GPU (`gpu-fraction: "0.5"`), the rest single-CPU.
backlog   `--backlog` pods (each size in turn) asking for more GPUs than any node has: all stay pending and nothing
          changes. Once the run settles the writes are counted over `--window` seconds.
scale     `--scale-pods` pods (20,000 by default; KAI's envelope is 1,000 nodes): of every five blocks of ten pods,
          two are gangs of 10 (as `gangs`), two single-pod jobs, one single pods asking for half a GPU. Its pods
          stay until every workload ran: `--workloads scale,ceiling` measures the ceiling at that backlog.

For every run it prints pods/s from the first create until every pod is Running, the create-to-bound and
bound-to-Running latency (p50/p90/p99) and the same split into pipeline stages (pod-grouper, scheduler, binder,
node agent; from the bench's watches and from the API server's timestamps), the API requests per bound pod by
verb and resource (the delta of the API server's `apiserver_request_total` over the run, leases counted apart),
and the CPU seconds per bound pod of every process of the cluster. It plots progress over time. Run:
python bench/apiserver_bench.py [--cluster apibench] [--pods 1000] [--workloads ceiling,single,gangs,mixed,backlog]
For the e2e at scale: kai dev up ... --nodes 1000, then --workloads scale,ceiling [--scale-pods 20000] --timeout 3600.
A suite prints a progress line every 60 s; stopped (SIGINT/SIGTERM) or failed, it prints what it reached, labelled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from operators.core.kube import RawError, api_client, is_not_found, raw, raw_stream
from operators.core.times import parse_rfc3339
from operators.devcluster.cluster import load_state

READS = ("GET", "LIST", "WATCH")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    name: str
    pods: int
    created: dict[str, float] = field(default_factory=dict)  # pod -> wall time its create was answered
    bound: dict[str, float] = field(default_factory=dict)  # pod -> wall time the watch showed spec.nodeName
    running: dict[str, float] = field(default_factory=dict)
    started: float = 0.0
    writes_s: float = 0.0  # first create -> last create (and bind, for the ceiling) answered
    running_s: float = 0.0  # first create -> every pod Running
    requests: Counter[str] = field(default_factory=Counter)  # "VERB resource[/sub]" -> count over the run
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds over the run
    write_rate: dict[str, float] = field(default_factory=dict)  # backlog: "VERB resource" -> per second
    grouped: dict[str, float] = field(default_factory=dict)  # pod -> wall time the watch showed pod-group-name
    group_of: dict[str, str] = field(default_factory=dict)  # pod -> its PodGroup's name
    podgroups: dict[str, float] = field(default_factory=dict)  # PodGroup -> wall time its watch showed it
    bindrequests: dict[str, float] = field(default_factory=dict)  # pod -> wall time its BindRequest was seen
    server_stages: list[tuple[str, list[float]]] = field(default_factory=list)  # from the objects' timestamps
    retries: int = 0  # creates answered 500, or not in time, and retried
    writers: Counter[str] = field(default_factory=Counter)  # "client VERB resource" -> writes (audit log), the run's ns

    def rate(self, seconds: float) -> float:
        return self.pods / seconds if seconds > 0 else 0.0


class Stopped(Exception):
    """The run was stopped (SIGINT/SIGTERM) or failed before it finished; `run` holds what it reached."""

    def __init__(self, run: Run) -> None:
        super().__init__(run.name)
        self.run = run


def percentiles(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return (0.0, 0.0, 0.0)
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return at(0.5), at(0.9), at(0.99)


def pod(name: str, scheduler: str, queue: str = "", *, gpus: int = 0, fraction: str = "",
        labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    all_labels = {"app": "apibench", **(labels or {})}
    if queue:
        all_labels["kai.scheduler/queue"] = queue
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "64Mi"}}
    if gpus:
        resources = {"requests": {"cpu": "100m", "nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    meta: dict[str, Any] = {"name": name, "labels": all_labels}
    if fraction:
        meta["annotations"] = {"gpu-fraction": fraction}
        resources = {"requests": {"cpu": "100m"}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "resources": resources}]}}


async def bounded(concurrency: int, calls: list[Callable[[], Awaitable[None]]]) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


# --- what the cluster reports ----------------------------------------------------------------------------
REFUSED = " -> "  # "VERB resource -> CODE": the requests of a kind the API server answered with an error


async def request_counts(api: Any) -> Counter[str]:
    """apiserver_request_total summed by verb and resource[/subresource] (leases under `lease`), and apart (keys
    with REFUSED) those answered 4xx/5xx: a client retrying a write the server refuses (kwok's 422s on a stale pod)
    shows up there, not as work of the suite."""
    resp = await raw_stream(api, "GET", "/metrics")
    async with resp:
        text = (await resp.read()).decode()
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            resource = labels.get("resource", "") or "(non-resource)"
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            key = f"{labels.get('verb', '?')} {resource}"
            out[key] += int(sample.value)
            if labels.get("code", "").isdigit() and int(labels["code"]) >= 400:
                out[f"{key}{REFUSED}{labels['code']}"] += int(sample.value)
    return out


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
        except (OSError, IndexError, ValueError):
            continue
    return out


def peak_rss_mib(pids: dict[str, int]) -> dict[str, float]:
    """Each process's peak resident memory so far (VmHWM): what the chart's memory requests and limits rest on."""
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            with open(f"/proc/{pid}/status") as f:
                line = next(ln for ln in f if ln.startswith("VmHWM:"))
            out[name] = int(line.split()[1]) / 1024
        except (OSError, StopIteration, ValueError):
            continue
    return out


class Measure:
    """Request counts and CPU before/after a run; who wrote, when the cluster keeps an audit log."""

    def __init__(self, api: Any, pids: dict[str, int], audit_log: Path | None = None) -> None:
        self.api, self.pids, self.audit_log = api, pids, audit_log

    def audit_mark(self) -> int:
        return self.audit_log.stat().st_size if self.audit_log and self.audit_log.exists() else -1

    def writers(self, mark: int, namespace: str) -> Counter[str]:
        """The writes answered since `mark` on objects of `namespace`, by client (User-Agent up to its first "/"),
        verb and resource: which component (or kwok, the kubelet's double) makes the writes apiserver_request_total
        counts. Only with `kai dev up --audit-policy tests/audit-policy.yaml`; a blocking audit log costs the API
        server CPU, so CPU per pod is read from runs without it."""
        out: Counter[str] = Counter()
        if mark < 0 or self.audit_log is None:
            return out
        with self.audit_log.open("rb") as log:
            log.seek(mark)
            text = log.read()
        for line in text[:text.rfind(b"\n") + 1].splitlines():
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (event.get("stage") == "ResponseComplete" and ref.get("namespace") == namespace
                    and event.get("verb") in ("create", "update", "patch", "delete")):
                resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                out[f"{event.get('userAgent', '').split('/')[0]} {event['verb']} {resource}"] += 1
        return out

    async def __call__(self) -> tuple[Counter[str], dict[str, float]]:
        return await request_counts(self.api), cpu_seconds(self.pids)

    @staticmethod
    def delta(run: Run, before: tuple[Counter[str], dict[str, float]],
              after: tuple[Counter[str], dict[str, float]]) -> None:
        run.requests = Counter({k: v - before[0].get(k, 0) for k, v in after[0].items()
                                if v - before[0].get(k, 0) > 0})
        run.cpu = {k: v - before[1].get(k, 0.0) for k, v in after[1].items()}


async def watch_pods(api: Any, namespace: str, run: Run, count: int, timeout: float, *, until: str) -> None:
    """Record bind and Running times from the namespace's pod watch until `count` pods are `until`."""
    listing = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods")
    version = listing["metadata"]["resourceVersion"]

    def see(obj: dict[str, Any]) -> None:
        name, now = obj["metadata"]["name"], time.time()
        group = (obj["metadata"].get("annotations") or {}).get("pod-group-name")
        if group and name not in run.grouped:
            run.grouped[name] = now
            run.group_of[name] = group
        if (obj.get("spec") or {}).get("nodeName") and name not in run.bound:
            run.bound[name] = now
        if (obj.get("status") or {}).get("phase") == "Running" and name not in run.running:
            run.running[name] = now

    for item in listing["items"]:
        see(item)
    done = run.running if until == "Running" else run.bound
    deadline = time.monotonic() + timeout
    while len(done) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(run.bound)} bound, {len(run.running)} Running of {count} in {namespace} "
                               f"after {timeout:.0f}s")
        resp = await raw_stream(api, "GET", f"/api/v1/namespaces/{namespace}/pods",
                                query={"watch": "true", "resourceVersion": version,
                                       "timeoutSeconds": str(max(int(left), 1))}, timeout=left + 5)
        async with resp:
            async for line in resp.content:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    break
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "DELETED":
                    see(event["object"])
                if len(done) >= count:
                    break


async def watch_first_seen(api: Any, path: str, seen: dict[str, float]) -> None:
    """Record the wall time each object under `path` is first seen (runs until cancelled)."""
    listing = await raw(api, "GET", path)
    version = listing["metadata"]["resourceVersion"]
    for item in listing["items"]:
        seen.setdefault(item["metadata"]["name"], time.time())
    while True:
        resp = await raw_stream(api, "GET", path, query={"watch": "true", "resourceVersion": version,
                                                         "timeoutSeconds": "300"}, timeout=310)
        async with resp:
            async for line in resp.content:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    listing = await raw(api, "GET", path)
                    version = listing["metadata"]["resourceVersion"]
                    break
                version = event["object"]["metadata"]["resourceVersion"]
                seen.setdefault(event["object"]["metadata"]["name"], time.time())


async def create_namespace(api: Any, prefix: str) -> str:
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    await raw(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    return namespace


async def delete_and_wait(api: Any, path: str, timeout: float = 300) -> None:
    """Delete and wait until it is gone, so that the next run does not overlap with its clean-up."""
    try:
        await raw(api, "DELETE", path)
    except Exception as exc:
        if not is_not_found(exc):
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await raw(api, "GET", path)
        except Exception as exc:
            if is_not_found(exc):
                return
            raise
        await asyncio.sleep(1)
    raise TimeoutError(f"{path} still there after {timeout:.0f}s")


# --- the runs ----------------------------------------------------------------------------------------------
async def ceiling(api: Any, measure: Measure, count: int, concurrency: int, timeout: float) -> Run:
    namespace = await create_namespace(api, "apibench-raw")
    nodes = await raw(api, "GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})
    names = sorted(n["metadata"]["name"] for n in nodes["items"]) or sorted(
        n["metadata"]["name"] for n in (await raw(api, "GET", "/api/v1/nodes"))["items"])
    run = Run("ceiling: create + pods/binding", count)
    base = f"/api/v1/namespaces/{namespace}/pods"

    async def create_and_bind(i: int) -> None:
        name = f"raw-{i:05d}"
        await raw(api, "POST", base, body=pod(name, "none"))
        run.created[name] = time.time()
        await raw(api, "POST", f"{base}/{name}/binding",
                  body={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": names[i % len(names)]}})
        run.bound[name] = time.time()

    before = await measure()
    run.started = time.time()
    await bounded(concurrency, [partial(create_and_bind, i) for i in range(count)])
    run.writes_s = time.time() - run.started
    # The ceiling is this rate; printed now, as the wait for Running (the node agent's pace) may not end.
    print(f"  [ceiling] {count} pods created and bound in {run.writes_s:.1f} s: {run.rate(run.writes_s):.1f} pods/s",
          flush=True)
    await watch_pods(api, namespace, run, count, timeout, until="Running")
    run.running_s = max(run.running.values()) - run.started
    Measure.delta(run, before, await measure())
    await delete_and_wait(api, f"/api/v1/namespaces/{namespace}")
    return run


async def make_queue(api: Any) -> str:
    name = f"apibench-{uuid.uuid4().hex[:6]}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await raw(api, "POST", "/apis/scheduling.run.ai/v2/queues",
              body={"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                    "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    return name


def raycluster(name: str, queue: str, workers: int) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray",
                                         "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue}},
            "spec": {"managedBy": "kueue.x-k8s.io/multikueue",  # KubeRay leaves it alone: the bench makes pods
                     "headGroupSpec": {"rayStartParams": {}, "template": template},
                     "workerGroupSpecs": [{"groupName": "workers", "replicas": workers, "minReplicas": workers,
                                           "maxReplicas": workers, "rayStartParams": {}, "template": template}]}}


async def suite(api: Any, measure: Measure, workload: str, count: int, concurrency: int, timeout: float,
                gang: int = 10, keep: list[str] | None = None) -> Run:
    """One workload end to end. With `keep`, its namespace and queue stay (their paths are appended to it): the
    next runs measure at that backlog."""
    queue = await make_queue(api)
    namespace = await create_namespace(api, f"apibench-{workload}")
    await asyncio.sleep(2)  # the scheduler's informer sees the queue before its pods
    base = f"/api/v1/namespaces/{namespace}/pods"
    calls: list[Callable[[], Awaitable[None]]] = []
    run = Run({"single": f"single: {count} single-pod jobs", "gangs": f"gangs: {count // gang} x {gang} pods",
               "mixed": f"mixed: {count} pods, 1 in 5 half a GPU",
               "scale": f"scale: {count} pods, 2 in 5 in gangs of {gang}, 2 in 5 single, 1 in 5 half a GPU"}[workload],
              count)

    async def create(body: dict[str, Any]) -> None:
        # A 500 (a webhook call that timed out on a starved box) or no answer in time is retried as a controller
        # would; counted. A retry answered 409 found the first attempt's pod: created.
        for attempt in range(4):
            try:
                await raw(api, "POST", base, body=body)
                break
            except RawError as exc:
                if exc.status == 409 and attempt > 0:
                    break
                if exc.status != 500 or attempt == 3:
                    raise
            except TimeoutError:
                if attempt == 3:
                    raise
            run.retries += 1
        run.created[body["metadata"]["name"]] = time.time()

    if workload in ("gangs", "scale"):
        run.pods = count = count // gang * gang
    # Blocks of `gang` pods: every block a gang for `gangs`; for `scale`, of every five blocks two are gangs,
    # two single-pod jobs and one single pods asking for half a GPU (`mixed` has one pod in five so).
    kinds = [("gang" if workload == "gangs" or (workload == "scale" and b % 5 < 2)
              else "fraction" if workload == "scale" and b % 5 == 4 else "single") for b in range(-(-count // gang))]
    owners: dict[int, dict[str, Any]] = {}

    async def make_owner(b: int) -> None:
        owners[b] = await raw(api, "POST", f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters",
                              body=raycluster(f"gang-{b:05d}", queue, gang - 1))

    await bounded(concurrency, [partial(make_owner, b) for b, kind in enumerate(kinds) if kind == "gang"])
    for b, kind in enumerate(kinds):
        if kind != "gang":
            for i in range(b * gang, min((b + 1) * gang, count)):
                fraction = "0.5" if kind == "fraction" or (workload == "mixed" and i % 5 == 4) else ""
                calls.append(partial(create, pod(f"kai-{i:05d}", "kai-scheduler", queue, fraction=fraction)))
            continue
        owner = owners[b]
        ref = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": owner["metadata"]["name"],
               "uid": owner["metadata"]["uid"], "controller": True}
        for i in range(gang):
            head = i == 0
            labels = {"ray.io/cluster": owner["metadata"]["name"], "ray.io/node-type": "head" if head else "worker",
                      "ray.io/group": "headgroup" if head else "workers"}
            calls.append(partial(create, pod(f"g{b:05d}-{i:02d}", "kai-scheduler", queue, labels=labels, owner=ref)))
    before = await measure()
    mark = measure.audit_mark()
    run.started = time.time()
    stage_watchers = [
        asyncio.create_task(watch_first_seen(api, f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups",
                                             run.podgroups)),
        asyncio.create_task(watch_first_seen(
            api, f"/apis/scheduling.run.ai/v1alpha2/namespaces/{namespace}/bindrequests", run.bindrequests))]
    progress = asyncio.create_task(print_progress(run))
    watcher = asyncio.create_task(watch_pods(api, namespace, run, count, timeout, until="Running"))
    creates = asyncio.create_task(bounded(concurrency, calls))
    stopped = False
    try:
        # The watch's timeout ends the creates too: a run that cannot finish stops where it is.
        await asyncio.wait([creates, watcher], return_when=asyncio.FIRST_EXCEPTION)
        if not creates.done():
            creates.cancel()
            run.name += f" (creates stopped at {len(run.created)} of {count})"
        else:
            await creates  # a failed create ends the run, as before
        run.writes_s = (max(run.created.values()) if run.created else time.time()) - run.started
        try:
            await watcher
        except TimeoutError as exc:  # report what ran, labelled: a long run's numbers are not thrown away
            print(f"\n  {workload}: {exc}; the report covers the pods Running by then", flush=True)
            run.name += f" (timed out: {len(run.running)} of {run.pods} Running)"
            run.pods = len(run.running)
        for task in stage_watchers:
            task.cancel()
        progress.cancel()
        if not run.running:
            raise TimeoutError(f"{workload}: no pod Running after {timeout:.0f}s")
        run.running_s = max(run.running.values()) - run.started
        await asyncio.sleep(5)  # trailing status writes (coalesced a few seconds) belong to the run
        Measure.delta(run, before, await measure())
        run.writers = measure.writers(mark, namespace)
        await server_stages(api, namespace, run)
    except asyncio.CancelledError:
        # Stopped by a signal: what the run reached is printed, the cluster is left to `kai dev down`.
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
        stopped = True
        raise Stopped(run) from None
    except Exception as exc:
        # A failure mid-run (a create that kept failing) reports what the run reached before it ends the bench.
        stopped = True
        run.name += f" (failed: {type(exc).__name__}: {exc})"
        raise Stopped(run) from exc
    finally:
        for task in (progress, watcher, creates, *stage_watchers):
            task.cancel()
        paths = [f"/api/v1/namespaces/{namespace}", f"/apis/scheduling.run.ai/v2/queues/{queue}"]
        if keep is None and not stopped:
            for path in paths:
                await delete_and_wait(api, path, timeout=1800)
        elif keep is not None:
            keep += paths
    return run


def so_far(run: Run) -> str:
    """One line of what a run reached: pods created, bound and Running, their rates since the first create, and
    create -> bound over the pods bound so far (pods not yet bound are not in it: it understates a backlog)."""
    elapsed = max(time.time() - run.started, 1e-9)
    to_bound = [run.bound[p] - run.created[p] for p in run.bound if p in run.created]
    p50, _, p99 = percentiles(to_bound)
    created, bound = len(run.created), len(run.bound)
    return (f"{elapsed:6.0f} s  created {created} ({created / elapsed:.1f}/s)  bound {bound} "
            f"({bound / elapsed:.1f}/s)  Running {len(run.running)}  create -> bound of the bound: "
            f"p50 {p50:.1f} s  p99 {p99:.1f} s")


async def print_progress(run: Run, every: float = 60) -> None:
    """A progress line every `every` seconds, so a long run stopped from outside leaves its trace."""
    while True:
        await asyncio.sleep(every)
        print(f"  [{run.name.split(':')[0]}] {so_far(run)}", flush=True)


def report_stopped(run: Run) -> None:
    """What a stopped run reached, labelled as such (no request counts or CPU: the run did not end)."""
    print(f"\n== {run.name} (STOPPED before it finished: partial)")
    print(f"  {so_far(run)}")
    if run.retries:
        print(f"  creates answered 500 or not in time, retried: {run.retries}")
    to_running = [run.running[p] - run.bound[p] for p in run.running if p in run.bound]
    print("  bound -> Running   p50 {:.2f} s  p90 {:.2f} s  p99 {:.2f} s  (n={})".format(
        *percentiles(to_running), len(to_running)))
    if run.grouped:
        print("  stages so far (per pod, from the bench's watches):")
        for stage, values in stages(run):
            print("    {:34} p50 {:6.2f} s  p90 {:6.2f} s  p99 {:6.2f} s  (n={})".format(
                stage, *percentiles(values), len(values)))


def _stamp(value: str | None) -> float | None:
    return parse_rfc3339(value)


async def server_stages(api: Any, namespace: str, run: Run) -> None:
    """The same stages from the API server's own timestamps (whole seconds), free of the bench's watch lag.

    pod created (`creationTimestamp`) -> PodGroup created -> pod-grouper's patch (its managedFields time) ->
    BindRequest created -> bound (the `PodScheduled=True` condition the binding sets) -> Running (`startTime`).
    """
    pods = (await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods"))["items"]
    pgs = {o["metadata"]["name"]: _stamp(o["metadata"]["creationTimestamp"]) for o in (await raw(
        api, "GET", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups"))["items"]}
    brs = {o["metadata"]["name"]: _stamp(o["metadata"]["creationTimestamp"]) for o in (await raw(
        api, "GET", f"/apis/scheduling.run.ai/v1alpha2/namespaces/{namespace}/bindrequests"))["items"]}
    out: dict[str, list[float]] = {k: [] for k in ("create -> PodGroup created", "create -> pod-grouper patch",
                                                   "ready -> BindRequest created", "BindRequest -> bound",
                                                   "bound -> started", "create -> bound")}
    for pod in pods:
        meta = pod["metadata"]
        created = _stamp(meta["creationTimestamp"])
        group = (meta.get("annotations") or {}).get("pod-group-name", "")
        # The pod-grouper's patch is the only non-status write that sets `pod-group-name`.
        patched = max((_stamp(m.get("time")) or 0.0 for m in meta.get("managedFields") or []
                       if "pod-group-name" in json.dumps(m.get("fieldsV1")) and m.get("subresource") != "status"),
                      default=None)
        conditions = (pod.get("status") or {}).get("conditions") or []
        bound = next((_stamp(c.get("lastTransitionTime")) for c in conditions
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
        started = _stamp((pod.get("status") or {}).get("startTime"))
        pg, br = pgs.get(group), brs.get(meta["name"])
        if created is None:
            continue
        for stage, begin, end in (("create -> PodGroup created", created, pg),
                                  ("create -> pod-grouper patch", created, patched),
                                  ("ready -> BindRequest created", max(pg or 0, patched or 0) or None, br),
                                  ("BindRequest -> bound", br, bound), ("bound -> started", bound, started),
                                  ("create -> bound", created, bound)):
            if begin is not None and end is not None:
                out[stage].append(end - begin)
    run.server_stages = list(out.items())


def stages(run: Run) -> list[tuple[str, list[float]]]:
    """Per pod, the time each pipeline stage took, as the bench's watches saw them.

    created (create answered) -> grouped (pod-grouper's patch: `pod-group-name`) -> PodGroup seen -> BindRequest
    seen (the scheduler decided and wrote) -> bound (`spec.nodeName`) -> Running. "ready to schedule" is the later
    of grouped and PodGroup seen, the point from which the scheduler can place the pod.
    """
    out: dict[str, list[float]] = {k: [] for k in ("create -> grouped", "create -> PodGroup seen",
                                                   "ready to schedule -> BindRequest", "BindRequest -> bound",
                                                   "bound -> Running")}
    for name, created in run.created.items():
        grouped = run.grouped.get(name)
        pg = run.podgroups.get(run.group_of.get(name, ""))
        br = run.bindrequests.get(name)
        bound = run.bound.get(name)
        if grouped is not None:
            out["create -> grouped"].append(grouped - created)
        if pg is not None:
            out["create -> PodGroup seen"].append(pg - created)
        if grouped is not None and pg is not None and br is not None:
            out["ready to schedule -> BindRequest"].append(br - max(grouped, pg))
        if br is not None and bound is not None:
            out["BindRequest -> bound"].append(bound - br)
        if bound is not None and name in run.running:
            out["bound -> Running"].append(run.running[name] - bound)
    return list(out.items())


async def backlog(api: Any, measure: Measure, count: int, concurrency: int, settle: float, window: float) -> Run:
    """Pods that can never be placed (9 GPUs, more than any node has): the writes once nothing changes."""
    queue = await make_queue(api)
    namespace = await create_namespace(api, "apibench-backlog")
    await asyncio.sleep(2)
    run = Run(f"backlog: {count} pending pods", count)
    base = f"/api/v1/namespaces/{namespace}/pods"

    async def create(i: int) -> None:
        await raw(api, "POST", base, body=pod(f"wait-{i:05d}", "kai-scheduler", queue, gpus=9))

    try:
        run.started = time.time()
        await bounded(concurrency, [partial(create, i) for i in range(count)])
        run.writes_s = time.time() - run.started
        # The first explanations, PodGroups and statuses go out; the run has settled once 10 s pass with fewer
        # than 20 writes (leases apart), or after `settle` seconds at most.
        deadline = time.monotonic() + settle
        last = await request_counts(api)
        while time.monotonic() < deadline:
            await asyncio.sleep(10)
            now = await request_counts(api)
            writes = sum(v - last.get(k, 0) for k, v in now.items() if k.split()[0] not in READS and not is_lease(k))
            last = now
            if writes < 20:
                break
        run.running_s = time.time() - run.started  # here: first create -> settled
        before = await measure()
        await asyncio.sleep(window)
        Measure.delta(run, before, await measure())
        run.write_rate = {k: v / window for k, v in run.requests.items()
                          if k.split()[0] not in READS and REFUSED not in k}
    finally:
        await delete_and_wait(api, f"/api/v1/namespaces/{namespace}", timeout=600)
        await delete_and_wait(api, f"/apis/scheduling.run.ai/v2/queues/{queue}")
    return run


# --- report --------------------------------------------------------------------------------------------------
def is_lease(key: str) -> bool:
    return key.endswith(" leases")


def report(run: Run, ceiling_rate: float | None) -> None:
    print(f"\n== {run.name}")
    if run.write_rate:
        suite_writes = {k: v for k, v in run.write_rate.items() if not is_lease(k)}
        total = sum(suite_writes.values())
        print(f"  settled {run.running_s:.0f} s after the first create; over the next window:")
        print(f"  writes/s (leases apart): {total:.2f}   leases: "
              f"{sum(v for k, v in run.write_rate.items() if is_lease(k)):.2f}/s")
        for key, value in sorted(suite_writes.items(), key=lambda kv: -kv[1]):
            print(f"    {key:40} {value:7.2f}/s")
        return
    bound = len(run.bound)
    print(f"  pods {run.pods}  creates done {run.writes_s:.1f} s  all Running {run.running_s:.1f} s  "
          f"-> {run.rate(run.running_s):.1f} pods/s end to end")
    if run.retries:
        print(f"  creates answered 500 or not in time, retried: {run.retries}")
    if ceiling_rate:
        print(f"  end to end / create+bind ceiling of this run: {run.rate(run.running_s) / ceiling_rate:.2f}")
    to_bound = [run.bound[p] - run.created[p] for p in run.bound if p in run.created]
    to_running = [run.running[p] - run.bound[p] for p in run.running if p in run.bound]
    print("  create -> bound    p50 {:.2f} s  p90 {:.2f} s  p99 {:.2f} s".format(*percentiles(to_bound)))
    print("  bound -> Running   p50 {:.2f} s  p90 {:.2f} s  p99 {:.2f} s".format(*percentiles(to_running)))
    if run.grouped:
        print("  stages (per pod, from the bench's watches):")
        for stage, values in stages(run):
            print("    {:34} p50 {:6.2f} s  p90 {:6.2f} s  p99 {:6.2f} s  (n={})".format(
                stage, *percentiles(values), len(values)))
    if run.server_stages:
        print("  stages (per pod, from the API server's timestamps, whole seconds):")
        for stage, values in run.server_stages:
            print("    {:34} p50 {:6.2f} s  p90 {:6.2f} s  p99 {:6.2f} s  (n={})".format(
                stage, *percentiles(values), len(values)))
    if bound:
        kinds = {k: v for k, v in run.requests.items() if REFUSED not in k}
        total = sum(v for k, v in kinds.items() if not is_lease(k))
        print(f"  API requests per bound pod: {total / bound:.2f} (leases apart: "
              f"{sum(v for k, v in kinds.items() if is_lease(k)) / bound:.2f})")
        for key, value in sorted(kinds.items(), key=lambda kv: -kv[1]):
            if not is_lease(key) and value / bound >= 0.005:
                print(f"    {key:40} {value / bound:6.2f}")
        refused = sorted(((k, v) for k, v in run.requests.items() if REFUSED in k and v / bound >= 0.005),
                         key=lambda kv: -kv[1])
        if refused:
            print("  of which answered with an error, per bound pod: " + ", ".join(
                f"{k} {v / bound:.2f}" for k, v in refused))
        if run.writers:
            print("  writes per bound pod by client (audit log): " + ", ".join(
                f"{k} {v / bound:.2f}" for k, v in run.writers.most_common() if v / bound >= 0.005))
        print("  CPU seconds per bound pod: " + ", ".join(
            f"{name} {sec / bound * 1000:.1f} ms" for name, sec in sorted(run.cpu.items(), key=lambda kv: -kv[1])
            if sec > 0))


def plot(runs: list[Run], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flowing = [r for r in runs if r.bound]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 4.5))
    colours = ["#777", "#76b900", "#1f77b4", "#d62728", "#9467bd"]
    for r, colour in zip(flowing, colours, strict=False):
        for times, style, what in ((r.bound, "-", "bound"), (r.running, ":", "Running")):
            stamps = sorted(t - r.started for t in times.values())
            left.plot(stamps, range(1, len(stamps) + 1), style, color=colour, label=f"{r.name.split(':')[0]} {what}")
    left.set_xlabel("seconds since the first create")
    left.set_ylabel("pods")
    left.set_title("progress")
    left.legend(fontsize=7)
    suites = [r for r in flowing if r.requests and not r.name.startswith("ceiling")]
    kinds = sorted({k for r in suites for k in r.requests if not is_lease(k) and REFUSED not in k},
                   key=lambda k: -sum(r.requests.get(k, 0) / max(len(r.bound), 1) for r in suites))[:12]
    width = 0.8 / max(len(suites), 1)
    for i, r in enumerate(suites):
        values = [r.requests.get(k, 0) / max(len(r.bound), 1) for k in kinds]
        right.barh([j + i * width for j in range(len(kinds))], values, height=width, label=r.name.split(":")[0],
                   color=colours[(i + 1) % len(colours)])
    right.set_yticks([j + width * (len(suites) - 1) / 2 for j in range(len(kinds))], kinds, fontsize=7)
    right.invert_yaxis()
    right.set_xlabel("API requests per bound pod")
    right.set_title("requests per bound pod by verb and resource")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--cluster", default="apibench")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--workloads", default="ceiling,single,gangs,mixed,backlog",
                        help="any of ceiling,single,gangs,mixed,backlog,scale in order; `scale,ceiling` measures the "
                             "ceiling with the scale run's pods still there")
    parser.add_argument("--scale-pods", type=int, default=20000,
                        help="scale: pods (2 in 5 in gangs of 10, 2 in 5 single, 1 in 5 half a GPU); its pods "
                             "stay until every workload ran")
    parser.add_argument("--backlog", default="400,4000", help="pending pod counts of the backlog runs")
    parser.add_argument("--settle", type=float, default=900,
                        help="backlog: at most this many seconds for the first writes to go out")
    parser.add_argument("--window", type=float, default=60, help="backlog: seconds over which writes are counted")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for pods to be Running")
    parser.add_argument("--plot", default="bench/apiserver_bench.png")
    args = parser.parse_args()
    if not 1 <= args.pods <= 5000:
        parser.error("--pods must be within 1..5000")
    state = load_state(args.cluster)
    if state is None:
        raise SystemExit(f"no dev cluster {args.cluster!r}: kai dev up --name {args.cluster} --port-base 26000 "
                         "--nodes 200 --detach")
    runs: list[Run] = []
    main_task = asyncio.current_task()
    assert main_task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, main_task.cancel)
    api = await api_client(state.kubeconfig)
    async with api:
        try:
            await run_workloads(api, args, state, runs)
        except Stopped as stop:
            report_stopped(stop.run)
            runs.append(stop.run)
            print("\nstopped: the run's namespaces are left for `kai dev down`", flush=True)
        print("\npeak RSS (VmHWM) since start: " + ", ".join(
            f"{name} {mib:.0f} MiB" for name, mib in sorted(peak_rss_mib(dict(state.pids)).items())))
        plot(runs, args.plot)
        print(f"\nwrote {args.plot}", flush=True)


async def run_workloads(api: Any, args: argparse.Namespace, state: Any, runs: list[Run]) -> None:
    """The workloads in order; the namespaces `scale` keeps are deleted once every workload ran."""
    measure = Measure(api, dict(state.pids), Path(state.dir) / "logs" / "audit.log")
    ceiling_rate = None
    kept: list[str] = []
    scale_run: Run | None = None
    for workload in (w.strip() for w in args.workloads.split(",") if w.strip()):
        if workload == "ceiling":
            run = await ceiling(api, measure, args.pods, args.concurrency, args.timeout)
            ceiling_rate = run.rate(run.writes_s)
            print(f"\n== {run.name}: {run.rate(run.writes_s):.1f} pods/s create+bind, "
                  f"{run.rate(run.running_s):.1f} pods/s until Running")
            if scale_run is not None:
                print(f"  with the scale run's {scale_run.pods} pods in place: scale end to end / this ceiling "
                      f"{scale_run.rate(scale_run.running_s) / ceiling_rate:.2f}")
        elif workload == "scale":
            run = await suite(api, measure, workload, args.scale_pods, args.concurrency, args.timeout, keep=kept)
            report(run, ceiling_rate)
            scale_run = run
        elif workload == "backlog":
            for size in (int(s) for s in args.backlog.split(",") if s.strip()):
                run = await backlog(api, measure, size, args.concurrency, args.settle, args.window)
                report(run, None)
                runs.append(run)
            continue
        else:
            run = await suite(api, measure, workload, args.pods, args.concurrency, args.timeout)
            report(run, ceiling_rate)
        runs.append(run)
    for path in kept:
        await delete_and_wait(api, path, timeout=1800)


if __name__ == "__main__":
    asyncio.run(main())
