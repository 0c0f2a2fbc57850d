"""Write a bench cluster as KAI's scheduler snapshot (a zip holding `snapshot.json`), so KAI's own offline runner
(`cmd/snapshot-tool`, which fills fake clientsets from the snapshot, syncs its cache and runs one session) can
schedule the very input `scheduler_bench.py` times.

Run: python bench/kai_snapshot.py --case plain|envelope|envelope2x|gang1000 [--nodes 5000] [--topology] --out F.zip
     python bench/kai_snapshot.py --shape 4000,140000,28000 --out F.zip   # the envelope generator at another size

The objects are the ones `scheduler_bench.py` generates for the same case (after the pod-grouper's implicit
PodGroups, as that bench parses them), with what the API server and kubelet would add before KAI reads them: a
container's requests default to its limits (KAI counts requests only; `nvidia.com/gpu` is set as a limit) and a
node's capacity is its allocatable. `config` is the scheduler configuration KAI's operator renders from a default
SchedulingShard (binpack placement: every default plugin and action, by their default priorities) and
`schedulerParams` the scheduler binary's flag defaults; `discovery` says the API server is 1.34 with
`resource.k8s.io/v1`, as on the dev cluster, so KAI's DRA code is on as ours is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from collections.abc import Iterable, Mapping
from typing import Any

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [BENCH, os.path.dirname(BENCH)]  # scheduler_bench, and the checkout's `operators`

# KAI's operator defaults: plugin priorities (higher first, ties by name), placement binpack for GPU and CPU
# (which enables gpupack, gpusharingorder and the consolidation action, and disables gpuspread).
PLUGIN_PRIORITIES = {
    "predicates": 1900, "proportion": 1800, "priority": 1700, "nodeavailability": 1600, "resourcetype": 1500,
    "podaffinity": 1400, "elastic": 1300, "kubeflow": 1200, "ray": 1100, "subgrouporder": 1000, "taskorder": 900,
    "nominatednode": 800, "dynamicresources": 700, "minruntime": 600, "topology": 500, "snapshot": 400,
    "gpupack": 300, "nodeplacement": 200, "gpusharingorder": 100,
}
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
SECOND_NS = 1_000_000_000  # Go's time.Duration marshals as integer nanoseconds

# The `rawObjects` key of each kind KAI's snapshot carries.
RAW_KEYS = {"Pod": "pods", "Node": "nodes", "Queue": "queues", "PodGroup": "podGroups",
            "BindRequest": "bindRequests", "PriorityClass": "priorityClasses", "ConfigMap": "configMaps",
            "PersistentVolumeClaim": "persistentVolumeClaims", "CSIStorageCapacity": "csiStorageCapacities",
            "StorageClass": "storageClasses", "CSIDriver": "csiDrivers", "ResourceClaim": "resourceClaims",
            "ResourceSlice": "resourceSlices", "DeviceClass": "deviceClasses", "Topology": "topologies"}


def scheduler_config() -> dict[str, Any]:
    """The configuration KAI's operator writes for a default SchedulingShard."""
    plugins: list[dict[str, Any]] = []
    for name in sorted(PLUGIN_PRIORITIES, key=lambda n: (-PLUGIN_PRIORITIES[n], n)):
        plugin: dict[str, Any] = {"name": name}
        if name == "nodeplacement":
            plugin["arguments"] = {"gpu": "binpack", "cpu": "binpack"}
        plugins.append(plugin)
    return {"actions": ", ".join(ACTIONS), "tiers": [{"plugins": plugins}]}


def scheduler_params(scheduler_name: str = "kai-scheduler") -> dict[str, Any]:
    """KAI's scheduler flag defaults (`cmd/scheduler/app/options`), as `BuildSchedulerParams` passes them."""
    return {"schedulerName": scheduler_name,
            "partitionParams": {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""},
            "maxNumberConsolidationPreemptees": 16, "useSchedulingSignatures": True,
            "fullHierarchyFairness": True, "allowConsolidatingReclaim": True, "numOfStatusRecordingWorkers": 5,
            "globalDefaultStalenessGracePeriod": 60 * SECOND_NS, "schedulePeriod": SECOND_NS,
            "queueLabelKey": "kai.scheduler/queue"}


def discovery() -> dict[str, Any]:
    return {"serverVersion": {"major": "1", "minor": "34"},
            "resources": [{"groupVersion": "resource.k8s.io/v1", "resources": [
                {"name": n, "namespaced": n == "resourceclaims", "kind": k, "verbs": ["get", "list", "watch"]}
                for n, k in (("resourceclaims", "ResourceClaim"), ("resourceslices", "ResourceSlice"),
                             ("deviceclasses", "DeviceClass"))]}]}


def _admitted(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` as stored after admission: containers' requests defaulted from their limits, a node's capacity set."""
    out = dict(obj)
    if obj["kind"] == "Pod":
        spec = dict(obj["spec"])
        containers = []
        for c in spec.get("containers", []):
            res = c.get("resources") or {}
            limits = res.get("limits") or {}
            if limits:
                res = {**res, "requests": {**limits, **(res.get("requests") or {})}}
            containers.append({**c, "resources": res})
        spec["containers"] = containers
        out["spec"] = spec
    elif obj["kind"] == "Node":
        status = dict(obj.get("status") or {})
        status.setdefault("capacity", dict(status.get("allocatable") or {}))
        out["status"] = status
    return out


def snapshot(objects: Iterable[Mapping[str, Any]], scheduler_name: str = "kai-scheduler") -> dict[str, Any]:
    """KAI's `Snapshot` (config, schedulerParams, rawObjects, discovery) of `objects`; a kind KAI's snapshot has no
    place for raises."""
    raw: dict[str, list[dict[str, Any]]] = {key: [] for key in RAW_KEYS.values()}
    for obj in objects:
        key = RAW_KEYS.get(obj["kind"])
        if key is None:
            raise ValueError(f"KAI's snapshot has no place for a {obj['kind']}")
        raw[key].append(_admitted(obj))
    return {"config": scheduler_config(), "schedulerParams": scheduler_params(scheduler_name), "rawObjects": raw,
            "discovery": discovery()}


def write(path: str, snap: Mapping[str, Any]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("snapshot.json", json.dumps(snap, separators=(",", ":")))


def read(path: str) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        data: dict[str, Any] = json.loads(z.read("snapshot.json"))
    return data


def bench_objects(case: str, nodes: int, topology: bool = False,
                  shape: tuple[int, int, int] | None = None) -> list[Mapping[str, Any]]:
    """The objects `scheduler_bench.py --case CASE` parses: its generator's, plus the implicit PodGroups. `shape`
    (nodes, pods, workloads): the envelope generator at that size instead of `case`."""
    from scheduler_bench import _objects

    from operators.scheduler.decide.simulation import with_implicit_podgroups
    if shape:
        from envelope_cluster import Profile, generate_envelope
        return with_implicit_podgroups(generate_envelope(Profile("shape", *shape)))
    return with_implicit_podgroups(_objects(case, nodes, topology, False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--case", choices=("plain", "envelope", "envelope2x", "gang1000"), default="plain")
    parser.add_argument("--nodes", type=int, default=5000, help="plain and gang1000 only (the envelopes are fixed)")
    parser.add_argument("--topology", action="store_true", help="plain and gang1000: as scheduler_bench --topology")
    parser.add_argument("--shape", help="NODES,PODS,WORKLOADS: the envelope generator at that size (not --case)")
    parser.add_argument("--out", required=True, help="the zip to write")
    args = parser.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(",")) if args.shape else None
    if shape is not None and len(shape) != 3:
        parser.error("--shape takes NODES,PODS,WORKLOADS")
    snap = snapshot(bench_objects(args.case, args.nodes, args.topology, shape))  # type: ignore[arg-type]
    write(args.out, snap)
    counts = ", ".join(f"{k} {len(v)}" for k, v in snap["rawObjects"].items() if v)
    print(f"{args.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
