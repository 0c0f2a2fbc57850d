"""Scheduler cycle benchmark: synthetic clusters of 500 / 1,000 / 5,000 GPU nodes (8 GPUs each) with 10 pods per
node, timed through the same path as `kai simulate` (parse objects -> snapshot -> one cycle -> decisions).

Each size runs in its own process so peak RSS is per size. Prints a table and writes a plot.
Run: python bench/scheduler_bench.py [--sizes 500,1000,5000] [--plot bench/scheduler_bench.png]
With --baseline REF, each size also runs on the scheduler code of git revision REF (extracted to a temporary
directory), alternating with the working tree, so before/after are measured in the same session; the table
shows the best cycle CPU of `--repeat` runs of each, and the disruptive actions' scenario-search counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout this script belongs to
NODE_GPUS = 8
NODE_CPU = 128
NODE_MEM_GI = 1024
DEPARTMENTS = 4
TEAMS_PER_DEPARTMENT = 4  # 4 + 16 = 20 queues in two levels
# --topology: zone > rack > node labels and a Topology; pending gangs ask for a rack (required or preferred).
ZONE_LABEL, RACK_LABEL = "topology.kubernetes.io/zone", "cloud.provider.com/topology-rack"
RACK_NODES = 16
ZONE_RACKS = 16
TOPOLOGY = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": ZONE_LABEL, "alias": "zone"}, {"nodeLabel": RACK_LABEL, "alias": "rack"},
                                {"nodeLabel": "kubernetes.io/hostname"}]}}


def _node(i: int) -> dict[str, Any]:
    product = "H100" if i % 2 else "A100"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{i:05d}", "labels": {
                "kubernetes.io/hostname": f"node-{i:05d}", "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.count": str(NODE_GPUS)}},
            "spec": {},
            "status": {"allocatable": {"cpu": str(NODE_CPU), "memory": f"{NODE_MEM_GI}Gi",
                                       "nvidia.com/gpu": str(NODE_GPUS), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


DRA_DRIVER = "gpu.nvidia.com"
DRA_SHARE = 0.2  # --dra: the share of GPU pods whose GPUs come from a ResourceClaim
DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRA_DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}'"}}]}}


def _dra_slice(node: dict[str, Any]) -> dict[str, Any]:
    """--dra: the node's GPUs as the devices of one ResourceSlice (its nvidia.com/gpu resource is dropped)."""
    name, labels = node["metadata"]["name"], node["metadata"]["labels"]
    del node["status"]["allocatable"]["nvidia.com/gpu"]
    devices = [{"name": f"gpu-{g}", "attributes": {"type": {"string": "gpu"}, "index": {"int": g},
                                                   "productName": {"string": labels["nvidia.com/gpu.product"]},
                                                   "uuid": {"string": f"GPU-{name}-{g}"}},
                "capacity": {"memory": {"value": "80Gi"}}} for g in range(NODE_GPUS)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-gpu"},
            "spec": {"driver": DRA_DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1,
                                                                      "resourceSliceCount": 1}, "devices": devices}}


def _dra_claim(pod: dict[str, Any], gpus: int, devices: list[int] | None, product: str | None) -> dict[str, Any]:
    """--dra: the pod's claim (as made from its template), allocated to `devices` of its node when it runs."""
    meta = pod["metadata"]
    exactly: dict[str, Any] = {"deviceClassName": DRA_DRIVER, "count": gpus}
    if product:
        expression = f"device.attributes['{DRA_DRIVER}'].productName == '{product}'"
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"{meta['name']}-gpu", "namespace": meta["namespace"], "uid": f"{meta['uid']}-gpu",
                     "ownerReferences": [{"kind": "Pod", "name": meta["name"], "uid": meta["uid"]}]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}, "status": {}}
    if devices is not None:
        node = pod["spec"]["nodeName"]
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRA_DRIVER, "pool": node, "device": f"gpu-{d}"} for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]}
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
    return claim


def _queue(name: str, parent: str, gpu_quota: float) -> dict[str, Any]:
    res = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                          "cpu": res, "memory": res}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


class Filler:
    """Places running pods on nodes without over-committing them (first fit with a moving cursor)."""

    def __init__(self, n: int) -> None:
        self.gpus = [NODE_GPUS] * n
        self.cpu = [NODE_CPU] * n
        self.half: list[tuple[int, str]] = []  # GPUs with one 0.5 tenant: (node, group)
        self.cursor = 0
        self.groups = 0

    def whole(self, gpus: int, cpu: int) -> int | None:
        for _ in range(len(self.gpus)):
            i = self.cursor
            if self.gpus[i] >= gpus and self.cpu[i] >= cpu:
                self.gpus[i] -= gpus
                self.cpu[i] -= cpu
                return i
            self.cursor = (self.cursor + 1) % len(self.gpus)
        return None

    def second_tenant(self, i: int, cpu: int) -> bool:
        """Whether node `i` has room for the second 0.5 pod on a half-used GPU; takes its CPU if so."""
        if self.cpu[i] < cpu:
            return False
        self.cpu[i] -= cpu
        return True

    def fraction(self, cpu: int) -> tuple[int, str] | None:
        while self.half:  # a half whose node has no room left stays half used
            i, group = self.half.pop()
            if self.second_tenant(i, cpu):
                return i, group
        i = self.whole(1, cpu)
        if i is None:
            return None
        self.groups += 1
        group = f"grp-{self.groups:06d}"
        self.half.append((i, group))
        return i, group


def queues_and_priorities(objs: list[dict[str, Any]], n_nodes: int) -> list[str]:
    """Append the two-level queue tree (departments, teams; GPU quotas scaled to the cluster) and the priority
    classes to `objs`; the team (leaf) queues' names."""
    teams: list[str] = []
    for d in range(DEPARTMENTS):
        objs.append(_queue(f"dept-{d}", "", n_nodes * NODE_GPUS / DEPARTMENTS / 2))
        for t in range(TEAMS_PER_DEPARTMENT):
            teams.append(f"team-{d}-{t}")
            objs.append(_queue(teams[-1], f"dept-{d}", n_nodes * NODE_GPUS / len(teams) / 8 if t % 2 else 0))
    objs += [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
             for n, v in (("train", 50), ("build", 100), ("inference", 125))]
    return teams


def generate(n_nodes: int, seed: int = 7, topology: bool = False, dra: bool = False) -> list[dict[str, Any]]:
    """The synthetic cluster. `topology`: the same cluster, its nodes in racks of 16 and zones of 16 racks, and of
    the pending gangs one in four requires a rack and one in four prefers a rack inside a required zone. `dra`:
    the nodes' GPUs are DRA devices (one ResourceSlice per node), and 20% of the GPU pods claim theirs through a
    ResourceClaim (a product selector where the pod would select H100 nodes); the others ask nvidia.com/gpu,
    counted against the same GPUs (KAI's rule)."""
    rnd = random.Random(seed)
    objs: list[dict[str, Any]] = [_node(i) for i in range(n_nodes)]
    dra_rnd = random.Random(seed + 1)  # its own stream: the cluster is the plain one, only the GPU source differs
    next_device = [0] * n_nodes  # --dra: the devices held by claims so far, per node
    if dra:
        objs += [_dra_slice(n) for n in objs[:n_nodes]]
        objs.append(DEVICE_CLASS)
    if topology:
        for i, n in enumerate(objs):
            rack = i // RACK_NODES
            n["metadata"]["labels"].update({ZONE_LABEL: f"zone-{rack // ZONE_RACKS}", RACK_LABEL: f"rack-{rack}"})
        objs.append(TOPOLOGY)
    teams = queues_and_priorities(objs, n_nodes)
    filler = Filler(n_nodes)
    target = 10 * n_nodes
    running_target = target * 2 // 3
    made = 0
    job = 0
    while made < target:
        job += 1
        kind = rnd.choices(["single", "gang", "fraction", "cpu"], weights=[40, 8, 10, 15])[0]
        size = rnd.randint(2, 16) if kind == "gang" else 1
        gpus = {"single": 1, "gang": rnd.choice([1, 1, 2, 4]), "fraction": 0, "cpu": 0}[kind]
        cpu = 4 * gpus if gpus else 2
        running = made < running_target
        ns = f"ns-{job % 50}"
        name = f"job-{job:06d}"
        queue = teams[rnd.randrange(len(teams))]
        selector = {"nvidia.com/gpu.product": "H100"} if gpus and rnd.random() < 0.1 else None
        group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                 "metadata": {"name": name, "namespace": ns, "uid": name,
                              "creationTimestamp": f"2025-01-01T{job // 3600 % 24:02d}:{job // 60 % 60:02d}:"
                                                   f"{job % 60:02d}Z"},
                 "spec": {"minMember": size, "queue": queue, "priorityClassName": "train"}}
        objs.append(group)
        placed: list[tuple[int, str | None]] = []
        if running:
            for _ in range(size):
                if kind == "fraction":
                    spot = filler.fraction(cpu)
                    if spot is None:
                        break
                    placed.append(spot)
                else:
                    i = filler.whole(gpus, cpu)
                    if i is None:
                        break
                    placed.append((i, None))
            if len(placed) < size:
                running = False  # cluster full: the rest is pending (the placed slots stay reserved: harmless)
        if topology and kind == "gang" and not running and job % 4 < 2:
            group["spec"]["topologyConstraint"] = (
                {"topology": "dc", "requiredTopologyLevel": "rack"} if job % 4 == 0
                else {"topology": "dc", "requiredTopologyLevel": "zone", "preferredTopologyLevel": "rack"})
        for k in range(size):
            labels: dict[str, str] = {"app": name}
            annotations = {"pod-group-name": name}
            resources: dict[str, Any] = {"requests": {"cpu": str(cpu), "memory": f"{4 * max(gpus, 1)}Gi"}}
            if gpus:
                resources["limits"] = {"nvidia.com/gpu": str(gpus)}
            if kind == "fraction":
                annotations["gpu-fraction"] = "0.5"
            spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                                    "containers": [{"name": "main", "resources": resources}]}
            if selector:
                spec["nodeSelector"] = selector
            status = "Pending"
            if running:
                node_idx, group = placed[k]
                spec["nodeName"] = f"node-{node_idx:05d}"
                status = "Running"
                if group:
                    labels["runai-gpu-group"] = group
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{name}-{k}", "namespace": ns, "uid": f"{name}-{k}",
                                "labels": labels, "annotations": annotations},
                   "spec": spec, "status": {"phase": status}}
            if dra and gpus and kind != "fraction" and dra_rnd.random() < DRA_SHARE:
                del resources["limits"]
                devices = None
                if running:
                    first = next_device[node_idx]
                    devices = list(range(first, min(first + gpus, NODE_GPUS)))
                    next_device[node_idx] += gpus
                objs.append(_dra_claim(pod, gpus, devices, "H100" if selector else None))
            objs.append(pod)
            made += 1
    return objs


CASES = ("plain", "envelope", "envelope2x", "gang1000")  # --case: which cluster `--one` builds


def _objects(case: str, n_nodes: int, topology: bool, dra: bool) -> list[dict[str, Any]]:
    if case == "plain":
        return generate(n_nodes, topology=topology, dra=dra)
    from envelope_cluster import ENVELOPE, ENVELOPE_2X, add_gang, generate_envelope
    if case == "gang1000":
        return add_gang(generate(n_nodes, topology=topology, dra=dra))
    return generate_envelope(ENVELOPE if case == "envelope" else ENVELOPE_2X)


def _rss_mib() -> float:
    """The process's resident memory now (not its peak), from /proc."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(n_nodes: int, topology: bool = False, dra: bool = False, case: str = "plain") -> dict[str, Any]:
    import gc

    try:  # the decide/shell layout, else the flat one of older revisions (`--baseline`)
        from operators.scheduler.decide import cycle as cycle_module
        from operators.scheduler.decide.config import SchedulerConfig
        from operators.scheduler.decide.cycle import run_cycle
        from operators.scheduler.decide.simulation import with_implicit_podgroups
        from operators.scheduler.decide.snapshot import build_snapshot, snapshot_from_objects
    except ImportError:
        from operators.scheduler.config import SchedulerConfig  # type: ignore[no-redef]
        from operators.scheduler.cycle import run_cycle  # type: ignore[no-redef]
        from operators.scheduler.simulate import with_implicit_podgroups  # type: ignore[no-redef]
        from operators.scheduler.snapshot import build_snapshot, snapshot_from_objects  # type: ignore[no-redef]

        from operators.scheduler import cycle as cycle_module  # type: ignore[no-redef]

    objs = _objects(case, n_nodes, topology, dra)
    workloads = sum(1 for o in objs if o["kind"] == "PodGroup")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    p0 = time.process_time()
    snapshot = snapshot_from_objects(with_implicit_podgroups(objs))
    parse_cpu = time.process_time() - p0
    t1 = time.perf_counter()
    del objs  # what a live scheduler keeps is the records, not the objects they were parsed from
    gc.collect()
    rss_records = _rss_mib()
    # Per-phase CPU: the cycle's phase timer (perf_counter) reads process time in this process.
    cycle_module.time = SimpleNamespace(perf_counter=time.process_time)  # type: ignore[attr-defined]
    c1 = time.process_time()
    decisions = run_cycle(snapshot, SchedulerConfig(), 1.7e9)
    c2 = time.process_time()
    t2 = time.perf_counter()
    # The cycle runs with the cyclic collector off; what it leaves unfreed is collected at the first young
    # collection after it, on the scheduler's CPU all the same: timed here, apart from the cycle.
    gc.collect(0)
    c3 = time.process_time()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_cycle = _rss_mib()
    # The live loop's per-cycle snapshot assembly: build_snapshot over the informer stores' records.
    b0 = time.process_time()
    build_snapshot(nodes=list(snapshot.nodes), pods=list(snapshot.pods), podgroups=list(snapshot.podgroups),
                   queues=list(snapshot.queues), bindrequests=list(snapshot.bindrequests),
                   priority_classes=list(snapshot.priority_classes),
                   **({"resource_slices": list(snapshot.resource_slices),
                       "resource_claims": list(snapshot.resource_claims),
                       "device_classes": list(snapshot.device_classes)} if dra else {}))
    b1 = time.process_time()
    # The decision core without the disruptive actions (allocate is where a cycle's binds come from).
    run_cycle(snapshot, SchedulerConfig(), 1.7e9, ("allocate",))
    b2 = time.process_time()
    pods = len(snapshot.pods)
    pending = sum(1 for p in snapshot.pods if p.phase == "Pending")
    if case in ("envelope", "envelope2x"):
        n_nodes = len(snapshot.nodes)
    return {"nodes": n_nodes, "case": case, "workloads": workloads, "pods": pods, "pending": pending,
            "parse_s": t1 - t0, "parse_cpu_s": parse_cpu, "cycle_s": t2 - t1,
            "gpus": sum(getattr(n, "gpus", 0) for n in snapshot.nodes),
            "rss_records_mib": rss_records, "rss_after_cycle_mib": rss_cycle,
            "gang_bound": sum(1 for b in decisions.binds if b.pod_group == "big-gang"),
            "cycle_cpu_s": c2 - c1, "garbage_cpu_s": c3 - c2,
            "build_snapshot_cpu_s": b1 - b0, "allocate_only_cpu_s": b2 - b1,
            "binds": len(decisions.binds), "pipelined": len(decisions.pipelined),
            "evictions": len(decisions.evictions), "counters": dict(sorted(decisions.counters.items())),
            "actions_ms": {k: round(v, 1) for k, v in decisions.timings.items() if not k.startswith("plugin/")},
            "unschedulable": len(decisions.unschedulable), "peak_rss_mib": rss / 1024,
            "rss_growth_mib": (rss - rss_before) / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="500,1000,5000")
    parser.add_argument("--plot", default="bench/scheduler_bench.png")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="cProfile the cycle of the largest size")
    parser.add_argument("--baseline", help="git revision to measure against in the same run (e.g. HEAD~1)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (and per revision); best CPU kept")
    parser.add_argument("--topology", action="store_true",
                        help="zone > rack node labels, a Topology, and rack constraints on half the pending gangs")
    parser.add_argument("--dra", action="store_true",
                        help="the GPUs as DRA devices, 20%% of the GPU pods claiming theirs through ResourceClaims")
    parser.add_argument("--case", choices=CASES, default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--envelope", action="store_true",
                        help="KAI's envelope: 1,000 nodes, 90,000 pods, 16,000 workloads, a 1,000-pod gang")
    parser.add_argument("--envelope2x", action="store_true",
                        help="twice it: 10,000 nodes, 150,000 pods, 30,000 workloads, a 1,000-pod gang")
    parser.add_argument("--gang1000", action="store_true",
                        help="one pending 1,000-pod gang added to the plain cluster (--sizes, default 5000)")
    parser.add_argument("--sweep", action="store_true",
                        help="cycle CPU against nodes, 1,000 .. 10,000 (plain cluster), plotted to --plot")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.topology, args.dra, args.case)))
        return 0
    cases = [c for c, on in (("envelope", args.envelope), ("envelope2x", args.envelope2x),
                             ("gang1000", args.gang1000)) if on]
    if args.profile:
        import cProfile
        import pstats

        from operators.scheduler.decide.config import SchedulerConfig
        from operators.scheduler.decide.cycle import run_cycle
        from operators.scheduler.decide.simulation import with_implicit_podgroups
        from operators.scheduler.decide.snapshot import snapshot_from_objects
        size = 5000 if cases == ["gang1000"] and args.sizes == parser.get_default("sizes") else \
            max(int(s) for s in args.sizes.split(","))
        objects = _objects(cases[0] if cases else "plain", size, args.topology, args.dra)
        snapshot = snapshot_from_objects(with_implicit_podgroups(objects))
        prof = cProfile.Profile()
        prof.runcall(run_cycle, snapshot, SchedulerConfig(), 1.7e9)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return 0
    if cases:
        if args.gang1000 and args.sizes == parser.get_default("sizes"):
            args.sizes = "5000"
        sizes = [int(s) for s in args.sizes.split(",")]
        if args.baseline:
            for case in cases:
                compare(args.baseline, sizes if case == "gang1000" else [0], max(1, args.repeat), args.topology, case)
            return 0
        for case in cases:
            for size in (sizes if case == "gang1000" else [0]):
                report_phases(min((_run(size, topology=args.topology, case=case) for _ in range(max(1, args.repeat))),
                                  key=lambda r: r["cycle_cpu_s"]))
        return 0
    if args.sweep:
        return sweep([int(s) for s in (args.sizes if args.sizes != parser.get_default("sizes")
                                       else "1000,2500,5000,7500,10000").split(",")], args.plot, args.repeat)
    if args.baseline:
        return compare(args.baseline, [int(s) for s in args.sizes.split(",")], max(1, args.repeat), args.topology)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.append(min((_run(size, topology=args.topology, dra=args.dra) for _ in range(max(1, args.repeat))),
                        key=lambda r: r["cycle_cpu_s"]))
    header = f"{'nodes':>6} {'pods':>7} {'pending':>8} {'parse s':>8} {'cycle s':>8} {'cycle cpu s':>12} " \
             f"{'gc after s':>11} {'alloc-only cpu s':>17} {'snapshot cpu s':>15} {'binds':>6} {'unsched':>8} " \
             f"{'peak RSS MiB':>13}"
    print(header)
    for r in rows:
        print(f"{r['nodes']:>6} {r['pods']:>7} {r['pending']:>8} {r['parse_s']:>8.3f} {r['cycle_s']:>8.3f} "
              f"{r['cycle_cpu_s']:>12.3f} {r['garbage_cpu_s']:>11.3f} {r['allocate_only_cpu_s']:>17.3f} "
              f"{r['build_snapshot_cpu_s']:>15.3f} "
              f"{r['binds']:>6} {r['unschedulable']:>8} {r['peak_rss_mib']:>13.0f}")
    for r in rows:
        print(f"{r['nodes']:>6} nodes: {r['evictions']} evictions, {r['pipelined']} pipelined; "
              f"scenario search {_counts(r)}")
    plt = _pyplot()
    if plt is None:
        return 0
    fig, ax1 = plt.subplots(figsize=(7, 4))
    xs = [r["nodes"] for r in rows]
    ax1.plot(xs, [r["cycle_s"] for r in rows], "o-", label="cycle wall (snapshot+session+allocate)")
    ax1.plot(xs, [r["cycle_cpu_s"] for r in rows], "o:", label="cycle CPU time")
    ax1.plot(xs, [r["allocate_only_cpu_s"] for r in rows], "x:", label="cycle CPU, allocate only")
    ax1.plot(xs, [r["build_snapshot_cpu_s"] for r in rows], "d:", label="live snapshot assembly CPU")
    ax1.plot(xs, [r["parse_s"] for r in rows], "s--", label="parse objects (once per event when live)")
    ax1.axhline(1.0, color="grey", linestyle=":", label="1 s target")
    ax1.set_xlabel("GPU nodes (8 GPUs, 10 pods per node)")
    ax1.set_ylabel("seconds")
    ax2 = ax1.twinx()
    ax2.plot(xs, [r["peak_rss_mib"] for r in rows], "^-", color="tab:red", label="peak RSS")
    ax2.set_ylabel("MiB")
    fig.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot)
    print(f"plot: {args.plot}")
    return 0


def _pyplot() -> Any:
    """matplotlib's pyplot on the file backend, or None (said on stderr) when it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return None
    return plt


def report_phases(r: dict[str, Any]) -> None:
    """One run's phases in CPU ms, its size and its memory."""
    phases = " ".join(f"{k}={v:.0f}" for k, v in r.get("actions_ms", {}).items())
    print(f"== {r['case']}: {r['nodes']} nodes ({r['gpus']} GPUs), {r['pods']} pods ({r['pending']} pending), "
          f"{r['workloads']} workloads; load average {os.getloadavg()[0]:.1f}")
    print(f"  parse objects to records: {r['parse_cpu_s']:.2f} s CPU ({r['parse_s']:.2f} s wall); "
          f"live snapshot assembly (build_snapshot over the records): {r['build_snapshot_cpu_s'] * 1000:.0f} ms CPU")
    print(f"  cycle: {r['cycle_cpu_s']:.3f} s CPU ({r['cycle_s']:.3f} s wall), then {r['garbage_cpu_s']:.3f} s CPU "
          f"collecting what it left; allocate-only cycle "
          f"{r['allocate_only_cpu_s']:.3f} s CPU")
    print(f"  phases, CPU ms: {phases}")
    print(f"  binds {r['binds']} (of the 1,000-pod gang: {r.get('gang_bound', 0)}), pipelined {r['pipelined']}, "
          f"evictions {r['evictions']}, unschedulable {r['unschedulable']}; scenario search {_counts(r)}")
    print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB (with the generated objects); records only "
          f"{r.get('rss_records_mib', 0):.0f} MiB, after the cycle {r.get('rss_after_cycle_mib', 0):.0f} MiB")


def sweep(sizes: list[int], plot: str, repeat: int) -> int:
    """Cycle CPU (and its phases) of the plain cluster against its node count, one process per size."""
    rows = []
    print(f"{'nodes':>6} {'pods':>7} {'pending':>8} {'cycle cpu s':>12} {'open ms':>8} {'allocate ms':>12} "
          f"{'close ms':>9} {'peak RSS MiB':>13} {'load':>5}")
    for size in sizes:
        r = min((_run(size) for _ in range(max(1, repeat))), key=lambda row: row["cycle_cpu_s"])
        rows.append(r)
        a = r["actions_ms"]
        print(f"{size:>6} {r['pods']:>7} {r['pending']:>8} {r['cycle_cpu_s']:>12.3f} {a['open-session']:>8.0f} "
              f"{a.get('allocate', 0):>12.0f} {a['close-session']:>9.0f} {r['peak_rss_mib']:>13.0f} "
              f"{os.getloadavg()[0]:>5.1f}", flush=True)
    plt = _pyplot()
    if plt is None:
        return 0
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["nodes"] for r in rows]
    ax.plot(xs, [r["cycle_cpu_s"] for r in rows], "o-", label="cycle CPU, all default actions")
    for phase, style in (("open-session", "s:"), ("allocate", "x:"), ("reclaim", "d:"), ("close-session", "^:")):
        ax.plot(xs, [r["actions_ms"].get(phase, 0) / 1000 for r in rows], style, label=f"{phase} CPU")
    ax.axhline(0.5, color="grey", linestyle=":", label="0.5 s target (5,000 nodes)")
    ax.set_xlabel("GPU nodes (8 GPUs, 10 pods per node, one third pending)")
    ax.set_ylabel("CPU seconds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot)
    print(f"plot: {plot}")
    return 0


def _run(size: int, code: str | None = None, topology: bool = False, dra: bool = False,
         case: str = "plain") -> dict[str, Any]:
    """One size in a fresh process, on the `operators` package of `code` (default: the checkout holding this
    script, not whichever checkout the environment has installed)."""
    env = dict(os.environ)
    code = code or ROOT
    env["PYTHONPATH"] = code + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run([sys.executable, __file__, "--one", str(size or 1), "--case", case,
                          *(["--topology"] if topology else []), *(["--dra"] if dra else [])],
                         check=True, capture_output=True, text=True, env=env)
    row: dict[str, Any] = json.loads(out.stdout)
    return row


def _counts(row: dict[str, Any]) -> str:
    counters: dict[str, int] = row.get("counters", {})
    return ", ".join(f"{k}={v}" for k, v in counters.items()) or "none"


def _spent(row: dict[str, Any]) -> float:
    """What a cycle costs the scheduler: its CPU and the collection of what it left."""
    return float(row["cycle_cpu_s"] + row.get("garbage_cpu_s", 0.0))


def compare(ref: str, sizes: list[int], repeat: int, topology: bool = False, case: str = "plain") -> int:
    """Cycle CPU of revision `ref` against the working tree, runs alternated so both see the same load."""
    root = ROOT
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", root, "archive", ref, "operators"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        print(f"{'nodes':>6} {'revision':>10} {'cycle cpu s':>12} {'gc after s':>11} {'evictions':>10} "
              f"{'pipelined':>10}  actions ms; scenario search")
        for size in sizes:
            best: dict[str, dict[str, Any]] = {}
            for _ in range(repeat):
                for label, code in ((ref, tmp), ("worktree", None)):
                    r = _run(size, code, topology, case=case)
                    if label not in best or _spent(r) < _spent(best[label]):
                        best[label] = r
            for label, r in best.items():
                actions = " ".join(f"{k}={v}" for k, v in r.get("actions_ms", {}).items())
                size = r["nodes"]
                gang = f" gang bound {r.get('gang_bound', 0)};" if case != "plain" else ""
                print(f"{size:>6} {label:>10} {r['cycle_cpu_s']:>12.3f} {r.get('garbage_cpu_s', 0.0):>11.3f} "
                      f"{r.get('evictions', 0):>10} "
                      f"{r['pipelined']:>10}  {actions};{gang} {_counts(r)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
