"""The predicates plugin's one fit function: "does it fit" and "why not" are the same checks."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from sched_builders import node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import NodeState, Task
from operators.scheduler.decide.placement.gpus import fraction_units, shared_capacity
from operators.scheduler.decide.placement.predicates import POD_NUMBER
from operators.scheduler.decide.placement.search import Placement, Placer
from operators.scheduler.decide.plugins.predicates import fit as fit_module
from operators.scheduler.decide.plugins.predicates.fit import CPU, GPUS, MEMORY, fit, histogram
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects


def test_a_task_fits_exactly_the_nodes_that_have_no_reason_against_it() -> None:
    objs = [node("full", gpus=2), node("small", gpus=8, cpu="2", memory="1Gi"), node("big", gpus=8),
            node("cpu-only", gpus=0), queue("q"), podgroup("r", min_member=1),
            pod("r", "r", gpus=2, node_name="full", phase="Running"),
            podgroup("p"), pod("p", "p", gpus=4, cpu="4", memory="8Gi"),
            podgroup("s"), pod("s", "s", fraction="0.5")]
    session = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    placer = session.placer
    assert placer.fit is fit  # the predicates plugin's, registered at its node_fit extension point
    tasks = {t.rec.name: t for job in session.jobs for t in job.tasks}
    nodes = {n.name: n for n in session.nodes}
    why = {name: placer.fit_reasons(tasks["p"], n) for name, n in nodes.items()}
    assert why == {"full": [GPUS], "small": [CPU, MEMORY], "big": [], "cpu-only": [GPUS]}
    for task in tasks.values():
        for n in session.nodes:
            reasons: list[str] = []
            assert (fit(placer, task, n, False, reasons) is None) == bool(reasons), (task.rec.name, n.name)
            assert (fit(placer, task, n, False) is None) == bool(reasons), (task.rec.name, n.name)
    placement = fit(placer, tasks["s"], nodes["big"], True)
    assert placement is not None and placement.portion > 0 and not placement.pipeline


def test_the_fit_histogram_counts_what_fit_says_on_every_node_and_runs_it_only_on_nodes_with_room(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary's histogram (`histogram`) is the per-node `fit` with reasons, released resources counted; nodes
    already short of whole GPUs, CPU or memory are counted without the full fit (its other checks never run there)."""
    objs: list[dict[str, Any]] = [queue("q"), podgroup("p"), pod("p", "p", gpus=2, cpu="4", memory="8Gi"),
                                  podgroup("c"), pod("c", "c", cpu="4", memory="8Gi"),
                                  podgroup("s"), pod("s", "s", fraction="0.5", cpu="4", memory="8Gi"),
                                  podgroup("t"), pod("t", "t", fraction="0.5", devices=2, cpu="4", memory="8Gi"),
                                  podgroup("m"), pod("m", "m", gpu_memory="20480")]
    objs += [x for i in range(0, 40, 3) for x in (podgroup(f"r{i}", min_member=1),
                                                   pod(f"r{i}", f"r{i}", fraction="0.5", node_name=f"n{i}",
                                                       phase="Running", gpu_group=f"g{i}"))]
    objs += [node(f"n{i}", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}] if i % 7 == 3 else None)
             for i in range(40)]
    session = Session(snapshot_from_objects(objs), SchedulerConfig(), 1e9)
    placer = session.placer
    tasks = {t.rec.name: t for job in session.jobs for t in job.tasks if t.rec.name in ("p", "c", "s", "t", "m")}
    rng = random.Random(26)
    gib = 1 << 30
    for n in session.nodes:  # every combination of shortages, some met only by what is being released
        n.idle_gpu, n.rel_gpu = rng.randint(0, 2), rng.randint(0, 1)
        n.idle_cpu, n.rel_cpu = rng.choice((2000, 4000)), rng.choice((0, 2000))
        n.idle_mem, n.rel_mem = rng.choice((4, 8)) * gib, rng.choice((0, 4)) * gib
        if n.idx % 5 == 1:
            n.n_pods = n.max_pods  # room in resources, refused by the pod count
    full: dict[str, Counter[tuple[str, ...]]] = {}
    for name, task in tasks.items():
        per_node: Counter[tuple[str, ...]] = Counter()
        for n in session.nodes:
            why: list[str] = []
            fit(placer, task, n, False, why)
            per_node[tuple(why)] += 1
        full[name] = per_node
    assert len(full["p"]) >= 8 and {(GPUS,), (CPU, MEMORY), (GPUS, CPU, MEMORY), (POD_NUMBER,), ()} <= set(full["p"])
    calls: list[str] = []

    def counted(placer: Placer, task: Task, n: NodeState, idle_only: bool,
                why: list[str] | None = None) -> Placement | None:
        calls.append(n.name)
        return fit(placer, task, n, idle_only, why)

    monkeypatch.setattr(fit_module, "fit", counted)
    for name, task in tasks.items():
        calls.clear()
        assert histogram(placer, task, session.nodes) == full[name], name
        gpu = task.rec.gpu
        room = [n.name for n in session.nodes if gpu.memory_mib is not None
                or ((shared_capacity(n, fraction_units(gpu.portion), False) >= gpu.num_devices if gpu.portion
                     else gpu.whole <= n.idle_gpu + n.rel_gpu)
                    and task.rec.cpu <= n.idle_cpu + n.rel_cpu and task.rec.memory <= n.idle_mem + n.rel_mem)]
        assert calls == room, name
        assert name == "m" or len(room) < len(session.nodes) / 2, name  # most nodes are counted without it
    assert any(n.groups for n in session.nodes)
    monkeypatch.undo()
    for name in ("s", "t"):  # shared devices with room spare some nodes without enough whole free GPUs
        devices = tasks[name].rec.gpu.num_devices
        spared = []
        for n in session.nodes:
            why: list[str] = []
            fit(placer, tasks[name], n, False, why)
            if n.idle_gpu + n.rel_gpu < devices and GPUS not in why:
                spared.append(n.name)
        assert spared, name
