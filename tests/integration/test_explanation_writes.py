"""The scheduler's writer against the real API server: a pending pod's explanation is written again for a new reason
or a new pod of the same name at once, for new counts only after `--explanation-refresh` (0: every change, as KAI).

The pods name a scheduler nobody runs, so only this test's writer explains them; the writes are counted in the API
server's audit log.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Unschedulable
from tests.support import Cluster, audit_mark, audited

pytestmark = pytest.mark.cluster

SCHEDULER = "explanation-writes-test"
GPUS = "Resources were not found for pod {ns}/p-1 due to: {n} node(s) didn't have enough resources: GPUs."
TAINT = GPUS + " \n{t} node(s) had untolerated taint {{gpu: busy}}."


def create_pod(cluster: Cluster, namespace: str) -> dict[str, Any]:
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-1", "annotations": {keys.POD_GROUP_NAME: "pg-1"}},
        "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "c", "image": "busybox"}]}}))
    pod: dict[str, Any] = cluster.get_json("pod", "p-1", namespace=namespace)
    return pod


def condition_writes(cluster: Cluster, namespace: str, since: int) -> int:
    return audited(cluster, since, namespace=namespace, name="p-1")["PATCH pods/status"]


async def explain_each(cluster: Cluster, namespace: str, refresh: float, messages: list[list[str]]) -> list[int]:
    """For each list of messages, the loop explains each in turn; returns the condition writes after each list.
    Between the lists, the pod is deleted and created again under the same name when the list is empty."""
    from operators.core.kube import api_client
    from operators.scheduler.shell.loop import SchedulerLoop

    api = await api_client(cluster.kubeconfig)
    try:
        loop = SchedulerLoop(api, SchedulerConfig(scheduler_name=SCHEDULER), explanation_refresh=refresh)
        loop.pods._put(f"{namespace}/p-1", loop.pods.parse(create_pod(cluster, namespace)), "ADDED")
        since = audit_mark(cluster)
        out = []
        for batch in messages:
            if not batch:
                cluster.kubectl("delete", "pod", "p-1", "--wait=true", namespace=namespace)
                loop.pods._put(f"{namespace}/p-1", loop.pods.parse(create_pod(cluster, namespace)), "MODIFIED")
                continue
            for message in batch:
                await loop.explain(Unschedulable(namespace, "pg-1", "default", message, (), {"p-1": message}, False))
            out.append(condition_writes(cluster, namespace, since))
        return out
    finally:
        await api.close()


async def test_a_new_reason_or_a_new_pod_is_written_new_counts_are_not(cluster: Cluster, namespace: str) -> None:
    gpus = [GPUS.format(ns=namespace, n=n) for n in (3, 4, 5)]  # counts move every cycle
    taint = TAINT.format(ns=namespace, n=5, t=1)  # a new reason
    again = TAINT.format(ns=namespace, n=6, t=1)  # the same reason, for a pod created again under the same name
    assert await explain_each(cluster, namespace, 300, [gpus, [taint], [], [again]]) == [1, 2, 3]


async def test_with_no_refresh_interval_every_change_of_counts_is_written_as_kai_does(
        cluster: Cluster, namespace: str) -> None:
    texts = [GPUS.format(ns=namespace, n=n) for n in (3, 4, 5, 5)]
    assert await explain_each(cluster, namespace, 0, [texts]) == [3]  # every new text, the repeated one not
