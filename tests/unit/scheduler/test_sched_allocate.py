"""The allocate action end to end on small snapshots: ordering, gangs, elastic growth, capacity checks."""

from __future__ import annotations

from sched_builders import PRIORITY_CLASSES, bound, cycle, gang, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig


def test_gang_all_or_nothing_and_explanation() -> None:
    objs = [node("n1", gpus=4), node("n2", gpus=4), queue("q"), *gang("big", 3, gpus=3)]
    d = cycle(objs)
    assert d.binds == []
    [u] = d.unschedulable
    assert u.pod_group == "big" and not u.has_allocated_pods
    assert u.reasons[0].reason == "PodSchedulingErrors"
    assert u.message == (
        "PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling. "
        "Additional pods cannot be scheduled due to: no nodes with enough resources were found: "
        "2 node(s) didn't have enough resources: GPUs..")
    # the failing pod carries the node histogram; the others get the job message
    assert u.pod_messages["big-2"] == (
        "no nodes with enough resources were found: 2 node(s) didn't have enough resources: GPUs.")
    assert u.pod_messages["big-0"] == u.message


def test_gang_rollback_leaves_room_for_next_job() -> None:
    # The big gang fails after placing 2 pods; the rollback must free them for the small job.
    objs = [node("n1", gpus=4), node("n2", gpus=4), queue("q"), *gang("a-big", 3, gpus=3),
            podgroup("b-small", created="2025-01-02T00:00:00Z"), pod("small", "b-small", gpus=4)]
    d = cycle(objs)
    assert bound(d) == {"small": "n1"}


def test_gang_fits() -> None:
    objs = [node("n1", gpus=4), node("n2", gpus=4), queue("q"), *gang("g", 4, gpus=2)]
    d = cycle(objs)
    assert sorted(bound(d).values()) == ["n1", "n1", "n2", "n2"]
    assert [a.key for a in d.annotations] == ["kai.scheduler/last-start-timestamp"]


def test_subgroup_gang_kuberay_shape() -> None:
    objs = [node("n1", gpus=0, cpu="2"), node("n2", gpus=0, cpu="1"), queue("q"),
            podgroup("ray", min_member=3, subgroups=[{"name": "headgroup", "minMember": 1},
                                                     {"name": "worker", "minMember": 2}]),
            pod("head", "ray", subgroup="headgroup", labels={"ray.io/node-type": "head"}),
            pod("w1", "ray", subgroup="worker"), pod("w2", "ray", subgroup="worker"),
            pod("w3", "ray", subgroup="worker")]
    d = cycle(objs)
    # 3 CPUs for 4 pods: the core (head + 2 workers) binds, the elastic third worker does not.
    assert set(bound(d)) == {"head", "w1", "w2"}
    [u] = d.unschedulable
    assert u.has_allocated_pods
    assert u.message.startswith("PodSchedulingErrors: Resources were not found for pod ns/w3 due to: ")


def test_subgroup_gang_message() -> None:
    objs = [node("n1", gpus=2), queue("q"),
            podgroup("ray", min_member=3, subgroups=[{"name": "headgroup", "minMember": 1},
                                                     {"name": "worker", "minMember": 2}]),
            pod("head", "ray", subgroup="headgroup", labels={"ray.io/node-type": "head"}, gpus=1),
            pod("w1", "ray", subgroup="worker", gpus=1), pod("w2", "ray", subgroup="worker", gpus=1)]
    [u] = cycle(objs).unschedulable
    assert u.message.startswith(
        "PodSchedulingErrors: Resources were found for 2 pods from all sub-groups while sub-group worker requires "
        "2 pods for gang scheduling. Additional pods cannot be scheduled in this sub-group due to: ")


def test_pod_with_unknown_subgroup_is_ignored() -> None:
    objs = [node("n1"), queue("q"), podgroup("pg", subgroups=[{"name": "a", "minMember": 1}]),
            pod("in-a", "pg", subgroup="a"), pod("stray", "pg", subgroup="zzz")]
    assert set(bound(cycle(objs))) == {"in-a"}


def test_elastic_growth_one_pod_at_a_time_until_full() -> None:
    objs = [node("n1", gpus=3), queue("q"), *gang("el", 5, min_member=2, gpus=1)]
    d = cycle(objs)
    assert len(d.binds) == 3
    [u] = d.unschedulable
    assert u.has_allocated_pods and len(u.pod_messages) == 2


def test_elastic_job_yields_to_fresh_gang_of_same_priority() -> None:
    # el is running at its minimum; the fresh job (below min) sorts first and takes the free GPU.
    objs = [node("n1", gpus=2), queue("q"),
            podgroup("el", min_member=1), pod("el-0", "el", gpus=1, node_name="n1", phase="Running"),
            pod("el-1", "el", gpus=1),
            podgroup("fresh", created="2025-06-01T00:00:00Z"), pod("fresh-0", "fresh", gpus=1)]
    assert bound(cycle(objs)) == {"fresh-0": "n1"}


def test_job_order_priority_then_age() -> None:
    objs = [node("n1", gpus=1), queue("q"), *PRIORITY_CLASSES,
            podgroup("old-train", created="2025-01-01T00:00:00Z"), pod("a", "old-train", gpus=1),
            podgroup("new-inference", priority_class="inference", created="2025-02-01T00:00:00Z"),
            pod("b", "new-inference", gpus=1)]
    # inference is non-preemptible: give the queue quota so it may run
    objs[1] = queue("q", gpu=(1, -1, 1))
    assert bound(cycle(objs)) == {"b": "n1"}
    objs2 = [node("n1", gpus=1), queue("q"), podgroup("y", created="2025-01-02T00:00:00Z"), pod("y0", "y", gpus=1),
             podgroup("x", created="2025-01-01T00:00:00Z"), pod("x0", "x", gpus=1)]
    assert bound(cycle(objs2)) == {"x0": "n1"}


def test_queues_alternate_by_drf() -> None:
    objs = [node("n1", gpus=4), queue("qa", gpu=(0, -1, 1)), queue("qb", gpu=(0, -1, 1))]
    for i in range(4):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-0{i + 1}T00:00:00Z"), pod(f"a{i}", f"a{i}", gpus=1)]
        objs += [podgroup(f"b{i}", "qb", created=f"2025-01-0{i + 1}T00:00:00Z"), pod(f"b{i}", f"b{i}", gpus=1)]
    d = cycle(objs)
    assert sorted(bound(d)) == ["a0", "a1", "b0", "b1"]


def test_under_quota_queue_first() -> None:
    objs = [node("n1", gpus=1), queue("qa", gpu=(0, -1, 1), created="2024-01-01T00:00:00Z"),
            queue("qb", gpu=(1, -1, 1), created="2025-01-01T00:00:00Z"),
            podgroup("a", "qa"), pod("a0", "a", gpus=1), podgroup("b", "qb"), pod("b0", "b", gpus=1)]
    assert bound(cycle(objs)) == {"b0": "n1"}


def test_queue_priority_orders_queues() -> None:
    objs = [node("n1", gpus=1), queue("lo", gpu=(0, -1, 1), priority=50, created="2024-01-01T00:00:00Z"),
            queue("hi", gpu=(0, -1, 1), priority=200, created="2025-01-01T00:00:00Z"),
            podgroup("a", "lo"), pod("a0", "a", gpus=1), podgroup("b", "hi"), pod("b0", "b", gpus=1)]
    assert bound(cycle(objs)) == {"b0": "n1"}


def test_over_limit_at_ancestor() -> None:
    objs = [node("n1", gpus=8), queue("dept", gpu=(0, 2, 1), display="Research"), queue("team", "dept"),
            podgroup("run", "team", created="2025-01-01T00:00:00Z"), pod("r0", "run", gpus=1, node_name="n1",
                                                                         phase="Running"),
            podgroup("new", "team", created="2025-01-02T00:00:00Z"), pod("n0", "new", gpus=2)]
    d = cycle(objs)
    assert d.binds == []
    [u] = d.unschedulable
    assert u.reasons[0].reason == "OverLimit"
    assert u.reasons[0].message == (
        "Research quota has reached the allowable limit of GPUs. Limit is 2 GPUs, currently 1 GPUs allocated and "
        "workload requested 2 GPUs")
    assert u.message == "OverLimit: " + u.reasons[0].message + "."
    details = u.reasons[0].details
    assert details is not None and details["queueDetails"]["name"] == "dept"
    assert u.pod_messages["n0"] == u.message


def test_over_limit_cpu_and_memory_messages() -> None:
    objs = [node("n1"), queue("q", cpu=(-1, 1000, 1)), podgroup("p"), pod("p0", "p", cpu="1500m")]
    [u] = cycle(objs).unschedulable
    assert u.reasons[0].message == ("q quota has reached the allowable limit of CPU cores. Limit is 1 cores, "
                                    "currently 0 cores allocated and workload requested 1.5 cores")
    objs = [node("n1"), queue("q", memory=(-1, 1000, 1)), podgroup("p"), pod("p0", "p", memory="2G")]
    [u] = cycle(objs).unschedulable
    assert u.reasons[0].message == ("q quota has reached the allowable limit of memory. Limit is 1 GB, "
                                    "currently 0 GB allocated and workload requested 2 GB")


def test_limit_zero_blocks_requested_resource_only() -> None:
    objs = [node("n1"), queue("q", gpu=(0, 0, 1)), podgroup("cpu-only"), pod("c", "cpu-only"),
            podgroup("gpu"), pod("g", "gpu", gpus=1)]
    d = cycle(objs)
    assert set(bound(d)) == {"c"}
    assert d.unschedulable[0].reasons[0].reason == "OverLimit"


def test_non_preemptible_over_quota_at_ancestor() -> None:
    objs = [node("n1"), *PRIORITY_CLASSES, queue("dept", gpu=(1, -1, 1)), queue("team", "dept", gpu=(4, -1, 1)),
            podgroup("build", "team", priority_class="build"), pod("b0", "build", gpus=2)]
    [u] = cycle(objs).unschedulable
    assert u.reasons[0].reason == "NonPreemptibleOverQuota"
    assert u.reasons[0].message == (
        "Non-preemptible workload is over quota. Workload requested 2 GPUs, but dept quota is 1 GPUs, while 0 GPUs "
        "are already allocated for non-preemptible pods. Use a preemptible workload to go over quota.")
    # the same job as preemptible (explicit field) is fine
    objs[-2] = podgroup("build", "team", priority_class="build", preemptibility="preemptible")
    assert set(bound(cycle(objs))) == {"b0"}


def test_default_queues_block_non_preemptible() -> None:
    objs = [node("n1"), *PRIORITY_CLASSES, queue("default-parent-queue", gpu=(0, -1, 1), cpu=(0, -1, 1),
                                                  memory=(0, -1, 1)),
            queue("default-queue", "default-parent-queue", gpu=(0, -1, 1), cpu=(0, -1, 1), memory=(0, -1, 1)),
            podgroup("inf", "default-queue", priority_class="inference"), pod("i0", "inf", cpu="1")]
    [u] = cycle(objs).unschedulable
    assert u.reasons[0].reason == "NonPreemptibleOverQuota"
    assert "1 CPU cores, but default-queue quota is 0 cores" in u.reasons[0].message


def test_queue_does_not_exist() -> None:
    objs = [node("n1"), queue("q"), podgroup("p", "team-x"), pod("p0", "p")]
    d = cycle(objs)
    assert d.binds == []
    [u] = d.unschedulable
    assert u.message == "QueueDoesNotExist: Queue 'team-x' does not exist."
    assert u.pod_messages == {"p0": "QueueDoesNotExist: Queue 'team-x' does not exist."}


def test_orphan_queue_subtree_dropped() -> None:
    objs = [node("n1"), queue("child", "missing-parent"), queue("grandchild", "child"),
            podgroup("p", "grandchild"), pod("p0", "p"), podgroup("c", "child"), pod("c0", "c")]
    d = cycle(objs)
    assert d.binds == [] and d.queues == []
    reasons = {u.pod_group: u.reasons[0] for u in d.unschedulable}
    assert {r.reason for r in reasons.values()} == {"QueueDoesNotExist"}
    # The message names the queue that is really missing, not the PodGroup's own (existing) queue.
    assert reasons["c"].message == "Queue 'child' cannot be scheduled: its parent queue 'missing-parent' does not exist"
    assert reasons["p"].message == ("Queue 'grandchild' cannot be scheduled: its ancestor queue 'missing-parent' "
                                    "(parent of 'child') does not exist")
    pending = {u.pod_group: u.pod_messages for u in d.unschedulable}
    assert pending["c"] == {"c0": "QueueDoesNotExist: Queue 'child' cannot be scheduled: its parent queue "
                                  "'missing-parent' does not exist."}


def test_orphan_queue_schedules_once_its_parent_exists() -> None:
    objs = [node("n1"), queue("child", "late-parent"), podgroup("p", "child"), pod("p0", "p")]
    assert bound(cycle(objs)) == {}
    assert set(bound(cycle([*objs, queue("late-parent")]))) == {"p0"}


def test_queue_in_a_parent_loop_is_explained() -> None:
    objs = [node("n1"), queue("a", "b"), queue("b", "a"), podgroup("p", "a"), pod("p0", "p")]
    [u] = cycle(objs).unschedulable
    assert u.reasons[0].message == "Queue 'a' cannot be scheduled: its parent queues form a loop (a -> b -> a)"


def test_non_leaf_queue_is_skipped_silently() -> None:
    objs = [node("n1"), queue("parent"), queue("leaf", "parent"), podgroup("p", "parent"), pod("p0", "p")]
    d = cycle(objs)
    assert d.binds == [] and d.unschedulable[0].reasons == ()
    assert d.unschedulable[0].message == "Unable to schedule podgroup"


def test_not_ready_gang() -> None:
    objs = [node("n1"), queue("q"), podgroup("g", min_member=3), pod("g0", "g"),
            pod("g1", "g", spec_extra={"schedulingGates": [{"name": "x"}]})]
    d = cycle(objs)
    assert d.binds == [] and d.unschedulable == []
    assert d.not_ready[0].message == (
        "Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 1 are gated")


def test_not_ready_subgroup_message() -> None:
    objs = [node("n1"), queue("q"), podgroup("g", subgroups=[{"name": "workers", "minMember": 2}]),
            pod("g0", "g", subgroup="workers")]
    assert cycle(objs).not_ready[0].message == (
        "Job is not ready for scheduling. Waiting for 2 pods for SubGroup workers, currently 1 exist, 0 are gated.")


def test_binding_pods_hold_capacity() -> None:
    br = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
          "metadata": {"name": "held", "namespace": "ns"}, "spec": {"podName": "held", "selectedNode": "n1"}}
    objs = [node("n1", gpus=1), node("n2", gpus=1), queue("q"), podgroup("h"), pod("held", "h", gpus=1), br,
            podgroup("new", created="2025-02-01T00:00:00Z"), pod("new0", "new", gpus=1)]
    assert bound(cycle(objs)) == {"new0": "n2"}
    failed = {**br, "status": {"phase": "Failed"}}
    objs[5] = failed
    d = cycle(objs)
    assert set(bound(d)) == {"held", "new0"}


def test_other_scheduler_pods_consume_node_capacity() -> None:
    objs = [node("n1", gpus=1), queue("q"),
            pod("foreign", None, gpus=1, node_name="n1", phase="Running", scheduler="default-scheduler"),
            podgroup("p"), pod("p0", "p", gpus=1)]
    d = cycle(objs)
    assert d.binds == []
    assert d.queues[0].fair_share["gpu"] == 0  # capacity of other schedulers' pods is not shared out


def test_pipelining_onto_releasing_resources() -> None:
    objs = [node("n1", gpus=2), queue("q"),
            podgroup("old"), pod("leaving", "old", gpus=2, node_name="n1", phase="Running", deleting=True),
            *gang("g", 2, gpus=1)]
    d = cycle(objs)
    assert d.binds == []
    assert sorted(p.pod for p in d.pipelined) == ["g-0", "g-1"]
    assert d.pipelined[0].message == "Pod ns/g-0 was pipelined to node n1"
    assert not any(a.key == "kai.scheduler/last-start-timestamp" for a in d.annotations)


def test_gang_partly_on_releasing_is_fully_pipelined() -> None:
    objs = [node("n1", gpus=1), node("n2", gpus=1), queue("q"),
            podgroup("old"), pod("leaving", "old", gpus=1, node_name="n2", phase="Running", deleting=True),
            *gang("g", 2, gpus=1)]
    d = cycle(objs)
    assert d.binds == []  # a gang never starts half-bound
    assert sorted((p.pod, p.node) for p in d.pipelined) == [("g-0", "n1"), ("g-1", "n2")]


def test_stale_timestamp_set_and_cleared() -> None:
    objs = [node("n1", gpus=0), queue("q"), podgroup("g", min_member=2),
            pod("g0", "g", node_name="n1", phase="Running"), pod("g1", "g", phase="Failed")]
    d = cycle(objs, now=1_700_000_000)
    assert [(a.key, a.value) for a in d.annotations] == [
        ("kai.scheduler/stale-podgroup-timestamp", "2023-11-14T22:13:20Z")]
    healthy = [node("n1", gpus=0), queue("q"),
               podgroup("g", annotations={"kai.scheduler/stale-podgroup-timestamp": "2023-11-14T22:13:20Z"}),
               pod("g0", "g", node_name="n1", phase="Running")]
    assert [(a.key, a.value) for a in cycle(healthy).annotations] == [("kai.scheduler/stale-podgroup-timestamp", None)]


def test_queue_depth_per_action() -> None:
    objs = [node("n1", gpus=4), queue("q")]
    for i in range(4):
        objs += [podgroup(f"j{i}", created=f"2025-01-0{i + 1}T00:00:00Z"), pod(f"j{i}", f"j{i}", gpus=1)]
    cfg = SchedulerConfig(queue_depth_per_action={"allocate": 2})
    assert sorted(bound(cycle(objs, cfg))) == ["j0", "j1"]


def test_queue_shares_reported() -> None:
    objs = [node("n1", gpus=4), queue("q", gpu=(1, -1, 1)), podgroup("p"), pod("p0", "p", gpus=2)]
    [qs] = cycle(objs).queues
    assert qs.name == "q" and qs.fair_share["gpu"] == 2 and qs.allocated["gpu"] == 2 and qs.requested["gpu"] == 2
    assert qs.deserved["gpu"] == 1 and qs.limit["gpu"] == -1
