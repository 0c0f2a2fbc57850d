"""Record parsing and the session's view of the snapshot, priorities and preemptibility included."""

from __future__ import annotations

import pytest
from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.core.api.queue import queue_record
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.records import node_record, pod_record
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import build_snapshot, snapshot_from_objects
from operators.scheduler.decide.units import GPU


def session(objs: list[dict]) -> Session:  # type: ignore[type-arg]
    return Session(snapshot_from_objects(objs), SchedulerConfig(), 0.0)


def test_pod_record_requests_and_gpu() -> None:
    rec = pod_record(pod("p", "g", cpu="500m", memory="1Gi", gpus=2))
    assert (rec.cpu, rec.memory, rec.gpu.whole) == (500, 2**30, 2)
    frac = pod_record(pod("f", "g", fraction="0.25", devices=2))
    assert frac.gpu.portion == 0.25 and frac.gpu.num_devices == 2 and frac.gpu.is_shared
    bad = pod_record(pod("b", "g", fraction="1.5"))
    assert bad.gpu_error.startswith("gpu-fraction annotation value")


def test_node_record() -> None:
    rec = node_record(node("n", gpus=4, cpu="16", memory="64Gi", gpu_memory=40960))
    assert (rec.cpu, rec.memory, rec.gpus, rec.ready, rec.gpu_memory_mib) == (16000, 64 * 2**30, 4, True, 40900)


def test_queue_record_units() -> None:
    rec = queue_record(queue("q", cpu=(2000, -1, 1), memory=(1000, 2000, 0), gpu=(1.5, 4, 2)))
    # Core units: micro-GPUs, millicores, bytes (queue memory is in MB); weights stay plain numbers.
    assert rec.quota == (1_500_000, 2000, 10**9) and rec.limit == (4_000_000, -1, 2 * 10**9)
    assert rec.weight == (2, 1, 0)
    empty = queue_record({"kind": "Queue", "metadata": {"name": "e"}, "spec": {}})
    assert empty.limit == (0, 0, 0) and empty.priority == 100


@pytest.mark.parametrize(("kw", "status"), [
    ({"phase": "Running", "node_name": "n1"}, "Running"),
    ({"phase": "Running", "node_name": "n1", "deleting": True}, "Releasing"),
    ({"phase": "Pending", "node_name": "n1"}, "Bound"),
    ({"phase": "Pending"}, "Pending"),
    ({"phase": "Pending", "deleting": True}, "Releasing"),
    ({"phase": "Pending", "spec_extra": {"schedulingGates": [{"name": "g"}]}}, "Gated"),
    ({"phase": "Succeeded", "node_name": "n1"}, "Succeeded"),
    ({"phase": "Failed"}, "Failed"),
])
def test_task_status(kw: dict, status: str) -> None:  # type: ignore[type-arg]
    ssn = session([node("n1"), queue("q"), podgroup("g"), pod("p", "g", **kw)])
    assert ssn.jobs[0].tasks[0].status == status


def test_binding_status_from_bindrequest() -> None:
    br = {"kind": "BindRequest", "metadata": {"name": "p", "namespace": "ns"},
          "spec": {"podName": "p", "selectedNode": "n1", "selectedGPUGroups": ["g1"]}}
    ssn = session([node("n1"), queue("q"), podgroup("g"), pod("p", "g", fraction="0.5"), br])
    task = ssn.jobs[0].tasks[0]
    assert task.status == "Binding" and ssn.nodes[task.node].name == "n1" and task.groups == ("g1",)
    assert ssn.nodes[0].groups["g1"].used == GPU // 2 and ssn.nodes[0].idle_gpu == 7


def test_node_usage_includes_every_pod() -> None:
    ssn = session([node("n1", gpus=8, cpu="10"), queue("q"),
                   pod("foreign", None, gpus=2, cpu="3", node_name="n1", phase="Running", scheduler="other"),
                   podgroup("g"), pod("mine", "g", gpus=1, node_name="n1", phase="Running"),
                   pod("done", None, gpus=4, node_name="n1", phase="Succeeded")])
    n = ssn.nodes[0]
    assert (n.idle_gpu, n.idle_cpu, n.n_pods) == (5, 6000, 2)
    assert ssn.total[0] == 6 * GPU  # other schedulers' pods are subtracted from the shared capacity


def test_reservation_pod_holds_group_not_whole_gpu() -> None:
    res = pod("res", None, gpus=1, namespace="kai-resource-reservation", node_name="n1", phase="Running",
              labels={"app": "kai-resource-reservation"}, gpu_group="grp")
    ssn = session([node("n1", gpus=2), queue("q"), res,
                   podgroup("g"), pod("f", "g", fraction="0.5", node_name="n1", phase="Running", gpu_group="grp")])
    n = ssn.nodes[0]
    assert n.idle_gpu == 1 and n.groups["grp"].used == GPU // 2


def test_priority_and_preemptibility() -> None:
    pcs = [*PRIORITY_CLASSES,
           {"kind": "PriorityClass", "metadata": {"name": "dflt"}, "value": 90, "globalDefault": True}]
    ssn = session([queue("q"), *pcs, podgroup("a", priority_class="build"), podgroup("b", priority_class="nope"),
                   podgroup("c", priority_class="train", preemptibility="non-preemptible")])
    jobs = {j.name: j for j in ssn.jobs}
    assert (jobs["a"].priority, jobs["a"].preemptible) == (100, False)
    assert (jobs["b"].priority, jobs["b"].preemptible) == (90, True)
    assert (jobs["c"].priority, jobs["c"].preemptible) == (50, False)
    ssn = session([queue("q"), podgroup("d", priority_class="missing")])
    assert ssn.jobs[0].priority == 50


def test_queue_hierarchy_n_levels_and_accounting() -> None:
    ssn = session([node("n1"), queue("top"), queue("mid", "top"), queue("leaf", "mid"), queue("orphan", "ghost"),
                   podgroup("g", "leaf"), pod("r", "g", gpus=2, node_name="n1", phase="Running"),
                   podgroup("h", "leaf"), pod("p", "h", gpus=1)])
    assert set(ssn.queues) == {"top", "mid", "leaf"}
    assert ssn.queues["leaf"].parent is ssn.queues["mid"] and ssn.queues["top"].depth == 0
    for name in ("top", "mid", "leaf"):
        assert ssn.queues[name].allocated[0] == 2 * GPU and ssn.queues[name].request[0] == 3 * GPU


def test_shard_selector() -> None:
    pool = {"kai.scheduler/node-pool": "pool-a"}
    objs = [node("in-pool", labels=pool), node("default")]
    snap = snapshot_from_objects(objs, partition="pool-a")
    assert [n.name for n in snap.nodes] == ["in-pool"]
    assert [n.name for n in snapshot_from_objects(objs).nodes] == ["default"]
    assert build_snapshot().nodes == ()
