"""The slim pod records keep what their component reads and nothing that changes without concerning it."""

from __future__ import annotations

import copy
from typing import Any

from operators.core import resources, slim

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                 "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"kai.scheduler/queue": "q"},
                 "annotations": {"pod-group-name": "pg", "gpu-fraction": "0.5"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju"}],
                 "managedFields": [{"manager": "kubelet"}]},
    "spec": {"schedulerName": "kai-scheduler", "nodeName": "n1", "priorityClassName": "train",
             "overhead": {"cpu": "100m"}, "tolerations": [{"key": "k", "operator": "Exists"}],
             "containers": [{"name": "c", "image": "i", "env": [{"name": "E", "value": "v"}],
                             "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}}],
             "initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "2"}}}]},
    "status": {"phase": "Running", "podIP": "10.0.0.1",
               "conditions": [{"type": "Ready", "status": "True"},
                              {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t"},
                              {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
               "containerStatuses": [{"name": "c", "resources": {"requests": {"cpu": "3"}}, "ready": True}]},
}


def test_the_accounting_record_gives_the_same_requests_and_conditions() -> None:
    record = slim.accounting_pod(copy.deepcopy(POD))
    assert resources.pod_container_requests(record["spec"], record["status"]) == \
        resources.pod_container_requests(POD["spec"], POD["status"])
    assert [c["type"] for c in record["status"]["conditions"]] == ["PodScheduled", "PodResizePending"]
    assert record["metadata"]["annotations"] == POD["metadata"]["annotations"]
    assert record["spec"]["nodeName"] == "n1" and record["status"]["phase"] == "Running"
    assert "tolerations" not in record["spec"] and "env" not in record["spec"]["containers"][0]


def test_the_grouping_record_keeps_metadata_and_the_spec_fields_the_rules_read() -> None:
    record = slim.grouping_pod(copy.deepcopy(POD))
    assert record["metadata"]["ownerReferences"] == POD["metadata"]["ownerReferences"]
    assert record["spec"] == {"schedulerName": "kai-scheduler", "nodeName": "n1", "priorityClassName": "train"}
    assert "status" not in record and "managedFields" not in record["metadata"]


def test_a_status_or_version_change_leaves_both_records_equal() -> None:
    later = copy.deepcopy(POD)
    later["metadata"]["resourceVersion"] = "8"
    later["status"]["podIP"] = "10.0.0.2"
    later["status"]["conditions"][0]["status"] = "False"  # Ready flips: nobody reads it
    assert slim.accounting_pod(later) == slim.accounting_pod(POD)
    assert slim.grouping_pod(later) == slim.grouping_pod(POD)
    later["status"]["phase"] = "Succeeded"
    assert slim.accounting_pod(later) != slim.accounting_pod(POD)
    assert slim.grouping_pod(later) == slim.grouping_pod(POD)
