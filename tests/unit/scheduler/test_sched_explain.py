"""Message formats of contracts section 14."""

from __future__ import annotations

import pytest

from operators.scheduler.decide import explain
from operators.scheduler.decide.explain import JobError
from operators.scheduler.decide.units import GPU


@pytest.mark.parametrize(("value", "text"), [(2, "2"), (1.5, "1.5"), (0.3333333, "0.333"), (0, "0"),
                                             (-1, "Unlimited"), (1000, "1000")])
def test_humanize(value: float, text: str) -> None:
    assert explain.humanize(value) == text


def test_fit_summary_histogram_sorted_as_strings() -> None:
    nodes = [["node(s) didn't have enough resources: GPUs"]] * 10 + [
        ["node(s) didn't have enough resources: CPU cores", "node(s) didn't have enough resources: memory"]] * 2
    assert explain.fit_summary(nodes) == (
        "no nodes with enough resources were found: 10 node(s) didn't have enough resources: GPUs. \n"
        "2 node(s) didn't have enough resources: CPU cores. \n2 node(s) didn't have enough resources: memory.")
    assert explain.fit_summary([[], []]) == "no nodes with enough resources were found"


def test_gang_messages() -> None:
    assert explain.gang_not_found(2, 3, "S") == (
        "Resources were found for 2 pods while 3 are required for gang scheduling. "
        "Additional pods cannot be scheduled due to: S")
    assert explain.subgroup_gang_not_found(1, "worker", 2, "S") == (
        "Resources were found for 1 pods from all sub-groups while sub-group worker requires 2 pods for gang "
        "scheduling. Additional pods cannot be scheduled in this sub-group due to: S")
    assert explain.pod_not_found("ns", "p", "S") == "Resources were not found for pod ns/p due to: S"


def test_capacity_messages() -> None:
    # Amounts in core units: micro-GPUs, millicores, bytes.
    assert explain.over_limit("q", 0, 4 * GPU, 3_500_000, GPU) == (
        "q quota has reached the allowable limit of GPUs. Limit is 4 GPUs, currently 3.5 GPUs allocated and "
        "workload requested 1 GPUs")
    assert explain.over_limit("q", 1, 2500, 2000, 1000) == (
        "q quota has reached the allowable limit of CPU cores. Limit is 2.5 cores, currently 2 cores allocated "
        "and workload requested 1 cores")
    assert explain.over_limit("q", 2, 4 * 10**9, 3 * 10**9, 2 * 10**9) == (
        "q quota has reached the allowable limit of memory. Limit is 4 GB, currently 3 GB allocated and "
        "workload requested 2 GB")
    assert explain.non_preemptible_over_quota("q", 1, 1000, 500, 1000) == (
        "Non-preemptible workload is over quota. Workload requested 1 CPU cores, but q quota is 1 cores, while "
        "0.5 cores are already allocated for non-preemptible pods. Use a preemptible workload to go over quota.")
    assert explain.non_preemptible_over_quota("q", 2, 10**9, 0, 2 * 10**9).startswith(
        "Non-preemptible workload is over quota. Workload requested 2 GB memory, but q quota is 1 GB, while 0 GB")


def test_job_message_and_pod_message() -> None:
    qdne = JobError("QueueDoesNotExist", ("Queue 'a' does not exist",))
    assert explain.job_message([qdne]) == "QueueDoesNotExist: Queue 'a' does not exist."
    two = [JobError("OverLimit", ("m1",)), JobError("OverLimit", ("m1",)), JobError("X", ("m0",))]
    assert explain.job_message(two) == "Unable to schedule podgroup: 2 m1. \nm0."
    assert explain.job_message([]) == "Unable to schedule podgroup"
    assert explain.pod_message(None, []) == "Unable to schedule pod"
    assert explain.pod_message("fit", [qdne]) == "fit"
    assert explain.pod_message(None, [qdne]) == "QueueDoesNotExist: Queue 'a' does not exist."
    assert explain.with_pool_prefix("m", "pool", 1) == "Node-Pool 'pool': m"
    assert explain.with_pool_prefix("m", "pool", -1) == "m"
    assert qdne.to_reason().message == "Queue 'a' does not exist"


def test_event_messages() -> None:
    assert explain.pipelined_message("ns", "p", "n") == "Pod ns/p was pipelined to node n"
    assert explain.scheduled_message("ns", "p", "n", "default") == (
        "Successfully assigned pod ns/p to node n at node-pool default")
    assert explain.stale_message(1, 3, [("w", 2, 0)]) == (
        "Job is stale. 1 pods are active, minMember is 3, subGroup w minMember is 2 and 0 pods are active")
    assert explain.not_ready_message([("default", 3, 2, 1)], False) == (
        "Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 1 are gated")
