"""The incremental snapshot (`shell/snapshotview.py`): a cycle's snapshot equals `build_snapshot` over the stores
after every kind of change (watch events, assumed binds and evictions, a shard switch), and a store that did not
change gives the very same tuple again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue
from test_sched_dra import claim, dra_node, dra_pod
from test_sched_dra_extended import CLASS, ext_pod

from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.snapshot import Snapshot, build_snapshot
from operators.scheduler.shell.loop import SchedulerLoop


def watched(loop: SchedulerLoop, kind: str, obj: dict[str, Any]) -> None:
    """A watch event through the informer's own path (`Informer.apply_event`)."""
    informer = {"Node": loop.nodes, "Pod": loop.pods, "PodGroup": loop.podgroups, "Queue": loop.queues,
                "PriorityClass": loop.priority_classes}[obj["kind"]]
    informer.apply_event({"type": kind, "object": obj})


def full(loop: SchedulerLoop) -> Snapshot:
    """The snapshot rebuilt from every store, as each cycle did before the views."""
    return build_snapshot(
        nodes=loop.nodes.store.values(), pods=loop.pods.store.values(), podgroups=loop.podgroups.store.values(),
        queues=loop.queues.store.values(), priority_classes=loop.priority_classes.store.values(),
        node_pool_label=loop.config.node_pool_label, partition=loop.config.partition)


def loaded() -> SchedulerLoop:
    loop = SchedulerLoop(object(), SchedulerConfig())
    for obj in [*PRIORITY_CLASSES, queue("q"), node("n1"), node("n2", labels={keys.NODE_POOL_LABEL: "a"}),
                podgroup("g1"), podgroup("g2"), pod("p1", "g1", node_name="n1", phase="Running"), pod("p2", "g2")]:
        watched(loop, "ADDED", obj)
    return loop


def test_an_unchanged_store_is_shared_and_every_change_is_seen() -> None:
    loop = loaded()
    first = loop.snapshot()
    assert first == full(loop)
    again = loop.snapshot()
    assert again.pods is first.pods and again.nodes is first.nodes and again.podgroups is first.podgroups
    # Watch events between cycles: a pod bound, one deleted, one created, a node replaced.
    watched(loop, "MODIFIED", pod("p2", "g2", node_name="n1", phase="Running"))
    watched(loop, "DELETED", pod("p1", "g1"))
    watched(loop, "ADDED", podgroup("g3"))
    watched(loop, "ADDED", pod("p3", "g3"))
    watched(loop, "DELETED", node("n1"))
    watched(loop, "ADDED", node("n3"))
    second = loop.snapshot()
    assert second == full(loop) and [p.name for p in second.pods] == ["p2", "p3"]
    assert [n.name for n in second.nodes] == ["n3"]  # n2 is in node pool "a", not the default shard's
    assert second.queues == first.queues


def test_assumed_binds_and_evictions_overlay_the_next_snapshot() -> None:
    loop = loaded()
    loop.snapshot()
    p2 = loop.pods.store["ns/p2"]
    loop.assumed_pods.assume("ns/p2", replace(p2, node_name="n1"))
    assert loop.snapshot().pods == full(loop).pods and loop.snapshot().pods[1].node_name == "n1"
    loop.assumed_pods.forget("ns/p2")
    assert loop.snapshot() == full(loop) and [p.name for p in loop.snapshot().pods] == ["p1"]
    p1 = loop.pods.store["ns/p1"]
    loop.assumed_pods.assume("ns/p1", replace(p1, deleting=True))  # an eviction being written
    assert loop.snapshot().pods[0].deleting
    # An equal record written again still gives the store's current record (no stale copy is kept).
    loop.assumed_pods.correct("ns/p1", replace(p1, deleting=True), "REREAD")
    assert loop.snapshot().pods[0] is loop.pods.store["ns/p1"]


def test_a_shard_switch_refilters_the_shared_stores() -> None:
    loop = loaded()
    assert [n.name for n in loop.snapshot().nodes] == ["n1"]
    loop.config = replace(loop.config, partition="a")
    assert [n.name for n in loop.snapshot().nodes] == ["n2"] and loop.snapshot() == full(loop)



def _dra_loaded() -> tuple[SchedulerLoop, dict[str, Any]]:

    loop = loaded()
    informers = {"DeviceClass": loop.dra.classes, "ResourceSlice": loop.dra.slices,
                 "ResourceClaim": loop.dra.claims, "Node": loop.nodes, "Pod": loop.pods}
    for obj in [CLASS, *dra_node("d1"), claim("c1", owner="pd"), dra_pod("pd", "g1", "c1"), ext_pod("pe", 2)]:
        informers[obj["kind"]].apply_event({"type": "ADDED", "object": obj})
    return loop, informers


def full_dra(loop: SchedulerLoop) -> Snapshot:
    """`full` with the DRA objects: their GPUs folded into nodes and pods by `build_snapshot`."""
    dra = build_snapshot(nodes=loop.nodes.store.values(), pods=loop.pods.store.values(), **loop.dra.records(),
                         node_pool_label=loop.config.node_pool_label, partition=loop.config.partition)
    return replace(full(loop), nodes=dra.nodes, pods=dra.pods, resource_slices=dra.resource_slices,
                   resource_claims=dra.resource_claims, device_classes=dra.device_classes)


def test_dra_gpus_are_folded_again_only_for_what_changed() -> None:

    loop, informers = _dra_loaded()
    first = loop.snapshot()
    assert first == full_dra(loop)
    by_name = {p.name: p for p in first.pods}
    assert by_name["pd"].gpu.whole == 1 and by_name["pe"].claims  # the claim's GPU; the extended resource's claim
    assert {n.name: n.gpus for n in first.nodes}["d1"] == 8 and len(first.resource_claims) == 2
    again = loop.snapshot()
    assert again.pods is first.pods and again.nodes is first.nodes and again == first
    # A pod written: the pods folded again, the nodes kept.
    watched(loop, "ADDED", pod("p4", "g1"))
    second = loop.snapshot()
    assert second == full_dra(loop) and second.nodes is first.nodes and second.pods is not first.pods
    # A slice gone: the nodes folded again, the pods kept.
    informers["ResourceSlice"].apply_event({"type": "DELETED", "object": dra_node("d1")[1]})
    third = loop.snapshot()
    assert third == full_dra(loop) and third.pods is second.pods and {n.name: n.gpus for n in third.nodes}["d1"] == 0
    # The claim deleted: the pod's GPU with it.
    informers["ResourceClaim"].apply_event({"type": "DELETED", "object": {
        "kind": "ResourceClaim", "metadata": {"name": "c1", "namespace": "ns"}}})
    fourth = loop.snapshot()
    assert fourth == full_dra(loop) and {p.name: p for p in fourth.pods}["pd"].gpu.whole == 0
    # The DeviceClass gone: the extended resource is a plain scalar again.
    informers["DeviceClass"].apply_event({"type": "DELETED", "object": CLASS})
    fifth = loop.snapshot()
    assert fifth == full_dra(loop) and not {p.name: p for p in fifth.pods}["pe"].claims
