"""Suspend instead of kill (the opt-in `suspend` plugin): a suspendable owner whose gang is chosen as a victim is
suspended as a whole (one Suspension instead of the pods' evictions), and resumed only when its whole gang fits
in the cycle, after every action placed what it could."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.framework import PluginSetting
from operators.scheduler.decide.plugins.suspend import rules
from operators.scheduler.decide.records import NO_CONSTRAINTS, Constraints, NodeSelectorTerm, Requirement, Toleration
from operators.scheduler.decide.snapshot import snapshot_from_objects

PREEMPT = SchedulerConfig(actions=("allocate", "preempt"))
LATER = "2025-01-01T01:00:00Z"
JOB = ("batch/v1", "Job")
SUSPENDED_AT = 1735691400.0  # 2025-01-01T00:30:00Z: after T0 (the pods it had), before LATER


def owned(pg: dict[str, Any], kind: tuple[str, str] = JOB, opt_in: str | None = "true") -> dict[str, Any]:
    pg["metadata"]["ownerReferences"] = [{"apiVersion": kind[0], "kind": kind[1], "name": pg["metadata"]["name"],
                                          "uid": f"owner-{pg['metadata']['name']}", "controller": True}]
    if opt_in is not None:
        pg["metadata"]["annotations"][keys.SUSPEND_ON_PREEMPTION] = opt_in
    return pg


def cluster(train: dict[str, Any], *extra: dict[str, Any], pods: int = 2, q: dict[str, Any] | None = None
            ) -> list[dict[str, Any]]:
    """One 2-GPU node held by the training gang `train` (1 GPU per pod); an inference pod wants 1 GPU."""
    running = [pod(f"train-{i}", "train", gpus=1, node_name="n1", phase="Running") for i in range(pods)]
    return [node("n1", gpus=2), q or queue("q"), *PRIORITY_CLASSES, train, *running, *extra,
            podgroup("urgent", "q", priority_class="inference", created=LATER),
            pod("urgent-0", "urgent", gpus=1, created=LATER)]


def test_an_opted_in_job_is_suspended_whole_instead_of_evicted() -> None:
    d = cycle(cluster(owned(podgroup("train", "q", 2))), PREEMPT)
    assert d.evictions == []
    [s] = d.suspensions
    assert (s.owner, s.field_path, s.verify, s.action, s.for_pod_group) == (
        ("batch/v1", "Job", "train", "owner-train"), ("spec", "suspend"), False, "preempt", "ns/urgent")
    assert sorted(e.pod for e in s.evictions) == ["train-0", "train-1"]
    assert "resumes whole once its gang of 2 pod(s) (2 GPUs" in s.message
    [stamp] = [a for a in d.annotations if a.key == keys.SUSPENDED_BY_SCHEDULER]
    gang = rules.decode(stamp.value)
    assert gang is not None and (len(gang.pods), gang.min_member, gang.action, gang.by) == (2, 2, "preempt",
                                                                                             "ns/urgent")
    assert [p.pod for p in d.pipelined] == ["urgent-0"]  # the preemptor still waits for the freed GPU


def test_without_the_opt_in_kai_evicts_the_pods() -> None:
    d = cycle(cluster(owned(podgroup("train", "q", 2), opt_in=None)), PREEMPT)
    assert sorted(e.pod for e in d.evictions) == ["train-0", "train-1"] and d.suspensions == []
    assert "suspensions" not in d.to_dict()  # `kai simulate` output is unchanged without the opt-in


def test_queue_opt_in_and_the_workload_override() -> None:
    q = queue("q")
    q["metadata"]["annotations"] = {keys.SUSPEND_ON_PREEMPTION: "true"}
    assert len(cycle(cluster(owned(podgroup("train", "q", 2), opt_in=None), q=q), PREEMPT).suspensions) == 1
    d = cycle(cluster(owned(podgroup("train", "q", 2), opt_in="false"), q=q), PREEMPT)
    assert d.suspensions == [] and len(d.evictions) == 2


def test_pods_above_the_gang_minimum_are_evicted_not_suspended() -> None:
    # An elastic job (minMember 1) gives up one of its two pods: its gang survives, so nothing is suspended.
    d = cycle(cluster(owned(podgroup("train", "q", 1))), PREEMPT)
    assert d.suspensions == [] and len(d.evictions) == 1


def test_consolidation_moves_an_opted_in_job_it_does_not_suspend_it() -> None:
    # Two 2-GPU nodes with one 1-GPU job each; a 2-GPU job fits only if one of them moves to the other node.
    objs = [node("n1", gpus=2), node("n2", gpus=2), queue("q"), *PRIORITY_CLASSES,
            owned(podgroup("a", "q")), pod("a-0", "a", gpus=1, node_name="n1", phase="Running"),
            owned(podgroup("b", "q")), pod("b-0", "b", gpus=1, node_name="n2", phase="Running"),
            podgroup("big", "q", created=LATER), pod("big-0", "big", gpus=2, created=LATER)]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "consolidation")))
    assert [e.action for e in d.evictions] == ["consolidation"] and d.suspensions == []


def test_a_stale_gang_is_evicted_not_suspended() -> None:
    # Stale-gang eviction stops no workload for another one: the opt-in (suspend on preemption) does not apply.
    stale = owned(podgroup("g", "q", 3, annotations={keys.STALE_PODGROUP_TIMESTAMP: "2025-01-01T00:00:00Z"}))
    objs = [node("n1", gpus=8), queue("q"), stale, pod("g-0", "g", gpus=1, node_name="n1", phase="Running")]
    d = cycle(objs, replace(SchedulerConfig(actions=("stalegangeviction",)), stale_grace_period=60.0), now=2e9)
    assert [e.action for e in d.evictions] == ["stalegangeviction"] and d.suspensions == []


def test_owners_that_cannot_be_suspended_and_unknown_kinds() -> None:
    d = cycle(cluster(owned(podgroup("train", "q", 2), kind=("batch/v1", "CronJob"))), PREEMPT)
    assert d.suspensions == [] and len(d.evictions) == 2
    d = cycle(cluster(owned(podgroup("train", "q", 2), kind=("kubeflow.org/v1", "PyTorchJob"))), PREEMPT)
    assert d.suspensions[0].field_path == ("spec", "runPolicy", "suspend") and not d.suspensions[0].verify
    d = cycle(cluster(owned(podgroup("train", "q", 2), kind=("example.com/v1", "Training"))), PREEMPT)
    assert d.suspensions[0].verify and d.suspensions[0].field_path == ("spec", "suspend")


def suspended(name: str, pods: int = 2, gpus: int = 1, priority_class: str = "train",
              created: str = "2025-01-01T00:00:00Z", shape: Constraints = NO_CONSTRAINTS) -> dict[str, Any]:
    gang = rules.SuspendedGang(tuple((gpus * 1_000_000, 1000, 2**30, 0) for _ in range(pods)), (shape,), pods,
                               "reclaim", "ns/other", SUSPENDED_AT)
    pg = owned(podgroup(name, "q", pods, priority_class=priority_class, created=created))
    pg["metadata"]["annotations"][keys.SUSPENDED_BY_SCHEDULER] = gang.encode()
    return pg


def test_a_suspended_gang_resumes_only_when_it_fits_whole() -> None:
    base = [queue("q"), *PRIORITY_CLASSES, suspended("train")]
    d = cycle([node("n1", gpus=2), *base], PREEMPT)
    [r] = d.resumes
    assert (r.owner[1:3], r.field_path) == (("Job", "train"), ("spec", "suspend"))
    assert [(a.key, a.value) for a in d.annotations] == [(keys.SUSPENDED_BY_SCHEDULER, None)]
    # One GPU free: half of the gang would fit, so it stays suspended (never half a gang).
    busy = [podgroup("other", "q"), pod("other-0", "other", gpus=1, node_name="n1", phase="Running")]
    d = cycle([node("n1", gpus=2), *base, *busy], PREEMPT)
    assert d.resumes == [] and d.annotations == []


def test_no_resume_while_its_pods_are_still_going_or_beyond_its_queue_limit() -> None:
    going = pod("train-0", "train", gpus=1, node_name="n1", phase="Running", deleting=True)
    d = cycle([node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES, suspended("train"), going], PREEMPT)
    assert d.resumes == []
    limited = queue("q", gpu=(-1, 1, 1))
    d = cycle([node("n1", gpus=4), limited, *PRIORITY_CLASSES, suspended("train")], PREEMPT)
    assert d.resumes == []


def test_resume_needs_nodes_the_pods_may_run_on() -> None:
    # The gang's pods selected zone b; only zone a has free GPUs: it stays suspended until zone b has room.
    zone_b = Constraints((("zone", "b"),))
    nodes = [node("a1", gpus=4, labels={"zone": "a"}), node("b1", gpus=1, labels={"zone": "b"})]
    d = cycle([*nodes, queue("q"), *PRIORITY_CLASSES, suspended("train", shape=zone_b)], PREEMPT)
    assert d.resumes == []
    nodes.append(node("b2", gpus=1, labels={"zone": "b"}))
    d = cycle([*nodes, queue("q"), *PRIORITY_CLASSES, suspended("train", shape=zone_b)], PREEMPT)
    assert [r.pod_group for r in d.resumes] == ["train"]


def test_a_suspension_remembers_the_pods_node_constraints() -> None:
    objs = cluster(owned(podgroup("train", "q", 2)))
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"].startswith("train-"):
            o["spec"]["nodeSelector"] = {"zone": "b"}
    d = cycle(objs, PREEMPT)
    [stamp] = [a for a in d.annotations if a.key == keys.SUSPENDED_BY_SCHEDULER]
    gang = rules.decode(stamp.value)
    assert gang is not None and gang.shapes == (Constraints((("zone", "b"),)),)


def test_this_cycles_placements_come_first_and_the_higher_priority_gang_resumes_first() -> None:
    pending = [podgroup("new", "q", 2), pod("new-0", "new", gpus=1), pod("new-1", "new", gpus=1)]
    d = cycle([node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES, suspended("train"), *pending], PREEMPT)
    assert sorted(b.pod for b in d.binds) == ["new-0", "new-1"] and d.resumes == []
    d = cycle([node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES, suspended("low"),
               suspended("high", priority_class="build", created=LATER)], PREEMPT)
    assert [r.pod_group for r in d.resumes] == ["high"]


def test_resumed_by_its_user_the_mark_goes() -> None:
    back = pod("train-0", "train", gpus=1, node_name="n1", phase="Running", created=LATER)
    d = cycle([node("n1", gpus=4), queue("q"), *PRIORITY_CLASSES, suspended("train"), back], PREEMPT)
    assert d.resumes == []
    assert [a.value for a in d.annotations if a.key == keys.SUSPENDED_BY_SCHEDULER] == [None]


def test_the_plugin_can_be_disabled() -> None:
    off = SchedulerConfig(actions=("allocate", "preempt"), plugins=(PluginSetting("suspend", enabled=False),))
    d = cycle(cluster(owned(podgroup("train", "q", 2))), off)
    assert d.suspensions == [] and len(d.evictions) == 2


def test_the_record_round_trips_and_a_bad_one_is_ignored() -> None:
    shape = Constraints((("zone", "a"),), (NodeSelectorTerm((Requirement("rack", "In", ("r1", "r2")),)),),
                        (Toleration("gpu", "Exists", "", "NoSchedule"),))
    gang = rules.SuspendedGang(((2_000_000, 500, 10, 1), (1_000_000, 100, 5, 0)), (NO_CONSTRAINTS, shape), 1,
                               "reclaim", "ns/x", 12.5)
    assert rules.decode(gang.encode()) == gang and gang.gang == ((2_000_000, 500, 10, 1),)
    assert rules.decode("{not json") is None and rules.decode(json.dumps({"pods": [[1]]})) is None


def test_kai_why_shows_the_resume_condition() -> None:
    from operators.insight.why import explain

    busy = [podgroup("other", "q"), pod("other-0", "other", gpus=1, node_name="n1", phase="Running")]
    objs = [node("n1", gpus=2), queue("q"), *PRIORITY_CLASSES, suspended("train"), *busy]
    report = explain(snapshot_from_objects(objs), PREEMPT, 1e9, "ns", "train")
    assert (report.state, report.runs_now) == ("suspended", False)
    assert report.lines == [
        "Suspended by the scheduler (reclaim for ns/other); it resumes whole once its gang of 2 pod(s) (2 GPUs, "
        "2 CPU cores, 2.147 GB memory) fits at once on free resources of nodes it may run on, within its queue's "
        "limits.", "Not now: the free resources of the nodes it may run on do not hold all of its pods at once."]
    report = explain(snapshot_from_objects(objs[:-2]), PREEMPT, 1e9, "ns", "train")
    assert report.runs_now and report.lines[-1] == "The next cycle resumes it."
