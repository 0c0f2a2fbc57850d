"""The incremental snapshot: what each cycle takes from the informer stores, shared until a store changes.

Every watch event is parsed once into a frozen record (the informers' transforms); a cycle's snapshot is tuples of
those records. A store that did not change since the last cycle gives the same tuple again (nothing copied, its
shard filter not re-run); one that changed gives a new tuple of the same shared records, in the store's order, so
the snapshot is exactly what `build_snapshot` would assemble from the stores (see `bench/refactor_proof.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any, Generic, TypeVar

from operators.core.cache import Informer
from operators.scheduler.decide.records import NodeRecord, PodGroupRecord
from operators.scheduler.decide.snapshot import Snapshot, build_snapshot

R = TypeVar("R")


class RecordView(Generic[R]):
    """One informer's records as a tuple, rebuilt only when the store was written since (`Informer.version`) or
    the filter's key (the shard) changed."""

    def __init__(self, informer: Informer[R]) -> None:
        self._informer = informer
        self._at: tuple[int, Hashable] | None = None
        self._records: tuple[R, ...] = ()

    def records(self, keep: Callable[[R], bool] | None = None, key: Hashable = None) -> tuple[R, ...]:
        at = (self._informer.version, key)
        if at != self._at:
            values = self._informer.store.values()
            self._records = tuple(values) if keep is None else tuple(r for r in values if keep(r))
            self._at = at
        return self._records


class SnapshotViews:
    """The snapshot of a cycle from the informer stores, with the large kinds (nodes, pods, PodGroups) shared
    between cycles while unchanged; the small kinds go through `build_snapshot` every cycle."""

    def __init__(self, nodes: Informer[NodeRecord], pods: Informer[Any],
                 podgroups: Informer[PodGroupRecord]) -> None:
        self.nodes = RecordView(nodes)
        self.pods = RecordView(pods)
        self.podgroups = RecordView(podgroups)
        self._nodes, self._pods, self._podgroups = nodes, pods, podgroups

    def snapshot(self, *, node_pool_label: str, partition: str, **small: Any) -> Snapshot:
        """`build_snapshot(nodes=..., pods=..., podgroups=..., **small)` over the stores, the large kinds shared.
        With DRA slices or claims the nodes' and pods' GPUs are derived from them, and with DeviceClasses a pod's
        DRA-backed extended resources become a claim (KEP-5004): the full build then."""
        if small.get("resource_slices") or small.get("resource_claims") or small.get("device_classes"):
            return build_snapshot(nodes=self._nodes.store.values(), pods=self._pods.store.values(),
                                  podgroups=self._podgroups.store.values(), node_pool_label=node_pool_label,
                                  partition=partition, **small)
        shard = (node_pool_label, partition)

        def in_shard(r: NodeRecord | PodGroupRecord) -> bool:  # build_snapshot's rule
            return r.labels.get(node_pool_label, "") == partition

        base = build_snapshot(node_pool_label=node_pool_label, partition=partition, **small)
        return replace(base, nodes=self.nodes.records(in_shard, shard), pods=self.pods.records(),
                       podgroups=self.podgroups.records(in_shard, shard))
