"""Start-up, memory and event-loop pauses of the binder, pod-grouper, podgroup-controller, queue-controller and the
scheduler's pod and PodGroup informers at 20,000 / 50,000 / 150,000 pods.

Each measurement runs in a fresh process that builds the component's real object (its informers, parse functions,
indexes, listeners and work queues) and lists through the real `Informer` and `kube.raw` path from a small HTTP
server in another process, which serves synthetic pod and PodGroup list pages and a watch burst (kai-scheduler
pods as a Job's controller and the kubelet leave them: managed fields, env, probes, volumes, conditions; one
PodGroup per 5 pods). No control plane is needed for these numbers.

    python bench/components_bench.py [--sizes 20000,50000,150000] [--components binder,...] [--burst 20000]

Columns: `list s` (list plus parse into the store, wall), `rss MiB` (the process after the list, gc'd),
`store MiB` (RSS growth from before the list to after it), `B/pod` (store / pods), `lag ms` (the longest gap a
5 ms ticker saw while the list ran: probes and lease renewals wait that long), `burst s` / `burst lag ms` (a watch
burst of MODIFIED pod events, each a pod bound).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAGE = 500
PODS_PER_GROUP = 5
COMPONENTS = ("binder", "pod-grouper", "podgroup-controller", "queue-controller", "scheduler")


# --- synthetic objects ---------------------------------------------------------------------------------------
def _managed(manager: str, operation: str, subresource: str | None, fields: dict[str, Any]) -> dict[str, Any]:
    entry = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": "2026-11-26T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


def pod(i: int, *, bound: bool = True) -> dict[str, Any]:
    """A Job's pod of `kai-scheduler`, running on a node (as `kubectl get pod -o json` shows it)."""
    ns = f"team-{i % 40}"
    job = f"train-{i // PODS_PER_GROUP}"
    uid = f"{i:08d}-0000-4000-8000-{i:012d}"
    job_uid = f"{i // PODS_PER_GROUP:08d}-1111-4000-8000-000000000000"
    node = f"node-{i % 10000}"
    container = {
        "name": "worker", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "-m", "torch.distributed.run", "--nproc-per-node=1", "train.py"],
        "env": [{"name": "RANK", "value": str(i % PODS_PER_GROUP)}, {"name": "MASTER_ADDR", "value": f"{job}-0"},
                {"name": "NCCL_DEBUG", "value": "INFO"}],
        "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                      "limits": {"nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10,
                           "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"}
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-11-26T10:00:05Z"}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": f"{job}-{i % PODS_PER_GROUP}-abcde", "generateName": f"{job}-{i % PODS_PER_GROUP}-",
            "namespace": ns, "uid": uid, "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-11-26T10:00:00Z",
            "labels": {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job,
                       "controller-uid": job_uid, "job-name": job, "kai.scheduler/queue": f"queue-{i % 40}",
                       "batch.kubernetes.io/job-completion-index": str(i % PODS_PER_GROUP)},
            "annotations": {"pod-group-name": f"pg-{job}-{job_uid}",
                            "batch.kubernetes.io/job-completion-index": str(i % PODS_PER_GROUP)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                _managed("kube-controller-manager", "Update", None, {
                    "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:job-name": {}},
                                   "f:ownerReferences": {".": {}, f'k:{{"uid":"{job_uid}"}}': {}}},
                    "f:spec": {"f:containers": {'k:{"name":"worker"}': {".": {}, "f:image": {}, "f:name": {},
                                                                         "f:resources": {}}},
                               "f:restartPolicy": {}, "f:schedulerName": {}}}),
                _managed("pod-grouper", "Update", None, {"f:metadata": {"f:annotations": {"f:pod-group-name": {}}}}),
                _managed("kubelet", "Update", "status", {"f:status": {
                    "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
                    "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}),
            ]},
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
            "containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
            "securityContext": {}, "schedulerName": "kai-scheduler", "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority", "nodeName": node if bound else None,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}]},
        "status": {
            "phase": "Running" if bound else "Pending", "conditions": conditions if bound else conditions[-1:],
            "hostIP": "10.0.0.1", "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "podIPs": [{"ip": "10.1.2.3"}], "startTime": "2026-11-26T10:00:01Z", "qosClass": "Burstable",
            "containerStatuses": [{"name": "worker", "state": {"running": {"startedAt": "2026-11-26T10:00:04Z"}},
                                   "lastState": {}, "ready": True, "restartCount": 0,
                                   "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                   "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "0" * 64,
                                   "containerID": "containerd://" + f"{i:064x}", "started": True}]},
    }


def podgroup(j: int) -> dict[str, Any]:
    job_uid = f"{j:08d}-1111-4000-8000-000000000000"
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": f"pg-train-{j}-{job_uid}", "namespace": f"team-{(j * PODS_PER_GROUP) % 40}",
                     "uid": f"{j:08d}-2222-4000-8000-000000000000", "resourceVersion": str(900 + j),
                     "creationTimestamp": "2026-11-26T10:00:00Z",
                     "labels": {"kai.scheduler/queue": f"queue-{(j * PODS_PER_GROUP) % 40}"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"train-{j}",
                                          "uid": job_uid, "controller": True, "blockOwnerDeletion": True}],
                     "managedFields": [_managed("pod-grouper", "Update", None,
                                                {"f:spec": {"f:minMember": {}, "f:queue": {}}})]},
        "spec": {"minMember": PODS_PER_GROUP, "queue": f"queue-{(j * PODS_PER_GROUP) % 40}",
                 "priorityClassName": "train", "markUnschedulable": True, "schedulingBackoff": 1},
        "status": {"resourcesStatus": {"allocated": {"cpu": "20", "memory": "80Gi", "nvidia.com/gpu": "5"},
                                       "allocatedNonPreemptible": {},
                                       "requested": {"cpu": "20", "memory": "80Gi", "nvidia.com/gpu": "5"}},
                   "running": PODS_PER_GROUP, "pending": 0,
                   "schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                             "reason": "Unschedulable", "message": "", "transitionID": "1",
                                             "lastTransitionTime": "2026-11-26T10:00:00Z", "status": "True"}]},
    }


def write_pages(path: Path, make: Any, count: int) -> None:
    """One list page per line: the JSON array of its items."""
    with path.open("w") as out:
        for start in range(0, count, PAGE):
            out.write(json.dumps([make(i) for i in range(start, min(start + PAGE, count))]) + "\n")


# --- the fake list/watch server (a separate process) -------------------------------------------------------
def serve(pods_file: str, groups_file: str, pods: int, burst: int, port_file: str) -> None:
    from aiohttp import web

    def pages(path: str, count: int) -> list[bytes]:
        out: list[bytes] = []
        with open(path, "rb") as f:
            for line in f:
                if len(out) * PAGE >= count:
                    break
                out.append(line.rstrip(b"\n"))
        return out

    groups = -(-pods // PODS_PER_GROUP)
    served = {"pods": pages(pods_file, pods), "podgroups": pages(groups_file, groups)}
    counts = {"pods": pods, "podgroups": groups}

    async def handle(request: web.Request) -> web.StreamResponse:
        plural = request.path.rsplit("/", 1)[-1]
        if request.query.get("watch") == "true":
            resp = web.StreamResponse()
            await resp.prepare(request)
            if plural == "pods":
                for i in range(min(burst, pods)):  # a pod bound: its PodScheduled condition and node change
                    p = pod(i, bound=i % 2 == 0)
                    p["metadata"]["resourceVersion"] = str(10**9 + i)
                    await resp.write(json.dumps({"type": "MODIFIED", "object": p}).encode() + b"\n")
            return resp
        items = served.get(plural)
        if items is None:
            body = b'{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}'
            return web.Response(body=body, content_type="application/json")
        index = int(request.query.get("continue") or 0)
        last = (index + 1) * PAGE >= counts[plural]
        meta = {"resourceVersion": "999999"} if last else {"continue": str(index + 1)}
        body = b'{"kind":"List","apiVersion":"v1","metadata":' + json.dumps(meta).encode() + b',"items":' \
            + items[index] + b"}"
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        await asyncio.to_thread(Path(port_file).write_text, str(port))
        await asyncio.Event().wait()

    asyncio.run(main())


# --- one component in this process ---------------------------------------------------------------------------
def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _component(name: str, api: Any) -> tuple[Any, list[Any], Any]:
    """The component's object, the informers the bench lists (pods first), and its pod informer (or None)."""
    if name == "binder":
        from operators.binder.binding import Binder
        from operators.binder.common import BinderConfig

        b = Binder(api, api, BinderConfig())
        return b, [b.members], b.members
    if name == "pod-grouper":
        from operators.podgrouper.main import PodGrouper, parser

        g = PodGrouper(api, parser().parse_args([]))
        return g, [g.pods, g.podgroups], g.pods
    if name == "podgroup-controller":
        from operators.podgroupcontroller.main import PodGroupController
        from operators.podgroupcontroller.main import parser as pgc_parser

        c = PodGroupController(api, pgc_parser().parse_args([]))
        return c, [c.pods, c.podgroups], c.pods
    if name == "scheduler":  # its pod and PodGroup records (the other kinds are served empty)
        from operators.scheduler.decide.config import SchedulerConfig
        from operators.scheduler.shell.loop import SchedulerLoop

        s = SchedulerLoop(api, SchedulerConfig())
        return s, [s.pods, s.podgroups], s.pods
    from operators.queuecontroller.main import QueueController
    from operators.queuecontroller.main import parser as qc_parser

    q = QueueController(api, qc_parser().parse_args([]))
    return q, [q.podgroups], None


async def _measure(name: str, port: int, pods: int) -> dict[str, Any]:
    from kubernetes_asyncio import client

    config = client.Configuration(host=f"http://127.0.0.1:{port}")
    api = client.ApiClient(config)
    gaps: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            gaps.append(time.perf_counter() - t - 0.005)

    from operators.core.kube import raw

    component, informers, pod_informer = _component(name, api)
    await raw(api, "GET", "/api/v1/warmup")  # the client's first request imports and sets up what later ones reuse
    gc.collect()
    before = rss_mib()
    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.05)
    gaps.clear()
    t0 = time.perf_counter()
    for informer in informers:
        informer.page_size = PAGE
        await informer._list()
    list_s = time.perf_counter() - t0
    list_lag = max(gaps, default=0.0)
    gc.collect()
    after = rss_mib()
    burst_s = burst_lag = 0.0
    if pod_informer is not None:
        gaps.clear()
        t0 = time.perf_counter()
        await pod_informer._watch()
        burst_s = time.perf_counter() - t0
        burst_lag = max(gaps, default=0.0)
    stop = True
    await tick
    await api.close()
    del component
    return {"component": name, "pods": pods, "list s": list_s, "rss MiB": after,
            "peak MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "store MiB": after - before, "B/pod": (after - before) * 2**20 / pods,
            "lag ms": list_lag * 1000, "burst s": burst_s, "burst lag ms": burst_lag * 1000}


# --- driver ----------------------------------------------------------------------------------------------------
COLUMNS = ("component", "pods", "list s", "rss MiB", "peak MiB", "store MiB", "B/pod", "lag ms", "burst s",
           "burst lag ms")


def _row(r: dict[str, Any]) -> str:
    cells = []
    for c in COLUMNS:
        v = r[c]
        cells.append(f"{v:>{len(c) if c != 'component' else 20}}" if not isinstance(v, float)
                     else f"{v:>{len(c)}.{0 if c in ('B/pod',) or v >= 100 else 2}f}")
    return "  ".join(cells)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="20000,50000,150000")
    p.add_argument("--components", default=",".join(COMPONENTS))
    p.add_argument("--burst", type=int, default=20000, help="MODIFIED pod events in the watch burst")
    p.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "kai-components-bench"))
    p.add_argument("--one", nargs=3, metavar=("COMPONENT", "PORT", "PODS"), help=argparse.SUPPRESS)
    p.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve[0], args.serve[1], int(args.serve[2]), int(args.serve[3]), args.serve[4])
        return
    if args.one:
        print(json.dumps(asyncio.run(_measure(args.one[0], int(args.one[1]), int(args.one[2])))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    largest = max(sizes)
    pods_file, groups_file = data / f"pods-{largest}.jsonl", data / f"podgroups-{largest}.jsonl"
    if not pods_file.exists():
        write_pages(pods_file, pod, largest)
        write_pages(groups_file, podgroup, -(-largest // PODS_PER_GROUP))
    print("  ".join(f"{c:>{len(c) if c != 'component' else 20}}" for c in COLUMNS), flush=True)
    for size in sizes:
        port_file = data / "port"
        port_file.unlink(missing_ok=True)
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(pods_file), str(groups_file),
                                   str(size), str(args.burst), str(port_file)])
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.1)
            port = port_file.read_text()
            for name in args.components.split(","):
                out = subprocess.run([sys.executable, __file__, "--one", name, port, str(size)], check=True,
                                     capture_output=True, text=True).stdout
                print(_row(json.loads(out.strip().splitlines()[-1])), flush=True)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
