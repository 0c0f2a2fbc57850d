"""Memory of every component over time under a steady churn of workloads, against a running dev cluster.

Against `kai dev up --name soak --port-base 24000 --nodes 200 --no-kuberay --no-real-node --detach`, on loopback:
a population of workloads of the kinds the suite schedules, in `--queues` queues, each living a random lifetime
(uniform within 0.5-1.5x the mean, the mean being `--population / --rate` seconds by Little's law) and then deleted,
new ones created at `--rate` pods per second, so that the population stays about `--population` pods once the
first lifetimes end. Of every twenty workloads: seven single-GPU pods, five CPU-only pods, five pods asking for
half a GPU (`gpu-fraction: "0.5"`) and three gangs of `--gang` single-GPU pods (a PodGroup of minMember `--gang`
made by the bench, its owner-less pods annotated `pod-group-name`, as KAI v0.17's users do).

Every `--interval` seconds it samples VmRSS, VmHWM and RssAnon of every process of the cluster (the KAI components,
kube-apiserver, etcd and the rest, from the cluster's recorded pids and /proc) and the bench namespace's pods
(pending / bound: `spec.nodeName` set, which only the binder writes for pods of `kai-scheduler`).

At the end it prints RSS against time per component (every `--table-every` seconds), and per component the
first-to-last difference and the least-squares slope of RSS (MiB per hour) over the second half of the run; it
plots RSS against time to `--plot`. It deletes what it created on the end, SIGINT or SIGTERM. Run:
python bench/soak_bench.py --cluster soak --minutes 60 [--rate 2] [--population 400] [--interval 30]
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import os
import random
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apiserver_bench import create_namespace, delete_and_wait, make_queue, pod

from operators.core.kube import RawError, api_client, raw
from operators.devcluster.cluster import load_state

KAI = ("scheduler", "binder", "pod-grouper", "podgroup-controller", "queue-controller", "admission")
REFERENCE = ("kube-apiserver", "etcd")
KIB = 1024
# Of every twenty workloads (see the module's docstring); a gang counts its pods against the rate.
MIX = ("gpu",) * 7 + ("cpu",) * 5 + ("fraction",) * 5 + ("gang",) * 3


# --- the pure parts (unit-tested) ----------------------------------------------------------------------------
def parse_status(text: str, keys: tuple[str, ...] = ("VmRSS", "VmHWM", "RssAnon", "RssFile")) -> dict[str, float]:
    """The given fields of a /proc/<pid>/status text, in MiB (the kernel writes them in kB)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in keys:
            parts = value.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) / KIB
    return out


def slope_per_hour(times: list[float], values: list[float]) -> float:
    """The least-squares slope of `values` against `times` (seconds), per hour; 0 with fewer than two points."""
    n = len(times)
    if n < 2:
        return 0.0
    mean_t, mean_v = sum(times) / n, sum(values) / n
    var = sum((t - mean_t) ** 2 for t in times)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / var * 3600


def second_half(times: list[float], values: list[float]) -> tuple[list[float], list[float]]:
    """The samples from the middle of the run's span on."""
    if not times:
        return [], []
    middle = (times[0] + times[-1]) / 2
    kept = [(t, v) for t, v in zip(times, values, strict=True) if t >= middle]
    return [t for t, _ in kept], [v for _, v in kept]


# --- sampling ------------------------------------------------------------------------------------------------
def read_status(pid: int) -> dict[str, float]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return parse_status(f.read())
    except OSError:
        return {}


@dataclass
class Sample:
    at: float  # seconds since the start
    memory: dict[str, dict[str, float]]  # process -> VmRSS/VmHWM/RssAnon/RssFile, MiB
    pending: int
    bound: int
    load: float  # 1-minute load average


@dataclass
class Soak:
    namespace: str
    queues: list[str]
    started: float = 0.0
    created_pods: int = 0
    deleted_pods: int = 0
    gangs: int = 0
    errors: int = 0
    seen_bound: set[str] = field(default_factory=set)  # pods seen bound at some sample
    samples: list[Sample] = field(default_factory=list)


async def count_pods(api: Any, soak: Soak) -> tuple[int, int]:
    pods = (await raw(api, "GET", f"/api/v1/namespaces/{soak.namespace}/pods", timeout=60))["items"]
    bound = [p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")]
    soak.seen_bound.update(bound)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(live) - sum(1 for p in live if (p.get("spec") or {}).get("nodeName")), len(bound)


async def sampler(api: Any, soak: Soak, pids: dict[str, int], interval: float) -> None:
    while True:
        memory = {name: read_status(pid) for name, pid in pids.items()}
        try:
            pending, bound = await count_pods(api, soak)
        except (RawError, TimeoutError, OSError):
            pending = bound = -1
        load = os.getloadavg()[0]
        sample = Sample(time.time() - soak.started, memory, pending, bound, load)
        soak.samples.append(sample)
        rss = "  ".join(f"{n} {memory[n].get('VmRSS', 0):.0f}" for n in (*KAI, *REFERENCE) if n in memory)
        print(f"[{sample.at / 60:5.1f} min] load {load:.2f}  pods pending {pending} bound {bound}  "
              f"created {soak.created_pods} deleted {soak.deleted_pods}  RSS MiB: {rss}", flush=True)
        await asyncio.sleep(interval - (time.time() - soak.started - sample.at))


# --- churn ---------------------------------------------------------------------------------------------------
async def create_workload(api: Any, soak: Soak, kind: str, gang: int, rng: random.Random) -> tuple[str, int]:
    """One workload; returns its name and its pod count."""
    ns = soak.namespace
    queue = rng.choice(soak.queues)
    name = f"{kind}-{uuid.uuid4().hex[:8]}"
    base = f"/api/v1/namespaces/{ns}/pods"
    labels = {"app": "soak", "soak/workload": name}
    if kind != "gang":
        body = pod(name, "kai-scheduler", queue, gpus=1 if kind == "gpu" else 0,
                   fraction="0.5" if kind == "fraction" else "", labels=labels)
        await raw(api, "POST", base, body=body)
        return name, 1
    await raw(api, "POST", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups",
              body={"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
                    "spec": {"minMember": gang, "queue": queue}})
    for i in range(gang):
        body = pod(f"{name}-{i}", "kai-scheduler", queue, gpus=1, labels=labels)
        body["metadata"]["annotations"] = {"pod-group-name": name}
        await raw(api, "POST", base, body=body)
    return name, gang


async def delete_workload(api: Any, soak: Soak, name: str, kind: str) -> None:
    ns = soak.namespace
    await raw(api, "DELETE", f"/api/v1/namespaces/{ns}/pods",
              query={"labelSelector": f"soak/workload={name}", "gracePeriodSeconds": "0"})
    if kind == "gang":
        try:
            await raw(api, "DELETE", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/{name}")
        except RawError as exc:
            if exc.status != 404:
                raise


async def churn(api: Any, soak: Soak, rate: float, population: int, gang: int, seed: int) -> None:
    """Create pods at `rate` per second; delete each workload once its lifetime is over."""
    rng = random.Random(seed)
    mean_life = population / rate
    ends: list[tuple[float, str, str, int]] = []  # (monotonic end, name, kind, pods)
    begin = time.monotonic()
    while True:
        now = time.monotonic()
        while ends and ends[0][0] <= now:
            _, name, kind, count = heapq.heappop(ends)
            try:
                await delete_workload(api, soak, name, kind)
                soak.deleted_pods += count
            except (RawError, TimeoutError, OSError) as exc:
                soak.errors += 1
                print(f"  delete {name} failed: {exc}", flush=True)
        if soak.created_pods < rate * (now - begin):
            kind = rng.choice(MIX)
            try:
                name, count = await create_workload(api, soak, kind, gang, rng)
            except (RawError, TimeoutError, OSError) as exc:
                soak.errors += 1
                print(f"  create {kind} failed: {exc}", flush=True)
                await asyncio.sleep(1)
                continue
            soak.created_pods += count
            soak.gangs += kind == "gang"
            heapq.heappush(ends, (time.monotonic() + mean_life * rng.uniform(0.5, 1.5), name, kind, count))
            continue
        await asyncio.sleep(min(0.1, max(0.0, ends[0][0] - now) if ends else 0.1))


# --- report --------------------------------------------------------------------------------------------------
def series(soak: Soak, name: str, key: str = "VmRSS") -> tuple[list[float], list[float]]:
    points = [(s.at, s.memory[name][key]) for s in soak.samples if key in s.memory.get(name, {})]
    return [t for t, _ in points], [v for _, v in points]


def names(soak: Soak) -> list[str]:
    seen = {n for s in soak.samples for n in s.memory}
    return [n for n in (*KAI, *REFERENCE) if n in seen] + sorted(seen - set(KAI) - set(REFERENCE))


def report(soak: Soak, table_every: float) -> None:
    if not soak.samples:
        print("no samples")
        return
    shown = names(soak)
    print(f"\n== RSS (MiB) against time; pods created {soak.created_pods} ({soak.gangs} gangs), deleted "
          f"{soak.deleted_pods}, seen bound {len(soak.seen_bound)}, errors {soak.errors}")
    print(f"{'min':>6} {'load':>5} {'pend':>5} {'bound':>5} " + " ".join(f"{n[:11]:>11}" for n in shown))
    next_at = 0.0
    for i, s in enumerate(soak.samples):
        if s.at + 1e-6 < next_at and i != len(soak.samples) - 1:
            continue
        next_at = s.at + table_every
        print(f"{s.at / 60:6.1f} {s.load:5.2f} {s.pending:5d} {s.bound:5d} "
              + " ".join(f"{s.memory.get(n, {}).get('VmRSS', 0):11.1f}" for n in shown))
    print(f"\n{'process':22} {'first':>7} {'last':>7} {'last-first':>10} {'HWM':>7} {'slope 2nd half':>15} "
          f"{'anon first':>10} {'anon last':>9} {'anon slope':>10}")
    for n in shown:
        times, rss = series(soak, n)
        if not times:
            continue
        t2, v2 = second_half(times, rss)
        at, anon = series(soak, n, "RssAnon")
        a2t, a2v = second_half(at, anon)
        hwm = soak.samples[-1].memory.get(n, {}).get("VmHWM", 0.0)
        print(f"{n:22} {rss[0]:7.1f} {rss[-1]:7.1f} {rss[-1] - rss[0]:+10.1f} {hwm:7.1f} "
              f"{slope_per_hour(t2, v2):+11.1f}/h  {anon[0] if anon else 0:10.1f} {anon[-1] if anon else 0:9.1f} "
              f"{slope_per_hour(a2t, a2v):+8.1f}/h")
    loads = [s.load for s in soak.samples]
    print(f"\nload average (1 min) over the samples: min {min(loads):.2f}, mean {sum(loads) / len(loads):.2f}, "
          f"max {max(loads):.2f}")


def plot(soak: Soak, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5), gridspec_kw={"width_ratios": [2, 1]})
    for n in names(soak):
        times, rss = series(soak, n)
        if not times:
            continue
        axis = left if n in KAI else right
        if n in KAI or n in REFERENCE:
            axis.plot([t / 60 for t in times], rss, label=n)
    left.set_title("KAI components: VmRSS")
    right.set_title("kube-apiserver and etcd: VmRSS (reference)")
    for axis in (left, right):
        axis.set_xlabel("minutes")
        axis.set_ylabel("MiB")
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--cluster", default="soak")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=float, default=2.0, help="pods created per second")
    parser.add_argument("--population", type=int, default=400, help="pods alive at once, about")
    parser.add_argument("--queues", type=int, default=3)
    parser.add_argument("--gang", type=int, default=4, help="pods per gang")
    parser.add_argument("--interval", type=float, default=30, help="seconds between samples")
    parser.add_argument("--table-every", type=float, default=600, help="seconds between the table's rows")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--plot", default="bench/soak_bench.png")
    args = parser.parse_args()
    if not (0 < args.rate <= 20 and 1 <= args.population <= 5000):
        parser.error("--rate must be within (0, 20] and --population within 1..5000")
    state = load_state(args.cluster)
    if state is None:
        raise SystemExit(f"no dev cluster {args.cluster!r}: kai dev up --name {args.cluster} --port-base 24000 "
                         "--nodes 200 --no-kuberay --no-real-node --detach")
    main_task = asyncio.current_task()
    assert main_task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, main_task.cancel)
    api = await api_client(state.kubeconfig)
    async with api:
        queues = [await make_queue(api) for _ in range(args.queues)]
        soak = Soak(await create_namespace(api, "soak"), queues)
        await asyncio.sleep(2)  # the scheduler's informer sees the queues before their pods
        soak.started = time.time()
        tasks = [asyncio.create_task(sampler(api, soak, dict(state.pids), args.interval)),
                 asyncio.create_task(churn(api, soak, args.rate, args.population, args.gang, args.seed))]
        stopped = False
        try:
            await asyncio.sleep(args.minutes * 60)
        except asyncio.CancelledError:
            stopped = True
            print("\nstopped: reporting what was reached", flush=True)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            report(soak, args.table_every)
            plot(soak, args.plot, f"bench/soak_bench.py --cluster {args.cluster} --minutes {args.minutes:g} "
                 f"--rate {args.rate:g} --population {args.population}" + (" (stopped early)" if stopped else ""))
            print(f"\nwrote {args.plot}", flush=True)
        finally:
            print("deleting the namespace and queues ...", flush=True)
            await asyncio.shield(cleanup(api, soak))
            print("deleted", flush=True)


async def cleanup(api: Any, soak: Soak) -> None:
    await delete_and_wait(api, f"/api/v1/namespaces/{soak.namespace}", timeout=600)
    for queue in soak.queues:
        await delete_and_wait(api, f"/apis/scheduling.run.ai/v2/queues/{queue}")


if __name__ == "__main__":
    asyncio.run(main())
