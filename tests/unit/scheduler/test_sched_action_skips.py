"""Cheap skips and caches of the disruptive actions: each must never skip work that could succeed, and the
cached / lazy forms must equal the plain computation."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.actions import solver as solver_module
from operators.scheduler.decide.actions.consolidate import Consolidation, fits_free
from operators.scheduler.decide.actions.preempt import Preempt, could_preempt
from operators.scheduler.decide.actions.solver import Solver
from operators.scheduler.decide.actions.victims import (
    MergedVictims,
    order_chunks,
    preempt_min_runtime,
    protected,
    victim_chunks,
    within_queue_order,
)
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.plugins.proportion.reclaimable import ReclaimValidator
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.units import GPU

LATER = "2025-01-01T01:00:00Z"


def session_of(objs: list[dict[str, Any]]) -> Session:
    return Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)


def running_job(name: str, q: str, created: str, node_name: str = "n1", pclass: str = "train", gpus: int = 1
                ) -> list[dict[str, Any]]:
    return [podgroup(name, q, priority_class=pclass, created=created),
            pod(f"{name}-0", name, gpus=gpus, node_name=node_name, phase="Running")]


def pending_job(name: str, q: str, gpus: int, pclass: str = "train", created: str = LATER) -> list[dict[str, Any]]:
    return [podgroup(name, q, priority_class=pclass, created=created), pod(f"{name}-0", name, gpus=gpus,
                                                                           created=created)]


# --- preempt ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("hopeless_queue", ["qa", "qz"])  # served before / after the queue that can preempt
def test_preempt_skips_jobs_without_lower_priority_victims_but_not_the_others(hopeless_queue: str) -> None:
    objs = [node("n1", gpus=2), node("n2", gpus=2), queue(hopeless_queue, gpu=(2, -1, 1)),
            queue("qm", gpu=(2, -1, 1)), *PRIORITY_CLASSES,
            # Same priority as the pending job of its queue: nothing to preempt there.
            *running_job("va", hopeless_queue, "2025-01-01T00:00:00Z", "n1", pclass="build-preemptible", gpus=2),
            *pending_job("pa", hopeless_queue, 1, pclass="build-preemptible"),
            *running_job("vm", "qm", "2025-01-01T00:00:00Z", "n2", gpus=2),
            *pending_job("pm", "qm", 1, pclass="build-preemptible")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")))
    assert [(e.pod, e.for_pod_group) for e in d.evictions] == [("vm-0", "ns/pm")]
    assert [p.pod for p in d.pipelined] == ["pm-0"]


def test_could_preempt_needs_strictly_lower_priority_in_the_same_queue() -> None:
    objs = [node("n1", gpus=4), queue("qa"), queue("qb"), *PRIORITY_CLASSES,
            *running_job("v", "qa", "2025-01-01T00:00:00Z"),
            *pending_job("eq", "qa", 1), *pending_job("hi", "qa", 1, pclass="build-preemptible"),
            *pending_job("other", "qb", 1, pclass="build-preemptible")]
    s = session_of(objs)
    jobs = {j.name: j for j in s.jobs}
    lowest = {id(jobs["v"].queue): jobs["v"].priority}
    assert could_preempt(jobs["hi"], lowest)
    assert not could_preempt(jobs["eq"], lowest)
    assert not could_preempt(jobs["other"], lowest)


# --- consolidation -----------------------------------------------------------------------------------


def test_consolidation_runs_when_a_later_job_fits_the_free_total() -> None:
    # The first pending job (5 GPUs) is larger than all free GPUs (4): the action must not stop there.
    objs = [node("n0", gpus=4), node("n1", gpus=4), queue("q", gpu=(0, -1, 1)), *PRIORITY_CLASSES,
            *running_job("a", "q", "2025-01-01T00:00:00Z", "n0", gpus=2),
            *running_job("b", "q", "2025-01-01T00:00:01Z", "n1", gpus=2),
            *pending_job("big", "q", 5, created="2025-01-01T00:30:00Z"), *pending_job("p3", "q", 3)]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "consolidation")))
    assert len(d.evictions) == 1 and d.evictions[0].for_pod_group == "ns/p3"
    assert "p3-0" in {p.pod for p in d.pipelined}


def test_fits_free_is_per_resource_and_exact() -> None:
    # Integer core units (micro-GPUs, millicores, bytes): no tolerance, one unit over does not fit.
    assert fits_free([4 * GPU, 1000, 10**9], [4 * GPU, 1000, 10**9])
    assert not fits_free([4 * GPU + 1, 0, 0], [4 * GPU, 0, 0])
    assert not fits_free([5 * GPU, 0, 0], [4 * GPU, 10**6, 10**12])
    assert not fits_free([0, 2000, 0], [8 * GPU, 1000, 10**12])


# --- reclaim -----------------------------------------------------------------------------------------


def reclaim_cluster() -> list[dict[str, Any]]:
    """qa far above its share, qb slightly above, qc at its share; qd (pending work) below its share."""
    objs: list[dict[str, Any]] = [node("n1", gpus=8), node("n2", gpus=8), *PRIORITY_CLASSES,
                                  queue("qa", gpu=(2, -1, 1)), queue("qb", gpu=(4, -1, 1)),
                                  queue("qc", gpu=(2, -1, 1)), queue("qd", gpu=(6, -1, 1))]
    for i in range(7):
        objs += running_job(f"a{i}", "qa", f"2025-01-01T00:0{i}:00Z", "n1" if i < 5 else "n2")
    for i in range(5):
        objs += running_job(f"b{i}", "qb", f"2025-01-01T00:1{i}:00Z", "n2")
    for i in range(2):
        objs += running_job(f"c{i}", "qc", f"2025-01-01T00:2{i}:00Z", "n1" if i else "n2")
    for i in range(3):
        objs += pending_job(f"d{i}", "qd", 2)
    return objs


def test_reclaim_viable_is_a_necessary_condition_of_the_validator() -> None:
    s = session_of(reclaim_cluster())
    reclaimer = next(j for j in s.jobs if j.name == "d0")
    chunks = [c for j in s.jobs if j.queue is not reclaimer.queue for c in victim_chunks(j, protected=False)]
    validator = ReclaimValidator(s, reclaimer, [2.0, 2000.0, 2 * 1024.0 ** 3])
    assert any(validator.viable(c) for c in chunks) and not all(validator.viable(c) for c in chunks)
    refused = 0
    for size in (1, 2, 3):
        for scenario in itertools.permutations(chunks, size) if size < 3 else itertools.combinations(chunks, 3):
            if not all(validator.viable(c) for c in scenario):
                assert validator(list(scenario)) is None
                refused += 1
    assert refused


def test_reclaim_decisions_with_the_viability_skip() -> None:
    # qd takes back from the queues above their share (never from qc, which is at its share).
    d = cycle(reclaim_cluster(), SchedulerConfig(actions=("allocate", "reclaim")))
    assert d.evictions and all(e.action == "reclaim" for e in d.evictions)
    assert not any(e.pod.startswith("c") for e in d.evictions)


def test_merged_victims_equal_order_chunks() -> None:
    s = session_of(reclaim_cluster())
    chunks = [c for j in s.jobs for c in victim_chunks(j, protected=False)]
    by_queue: dict[Any, list[Any]] = {}
    for c in chunks:
        by_queue.setdefault(c.job.queue, []).append(c)
    merged = MergedVictims(s, [(q, within_queue_order(cs)) for q, cs in by_queue.items()])
    expected = order_chunks(s, chunks)
    assert len(merged) == len(expected)
    assert list(merged) == expected
    assert list(merged) == expected  # iterable again, from the start
    single = MergedVictims(s, [(q, within_queue_order(cs)) for q, cs in by_queue.items() if q.name == "qa"])
    assert list(single) == order_chunks(s, by_queue[next(q for q in by_queue if q.name == "qa")])



# --- cluster free ------------------------------------------------------------------------------------


def naive_free(s: Session) -> list[int]:
    g = c = m = 0
    for n in s.nodes:
        if not n.ok:
            continue
        g += (n.idle_gpu + n.rel_gpu) * GPU
        if n.groups:
            g += sum(gr.free for gr in n.groups.values() if not gr.fully_releasing)
        c += n.idle_cpu + n.rel_cpu
        m += n.idle_mem + n.rel_mem
    return [g, c, m]


def test_cluster_free_follows_statements_and_rollbacks() -> None:
    s = session_of(reclaim_cluster())
    assert s.cluster_free() == naive_free(s)
    stmt = s.statement()
    victim = next(t for j in s.jobs if j.name == "a6" for t in j.tasks)
    stmt.evict(victim, "reclaim", "ns/d0", "")
    assert s.cluster_free() == naive_free(s)
    pending = next(t for j in s.jobs if j.name == "d0" for t in j.tasks)
    placement = s.placer.find(pending)
    assert placement is not None
    stmt.pipeline(pending, placement)
    assert s.cluster_free() == naive_free(s)
    stmt.discard()
    assert s.cluster_free() == naive_free(s)


# --- the victim-reach bound (Solver.futile_walk) and preempt without the job-tree walk ---------------


def contested_cluster(seed: int, fragmented: bool = False) -> list[dict[str, Any]]:
    """Two queues on full nodes with preemptible work; pending jobs of every priority, some of which can take
    victims and some of which cannot (too large for any node's victims, or short of CPU: nodes' CPU is tight).
    `fragmented`: each node keeps 0-4 GPUs free (room in total that no single node has)."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [*PRIORITY_CLASSES, queue("qa", gpu=(rng.choice([0, 4, 8]), -1, 1)),
                                  queue("qb", gpu=(rng.choice([4, 8, 16]), -1, 1))]
    n_nodes = rng.randint(2, 4)
    objs += [node(f"n{i}", gpus=8, cpu=str(rng.choice([12, 16, 64]))) for i in range(n_nodes)]
    job = 0
    for i in range(n_nodes):
        free = 8 - rng.randint(0, 4) if fragmented else 8
        while free > 0:
            gpus = min(free, rng.choice([1, 2, 4]))
            free -= gpus
            name = f"r{job}"
            job += 1
            objs += [podgroup(name, rng.choice(["qa", "qb"]), priority_class=rng.choice(["train", "build-preemptible"]),
                              created=f"2025-01-01T00:{job:02d}:00Z"),
                     pod(f"{name}-0", name, gpus=gpus, cpu=str(rng.choice([1, 2, 4])), node_name=f"n{i}",
                         phase="Running")]
    for j in range(rng.randint(2, 5)):
        name, size = f"p{j}", rng.choice([1, 1, 2, 3])
        objs.append(podgroup(name, rng.choice(["qa", "qb"]), size,
                             priority_class=rng.choice(["train", "build-preemptible", "build", "inference"]),
                             created=f"2025-01-01T01:{j:02d}:00Z"))
        objs += [pod(f"{name}-{k}", name, gpus=rng.choice([0, 1, 2, 4, 8]), cpu=str(rng.choice([1, 4, 12])),
                     created=f"2025-01-01T01:{j:02d}:00Z") for k in range(size)]
    return objs


def decided(objs: list[dict[str, Any]], actions: tuple[str, ...], **config: Any) -> tuple[Any, ...]:
    d = cycle(objs, SchedulerConfig(actions=actions, **config))
    return d.to_dict(), sorted(d.counters.items())


@pytest.mark.parametrize("actions", [("allocate", "preempt"), ("allocate", "reclaim", "preempt")])
@pytest.mark.parametrize("caps", [{}, {"max_evictions_per_job": 1}, {"max_evictions_per_job": -1}])
def test_the_reach_bound_and_the_futile_preempt_change_no_decision(
        monkeypatch: pytest.MonkeyPatch, actions: tuple[str, ...], caps: dict[str, Any]) -> None:
    """Decisions and counters (failure reasons, scenarios) with the short cuts equal those of the full walks, on
    clusters where the bound proves searches futile and where searches evict."""
    fired = {"bound": 0, "futile": 0}
    may_cover, futile = Solver._may_cover, Preempt._futile

    def spy_cover(self: Solver, *args: Any) -> bool:
        out = may_cover(self, *args)
        fired["bound"] += not out
        return out

    def spy_futile(self: Preempt, *args: Any) -> dict[str, int] | None:
        out = futile(self, *args)
        fired["futile"] += out is not None
        return out

    evicted = 0
    monkeypatch.setattr(solver_module, "REACH_AFTER", 1)  # the bound after one chunk: these walks are short
    for seed in range(24):
        objs = contested_cluster(seed)
        with monkeypatch.context() as m:
            m.setattr(Solver, "_may_cover", spy_cover)
            m.setattr(Preempt, "_futile", spy_futile)
            fast = decided(objs, actions, **caps)
        with monkeypatch.context() as m:
            m.setattr(Solver, "_may_cover", lambda *args: True)
            m.setattr(Preempt, "_futile", lambda *args: None)
            slow = decided(objs, actions, **caps)
        assert fast == slow, seed
        evicted += bool(fast[0]["evictions"])
    assert fired["bound"] and evicted  # both sides of the bound were exercised
    assert fired["futile"] or "preempt" not in actions


@pytest.mark.parametrize("after", [0, 1, 256])
def test_a_futile_walk_is_charged_what_the_walk_spends(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    # n1's victims (4 GPUs) cannot make room for 6 GPUs: the walk finds no scenario, one work unit per chunk,
    # whether the bound ends it before the first chunk, after one, or never.
    monkeypatch.setattr(solver_module, "REACH_AFTER", after)
    objs = [node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES,
            *running_job("v0", "q", "2025-01-01T00:00:00Z", "n1", gpus=2),
            *running_job("v1", "q", "2025-01-01T00:00:01Z", "n1", gpus=2),
            *pending_job("big", "q", 6, pclass="build")]
    s = session_of(objs)
    job = next(j for j in s.jobs if j.name == "big")
    chunks = [c for j in s.jobs if j is not job for c in victim_chunks(j, protected=False)]
    tasks = s.tasks_to_allocate(job)
    solver = Solver(s, "preempt")
    assert solver.futile_walk(job, tasks, chunks) == len(chunks) == 2
    for work, left in ((10, 8), (2, 0), (1, 0)):
        solver.work = work
        stmt = s.statement()
        assert not solver.solve(stmt, job, tasks, chunks, describe=lambda *a: "")
        assert solver.work == left and not stmt.ops
    small = next(j for j in s.jobs if j.name == "v0")
    assert Solver(s, "preempt").futile_walk(job, [small.tasks[0]], chunks) is None  # 2 GPUs fit n1's victims


def test_consolidation_victims_merged_lazily_change_no_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consolidation's lazily merged victims give the decisions of the eager order_chunks() over every chunk."""

    def eager(session: Session, job: Any, candidates: list[Any], *_: Any) -> list[Any]:
        return order_chunks(session, [c for other in candidates
                                      if not protected(session, other, preempt_min_runtime(session, other.queue))
                                      for c in victim_chunks(other, False)])

    moved = 0
    for seed in range(24):
        objs = contested_cluster(seed, fragmented=True)
        lazy = decided(objs, ("allocate", "consolidation"))
        with monkeypatch.context() as m:
            m.setattr(Consolidation, "_victims", staticmethod(eager))
            assert decided(objs, ("allocate", "consolidation")) == lazy, seed
        moved += bool(lazy[0]["evictions"])
    assert moved
