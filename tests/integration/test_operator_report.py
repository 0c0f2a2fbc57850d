"""The operator's condition writes against a real API server: a write computed before a newer one landed must not
put a stale condition back.

Handlers of different Deployments run concurrently and read the same index. When all components become ready at
once, one handler can read "kai-scheduler-default not available" from the index, lose its write to another
handler's `Available=True` (409), and, had it kept what it computed, retry with the stale `False`: nothing later
would correct it, and an install waiting on `Available` would time out. `Operator.report` computes the conditions
after each read of the object instead.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import Cluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def shard(cluster: Cluster) -> Iterator[str]:
    name = f"report-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": name},
        "spec": {"partitionLabelValue": name}}))
    yield name
    cluster.kubectl("delete", "schedulingshard", name, "--ignore-not-found", "--wait=false")


def available(cluster: Cluster, name: str) -> str | None:
    conditions = (cluster.get_json("schedulingshard", name).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Available"), None)


async def test_a_write_that_lost_to_a_newer_one_is_recomputed_not_replayed(cluster: Cluster, shard: str) -> None:
    from operators.core.kube import api_client
    from operators.operator import status
    from operators.operator.main import Operator

    index = {"available": False}  # what the Deployments index says
    calls = []

    def conditions_now() -> list[dict[str, Any]]:
        state = status.Rollout(1, 1, 1) if index["available"] else status.Rollout(1, 1, 0, ("kai-scheduler-x",))
        calls.append(index["available"])
        if len(calls) == 1:
            # Between this handler's read and its write, the Deployment becomes available and another handler
            # writes Available=True: this handler's write must now fail on the resourceVersion and be recomputed.
            index["available"] = True
            newer = status.conditions(1, [], applied=True, state=status.Rollout(1, 1, 1))
            cluster.kubectl("patch", "schedulingshard", shard, "--subresource=status", "--type=merge",
                            "-p", json.dumps({"status": {"conditions": [
                                {**c, "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in newer]}}))
        return status.conditions(1, [], applied=True, state=state)

    api = await api_client(cluster.kubeconfig)
    try:
        body = cluster.get_json("schedulingshard", shard)
        await Operator(api, "test").report(body, conditions_now)
    finally:
        await api.close()
    assert calls[:2] == [False, True], calls
    assert available(cluster, shard) == "True"
