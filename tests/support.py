"""Helpers shared by the integration and end-to-end tests (the fixtures are in the root conftest.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
# The repository's own examples (examples/): what the README shows, and what the tests apply.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
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


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def labelled(docs: list[dict[str, Any]]) -> str:
    """The documents as YAML, cluster-scoped ones labelled so that the namespace fixture cleans them up."""
    out = []
    for doc in docs:
        if doc.get("kind") in ("Queue", "PriorityClass", "Node", "Topology"):
            doc.setdefault("metadata", {}).setdefault("labels", {})[TEST_LABEL] = "true"
        out.append(doc)
    return yaml.safe_dump_all(out)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 60, interval: float = 0.5) -> T:
    """Poll `check` until it returns something truthy; errors while polling count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
            last = exc
        else:
            if last:
                return last  # type: ignore[no-any-return]
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def poll(predicate: Callable[[], T | None], what: str, timeout: float = 60, interval: float = 0.5) -> T:
    """Poll until `predicate` returns something truthy (errors propagate); fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)


def apply(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace)


def items(cluster: Cluster, kind: str, namespace: str | None = None, *extra: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cluster.get_json(kind, *extra, namespace=namespace)["items"]
    return out


def queue(name: str, parent: str = "", gpu: tuple[float, float, float] = (-1, -1, 1)) -> dict[str, Any]:
    """A Queue; gpu = (quota, limit, overQuotaWeight); cpu and memory unlimited."""
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu[0], "limit": gpu[1], "overQuotaWeight": gpu[2]},
                                          "cpu": free, "memory": free}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
