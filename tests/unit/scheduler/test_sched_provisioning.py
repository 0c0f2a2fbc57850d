"""Autoscaler provisioning: one ProvisioningRequest per gang that does not fit, the gang held while it is pending."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sched_builders import PRIORITY_CLASSES, node, pod, podgroup, queue

from operators.scheduler.decide import provisioning
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.provisioning import ProvisioningPlan, ProvisioningRequestRecord
from operators.scheduler.decide.simulation import run_simulation
from operators.scheduler.decide.snapshot import snapshot_from_objects

CLASS = "check-capacity.autoscaling.x-k8s.io"
OPT_IN = {"kai.scheduler/provisioning-class": CLASS, "provisioning.kai.scheduler/ValidUntilSeconds": "600"}
NOW = 1e9


def gang(name: str, n: int, gpus: int, *, annotations: dict[str, str] | None = OPT_IN, queue_name: str = "q",
         head: bool = True) -> list[dict[str, Any]]:
    objs = [podgroup(name, queue_name, n, annotations=dict(annotations or {}))]
    if head:  # a head without GPUs and n-1 GPU workers: two shapes
        objs.append(pod(f"{name}-head", name, cpu="2", memory="4Gi"))
        objs += [pod(f"{name}-w{i}", name, gpus=gpus) for i in range(n - 1)]
    else:
        objs += [pod(f"{name}-w{i}", name, gpus=gpus) for i in range(n)]
    return objs


def run(objects: list[dict[str, Any]], requests: list[ProvisioningRequestRecord] | None = None,
        now: float = NOW) -> tuple[Decisions, ProvisioningPlan, Decisions]:
    snapshot = snapshot_from_objects(objects)
    decisions = run_cycle(snapshot, SchedulerConfig(), now)
    plan = provisioning.plan(snapshot, decisions, requests or [], now)
    return decisions, plan, provisioning.apply(decisions, plan, "default")


def existing(new: provisioning.NewRequest, *conditions: tuple[str, str, float], message: str = ""
             ) -> ProvisioningRequestRecord:
    manifest = new.manifest()
    manifest["status"] = {"conditions": [
        {"type": t, "status": "True", "reason": r, "message": message,
         "lastTransitionTime": dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        for t, r, at in conditions]}
    record = provisioning.provisioning_request_record(manifest)
    assert record is not None
    return record


def base(*more: dict[str, Any]) -> list[dict[str, Any]]:
    return [node("n1", gpus=8), queue("q"), *PRIORITY_CLASSES, *more]


def test_gang_that_does_not_fit_gets_one_request_grouped_by_shape() -> None:
    _, plan, held = run(base(*gang("big", 5, 4)))  # 16 GPUs on an 8-GPU cluster
    assert len(plan.create) == 1 and not plan.delete
    new = plan.create[0]
    assert new.name == "big-provisioning-1" and new.attempt == 1 and new.class_name == CLASS
    assert new.parameters == (("ValidUntilSeconds", "600"),)
    assert [(dict(p.shape.requests), p.count) for p in new.pod_sets] == [
        ({"cpu": "2000m", "memory": str(4 * 2**30)}, 1),
        ({"cpu": "1000m", "memory": str(2**30), "nvidia.com/gpu": "4"}, 4)]
    manifest = new.manifest()
    assert manifest["apiVersion"] == "autoscaling.x-k8s.io/v1" and manifest["kind"] == "ProvisioningRequest"
    assert manifest["spec"]["podSets"] == [{"podTemplateRef": {"name": "big-provisioning-1-0"}, "count": 1},
                                           {"podTemplateRef": {"name": "big-provisioning-1-1"}, "count": 4}]
    owner = manifest["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "PodGroup" and owner["name"] == "big" and owner["uid"] == "uid-big"
    templates = new.templates()
    assert [t["metadata"]["name"] for t in templates] == ["big-provisioning-1-0", "big-provisioning-1-1"]
    assert templates[1]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    # the gang is held and its PodGroup explains why
    assert "ns/big" in plan.holds
    (u,) = [u for u in held.unschedulable if u.pod_group == "big"]
    assert u.reasons[-1].reason == provisioning.REASON_PENDING and "big-provisioning-1" in u.message
    assert not held.binds


def test_no_request_without_opt_in_or_when_the_gang_fits() -> None:
    _, plan, _ = run(base(*gang("big", 5, 4, annotations=None)))
    assert not plan.create and not plan.holds
    d, plan, _ = run(base(*gang("small", 3, 2)))
    assert len(d.binds) == 3 and not plan.create


def test_queue_annotation_opts_in_and_workload_parameters_win() -> None:
    q = queue("q")
    q["metadata"]["annotations"] = {"kai.scheduler/provisioning-class": "queued-provisioning.gke.io",
                                    "provisioning.kai.scheduler/a": "queue", "provisioning.kai.scheduler/b": "q"}
    objs = [node("n1", gpus=8), q, *PRIORITY_CLASSES,
            *gang("big", 5, 4, annotations={"provisioning.kai.scheduler/a": "workload"})]
    _, plan, _ = run(objs)
    (new,) = plan.create
    assert new.class_name == "queued-provisioning.gke.io" and new.parameters == (("a", "workload"), ("b", "q"))


def test_gang_blocked_by_its_queue_limit_gets_no_request() -> None:
    objs = [node("n1", gpus=8), queue("q", gpu=(4, 8, 1)), *PRIORITY_CLASSES, *gang("big", 5, 4)]
    d, plan, _ = run(objs)
    assert any(r.reason == "OverLimit" for u in d.unschedulable for r in u.reasons)
    assert not plan.create and not plan.holds


def test_pending_request_is_not_duplicated_and_keeps_the_hold() -> None:
    _, first, _ = run(base(*gang("big", 5, 4)))
    pending = existing(first.create[0], ("Accepted", "Accepted", NOW))
    _, plan, held = run(base(*gang("big", 5, 4)), [pending], NOW + 30)
    assert not plan.create and not plan.delete and "ns/big" in plan.holds
    (u,) = [u for u in held.unschedulable if u.pod_group == "big"]
    assert "waiting for ProvisioningRequest big-provisioning-1" in u.reasons[-1].message


def test_no_evictions_on_behalf_of_a_held_gang() -> None:
    # Queue a runs 8 one-GPU jobs over its fair share; queue b's 4-GPU gang would reclaim 4 of them.
    objs: list[dict[str, Any]] = [node("n1", gpus=8), queue("qa", gpu=(4, -1, 1)), queue("qb", gpu=(4, -1, 1)),
                                  *PRIORITY_CLASSES]
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa"), pod(f"a{i}-0", f"a{i}", gpus=1, node_name="n1", phase="Running")]
    objs += gang("b", 2, 2, queue_name="qb", head=False)
    d, plan, held = run(objs)
    assert any(e.for_pod_group == "ns/b" for e in d.evictions), "precondition: reclaim makes room for b"
    assert len(plan.create) == 1 and plan.create[0].pod_group == "b"
    assert not [e for e in held.evictions if e.for_pod_group == "ns/b"]
    assert not [p for p in held.pipelined if p.pod_group == "b"]
    (u,) = [u for u in held.unschedulable if u.pod_group == "b"]
    assert u.reasons == (plan.holds["ns/b"].reason,) and sorted(u.pod_messages) == ["b-w0", "b-w1"]
    # Once provisioned, the gang is scheduled as any other: evictions are allowed again.
    provisioned = existing(plan.create[0], ("Provisioned", "Provisioned", NOW))
    _, plan2, held2 = run(objs, [provisioned], NOW + 1)
    assert not plan2.holds and not plan2.create
    assert any(e.for_pod_group == "ns/b" for e in held2.evictions)


def test_failed_request_is_explained_and_retried_after_backoff() -> None:
    _, first, _ = run(base(*gang("big", 5, 4)))
    failed = existing(first.create[0], ("Failed", "OutOfCapacity", NOW), message="no A100 left")
    _, plan, held = run(base(*gang("big", 5, 4)), [failed], NOW + 5)
    assert not plan.create and not plan.delete and "ns/big" in plan.holds
    reason = next(u for u in held.unschedulable if u.pod_group == "big").reasons[-1]
    assert reason.reason == provisioning.REASON_FAILED
    assert "big-provisioning-1 Failed: OutOfCapacity: no A100 left; retrying in 5s" in reason.message
    _, plan, _ = run(base(*gang("big", 5, 4)), [failed], NOW + provisioning.backoff(1))
    assert [r.name for r in plan.delete] == ["big-provisioning-1"]
    assert [(r.name, r.attempt) for r in plan.create] == [("big-provisioning-2", 2)]
    assert provisioning.backoff(2) == 2 * provisioning.backoff(1)
    assert provisioning.backoff(30) == provisioning.BACKOFF_MAX


def test_revoked_or_expired_capacity_counts_as_failure() -> None:
    _, first, _ = run(base(*gang("big", 5, 4)))
    for kind in ("CapacityRevoked", "BookingExpired"):
        record = existing(first.create[0], ("Provisioned", "Provisioned", NOW), (kind, kind, NOW))
        assert not record.provisioned
        _, plan, _ = run(base(*gang("big", 5, 4)), [record], NOW + 1)
        assert plan.holds["ns/big"].reason.reason == provisioning.REASON_FAILED
        assert kind in plan.holds["ns/big"].reason.message


def test_partial_provisioning_never_binds_part_of_the_gang() -> None:
    _, first, _ = run(base(*gang("big", 5, 4)))
    provisioned = existing(first.create[0], ("Provisioned", "Provisioned", NOW))
    # One of two new 4-GPU nodes arrived: 12 GPUs for 16 needed. Three workers would fit; none is bound.
    objs = base(node("new-0", gpus=4), *gang("big", 5, 4))
    d, plan, held = run(objs, [provisioned], NOW + 1)
    assert not d.binds and not held.binds
    assert not plan.create and not plan.holds


def test_request_is_deleted_when_the_gang_runs_or_is_gone() -> None:
    _, first, _ = run(base(*gang("big", 5, 4)))
    provisioned = existing(first.create[0], ("Provisioned", "Provisioned", NOW))
    objs = base(node("new-0", gpus=8), node("new-1", gpus=8), *gang("big", 5, 4))
    objs = [o for o in objs if o["metadata"]["name"] != "n1"]
    _, plan, held = run(objs, [provisioned], NOW + 1)
    assert len(held.binds) == 5 and not plan.delete  # bound this cycle: the request goes once they run
    placed = {b.pod: b.node for b in held.binds}
    for o in objs:
        if o["kind"] == "Pod":
            o["spec"]["nodeName"], o["status"]["phase"] = placed[o["metadata"]["name"]], "Running"
    _, plan, _ = run(objs, [provisioned], NOW + 2)
    assert [r.name for r in plan.delete] == ["big-provisioning-1"]
    _, plan, _ = run(base(), [provisioned], NOW + 2)  # PodGroup deleted
    assert [r.name for r in plan.delete] == ["big-provisioning-1"]


def test_requests_of_others_are_ignored() -> None:
    foreign = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
               "metadata": {"name": "x", "namespace": "ns"}, "spec": {"provisioningClassName": CLASS}}
    assert provisioning.provisioning_request_record(foreign) is None


def test_long_names_stay_valid_and_deterministic() -> None:
    long = "pg-" + "r" * 240 + "-0123"
    name = provisioning.request_name(long, 3)
    assert len(provisioning.template_name(name, 31)) <= 253 and name.endswith("-provisioning-3")
    assert name == provisioning.request_name(long, 3) != provisioning.request_name(long + "x", 3)


def test_simulate_lists_the_would_be_request() -> None:
    out = run_simulation(base(*gang("big", 5, 4)))
    (req,) = out["provisioning"]
    assert req["name"] == "big-provisioning-1" and req["podGroup"] == "big"
    assert [p["count"] for p in req["podSets"]] == [1, 4]
    assert "provisioning" not in run_simulation(base(*gang("small", 2, 2)))


def test_provisioned_gang_is_placed_on_the_new_nodes() -> None:
    _, first, _ = run(base(*gang("big", 3, 8, head=False)))  # 24 GPUs; n1 has 8
    request = first.create[0].manifest()
    request["metadata"]["creationTimestamp"] = "2025-01-01T00:10:00Z"
    request["status"] = {"conditions": [{"type": "Provisioned", "status": "True", "reason": "Provisioned",
                                         "message": "", "lastTransitionTime": "2025-01-01T00:11:00Z"}]}
    record = provisioning.provisioning_request_record(request)
    assert record is not None
    new = [node(f"new-{i}", gpus=8) for i in range(3)]
    for n in new:
        n["metadata"]["creationTimestamp"] = "2025-01-01T00:10:30Z"
    old = node("n1", gpus=8)
    old["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    snapshot = provisioning.prefer_new_nodes(
        snapshot_from_objects([old, *new, queue("q"), *PRIORITY_CLASSES, *gang("big", 3, 8, head=False)]), [record])
    assert {p.name: p.nominated_node for p in snapshot.pods} == {"big-w0": "new-0", "big-w1": "new-1",
                                                                  "big-w2": "new-2"}
    d = run_cycle(snapshot, SchedulerConfig(), NOW)
    assert {b.pod: b.node for b in d.binds} == {"big-w0": "new-0", "big-w1": "new-1", "big-w2": "new-2"}
    # Without a provisioned request nothing is nominated.
    plain = snapshot_from_objects([old, *new, queue("q"), *gang("big", 3, 8, head=False)])
    assert provisioning.prefer_new_nodes(plain, []) is plain


def test_gang_that_fits_before_its_request_is_provisioned_waits_for_it() -> None:
    _, first, _ = run(base(*gang("big", 5, 4)))
    pending = existing(first.create[0], ("Accepted", "Accepted", NOW))
    objs = base(node("new-0", gpus=8), node("new-1", gpus=8), *gang("big", 5, 4))  # the nodes arrived
    d, plan, held = run(objs, [pending], NOW + 5)
    assert len(d.binds) == 5, "precondition: the gang fits"
    assert not held.binds and "ns/big" in plan.holds and not plan.delete
    (u,) = [u for u in held.unschedulable if u.pod_group == "big"]
    assert "waiting for ProvisioningRequest big-provisioning-1" in u.message and len(u.pod_messages) == 5
    # A failed request does not hold a gang that fits: it runs, and the request goes next cycle.
    failed = existing(first.create[0], ("Failed", "OutOfCapacity", NOW))
    _, plan, held = run(objs, [failed], NOW + 5)
    assert len(held.binds) == 5 and not plan.holds


def test_provisioned_gang_waits_for_the_new_nodes_to_be_ready_for_at_most_the_grace() -> None:
    _, first, _ = run(base(*gang("big", 3, 8, head=False)))  # 24 GPUs; n1 has 8
    request = first.create[0].manifest()
    request["metadata"]["creationTimestamp"] = "2025-01-01T00:10:00Z"
    provisioned_at = dt.datetime(2025, 1, 1, 0, 11, tzinfo=dt.UTC).timestamp()
    record = existing(first.create[0], ("Provisioned", "Provisioned", provisioned_at))
    record = dataclasses.replace(record, created=provisioned_at - 60)
    old = [node(f"old-{i}", gpus=8) for i in range(2)]
    new = [node("new-0", gpus=8), node("new-1", gpus=8, ready=False)]  # the second one is still coming up
    for n in old:
        n["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    for n in new:
        n["metadata"]["creationTimestamp"] = "2025-01-01T00:10:30Z"
    objs = [*old, *new, queue("q"), *PRIORITY_CLASSES, *gang("big", 3, 8, head=False)]

    d, plan, held = run(objs, [record], provisioned_at + 2)
    assert len(d.binds) == 3, "precondition: the gang fits on the old nodes and the Ready new one"
    assert not held.binds and "ns/big" in plan.holds
    (u,) = [u for u in held.unschedulable if u.pod_group == "big"]
    assert "waiting for 1 of the nodes added since to be Ready" in u.message
    # Past the grace the gang runs on what is there.
    _, plan, held = run(objs, [record], provisioned_at + provisioning.NODES_READY_GRACE)
    assert len(held.binds) == 3 and not plan.holds
    # A cordoned new node is not coming.
    new[1]["spec"]["unschedulable"] = True
    _, plan, held = run(objs, [record], provisioned_at + 2)
    assert len(held.binds) == 3 and not plan.holds
