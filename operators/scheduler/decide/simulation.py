"""What `kai simulate` computes, without its file I/O: cycles on a list of Kubernetes objects, each cycle's binds
and evictions applied before the next, and the decisions as plain data (`shell/simulate.py` reads and prints).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from operators.core import keys
from operators.scheduler.decide import provisioning
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.devices import claims_after
from operators.scheduler.decide.plugins.proportion.usage import usage_from_documents, usage_pairs
from operators.scheduler.decide.records import PodGroupRecord, PodRecord, parse_time
from operators.scheduler.decide.snapshot import Snapshot, flatten, snapshot_from_objects


def with_implicit_podgroups(objects: Iterable[Mapping[str, Any]], scheduler_name: str = keys.SCHEDULER_NAME,
                            ) -> list[Mapping[str, Any]]:
    """Add the pod-grouper's PodGroup for bare pods of our scheduler that have none (simulation only)."""
    objects = flatten(objects)
    priority_classes = {str((o.get("metadata") or {}).get("name")) for o in objects if o.get("kind") == "PriorityClass"}
    out: list[Mapping[str, Any]] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        annotations = meta.get("annotations") or {}
        if (obj.get("kind") != "Pod" or spec.get("schedulerName") != scheduler_name
                or keys.POD_GROUP_NAME in annotations or meta.get("ownerReferences")):
            out.append(obj)
            continue
        pod = copy.deepcopy(dict(obj))
        name, labels = str(meta.get("name", "")), meta.get("labels") or {}
        uid = str(meta.get("uid") or name)
        pg_name = f"pg-{name}-{uid}"
        pod["metadata"] = {**meta, "annotations": {**annotations, keys.POD_GROUP_NAME: pg_name}}
        candidates = [labels.get(keys.PRIORITY_CLASS_LABEL), spec.get("priorityClassName")]
        priority = next((c for c in candidates if c and c in priority_classes), "train")
        pg_spec: dict[str, Any] = {"minMember": 1, "queue": labels.get(keys.QUEUE_LABEL, keys.DEFAULT_QUEUE),
                                   "priorityClassName": priority}
        if labels.get(keys.PREEMPTIBILITY_LABEL) in (keys.PREEMPTIBLE, keys.NON_PREEMPTIBLE, keys.SEMI_PREEMPTIBLE):
            pg_spec["preemptibility"] = labels[keys.PREEMPTIBILITY_LABEL]
        out.append({"apiVersion": f"{keys.GROUP}/{keys.PODGROUP_VERSION}", "kind": "PodGroup",
                    "metadata": {"name": pg_name, "namespace": meta.get("namespace") or "default",
                                 "creationTimestamp": meta.get("creationTimestamp")},
                    "spec": pg_spec})
        out.append(pod)
    return out


def _default_now(snapshot: Snapshot) -> float:
    # Deterministic default: the newest creation time among the inputs (0 when none is given).
    times = [p.created for p in snapshot.pods] + [g.created for g in snapshot.podgroups]
    return max(times, default=0.0)


def apply_decisions(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The next cycle's snapshot: bound pods run, evicted pods are pending again, quota gates lifted, annotations
    written."""
    binds = {(b.namespace, b.pod): b for b in decisions.binds}
    evicted = {(e.namespace, e.pod) for e in decisions.evictions}
    ungated = {(u.namespace, u.pod) for u in decisions.ungates}
    pods: list[PodRecord] = []
    bound: dict[str, list[tuple[str, str]]] = {}  # DRA: claim key -> (allocation, pod uid) the binder writes
    released: dict[str, list[str]] = {}  # DRA: claim key -> uids of the evicted pods using it
    for pod in snapshot.pods:
        key = (pod.namespace, pod.name)
        names = dict(pod.claims)
        if key in binds:
            b = binds[key]
            for pod_claim, allocation in b.claim_allocations:
                bound.setdefault(f"{pod.namespace}/{names.get(pod_claim, '')}", []).append((allocation, pod.uid))
            labels = dict(pod.labels)
            if b.gpu_groups:
                labels[keys.GPU_GROUP_LABEL] = b.gpu_groups[0]
            pod = replace(pod, phase="Running", node_name=b.node, gpu_groups=b.gpu_groups, labels=labels)
        elif key in evicted:
            for name in names.values():
                released.setdefault(f"{pod.namespace}/{name}", []).append(pod.uid)
            pod = replace(pod, phase="Pending", node_name="", deleting=False, gpu_groups=())
        elif key in ungated:
            pod = replace(pod, gated=False, quota_gated=False)
        pods.append(pod)
    updates: dict[tuple[str, str], dict[str, str | None]] = {}
    for a in decisions.annotations:
        updates.setdefault((a.namespace, a.pod_group), {})[a.key] = a.value
    podgroups: list[PodGroupRecord] = []
    for pg in snapshot.podgroups:
        upd = updates.get((pg.namespace, pg.name))
        if upd:
            pg = replace(pg, last_start=upd.get(keys.LAST_START_TIMESTAMP, pg.last_start),
                         stale_since=upd.get(keys.STALE_PODGROUP_TIMESTAMP, pg.stale_since),
                         last_eviction=parse_time(upd[keys.LAST_EVICTION_TIMESTAMP])
                         if keys.LAST_EVICTION_TIMESTAMP in upd else pg.last_eviction)
        podgroups.append(pg)
    claims = claims_after(snapshot.resource_claims, bound, released) if bound or released else \
        snapshot.resource_claims
    return replace(snapshot, pods=tuple(pods), podgroups=tuple(podgroups), resource_claims=claims)


def run_simulation(objects: Iterable[Mapping[str, Any]], config: SchedulerConfig | None = None,
                   actions: Sequence[str] | None = None, now: float | None = None,
                   cycles: int | None = None) -> dict[str, Any]:
    """Decisions for the given objects; with `cycles`, also the final `placement` of every pod."""
    cfg = config or SchedulerConfig()
    snapshot = snapshot_from_objects(with_implicit_podgroups(objects, cfg.scheduler_name),
                                     node_pool_label=cfg.node_pool_label, partition=cfg.partition)
    start = _default_now(snapshot) if now is None else now
    usage = usage_from_documents(flatten(objects), cfg.usage_db, start)  # time-based fair share input
    if usage:
        snapshot = replace(snapshot, queue_usage=usage_pairs(usage))
    result: dict[str, Any] = {"binds": [], "pipelined": [], "evictions": [], "unschedulable": [], "queues": []}
    # ProvisioningRequests given as input are the existing ones; each cycle's new ones stay pending after it.
    requests = [r for o in flatten(objects) if o.get("kind") == provisioning.KIND
                and (r := provisioning.provisioning_request_record(o)) is not None]
    would_create: list[dict[str, Any]] = []
    last = Decisions()
    for cycle in range(cycles or 1):
        now_cycle = start + cycle * cfg.schedule_period
        snapshot = provisioning.prefer_new_nodes(snapshot, requests)
        last = run_cycle(snapshot, cfg, now_cycle, actions)
        plan = provisioning.plan(snapshot, last, requests, now_cycle)
        last = provisioning.apply(last, plan, cfg.node_pool_name)
        would_create += [{**r.to_dict(), "cycle": cycle + 1} if cycles else r.to_dict() for r in plan.create]
        requests = [r for r in requests if r not in plan.delete] + [
            rec for n in plan.create if (rec := provisioning.provisioning_request_record(n.manifest())) is not None]
        data = last.to_dict()
        for key in ("binds", "evictions", "stale", "annotations"):
            for item in data[key]:
                result.setdefault(key, []).append({**item, "cycle": cycle + 1} if cycles else item)
        snapshot = apply_decisions(snapshot, last)
    final = last.to_dict()
    for key in ("pipelined", "unschedulable", "notReady", "queues"):
        result[key] = final[key]
    if would_create:
        result["provisioning"] = would_create
    if cycles:
        pipelined = {(p.namespace, p.pod): p.node for p in last.pipelined}
        placement = []
        for pod in sorted(snapshot.pods, key=lambda p: (p.namespace, p.name)):
            node = pipelined.get((pod.namespace, pod.name), pod.node_name)
            status = "Pipelined" if (pod.namespace, pod.name) in pipelined else pod.phase
            placement.append({"namespace": pod.namespace, "pod": pod.name, "node": node, "status": status})
        result["placement"] = placement
    return result
