"""The immutable cluster snapshot one scheduling cycle works on.

`build_snapshot` only collects records (parsed once per watch event by the `*_record` parsers) and applies the
shard selector, so the live loop can call it every cycle; all derived state is built by the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.core import keys
from operators.core.api.bindrequest import parse_decision
from operators.core.api.queue import QueueRecord, queue_record
from operators.scheduler.decide.devices import (
    ClaimRecord,
    DeviceClassRecord,
    SliceRecord,
    claim_record,
    device_class_record,
    slice_record,
    with_dra_gpus,
)
from operators.scheduler.decide.extended_resources import with_extended_claims
from operators.scheduler.decide.records import (
    BindRequestRecord,
    ConfigMapRecord,
    NodeRecord,
    PdbRecord,
    PodGroupRecord,
    PodRecord,
    PriorityClassRecord,
    RefusedEviction,
    TopologyRecord,
    configmap_record,
    node_record,
    pdb_record,
    pod_record,
    podgroup_record,
    priorityclass_record,
    topology_record,
)
from operators.scheduler.decide.searchbackoff import Backoff

__all__ = [
    "Removed",
    "Snapshot",
    "build_snapshot",
    "configmap_record",
    "node_record",
    "pdb_record",
    "pod_record",
    "podgroup_record",
    "priorityclass_record",
    "queue_record",
    "record_for",
    "snapshot_from_objects",
    "topology_record",
]


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeRecord, ...]
    pods: tuple[PodRecord, ...]
    podgroups: tuple[PodGroupRecord, ...]
    queues: tuple[QueueRecord, ...]
    bindrequests: tuple[BindRequestRecord, ...] = ()
    priority_classes: tuple[PriorityClassRecord, ...] = ()
    configmaps: frozenset[str] = frozenset()  # "namespace/name"
    node_pool: str = ""
    topologies: tuple[TopologyRecord, ...] = ()
    pdbs: tuple[PdbRecord, ...] = ()
    refused_evictions: tuple[RefusedEviction, ...] = ()  # the live loop's recent 429s (never in a file)
    # Time-based fair share: (queue, (gpu, cpu, memory) usage as a fraction of capacity over the window).
    queue_usage: tuple[tuple[str, tuple[float, float, float]], ...] = ()
    # Failed-search back-offs carried from the previous cycles (`searchbackoff`), by (action, job key).
    search_backoff: Mapping[tuple[str, str], Backoff] = field(default_factory=dict)
    # DRA (resource.k8s.io/v1); the nodes' and pods' DRA GPUs are already counted in their `gpus` / `gpu`.
    resource_slices: tuple[SliceRecord, ...] = ()
    resource_claims: tuple[ClaimRecord, ...] = ()
    device_classes: tuple[DeviceClassRecord, ...] = ()
    # What the producer knows left since an earlier snapshot (the live loop's informers): a hint for a session
    # opened from that snapshot's objects, which checks it (`session/persist.py`); never part of the snapshot's value.
    removed: Removed | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class Removed:
    """The pod and PodGroup records of `pods_from` / `podgroups_from` (an earlier snapshot's tuples, by identity)
    that a later snapshot no longer holds as the same objects: deleted, updated or replaced by an equal new object."""

    pods_from: tuple[PodRecord, ...]
    pods: tuple[PodRecord, ...]
    podgroups_from: tuple[PodGroupRecord, ...]
    podgroups: tuple[PodGroupRecord, ...]


def _in_shard(labels: Mapping[str, str], label_key: str, partition: str) -> bool:
    # The default shard takes objects without the label; shard X takes objects labelled X.
    return labels.get(label_key, "") == partition


def build_snapshot(
    *,
    nodes: Iterable[NodeRecord] = (),
    pods: Iterable[PodRecord] = (),
    podgroups: Iterable[PodGroupRecord] = (),
    queues: Iterable[QueueRecord] = (),
    bindrequests: Iterable[BindRequestRecord] = (),
    priority_classes: Iterable[PriorityClassRecord] = (),
    configmaps: Iterable[ConfigMapRecord] = (),
    topologies: Iterable[TopologyRecord] = (),
    resource_slices: Iterable[SliceRecord] = (),
    resource_claims: Iterable[ClaimRecord] = (),
    device_classes: Iterable[DeviceClassRecord] = (),
    node_pool_label: str = keys.NODE_POOL_LABEL,
    partition: str = "",
    pdbs: Iterable[PdbRecord] = (),
    refused_evictions: Iterable[RefusedEviction] = (),
) -> Snapshot:
    slices, claims, classes = tuple(resource_slices), tuple(resource_claims), tuple(device_classes)
    nodes = [n for n in nodes if _in_shard(n.labels, node_pool_label, partition)]
    if classes:  # KEP-5004: extended resources backed by DRA become a claim of their pod
        pods, claims = with_extended_claims(nodes, list(pods), classes, claims)
    if slices or claims:  # KAI's rule: DRA GPUs are whole GPUs of their node and of the pods claiming them
        nodes, pods = with_dra_gpus(nodes, pods, slices, {c.key: c for c in claims})
    return Snapshot(
        nodes=tuple(nodes),
        pods=tuple(pods),
        podgroups=tuple(p for p in podgroups if _in_shard(p.labels, node_pool_label, partition)),
        # Queues are shared: an unlabelled Queue is in every shard, a labelled one only in its own.
        queues=tuple(q for q in queues if q.labels.get(node_pool_label, "") in ("", partition)),
        bindrequests=tuple(bindrequests),
        priority_classes=tuple(priority_classes),
        configmaps=frozenset(f"{c.namespace}/{c.name}" for c in configmaps),
        node_pool=partition,
        topologies=tuple(sorted(topologies, key=lambda t: t.name)),
        pdbs=tuple(sorted(pdbs, key=lambda p: (p.namespace, p.name))),
        refused_evictions=tuple(refused_evictions),
        resource_slices=slices, resource_claims=claims, device_classes=classes,
    )


_PARSERS: dict[str, Any] = {
    "Node": node_record, "Pod": pod_record, "PodGroup": podgroup_record, "Queue": queue_record,
    "BindRequest": parse_decision, "PriorityClass": priorityclass_record, "ConfigMap": configmap_record,
    "Topology": topology_record, "PodDisruptionBudget": pdb_record, "ResourceSlice": slice_record,
    "ResourceClaim": claim_record, "DeviceClass": device_class_record,
}


def record_for(obj: Mapping[str, Any]) -> object | None:
    """The record of any supported object, or None for kinds the scheduler does not read."""
    parser = _PARSERS.get(str(obj.get("kind", "")))
    return parser(obj) if parser else None


def flatten(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Expand `kind: List` (and `*List`) objects into their items."""
    out: list[Mapping[str, Any]] = []
    for obj in objects:
        if not isinstance(obj, Mapping):
            continue
        if str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
            out.extend(flatten(obj["items"]))
        else:
            out.append(obj)
    return out


def snapshot_from_objects(
    objects: Iterable[Mapping[str, Any]], *, node_pool_label: str = keys.NODE_POOL_LABEL, partition: str = "",
) -> Snapshot:
    buckets: dict[type, list[Any]] = {}
    for obj in flatten(objects):
        rec = record_for(obj)
        if rec is not None:
            buckets.setdefault(type(rec), []).append(rec)
    return build_snapshot(
        nodes=buckets.get(NodeRecord, []), pods=buckets.get(PodRecord, []),
        podgroups=buckets.get(PodGroupRecord, []), queues=buckets.get(QueueRecord, []),
        bindrequests=buckets.get(BindRequestRecord, []), priority_classes=buckets.get(PriorityClassRecord, []),
        configmaps=buckets.get(ConfigMapRecord, []), topologies=buckets.get(TopologyRecord, []),
        resource_slices=buckets.get(SliceRecord, []), resource_claims=buckets.get(ClaimRecord, []),
        device_classes=buckets.get(DeviceClassRecord, []), node_pool_label=node_pool_label, partition=partition,
        pdbs=buckets.get(PdbRecord, []))
