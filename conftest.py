"""Shared fixtures: the local control plane (one per test session) and a namespace per test.

Set KAI_TEST_REUSE=1 to use (and keep) an already running cluster named by KAI_TEST_CLUSTER (default `test`),
started with `kai dev up --name test --port-base 17000 --audit-policy tests/audit-policy.yaml --detach`. The audit
log is how the tests count the requests of one namespace or one component (`tests.support.audited`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.support import AUDIT_POLICY, TEST_LABEL, Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    from operators.devcluster import cluster as dev

    name = os.environ.get("KAI_TEST_CLUSTER", "test")
    reuse = os.environ.get("KAI_TEST_REUSE") == "1"
    state = dev.load_state(name)
    started = False
    if not (reuse and state is not None and dev.is_running(state)):
        state = dev.up(dev.Options(name=name, port_base=int(os.environ.get("KAI_TEST_PORT_BASE", "17000")),
                                   autoscaler=True, timeout=300, audit_policy=AUDIT_POLICY.read_text()))
        started = True
    assert state is not None
    yield Cluster(name=name, kubeconfig=state.kubeconfig, kubectl_bin=state.kubectl, state_dir=state.dir)
    if started and not reuse:
        dev.down(name, quiet=True)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("label", "namespace", ns, f"{TEST_LABEL}=true")
    yield ns
    # Wait for the namespace to go: its pods (and their GPU shares) must not leak into the next test.
    cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
    # Cluster-scoped objects a test created carry the test label.
    for kind in ("queues.scheduling.run.ai", "priorityclasses", "nodes", "topologies.kai.scheduler"):
        cluster.kubectl("delete", kind, "-l", f"{TEST_LABEL}=true", "--wait=false", check=False)


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[Any]:
    from operators.core.kube import api_client

    client = await api_client(cluster.kubeconfig)
    async with client:
        yield client
