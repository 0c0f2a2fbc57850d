"""pdb: victims that would take a PodDisruptionBudget below its minimum are tried last (or not at all where the
queue or the shard forbids it), the eviction message names the budget, and an eviction the API server refused
takes that victim out of the next plans and tells the preemptor why it waits."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.records import RefusedEviction
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects

LATER = "2025-01-01T01:00:00Z"
RECLAIM_ONLY = SchedulerConfig(actions=("allocate", "reclaim"))


def pdb(allowed: int, name: str = "serve") -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "serve"}}},
            "status": {"disruptionsAllowed": allowed}}


def cluster(allowed: int | None = 1, *, replicas_only: bool = False, qa_note: str = "",
            gpus: int = 2) -> list[dict[str, Any]]:
    """Queue qa (quota 0) holds an 8-GPU node: 4 inference replicas (the newest, so today's first victims; a PDB
    minAvailable 3 covers them) and 4 training pods. qb (quota 8) submits a job that needs `gpus` GPUs."""
    qa = queue("qa", gpu=(0, -1, 1))
    if qa_note:
        qa["metadata"]["annotations"] = {"kai.scheduler/pdb-violation": qa_note}
    objs: list[dict[str, Any]] = [node("n1", gpus=8 if not replicas_only else 4), qa, queue("qb", gpu=(8, -1, 1)),
                                  *PRIORITY_CLASSES]
    if allowed is not None:
        objs.append(pdb(allowed))
    for i in range(4):
        objs += [podgroup(f"serve-{i}", "qa", created=f"2025-01-01T00:3{i}:00Z"),
                 pod(f"serve-{i}", f"serve-{i}", gpus=1, node_name="n1", phase="Running", labels={"app": "serve"})]
        if not replicas_only:
            objs += [podgroup(f"train-{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"),
                     pod(f"train-{i}", f"train-{i}", gpus=1, node_name="n1", phase="Running")]
    return [*objs, podgroup("big", "qb", created=LATER), pod("big-0", "big", gpus=gpus, created=LATER)]


def run(objs: list[dict[str, Any]], config: SchedulerConfig = RECLAIM_ONLY, **snap: Any) -> Decisions:
    snapshot: Snapshot = replace(snapshot_from_objects(objs), **snap)
    return run_cycle(snapshot, config, 1e9)


def evicted(d: Decisions) -> list[str]:
    return sorted(e.pod for e in d.evictions)


def test_without_a_budget_the_newest_replicas_go_first() -> None:
    assert evicted(run(cluster(None))) == ["serve-2", "serve-3"]


def test_at_most_the_budget_of_replicas_goes_and_the_rest_is_unprotected() -> None:
    d = run(cluster(1))
    assert evicted(d) == ["serve-3", "train-3"]
    [protected] = [e for e in d.evictions if e.pod == "serve-3"]
    assert protected.message.endswith("PodDisruptionBudget ns/serve (1 disruption allowed) covers it; the "
                                      "eviction stays within the budget.")
    assert "PodDisruptionBudget" not in next(e for e in d.evictions if e.pod == "train-3").message


def test_a_spent_budget_sends_every_replica_last() -> None:
    assert evicted(run(cluster(0))) == ["train-2", "train-3"]


def test_two_preemptors_of_one_cycle_share_the_budget() -> None:
    objs = cluster(1, gpus=1)
    objs += [podgroup("big2", "qb", created=LATER), pod("big2-0", "big2", gpus=1, created=LATER)]
    d = run(objs)
    assert len(d.evictions) == 2 and sum(e.pod.startswith("serve") for e in d.evictions) == 1


def test_beyond_the_budget_only_as_a_last_resort_by_default() -> None:
    d = run(cluster(1, replicas_only=True))
    assert evicted(d) == ["serve-2", "serve-3"]  # KAI's outcome: nothing else would do
    assert any("no other victim set would do" in e.message for e in d.evictions)


def test_a_queue_or_the_shard_can_forbid_breaking_the_budget() -> None:
    d = run(cluster(1, replicas_only=True, qa_note="forbid"))
    assert d.evictions == [] and [u.pod_group for u in d.unschedulable] == ["big"]
    shard = replace(config_from_mapping({"plugins": {"pdb": {"arguments": {"violation": "forbid"}}}}),
                    actions=RECLAIM_ONLY.actions)
    assert run(cluster(1, replicas_only=True), shard).evictions == []
    # The queue's own setting wins over the shard's.
    assert evicted(run(cluster(1, replicas_only=True, qa_note="allow"), shard)) == ["serve-2", "serve-3"]


def test_a_refused_eviction_takes_its_pod_out_of_the_plan_and_the_preemptor_says_why() -> None:
    refused = RefusedEviction("ns/serve-3", "ns/big", "Cannot evict pod as it would violate the pod's disruption "
                              "budget.")
    d = run(cluster(None, gpus=1), refused_evictions=(refused,))
    assert evicted(d) == ["serve-2"]
    # With nothing else to take, it stays pending and its PodGroup names the refusal.
    objs = [o for o in cluster(None, gpus=1, replicas_only=True)]
    refusals = tuple(RefusedEviction(f"ns/serve-{i}", "ns/big", "budget") for i in range(4))
    d = run(objs, refused_evictions=refusals)
    assert d.evictions == []
    [u] = d.unschedulable
    assert "EvictionRefused" in [r.reason for r in u.reasons]
    assert "the eviction of ns/serve-0 was refused by the API server (budget)" in u.message
