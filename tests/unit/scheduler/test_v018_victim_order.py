"""KAI's victim and pipelined-placement order (issue 24), and the GPU-group ids a move mints."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.model import GpuGroup, NodeState
from operators.scheduler.decide.placement.gpus import choose_groups
from operators.scheduler.decide.units import GPU

LATER = "2025-01-01T01:00:00Z"


def at(i: int) -> str:
    """KAI's test jobs are created a minute apart, in their list order (the later, the newer)."""
    return f"2025-01-01T00:{i:02d}:00Z"


def shared_node(groups: dict[str, GpuGroup], idle_gpu: int) -> NodeState:
    return cast(NodeState, SimpleNamespace(groups=groups, idle_gpu=idle_gpu, rel_gpu=0))


def test_a_new_group_never_takes_the_id_of_a_group_the_node_has() -> None:
    # A fractional pod moved to another GPU of its node: its own group (minted for it earlier, from node, pod and
    # index 0) is full for this search, so a new group is chosen, and its id must not be the one being left.
    def mint(i: int) -> str:
        return f"node-a/ns/pod/{i}"
    leaving = GpuGroup(mint(0), used=2 * GPU, releasing=GPU // 2, pods=1)
    choice = choose_groups(shared_node({leaving.id: leaving}, idle_gpu=1), GPU // 2, 1, False, mint)
    assert choice is not None and choice.new == (True,)
    assert choice.groups[0] not in ("node-a/ns/pod/0",)
    # Without a clash the minted id is unchanged (decisions stay byte-identical).
    fresh = choose_groups(shared_node({}, idle_gpu=2), GPU // 2, 2, False, mint)
    assert fresh is not None and fresh.groups == ("node-a/ns/pod/0", "node-a/ns/pod/1")




# --- KAI's scenarios (pkg/scheduler/actions/preempt/preempt_elastic_test.go) -------------------------------------

def running(name: str, group: str, node_name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, group, gpus=gpus, node_name=node_name, phase="Running", **kw)


def elastic_train(tasks: int) -> list[dict[str, Any]]:
    """KAI's elastic train job: minMember 1, `tasks` 1-GPU pods running on node0 (4 GPUs), queue0 deserving 4."""
    return [node("node0", gpus=4), queue("queue0", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            podgroup("running_job0", "queue0", min_member=1),
            *[running(f"running_job0-{i}", "running_job0", "node0") for i in range(tasks)]]


@pytest.mark.parametrize(("gpus", "evicted"), [
    # "Inference job preempts single task from elastic train job"
    (1, ["running_job0-3"]),
    # "Inference job preempts several tasks from elastic train job"
    (2, ["running_job0-2", "running_job0-3"]),
])
def test_kai_elastic_preempt_takes_the_last_pods(gpus: int, evicted: list[str]) -> None:
    objs = [*elastic_train(4), podgroup("pending_job0", "queue0", priority_class="inference", created=LATER),
            pod("pending_job0-0", "pending_job0", gpus=gpus, created=LATER)]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")))
    assert sorted(e.pod for e in d.evictions) == evicted
    assert [p.pod for p in d.pipelined] == ["pending_job0-0"]


def test_kai_elastic_preempt_takes_a_running_job_and_the_last_elastic_pod() -> None:
    # "Inference job preempts running job and a single task from elastic train job": node0 of 3 GPUs.
    objs = [node("node0", gpus=3), queue("queue0", gpu=(3, -1, 1)), *PRIORITY_CLASSES,
            podgroup("running_job0", "queue0", min_member=1, created=at(0)),
            *[running(f"running_job0-{i}", "running_job0", "node0") for i in range(2)],
            podgroup("running_job1", "queue0", created=at(1)), running("running_job1-0", "running_job1", "node0"),
            podgroup("pending_job0", "queue0", priority_class="inference", created=LATER),
            pod("pending_job0-0", "pending_job0", gpus=2, created=LATER)]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")))
    assert sorted(e.pod for e in d.evictions) == ["running_job0-1", "running_job1-0"]


def test_kai_elastic_preempt_takes_one_pod_of_each_elastic_job() -> None:
    # "Inference job preempts single task from several elastic train jobs": two elastic jobs of 2 pods each.
    objs = [node("node0", gpus=4), queue("queue0", gpu=(4, -1, 1)), *PRIORITY_CLASSES,
            *[o for j in range(2) for o in (podgroup(f"running_job{j}", "queue0", min_member=1, created=at(j)),
                                            *[running(f"running_job{j}-{i}", f"running_job{j}", "node0")
                                              for i in range(2)])],
            podgroup("pending_job0", "queue0", priority_class="inference", created=LATER),
            pod("pending_job0-0", "pending_job0", gpus=2, created=LATER)]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")))
    assert sorted(e.pod for e in d.evictions) == ["running_job0-1", "running_job1-1"]


def test_kai_elastic_preempt_moves_the_first_pod() -> None:
    # "Inference job preempts single task, moves one task from elastic train job": node0 (2 GPUs) runs both pods of
    # an elastic job, node1 has 1 free GPU. The 2-GPU preemptor takes node0; KAI re-places the victim job as it
    # allocates a job, in task order: running_job0-0 moves to node1 and running_job0-1 is evicted.
    objs = [node("node0", gpus=2), node("node1", gpus=1), queue("queue0", gpu=(2, -1, 1)), *PRIORITY_CLASSES,
            podgroup("running_job0", "queue0", min_member=1, created=at(0)),
            *[running(f"running_job0-{i}", "running_job0", "node0") for i in range(2)],
            podgroup("pending_job0", "queue0", priority_class="inference", created=LATER),
            pod("pending_job0-0", "pending_job0", gpus=2, created=LATER)]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "preempt")))
    assert sorted(e.pod for e in d.evictions) == ["running_job0-0", "running_job0-1"]
    assert {p.pod: p.node for p in d.pipelined} == {"pending_job0-0": "node0", "running_job0-0": "node1"}


# --- KAI's scenario (pkg/scheduler/actions/allocate/allocateTopology_test.go) ------------------------------------

RACK_TOPOLOGY = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "cluster-topology"},
                 "spec": {"levels": [{"nodeLabel": "k8s.io/rack"}]}}


def test_kai_preferred_rack_packs_the_job_on_one_rack() -> None:
    # "Preferred topology - schedule job on the same rack": node0 (rack1) has 1 of its 2 GPUs free, node1 (rack2)
    # both: the two 1-GPU pods of the job preferring a rack both go to node1, though node0 is the fuller node.
    group = podgroup("pending_job0", "queue0", 2, created=at(1))
    group["spec"]["topologyConstraint"] = {"topology": "cluster-topology", "preferredTopologyLevel": "k8s.io/rack"}
    objs = [RACK_TOPOLOGY, *PRIORITY_CLASSES, queue("queue0", gpu=(4, 4, 1)),
            node("node0", gpus=2, labels={"k8s.io/rack": "rack1"}),
            node("node1", gpus=2, labels={"k8s.io/rack": "rack2"}),
            podgroup("running_job0", "queue0", created=at(0)), running("running_job0-0", "running_job0", "node0"),
            group, *[pod(f"pending_job0-{i}", "pending_job0", gpus=1, created=at(1)) for i in range(2)]]
    d = cycle(objs)
    assert {b.pod: b.node for b in d.binds} == {"pending_job0-0": "node1", "pending_job0-1": "node1"}
