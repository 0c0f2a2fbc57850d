"""Shared fixtures: the local control plane (one per test session) and a namespace per test.

Set KAI_TEST_REUSE=1 to use (and keep) an already running cluster named by KAI_TEST_CLUSTER (default `test`),
started with `kai dev up --name test --port-base 17000 --detach`.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TEST_LABEL = "kai.test/owned"


@dataclass
class Cluster:
    name: str
    kubeconfig: str
    kubectl_bin: str
    state_dir: str

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                namespace: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}"]
        if namespace:
            argv.append(f"--namespace={namespace}")
        proc = subprocess.run([*argv, *args], input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def get_json(self, *args: str, namespace: str | None = None) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", namespace=namespace).stdout)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    from operators.devcluster import cluster as dev

    name = os.environ.get("KAI_TEST_CLUSTER", "test")
    reuse = os.environ.get("KAI_TEST_REUSE") == "1"
    state = dev.load_state(name)
    started = False
    if not (reuse and state is not None and dev.is_running(state)):
        state = dev.up(dev.Options(name=name, port_base=int(os.environ.get("KAI_TEST_PORT_BASE", "17000")),
                                   timeout=300))
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
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    # Cluster-scoped objects a test created carry the test label.
    for kind in ("queues.scheduling.run.ai", "priorityclasses", "nodes"):
        cluster.kubectl("delete", kind, "-l", f"{TEST_LABEL}=true", "--wait=false", check=False)


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[Any]:
    from operators.core.kube import api_client

    client = await api_client(cluster.kubeconfig)
    async with client:
        yield client


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def labelled(docs: list[dict[str, Any]]) -> str:
    """The documents as YAML, cluster-scoped ones labelled so that the namespace fixture cleans them up."""
    out = []
    for doc in docs:
        if doc.get("kind") in ("Queue", "PriorityClass", "Node"):
            doc.setdefault("metadata", {}).setdefault("labels", {})[TEST_LABEL] = "true"
        out.append(doc)
    return yaml.safe_dump_all(out)
