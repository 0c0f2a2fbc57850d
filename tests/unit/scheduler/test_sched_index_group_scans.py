"""The node index's scans over a node's shared devices (`_rekey_gpu`, written as loops, and its construction, which
skips them for a node without shared devices), and `shared_capacity`'s floor at zero whole devices: a node whose
only release is a shared device's portion (the evicted fractional pod asks for no CPU or memory) is releasing, in
the re-keyed index as in a fresh one; an over-committed node offers no whole device to a shared pod."""

from __future__ import annotations

from types import SimpleNamespace

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.placement.gpus import shared_capacity
from operators.scheduler.decide.placement.scoring import NodeIndex
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.units import GPU


def test_a_node_releasing_only_a_shared_devices_portion_is_releasing() -> None:
    objs = [*PRIORITY_CLASSES, queue("q"), node("n0", gpus=2), node("n1", gpus=2),
            podgroup("f", "q", priority_class="build-preemptible"), podgroup("g", "q", priority_class="build"),
            # Two halves of one device: the evicted one leaves its device in use, so no whole device releases.
            pod("f-0", "f", fraction="0.5", cpu="0", memory="0", node_name="n0", phase="Running", gpu_group="d0"),
            pod("g-0", "g", fraction="0.5", cpu="0", memory="0", node_name="n0", phase="Running", gpu_group="d0")]
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    task = next(t for j in s.jobs if j.name == "f" for t in j.tasks)
    n0 = s.nodes[task.node]
    assert n0.groups and s.index.releasing == set()
    stmt = s.statement()
    stmt.evict(task, "reclaim", "ns/x", "")
    assert (n0.rel_cpu, n0.rel_mem, n0.rel_gpu) == (0, 0, 0)  # only the device's portion is releasing
    fresh = NodeIndex(s.nodes, "binpack", "binpack")
    assert s.index.releasing == fresh.releasing == {n0.idx}
    assert list(s.index.shared_list) == list(fresh.shared_list)
    stmt.discard()
    assert s.index.releasing == set()


def test_an_over_committed_node_offers_no_whole_device() -> None:
    for idle, rel, idle_only, want in ((-1, 0, True, 0), (-2, 1, False, 0), (-1, 3, True, 0), (-1, 3, False, 2),
                                       (2, 1, True, 2), (2, 1, False, 3)):
        n = SimpleNamespace(idle_gpu=idle, rel_gpu=rel, groups={})
        assert shared_capacity(n, GPU // 2, idle_only) == want, (idle, rel, idle_only)  # type: ignore[arg-type]
