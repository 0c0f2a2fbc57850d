"""Scheduler shell benchmark: start-up (list + parse) and the per-cycle snapshot assembly, through the real shell.

Drives the scheduler's own `SchedulerLoop` informers (their transforms and stores) with what the API server would
send, without an API server: list pages as JSON bytes (decoded with `json.loads`, as `kube.raw` does) through
`Informer.parse_page` / `replace_all`, and watch lines through `Informer.apply_event`; then times
`SchedulerLoop.snapshot()` and `run_cycle` on it. The cluster is `scheduler_bench.generate`, padded with pending
single-pod jobs up to `--pods`, its pods dressed as the API server returns them (managed fields, status conditions,
container statuses, the projected token volume: about 4 KiB of JSON each).
Run: python bench/shell_bench.py [--nodes 5000 --pods 50000] [--cycles 5 --churn 0.01]
Each cycle first applies `--churn` x pods watch events: pods created (with their PodGroups), bound, deleted, and a
node added and one removed.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import os
import random
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from scheduler_bench import generate  # noqa: E402

from operators.core.cache import Informer, object_key  # noqa: E402
from operators.scheduler.decide.config import SchedulerConfig  # noqa: E402
from operators.scheduler.decide.cycle import run_cycle  # noqa: E402
from operators.scheduler.decide.snapshot import build_snapshot  # noqa: E402
from operators.scheduler.shell.loop import SchedulerLoop  # noqa: E402

PAGE = 500
_KINDS = {"Node": "nodes", "Pod": "pods", "PodGroup": "podgroups", "Queue": "queues",
          "PriorityClass": "priority_classes", "DeviceClass": "dra.classes", "ResourceSlice": "dra.slices",
          "ResourceClaim": "dra.claims"}


def pad(objs: list[dict[str, Any]], pods: int, seed: int = 11) -> list[dict[str, Any]]:
    """`objs` with pending single-pod jobs (and their PodGroups) added until it holds `pods` pods."""
    rnd = random.Random(seed)
    have = sum(1 for o in objs if o["kind"] == "Pod")
    queues = [o["metadata"]["name"] for o in objs if o["kind"] == "Queue" and o["spec"].get("parentQueue")]
    for i in range(max(pods - have, 0)):
        objs += job(f"pad-{i:06d}", f"ns-{i % 50}", rnd.choice(queues), rnd.choice((0, 1, 1, 2)))
    return objs


def job(name: str, ns: str, queue: str, gpus: int) -> list[dict[str, Any]]:
    """A pending single-pod job: its PodGroup and its pod."""
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": ns, "uid": name, "creationTimestamp": "2025-01-01T12:00:00Z"},
             "spec": {"minMember": 1, "queue": queue, "priorityClassName": "train"}}
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "4Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{name}-0", "namespace": ns, "uid": f"{name}-0", "labels": {"app": name},
                        "annotations": {"pod-group-name": name}},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "resources": resources}]},
           "status": {"phase": "Pending"}}
    return [group, pod]


def dress(pod: dict[str, Any], rv: int) -> dict[str, Any]:
    """The pod as the API server returns it: the fields a controller, the kubelet and admission add."""
    pod = copy.deepcopy(pod)
    meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
    owner_key = 'k:{"uid":"' + meta["uid"] + '-owner"}'
    meta.update({"resourceVersion": str(rv), "creationTimestamp": "2025-01-01T12:00:00Z", "generation": 1,
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"][:-2],
                                      "uid": f"{meta['uid']}-owner", "controller": True,
                                      "blockOwnerDeletion": True}],
                 "managedFields": [
                     {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                      "time": "2025-01-01T12:00:00Z", "fieldsType": "FieldsV1",
                      "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}},
                                                  "f:ownerReferences": {".": {}, owner_key: {}}},
                                   "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
                                       ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                                       "f:resources": {".": {}, "f:limits": {}, "f:requests": {}},
                                       "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                                       "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                                       "f:schedulerName": {}, "f:securityContext": {},
                                       "f:terminationGracePeriodSeconds": {}}}},
                     {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                      "time": "2025-01-01T12:00:05Z", "fieldsType": "FieldsV1",
                      "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {},
                                                "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}}]})
    container = spec["containers"][0]
    container.update({"image": "nvcr.io/nvidia/pytorch:24.01-py3", "imagePullPolicy": "IfNotPresent",
                      "command": ["python", "-m", "train"], "args": ["--epochs", "10", "--data", "/data"],
                      "env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "WORLD_SIZE", "value": "8"}],
                      "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                      "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]})
    spec.update({"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                 "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
                 "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300},
                                 {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300}],
                 "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                     {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                     {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                         "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]})
    conditions = [{"type": "PodScheduled", "status": "True" if spec.get("nodeName") else "False",
                   "lastProbeTime": None, "lastTransitionTime": "2025-01-01T12:00:01Z"}]
    if spec.get("nodeName"):
        conditions += [{"type": t, "status": "True", "lastProbeTime": None,
                        "lastTransitionTime": "2025-01-01T12:00:04Z"}
                       for t in ("Initialized", "Ready", "ContainersReady")]
        status.update({"hostIP": "10.0.0.1", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                       "startTime": "2025-01-01T12:00:02Z", "qosClass": "Burstable",
                       "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                                              "image": container["image"], "imageID": "sha256:" + "0" * 64,
                                              "containerID": "containerd://" + "1" * 64,
                                              "state": {"running": {"startedAt": "2025-01-01T12:00:03Z"}},
                                              "lastState": {}}]})
    status["conditions"] = conditions
    return pod


def list_pages(objs: list[dict[str, Any]]) -> Iterator[bytes]:
    """The list responses of one kind, `PAGE` items each, as the API server's JSON bytes."""
    for start in range(0, len(objs), PAGE):
        more = start + PAGE < len(objs)
        meta = {"resourceVersion": "1", **({"continue": f"c{start}"} if more else {})}
        yield json.dumps({"kind": "List", "apiVersion": "v1", "metadata": meta,
                          "items": objs[start:start + PAGE]}).encode()


def informer(loop: SchedulerLoop, kind: str) -> Informer[Any]:
    owner: Any = loop
    for name in _KINDS[kind].split("."):
        owner = getattr(owner, name)
    informers: Informer[Any] = owner
    return informers


def rss_mib() -> float:
    """The resident set now (Linux), not the peak: the harness's own pages come and go around the list."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu() -> float:
    return time.process_time()


def pages_of(nodes: int, pods: int, dra: bool = False) -> dict[str, list[bytes]]:
    """Every kind's list responses for the cluster (its dicts dropped: the scheduler never holds them)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for i, o in enumerate(pad(generate(nodes, dra=dra), pods)):
        if o["kind"] in _KINDS:
            by_kind.setdefault(o["kind"], []).append(dress(o, i) if o["kind"] == "Pod" else o)
    return {k: list(list_pages(v)) for k, v in by_kind.items()}


def legacy_page(inf: Informer[Any], body: bytes, fresh: dict[str, Any]) -> None:
    """A page as the informer took it before `take_page` (for --legacy): decoded and parsed with the GC on."""
    for obj in json.loads(body).get("items") or []:
        fresh[object_key(obj)] = inf.parse(obj)


def verify_stores(loop: SchedulerLoop, pages: dict[str, list[bytes]]) -> int:
    """Every kind's store after the list equals each object of its pages decoded and parsed on its own, record
    for record and in order (what `take_page`'s batching and GC pause must not change); returns the count."""
    for kind, kind_pages in pages.items():
        inf = informer(loop, kind)
        alone = {object_key(o): r for body in kind_pages for o in json.loads(body)["items"]
                 if (r := inf.parse(o)) is not None}
        assert inf.store == alone and list(inf.store) == list(alone), f"{kind}: the listed store differs"
    return sum(len(informer(loop, kind).store) for kind in pages)


def start_up(loop: SchedulerLoop, pages: dict[str, list[bytes]], legacy: bool = False) -> dict[str, float]:
    """List every kind through its informer: each page decoded and parsed by `take_page`, then the store
    installed by `replace_all`."""
    out = {"list_mib": sum(len(p) for ps in pages.values() for p in ps) / 2**20}
    c0, w0 = cpu(), time.perf_counter()
    for kind, kind_pages in pages.items():
        inf = informer(loop, kind)
        fresh: dict[str, Any] = {}
        for body in kind_pages:
            if legacy:
                legacy_page(inf, body, fresh)
            else:
                inf.take_page(body, fresh)
        inf.replace_all(fresh)
    out.update(list_cpu_s=cpu() - c0, list_wall_s=time.perf_counter() - w0)
    return out


class Cluster:
    """What the API server holds, by kind and key (in creation order, as an informer's store keeps it)."""

    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        for o in objs:
            self.objects.setdefault(o["kind"], {})[object_key(o)] = o
        self.rv = 10**6

    def of(self, kind: str) -> dict[str, dict[str, Any]]:
        return self.objects.setdefault(kind, {})

    def event(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Apply a write; returns its watch event as the API server sends it (pods dressed, a new
        resourceVersion)."""
        self.rv += 1
        store = self.of(obj["kind"])
        if kind == "DELETED":
            store.pop(object_key(obj), None)
        else:
            store[object_key(obj)] = obj
        sent = dress(obj, self.rv) if obj["kind"] == "Pod" else {
            **obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        return {"type": kind, "object": sent}


class Churn:
    """Between cycles, about `n` writes: a third pending pods bound (the binder set nodeName, the kubelet runs
    them), a third pods deleted, a third new single-pod jobs (PodGroup and pod); and with `nodes` one node removed,
    one added (a changed node list opens the next session in full; without, it opens from the last one's objects)."""

    def __init__(self, seed: int = 3, nodes: bool = True) -> None:
        self.rnd = random.Random(seed)
        self.made = 0
        self.nodes = nodes

    def writes(self, cluster: Cluster, n: int) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        pods, nodes = cluster.of("Pod"), list(cluster.of("Node").values())
        queues = [q["metadata"]["name"] for q in cluster.of("Queue").values() if q["spec"].get("parentQueue")]
        keys = list(pods)
        chosen = self.rnd.sample(keys, min(len(keys), 3 * n))
        for k in [k for k in chosen if not pods[k]["spec"].get("nodeName")][: n // 3]:
            pod = copy.deepcopy(pods[k])
            pod["spec"]["nodeName"] = self.rnd.choice(nodes)["metadata"]["name"]
            pod["status"]["phase"] = "Running"
            out.append(("MODIFIED", pod))
        out += [("DELETED", pods[k]) for k in chosen[-(n // 3):]]
        for _ in range(n // 3):
            self.made += 1
            group, pod = job(f"churn-{self.made:06d}", f"ns-{self.made % 50}", self.rnd.choice(queues),
                             self.rnd.choice((0, 1)))
            out += [("ADDED", group), ("ADDED", pod)]
        if not self.nodes:
            return out
        out.append(("DELETED", nodes[self.rnd.randrange(len(nodes))]))
        node = copy.deepcopy(nodes[0])
        name = f"churn-node-{self.made:06d}"
        node["metadata"] = {**node["metadata"], "name": name,
                            "labels": {**node["metadata"]["labels"], "kubernetes.io/hostname": name}}
        out.append(("ADDED", node))
        return out


def full_snapshot(loop: SchedulerLoop) -> Any:
    """The snapshot as every cycle assembled it before the incremental views: `build_snapshot` over copies of
    every store."""
    return build_snapshot(
        nodes=list(loop.nodes.store.values()), pods=list(loop.pods.store.values()),
        podgroups=list(loop.podgroups.store.values()), queues=list(loop.queues.store.values()),
        bindrequests=list(loop.bindrequests.store.values()),
        priority_classes=list(loop.priority_classes.store.values()),
        configmaps=list(loop.configmaps.store.values()), topologies=list(loop.topologies.store.values()),
        **loop.dra.records(), node_pool_label=loop.config.node_pool_label, partition=loop.config.partition,
        pdbs=list(loop.pdbs.store.values()), refused_evictions=loop.refused_evictions())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--churn", type=float, default=0.01, help="watch events per cycle, as a share of the pods")
    parser.add_argument("--no-first-cycle", action="store_true", help="skip the first scheduling cycle")
    parser.add_argument("--legacy", action="store_true", help="list as before `take_page` (the GC on)")
    parser.add_argument("--verify", action="store_true",
                        help="check every store against each listed object parsed alone (after the timings)")
    parser.add_argument("--dra", action="store_true",
                        help="GPUs of nodes as ResourceSlices, 20%% of GPU pods' as ResourceClaims (scheduler_bench)")
    args = parser.parse_args(argv)

    pages = pages_of(args.nodes, args.pods, args.dra)
    config = SchedulerConfig()
    asyncio.set_event_loop(asyncio.new_event_loop())
    loop = SchedulerLoop(None, config)
    rss0 = rss_mib()
    print(f"nodes={args.nodes} pods={args.pods} load1={os.getloadavg()[0]:.2f}", flush=True)
    w0 = time.perf_counter()
    row = start_up(loop, pages, args.legacy)
    rss1 = rss_mib()
    kept = pages if args.verify else {}
    del pages
    gc.collect()
    rss2 = rss_mib()
    print(f"start-up list: {row['list_mib']:.0f} MiB of JSON decoded and parsed in {row['list_cpu_s']:.2f} s CPU, "
          f"{row['list_wall_s']:.2f} s wall", flush=True)
    c0 = cpu()
    snapshot = loop.snapshot()
    snap_cpu = cpu() - c0
    print(f"first snapshot: {snap_cpu * 1000:.1f} ms CPU", flush=True)
    if not args.no_first_cycle:
        c0 = cpu()
        decisions = run_cycle(snapshot, config, 1.7e9)
        print(f"first cycle: {cpu() - c0:.2f} s CPU, {len(decisions.binds)} binds", flush=True)
    print(f"start-up total (list + parse + first cycle): {time.perf_counter() - w0:.2f} s wall; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; RSS {rss0:.0f} MiB before the list "
          f"(pages held), {rss1:.0f} after it, {rss2:.0f} with the pages dropped",
          flush=True)
    if args.verify:  # the first cycle only reads the stores
        print(f"stores verified: {verify_stores(loop, kept)} records equal to each object parsed alone", flush=True)
        del kept
    cluster, churn = Cluster(pad(generate(args.nodes, dra=args.dra), args.pods)), Churn()
    n = max(int(len(cluster.of("Pod")) * args.churn), 3)
    for cycle in range(args.cycles):
        lines = [(obj["kind"], json.dumps(cluster.event(kind, obj)).encode())
                 for kind, obj in churn.writes(cluster, n)]
        c0 = cpu()
        for kind, line in lines:
            informer(loop, kind).apply_event(json.loads(line))
        c1 = cpu()
        incremental = loop.snapshot()
        c2 = cpu()
        rebuilt = full_snapshot(loop)
        c3 = cpu()
        assert incremental == rebuilt
        print(f"cycle {cycle + 1}: {len(lines)} watch events {(c1 - c0) * 1000:.1f} ms CPU; snapshot "
              f"{(c2 - c1) * 1000:.1f} ms CPU incremental, {(c3 - c2) * 1000:.1f} ms full rebuild; "
              f"load1={os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
