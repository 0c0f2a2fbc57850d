"""The predicates plugin's one fit function: "does it fit" and "why not" are the same checks."""

from __future__ import annotations

from sched_builders import node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.plugins.predicates.fit import CPU, GPUS, MEMORY, fit
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
