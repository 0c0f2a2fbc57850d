"""The scheduler loop streams BindRequests to the API server: a job's are created while the cycle that committed it
still runs, each exactly once.

A `SchedulerLoop` of the test's own, on a real API client, decides on objects put straight into its caches (they
need not exist on the server: the cluster's scheduler never sees them, so it binds nothing of theirs); its cycle
is wrapped to look at the server from inside the cycle's thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle
from operators.scheduler.decide.decisions import Decisions
from operators.scheduler.decide.provisioning import ProvisioningRequestRecord
from operators.scheduler.decide.session import Carry
from operators.scheduler.shell import loop as loop_module
from operators.scheduler.shell.loop import SchedulerLoop
from tests.support import Cluster, audit_mark, audited

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"


def objects(namespace: str, gangs: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """One 4-GPU node, a queue `q`, and per gang name (pods, GPUs per pod) a PodGroup and its pending pods."""
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "stream-n1", "labels": {}},
         "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU: "4", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {"gpu": free, "cpu": free, "memory": free}}}]
    for name, (size, gpus) in gangs.items():
        out.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": {}},
                    "spec": {"minMember": size, "queue": "q"}})
        out += [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{name}-{i}", "namespace": namespace, "uid": f"uid-{name}-{i}",
                              "annotations": {"pod-group-name": name}, "labels": {"kai.scheduler/queue": "q"}},
                 "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "resources": {
                     "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {GPU: str(gpus)}}}]},
                 "status": {"phase": "Pending"}} for i in range(size)]
    return out


def scheduler(api: Any, objs: list[dict[str, Any]]) -> SchedulerLoop:
    loop = SchedulerLoop(api, SchedulerConfig())
    informers: dict[str, Any] = {"Node": loop.nodes, "Pod": loop.pods, "PodGroup": loop.podgroups,
                                 "Queue": loop.queues}
    for obj in objs:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        informer = informers[obj["kind"]]
        informer._put(key, informer.parse(obj), "ADDED")
    return loop


def created(cluster: Cluster, namespace: str, since: int, wait: float) -> int:
    """BindRequest creates in `namespace` the API server answered since the audit mark `since`, once there is one
    or `wait` seconds passed.

    Counted rather than listed: the cluster's binder and scheduler may fail and delete these BindRequests (their
    pods exist only in the test's caches) as soon as they appear."""
    deadline = time.monotonic() + wait
    while True:
        count = audited(cluster, since, namespace=namespace)["POST bindrequests"]
        if count or time.monotonic() > deadline:
            return count
        time.sleep(0.2)


async def written(loop: SchedulerLoop) -> None:
    """Every write the cycle started has been answered (its explanations of the gang that does not fit too)."""
    while loop._writing:
        await asyncio.gather(*loop._writing, return_exceptions=True)
    if loop._explaining is not None:
        await asyncio.gather(loop._explaining, return_exceptions=True)


async def test_bindrequests_are_created_while_the_cycle_still_runs_and_only_once(
        cluster: Cluster, namespace: str, api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = scheduler(api, objects(namespace, {"a": (2, 1), "b": (2, 1), "too-big": (2, 4)}))
    during: list[int] = []
    before = audit_mark(cluster)

    def slow_cycle(*args: Any, **kwargs: Any) -> tuple[Decisions, Carry]:
        decisions, carry = run_carried_cycle(*args, **kwargs)
        # Still inside the cycle's thread: the committed jobs' BindRequests are already on the server.
        during.append(created(cluster, namespace, before, wait=20))
        return decisions, carry

    monkeypatch.setattr(loop_module, "run_carried_cycle", slow_cycle)
    decisions = await loop.cycle()
    await written(loop)
    assert {b.pod for b in decisions.binds} == {"a-0", "a-1", "b-0", "b-1"}
    assert during and during[0], "nothing was created before the cycle returned"
    # Each exactly once: the commit skipped those streamed while the cycle ran.
    assert created(cluster, namespace, before, wait=0) == 4
    assert set(loop.bindrequests.store) == {f"{namespace}/{p}" for p in ("a-0", "a-1", "b-0", "b-1")}


async def test_a_gang_with_a_provisioning_request_waits_for_the_cycles_end(
        cluster: Cluster, namespace: str, api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = scheduler(api, objects(namespace, {"a": (2, 1)}))
    loop.provisioning.requests._put(f"{namespace}/a-provisioning-1", ProvisioningRequestRecord(
        namespace=namespace, name="a-provisioning-1", uid="u", pod_group="a", attempt=1, class_name="c",
        templates=()), "ADDED")
    during: list[int] = []
    before = audit_mark(cluster)

    def watched_cycle(*args: Any, **kwargs: Any) -> tuple[Decisions, Carry]:
        decisions, carry = run_carried_cycle(*args, **kwargs)
        during.append(created(cluster, namespace, before, wait=3))  # what a streamed bind would have had time to create
        return decisions, carry

    monkeypatch.setattr(loop_module, "run_carried_cycle", watched_cycle)
    await loop.cycle()
    await written(loop)
    assert during == [0], "streamed although the provisioning plan may still hold the gang"
    # Provisioning is off here, so the binds go out at commit.
    assert created(cluster, namespace, before, wait=0) == 2
    assert set(loop.bindrequests.store) == {f"{namespace}/a-0", f"{namespace}/a-1"}
