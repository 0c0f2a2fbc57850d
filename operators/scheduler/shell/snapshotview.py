"""The incremental snapshot: what each cycle takes from the informer stores, shared until a store changes.

Every watch event is parsed once into a frozen record (the informers' transforms); a cycle's snapshot is tuples of
those records. A store that did not change since the last cycle gives the same tuple again (nothing copied, its
shard filter not re-run); one that changed gives a new tuple of the same shared records, in the store's order, so
the snapshot is exactly what `build_snapshot` would assemble from the stores (see `bench/refactor_proof.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

from operators.core.cache import Informer
from operators.scheduler.decide.devices import ClaimRecord, DeviceClassRecord, SliceRecord, with_dra_gpus
from operators.scheduler.decide.extended_resources import with_extended_claims
from operators.scheduler.decide.records import NodeRecord, PodGroupRecord
from operators.scheduler.decide.snapshot import Removed, Snapshot, build_snapshot

R = TypeVar("R")


class RecordView(Generic[R]):
    """One informer's records as a tuple, rebuilt only when the store was written since (`Informer.version`) or
    the filter's key (the shard) changed; with the tuple it returned before (`previous`) and the record objects
    the store stopped holding in between (`left`: every one of `previous` not in the new tuple, and others)."""

    def __init__(self, informer: Informer[R]) -> None:
        self._informer = informer
        self._at: tuple[int, Hashable] | None = None
        self._records: tuple[R, ...] = ()
        self.previous: tuple[R, ...] = ()
        self.left: tuple[R, ...] = ()
        self._left: list[R] = []
        informer.on_left(self._heard)

    def _heard(self, record: R) -> None:
        # Kept up to the size of the tuple last returned: only its records matter to a reader, and a list that
        # misses some is checked and diffed (persist.py). So a view nobody reads (a standby's) keeps nothing, and
        # any view at most one tuple's worth, however many writes come between two reads.
        if len(self._left) < len(self._records):
            self._left.append(record)

    def records(self, keep: Callable[[R], bool] | None = None, key: Hashable = None) -> tuple[R, ...]:
        at = (self._informer.version, key)
        self.previous = self._records
        self.left = ()
        if at != self._at:
            # A record leaving the filter (a key change) is not said to have left: a reader checks (persist.py).
            self.left = tuple(self._left)
            self._left.clear()
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
        self._dra = DraFold()

    def snapshot(self, *, node_pool_label: str, partition: str, **small: Any) -> Snapshot:
        """`build_snapshot(nodes=..., pods=..., podgroups=..., **small)` over the stores, the large kinds shared.
        With DRA slices or claims the nodes' and pods' GPUs are derived from them, and with DeviceClasses a pod's
        DRA-backed extended resources become a claim (KEP-5004): `DraFold` redoes that only for what changed."""
        shard = (node_pool_label, partition)

        def in_shard(r: NodeRecord | PodGroupRecord) -> bool:  # build_snapshot's rule
            return r.labels.get(node_pool_label, "") == partition

        slices = tuple(small.pop("resource_slices", ()))
        claims = tuple(small.pop("resource_claims", ()))
        classes = tuple(small.pop("device_classes", ()))
        base = build_snapshot(node_pool_label=node_pool_label, partition=partition, **small)
        nodes, pods = self.nodes.records(in_shard, shard), self.pods.records()
        podgroups = self.podgroups.records(in_shard, shard)
        # What left since the last snapshot, for a session opened from that one's objects (the DRA fold makes
        # pod records of its own: then nothing is said).
        removed: Removed | None = Removed(self.pods.previous, self.pods.left, self.podgroups.previous,
                                          self.podgroups.left)
        if slices or claims or classes:
            nodes, pods, claims = self._dra.fold(nodes, pods, slices, claims, classes)
            removed = None
        return replace(base, nodes=nodes, pods=pods, podgroups=podgroups, resource_slices=slices,
                       resource_claims=claims, device_classes=classes, removed=removed)


class DraFold:
    """`build_snapshot`'s DRA step (KEP-5004's claims, then the DRA GPUs folded into nodes and pods) with each half
    kept while its inputs are unchanged: the nodes' GPUs depend only on the nodes and the slices, the pods' only on
    the pods, the nodes' plugin resources, the DeviceClasses and the claims. The shared tuples of `RecordView` are
    compared by identity, the few DRA records by equality."""

    def __init__(self) -> None:
        self._pods_in: tuple[object, ...] | None = None
        self._pods_out: tuple[tuple[Any, ...], tuple[Any, ...]] = ((), ())
        self._nodes_in: tuple[object, ...] | None = None
        self._nodes_out: tuple[Any, ...] = ()
        self._folded: dict[int, tuple[Any, tuple[ClaimRecord | None, ...], Any]] = {}

    def fold(self, nodes: tuple[NodeRecord, ...], pods: tuple[Any, ...], slices: tuple[SliceRecord, ...],
             claims: tuple[ClaimRecord, ...], classes: tuple[DeviceClassRecord, ...]
             ) -> tuple[tuple[NodeRecord, ...], tuple[Any, ...], tuple[ClaimRecord, ...]]:
        at: tuple[object, ...] = (pods, nodes if classes else None, classes, claims)  # nodes: their plugin resources
        if self._pods_in is None or not _same(self._pods_in, at, 2):
            folded, all_claims = with_extended_claims(nodes, pods, classes, claims) if classes else (pods, claims)
            if slices or all_claims:
                folded = self._pods_with_claims(folded, {c.key: c for c in all_claims})
            self._pods_in, self._pods_out = at, (tuple(folded), tuple(all_claims))
        pods_out, all_claims = self._pods_out
        if not (slices or all_claims):
            return nodes, pods_out, all_claims
        at = (nodes, slices)
        if self._nodes_in is None or not _same(self._nodes_in, at, 1):
            folded_nodes, _ = with_dra_gpus(nodes, (), slices, {})
            self._nodes_in, self._nodes_out = at, tuple(folded_nodes)
        return self._nodes_out, pods_out, all_claims


    def _pods_with_claims(self, pods: Sequence[Any], claims: Mapping[str, ClaimRecord]) -> list[Any]:
        """`with_dra_gpus` over the pods, a pod with claims folded again only when it or one of its claim
        records is not the object it was last cycle (a pod's fold depends on nothing else)."""
        out, folded, was = [], {}, self._folded
        for p in pods:
            if not p.claims:
                out.append(p)
                continue
            mine = tuple(claims.get(f"{p.namespace}/{name}") if name else None for _, name in p.claims)
            hit = was.get(id(p))
            if hit is None or hit[0] is not p or len(hit[1]) != len(mine) or \
                    not all(a is b for a, b in zip(hit[1], mine, strict=True)):
                hit = (p, mine, with_dra_gpus((), (p,), (), claims)[1][0])
            folded[id(p)] = hit
            out.append(hit[2])
        self._folded = folded  # only this cycle's pods: the records kept alive are those of the store
        return out


def _same(was: tuple[object, ...], now: tuple[object, ...], shared: int) -> bool:
    """The first `shared` inputs (store tuples) are the same objects, the others (the few DRA records) equal."""
    return all(a is b for a, b in zip(was[:shared], now[:shared], strict=True)) and was[shared:] == now[shared:]
