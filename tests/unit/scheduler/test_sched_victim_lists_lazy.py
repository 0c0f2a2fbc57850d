"""Victim chunks made lazily (`VictimLists`, `JobOrder`): the decisions of the eager lists, on clusters with
elastic and semi-preemptible victims, several reclaiming queues and commits between searches; and a search that
ends early makes the chunks of the jobs it reached only."""

from __future__ import annotations

import gc
import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.actions import victims as victims_module
from operators.scheduler.decide.actions.consolidate import Consolidation
from operators.scheduler.decide.actions.reclaim import Reclaim
from operators.scheduler.decide.actions.victims import (
    MergedVictims,
    VictimLists,
    preempt_min_runtime,
    protected,
    reclaim_min_runtime,
    victim_chunks,
    within_queue_order,
)
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import Chunk, Job, QueueState
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects

QUEUES = ("qa", "qb", "qc", "qd")


def elastic_cluster(seed: int) -> list[dict[str, Any]]:
    """Four queues with random quotas on nodes filled by preemptible jobs of one to three pods (elastic: minMember
    below the pod count, pods on different nodes; some semi-preemptible), and pending work in every queue: new jobs
    and pods added to running elastic jobs (a job being placed that is also a victim candidate)."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES,
                                  *(queue(q, gpu=(rng.choice([0, 2, 4, 8, 16]), -1, 1)) for q in QUEUES)]
    n_nodes = rng.randint(3, 5)
    objs += [node(f"n{i}", gpus=8) for i in range(n_nodes)]
    free = {i: 8 - rng.randint(0, 2) for i in range(n_nodes)}
    running: list[tuple[str, str]] = []
    job = 0
    while any(free.values()):
        name, size = f"r{job}", rng.choice([1, 1, 2, 3])
        job += 1
        q = rng.choice(QUEUES)
        objs.append(podgroup(name, q, rng.randint(1, size), priority_class=rng.choice(["train", "build-preemptible"]),
                             created=f"2025-01-01T00:{job:02d}:00Z",
                             preemptibility="semi-preemptible" if rng.random() < 0.15 else ""))
        for k in range(size):
            fits = [i for i, f in free.items() if f > 0]
            if not fits:
                break
            i = rng.choice(fits)
            gpus = min(free[i], rng.choice([1, 2]))
            free[i] -= gpus
            objs.append(pod(f"{name}-{k}", name, gpus=gpus, node_name=f"n{i}", phase="Running"))
        running.append((name, q))
    for j in range(rng.randint(3, 6)):
        if running and rng.random() < 0.3:  # another pod of a running job
            name, _ = rng.choice(running)
            objs.append(pod(f"{name}-x{j}", name, gpus=rng.choice([1, 2]), created="2025-01-01T01:00:00Z"))
            continue
        name, size = f"p{j}", rng.choice([1, 1, 2, 3])
        objs.append(podgroup(name, rng.choice(QUEUES), size,
                             priority_class=rng.choice(["train", "build-preemptible", "build", "inference"]),
                             created=f"2025-01-01T01:{j:02d}:00Z"))
        objs += [pod(f"{name}-{k}", name, gpus=rng.choice([1, 2, 4]), created=f"2025-01-01T01:{j:02d}:00Z")
                 for k in range(size)]
    return objs


def eager_consolidation_victims(session: Session, lists: object, candidates: list[Job], *_: object) -> MergedVictims:
    """Consolidation's victims as built before the lazy lists: every unprotected candidate's chunks, made up front."""
    by_queue: dict[QueueState, list[Chunk]] = {}
    for other in candidates:
        assert other.queue is not None
        if protected(session, other, preempt_min_runtime(session, other.queue)):
            continue
        chunks = victim_chunks(other, False)
        if chunks:
            by_queue.setdefault(other.queue, []).extend(chunks)
    return MergedVictims(session, [(q, within_queue_order(chunks, session)) for q, chunks in by_queue.items()])


def eager_queue_chunks(self: Reclaim, session: Session, mine: QueueState, victim: QueueState) -> list[Chunk]:
    """Reclaim's per-queue victims as built before the lazy lists: every candidate's chunks, made up front."""
    hit = self._per_reclaimer.get((victim, mine))
    if hit is not None:
        return hit  # type: ignore[return-value]
    runtime = reclaim_min_runtime(session, mine, victim)
    epoch = self._epoch.get(victim, 0)
    shared = self._shared.get((victim, runtime))
    if shared is not None and shared[0] == epoch:
        out: Any = shared[1]
    else:
        out = within_queue_order([c for other in self._by_queue[victim]
                                  for c in victim_chunks(other, protected(session, other, runtime))], session)
        self._shared[(victim, runtime)] = (epoch, out)
    self._per_reclaimer[(victim, mine)] = out
    return out  # type: ignore[no-any-return]


def decided(objs: list[dict[str, Any]], actions: tuple[str, ...]) -> tuple[Any, ...]:
    d = cycle(objs, SchedulerConfig(actions=actions))
    return d.to_dict(), sorted(d.counters.items())


@pytest.mark.parametrize("actions", [("allocate", "consolidation"), ("allocate", "reclaim"),
                                     ("allocate", "consolidation", "reclaim", "preempt")])
def test_lazy_victim_lists_change_no_decision(monkeypatch: pytest.MonkeyPatch, actions: tuple[str, ...]) -> None:
    evicted = commits_after_reads = 0
    for seed in range(40):
        objs = elastic_cluster(seed)
        lazy = decided(objs, actions)
        with monkeypatch.context() as m:
            m.setattr(Consolidation, "_victims", staticmethod(eager_consolidation_victims))
            m.setattr(Reclaim, "_queue_chunks", eager_queue_chunks)
            assert decided(objs, actions) == lazy, seed
        evicted += bool(lazy[0]["evictions"])
        commits_after_reads += len({e["forPodGroup"] for e in lazy[0]["evictions"]}) > 1
    assert evicted >= 5 and commits_after_reads  # searches commit, and search again after a commit


def test_a_search_that_ends_early_makes_few_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reclaim's first scenario works: the chunks of the first victims read are made, not every candidate's (the
    merge reads 64 chunks at a time)."""
    made: list[str] = []
    original = victims_module.victim_chunks

    def counted(job: Job, protected: bool, whole: bool = False) -> list[Chunk]:
        made.append(job.name)
        return original(job, protected, whole)

    monkeypatch.setattr(victims_module, "victim_chunks", counted)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(8, -1, 1)),
                                  *(node(f"n{i}", gpus=8) for i in range(25))]
    for i in range(200):  # qa holds the cluster, one GPU a job, above its quota of 0
        objs += [podgroup(f"v{i}", "qa", created=f"2025-01-01T{i // 60:02d}:{i % 60:02d}:00Z"),
                 pod(f"v{i}-0", f"v{i}", gpus=1, node_name=f"n{i % 25}", phase="Running")]
    objs += [podgroup("want", "qb"), pod("want-0", "want", gpus=1, created="2025-01-01T05:00:00Z")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    assert [e.pod for e in d.evictions] == ["v199-0"]  # the newest job of the queue over its share
    # The newest 64 jobs (one read of the merge), the job being placed, then both jobs the commit touched again.
    assert made == [f"v{i}" for i in range(199, 135, -1)] + ["want", "v199", "want"], made


def _described(chunks: Any) -> list[tuple[str, list[str], bool]]:
    return [(c.job.name, [t.name for t in c.tasks], c.core) for c in chunks]


@pytest.mark.parametrize("touched", ["unread", "read"])
def test_an_order_keeps_the_chunks_of_its_build_across_a_commit(touched: str) -> None:
    """A commit touches a job (another search read and evicted one of its pods): an order built before keeps the
    job's chunks of that moment, whether it had read the job or not, and an order built after has the new ones."""
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("qa", gpu=(0, -1, 1)),
                                  *(node(f"n{i}", gpus=8) for i in range(10))]
    for i in range(40):  # elastic: two pods, minMember 1 (one elastic chunk and the core each); semi-preemptible
        objs += [podgroup(f"v{i}", "qa", 1, priority_class=["train", "build-preemptible"][i % 2],
                          created=f"2025-01-01T00:{i:02d}:00Z",
                          preemptibility="semi-preemptible" if i % 5 == 0 else ""),
                 pod(f"v{i}-0", f"v{i}", gpus=1, node_name=f"n{i % 10}", phase="Running"),
                 pod(f"v{i}-1", f"v{i}", gpus=1, node_name=f"n{(i + 1) % 10}", phase="Running")]
    s = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    jobs = s.victim_candidates()

    def eager() -> list[Chunk]:
        return within_queue_order([c for j in jobs for c in victim_chunks(j, protected(s, j, 0.0))], s)

    before = _described(eager())
    lists = VictimLists(s)
    order = lists.order(jobs, 0.0, False)
    victim = next(j for j in jobs if j.name == "v7")
    read = 3 if touched == "unread" else len(before)  # v7 (build-preemptible, created early) comes late
    assert order.has(read - 1)
    assert ("v7" in {c.job.name for c in order[:read]}) == (touched == "read")
    lists.chunks(victim)  # read by the other search
    stmt = s.statement()
    stmt.evict(victim.tasks[1], "reclaim", "ns/x", "")
    lists.committing([victim])
    stmt.commit()
    assert _described(order) == before
    after = _described(lists.order(jobs, 0.0, False))
    assert after == _described(eager()) != before


def test_a_cycle_whose_searches_read_victims_leaves_no_cyclic_garbage() -> None:
    """The orders and their lists form no reference cycle: one through the session would leave the whole session
    to the cyclic collector when the cycle ends, instead of reference counting freeing it."""
    objs = elastic_cluster(4)
    gc.collect()
    gc.disable()
    try:
        d = cycle(objs, SchedulerConfig(actions=("allocate", "consolidation", "reclaim", "preempt")))
        assert d.evictions  # the searches read victims
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (VictimLists, Session))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []
