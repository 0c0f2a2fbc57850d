"""The node index's cheaper upkeep, each read as before:
- the in-place move of one entry of a sorted (key, index) list leaves the list removing the old entry and inserting
  the new one leaves, whatever the distance, direction, ties of keys or list ends;
- the CPU side re-keyed only when it is read, the GPU side at every read: any reader, alone, reads what an index
  built afresh on the nodes' current state gives, however long the CPU side stays unread; and where a search blocks
  a node's devices without an update (consolidation's victim moves), every read gives what the index re-keying both
  sides at every read gives."""

from __future__ import annotations

import random
from bisect import bisect_left, insort

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue
from test_sched_node_index import churn

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import VICTIM_STATUSES
from operators.scheduler.decide.placement.scoring import NodeIndex, _move
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.units import GPU


def reference(lst: list[tuple[float, int]], old: float, new: float, idx: int) -> None:
    pos = bisect_left(lst, (old, idx))
    if pos < len(lst) and lst[pos] == (old, idx):
        del lst[pos]
    insort(lst, (new, idx))


def test_move_equals_remove_then_insert() -> None:
    moved_far = 0
    for seed in range(300):
        rng = random.Random(seed)
        n = rng.randrange(1, 40)
        # Few distinct keys (free GPUs in halves, as binpack keys are), so many entries tie on the key.
        keys = {i: rng.randrange(0, 17) / 2 for i in range(n)}
        lst = sorted((k, i) for i, k in keys.items())
        for _ in range(60):
            idx = rng.randrange(n)
            old, new = keys[idx], rng.randrange(0, 17) / 2
            if new == old:
                continue
            want = list(lst)
            reference(want, old, new, idx)
            moved_far += abs(want.index((new, idx)) - lst.index((old, idx))) > 1
            _move(lst, old, new, idx)
            assert lst == want, (seed, old, new, idx)
            keys[idx] = new
    assert moved_far > 1000  # the moves cross many entries, not just neighbours


def test_move_of_an_absent_entry_inserts_it() -> None:
    lst = [(1.0, 0), (2.0, 1), (3.0, 3)]
    _move(lst, 2.0, 0.5, 2)  # (2.0, 2) is not there: only the new entry goes in, as remove-then-insert does
    assert lst == [(0.5, 2), (1.0, 0), (2.0, 1), (3.0, 3)]
    _move(lst, 9.0, 4.0, 5)
    assert lst == [(0.5, 2), (1.0, 0), (2.0, 1), (3.0, 3), (4.0, 5)]


def cluster(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    objs: list[dict[str, object]] = [queue("q"), *PRIORITY_CLASSES]
    objs += [node(f"n{i}", gpus=rng.choice([0, 4, 8]), cpu=str(rng.choice([16, 32, 64]))) for i in range(12)]
    for j in range(60):
        kind = rng.choice(["gpu", "fraction", "cpu"])
        objs.append(podgroup(f"j{j}", "q"))
        objs.append(pod(f"j{j}-0", f"j{j}", node_name=f"n{rng.randrange(12)}", phase="Running",
                        cpu=str(rng.choice([1, 2, 4])), gpus=1 if kind == "gpu" else 0,
                        fraction="0.5" if kind == "fraction" else None))
    return objs


HALF = list(range(0, 12, 2))
READERS = (  # one reader of each side and kind; `releasing` and `sort_key` read both sides
    ("gpu", lambda index: list(index.gpu_order(1))),
    ("gpu", lambda index: list(index.shared_order())),
    ("gpu", lambda index: index.gpu_order_within(0, HALF)),
    ("gpu", lambda index: index.shared_order_within(HALF)),
    ("cpu", lambda index: list(index.cpu_order(1000, True))),
    ("cpu", lambda index: list(index.cpu_order(1000, False))),
    ("cpu", lambda index: index.cpu_order_within(0, False, HALF)),
    # the placer's releasing search reads the keys of both sides once it has read `releasing`
    ("both", lambda index: (sorted(index.releasing), list(index.cpu_key), list(index.gpu_key))),
    ("both", lambda index: [index.sort_key(n, c) for n in index.nodes for c in (True, False) if n.ok]),
)


def test_each_side_read_alone_reads_as_a_fresh_index() -> None:
    stale = {"gpu": 0, "cpu": 0}  # reads of one side while the other had changes not yet re-keyed
    for seed in range(30):
        s = Session(snapshot_from_objects(cluster(seed)), SchedulerConfig(), 1e9)
        rng = random.Random(seed)
        # Readers of one side only for long stretches, so the other side's changes pile up unread.
        readers = [r for r in READERS if r[0] == rng.choice(["gpu", "cpu"])] + [rng.choice(READERS)]
        stmt = s.statement()
        running = [t for j in s.jobs for t in j.tasks if t.status in VICTIM_STATUSES and t.node >= 0]
        marks = []
        for _ in range(25):
            if not churn(stmt, running, marks, rng):
                break
            side, read = rng.choice(readers)
            stale["gpu"] += side == "gpu" and bool(s.index._dirty_cpu)
            stale["cpu"] += side == "cpu" and bool(s.index._dirty)
            fresh = NodeIndex(s.nodes, s.config.gpu_placement, s.config.cpu_placement)
            assert read(s.index) == read(fresh), seed
    assert stale["gpu"] > 50 and stale["cpu"] > 50  # the sides were really read apart


class BothAtEveryRead(NodeIndex):
    """The index as it was: both sides re-keyed at every read."""

    def _flush_gpu(self) -> None:
        NodeIndex._flush_gpu(self)
        NodeIndex._flush_cpu(self)

    def _flush_cpu(self) -> None:
        NodeIndex._flush_gpu(self)
        NodeIndex._flush_cpu(self)


def test_reads_under_a_temporary_block_as_when_both_sides_were_rekeyed_at_every_read() -> None:
    blocked_reads = 0
    for seed in range(40):
        s = Session(snapshot_from_objects(cluster(seed)), SchedulerConfig(), 1e9)
        rng = random.Random(seed)
        index = s.index
        old = BothAtEveryRead(s.nodes, s.config.gpu_placement, s.config.cpu_placement)
        noted = index.update

        def both(node: object, _noted: object = noted, _old: NodeIndex = old) -> None:
            _noted(node)  # type: ignore[operator]
            _old.update(node)  # type: ignore[arg-type]

        index.update = both  # type: ignore[method-assign]
        stmt = s.statement()
        running = [t for j in s.jobs for t in j.tasks if t.status in VICTIM_STATUSES and t.node >= 0]
        for _ in range(25):
            live = [t for t in running if t.status in VICTIM_STATUSES]
            if not live:
                break
            for t in rng.sample(live, min(len(live), rng.randint(1, 3))):
                stmt.evict(t, "reclaim", "ns/x", "test")
            for _ in range(rng.randint(1, 3)):
                _, read = rng.choice(READERS)
                if rng.random() < 0.5:
                    # A node's devices and releasing GPUs taken for one read, then given back, with no update (as
                    # `Solver._move` keeps a moved pod off the devices it leaves).
                    n = s.nodes[rng.randrange(len(s.nodes))]
                    saved = [(g, g.used) for g in n.groups.values()]
                    for g, _ in saved:
                        g.used = 2 * GPU
                    n.rel_gpu -= 1
                    try:
                        assert read(index) == read(old), seed
                    finally:
                        for g, used in saved:
                            g.used = used
                        n.rel_gpu += 1
                    blocked_reads += 1
                else:
                    assert read(index) == read(old), seed
    assert blocked_reads > 300
