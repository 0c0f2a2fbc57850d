"""The pod parser shares what pods of one shape ask (requests, tolerations, constraints): the records are those of
a parse with nothing remembered, and inputs that compare equal in Python but parse differently are never aliased."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.scheduler.decide import records
from operators.scheduler.decide.records import NO_CONSTRAINTS, pod_record


def _forget() -> None:
    for memo in (records._TOLERATIONS, records._CONSTRAINTS, records._REQUESTS):
        memo.clear()


def _pod(name: str, cpu: Any = "500m", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"app": "train"},
                         "annotations": {"pod-group-name": "g"}},
            "spec": {"schedulerName": "kai-scheduler",
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"},
                                                                   "limits": {"nvidia.com/gpu": "1"}}}],
                     "tolerations": [{"key": "b", "operator": "Exists"}, {"key": "a", "value": "x"}], **spec},
            "status": {"phase": "Pending"}}


SHAPES = [
    _pod("plain"),
    _pod("selector", nodeSelector={"zone": "a"}),
    _pod("ports", containers=[{"name": "main", "ports": [{"hostPort": 80}]}]),
    _pod("configmap", volumes=[{"name": "v", "configMap": {"name": "cm"}}]),
    _pod("sidecar", initContainers=[{"name": "s", "restartPolicy": "Always",
                                     "resources": {"requests": {"cpu": "2"}}}]),
    _pod("overhead", overhead={"cpu": "250m"}),
    _pod("affinity", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "h"}]}}),
]


@pytest.mark.parametrize("pod", SHAPES, ids=lambda p: p["metadata"]["name"])
def test_records_equal_a_parse_with_nothing_remembered(pod: dict[str, Any]) -> None:
    _forget()
    fresh = pod_record(copy.deepcopy(pod))
    again = pod_record(copy.deepcopy(pod))  # from the memos
    assert again == fresh and repr(again) == repr(fresh) and again.fit_key == fresh.fit_key
    assert again.constraints is fresh.constraints  # one object per shape, hashed once


def test_an_in_place_resize_is_part_of_the_shape() -> None:
    _forget()
    given = {"containerStatuses": [{"name": "main", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}
    deferred = {**given, "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]}
    infeasible = {**given, "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]}
    records_ = [pod_record({**_pod("p"), "status": {"phase": "Running", **status}})
                for status in ({}, given, deferred, infeasible)]
    assert [(r.cpu, r.resize_from) for r in records_] == [(500, None), (2000, None), (2000, (2000, 1 << 30)),
                                                          (2000, None)]


def test_values_equal_in_python_but_not_as_quantities_are_not_aliased() -> None:
    _forget()
    assert pod_record(_pod("text", cpu="1")).cpu == 1000
    assert pod_record(_pod("bool", cpu=True)).cpu == 0  # not a quantity: the pod's requests are unreadable
    assert pod_record(_pod("int", cpu=1)).cpu == 1000
    tolerations = [{"key": "k", "value": 1}]
    other = [{"key": "k", "value": True}]
    first = pod_record(_pod("one", tolerations=tolerations)).constraints.tolerations
    second = pod_record(_pod("true", tolerations=other)).constraints.tolerations
    assert (first[0].value, second[0].value) == ("1", "True")


def test_no_constraints_stays_the_shared_empty_value() -> None:
    _forget()
    pod = _pod("bare")
    del pod["spec"]["tolerations"]
    assert pod_record(pod).constraints is NO_CONSTRAINTS


def test_the_memos_are_bounded() -> None:
    _forget()
    for i in range(records._MEMO_MAX + 10):
        pod_record(_pod(f"p{i}", cpu=f"{i + 1}m"))
    assert len(records._REQUESTS) <= records._MEMO_MAX
