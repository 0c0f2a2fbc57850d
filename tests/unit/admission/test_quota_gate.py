"""Quota gates (admission `--quota-gates`, beyond KAI): a new pod of the scheduler gets the gate once; other pods,
bound pods and the default (off) get nothing."""

from __future__ import annotations

from typing import Any

from operators.admission.mutate import mutate_pod
from operators.admission.review import mutate_review
from operators.core import keys

GATE_OP = {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": keys.QUOTA_GATE}]}


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "c"}], **spec}}


def ops(p: dict[str, Any], gate: bool = True) -> list[dict[str, Any]]:
    return mutate_pod(p, "ns", runtime_class_name=None, quota_gate=gate)


def test_the_gate_is_added_only_when_on() -> None:
    assert GATE_OP in ops(pod())
    assert not any("schedulingGates" in o["path"] for o in ops(pod(), gate=False))


def test_it_joins_other_gates_and_is_never_added_twice() -> None:
    assert {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": keys.QUOTA_GATE}} in ops(
        pod(schedulingGates=[{"name": "other"}]))
    assert not any("schedulingGates" in o["path"] for o in ops(pod(schedulingGates=[{"name": keys.QUOTA_GATE}])))


def test_bound_pods_and_other_schedulers_are_left_alone() -> None:
    assert not any("schedulingGates" in o["path"] for o in ops(pod(nodeName="n1")))
    assert ops(pod(schedulerName="default-scheduler")) == []


def test_the_review_passes_the_flag() -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": pod()}}
    answer = mutate_review(review, runtime_class_name=None, quota_gate=True)
    assert answer["response"]["allowed"] and answer["response"].get("patch")
