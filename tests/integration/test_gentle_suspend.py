"""Suspend instead of kill, live: a batch Job that opted in (`kai.scheduler/suspend-on-preemption`), chosen as a
victim, is suspended with one patch (kube-controller-manager's Job controller removes its pods), its PodGroup keeps
its minMember, `kai why` shows when it resumes, and once capacity returns it is resumed whole: no pod of it is bound
while another waits."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.integration.test_disruption import apply, events, isolated_nodes, pod_spec, pods, queue, running, wait_for
from tests.integration.test_gentle import bare_pod
from tests.integration.test_kai_cli import kai
from tests.support import Cluster, audit_mark, audited

pytestmark = pytest.mark.cluster


def job(name: str, queue_name: str, selector: dict[str, str]) -> dict[str, Any]:
    """Two pods of 2 GPUs, a gang of 2, opted in to suspension."""
    labels = {"app": name, "kai.scheduler/queue": queue_name, "priorityClassName": "train"}
    template = {"metadata": {"labels": labels}, "spec": {**pod_spec(2, selector), "restartPolicy": "Never"}}
    annotations = {"kai.scheduler/suspend-on-preemption": "true", "kai.scheduler/batch-min-member": "2"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 10, "template": template}}


def podgroup_of(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """The Job's PodGroup (found through its owner, as its pods may be gone)."""
    [group] = [g for g in cluster.get_json("podgroups.scheduling.run.ai", namespace=namespace)["items"]
               if [o["kind"] for o in g["metadata"].get("ownerReferences") or ()] == ["Job"]]
    return group


def test_an_opted_in_job_is_suspended_whole_and_resumed_whole(cluster: Cluster, namespace: str) -> None:
    q = f"suspend-{uuid.uuid4().hex[:6]}"
    selector = isolated_nodes(cluster, namespace, count=1, gpus=4)
    apply(cluster, namespace, [queue(q), job("train", q, selector)])
    wait_for("the Job's two pods to run", lambda: len(running(pods(cluster, namespace, "app=train"))) == 2 or None,
             timeout=120)
    group = podgroup_of(cluster, namespace)["metadata"]["name"]
    mark = audit_mark(cluster)

    # A higher-priority pod needs the whole node: the Job's gang is the victim, and it is suspended.
    apply(cluster, namespace, [bare_pod("urgent", q, 4, "build-preemptible", selector)])
    wait_for("the Job to be suspended", lambda: cluster.get_json("job", "train", namespace=namespace)["spec"].get(
        "suspend") is True or None, timeout=60)
    wait_for("the preemptor to run", lambda: running(pods(cluster, namespace, "app=urgent")) or None, timeout=90)
    assert pods(cluster, namespace, "app=train") == []  # the Job controller removed them all
    spent = audited(cluster, mark, namespace=namespace)
    assert spent["PATCH jobs"] == 1  # one patch for the whole Job
    assert spent["POST pods/eviction"] == 0  # its pods were not evicted
    [suspended] = [e["message"] for e in events(cluster, namespace, "SuspendedByScheduler")
                   if e["involvedObject"]["kind"] == "Job"]
    assert f"(preempt for {namespace}/pg-urgent-" in suspended, suspended  # the action and the preemptor
    assert "resumes whole once its gang of 2 pod(s) (4 GPUs" in suspended, suspended
    pg = podgroup_of(cluster, namespace)
    assert pg["metadata"]["name"] == group and pg["spec"]["minMember"] == 2
    assert "kai.scheduler/suspended-by-scheduler" in pg["metadata"]["annotations"]
    why = kai(cluster, "why", "job", "train", "-n", namespace)
    assert why.returncode == 1, why.stderr
    assert ": suspended" in why.stdout and "resumes whole once its gang of 2 pod(s) (4 GPUs" in why.stdout, why.stdout

    # Capacity returns: the Job resumes, and both of its pods are placed together.
    cluster.kubectl("delete", "pod", "urgent", "-n", namespace, "--wait=false")
    deadline = time.monotonic() + 90
    while True:
        assert time.monotonic() < deadline, "the Job did not run again"
        train = [p for p in pods(cluster, namespace, "app=train") if not p["metadata"].get("deletionTimestamp")]
        bound = [p for p in train if p["spec"].get("nodeName")]
        if bound:  # the first bound pod: the whole gang exists and every pod of it is bound or being bound
            requests = {o["metadata"]["name"] for o in cluster.get_json(
                "bindrequests.scheduling.run.ai", namespace=namespace)["items"]}
            assert len(train) == 2 and all(p["spec"].get("nodeName") or p["metadata"]["name"] in requests
                                           for p in train), [p["metadata"]["name"] for p in bound]
        if len(running(train)) == 2:
            break
        time.sleep(0.2)
    assert cluster.get_json("job", "train", namespace=namespace)["spec"].get("suspend") is False
    assert [e for e in events(cluster, namespace, "ResumedByScheduler") if e["involvedObject"]["kind"] == "Job"]
    assert "kai.scheduler/suspended-by-scheduler" not in podgroup_of(cluster, namespace)["metadata"]["annotations"]
