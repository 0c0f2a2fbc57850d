"""JSON logs of running components on the local control plane: every line is one object with the component,
and a line about an object names it (kind, namespace, name) and the reason it reports.

A second pod-grouper and scheduler run beside the cluster's own, with a scheduler name of their own, so only
this test's pod is theirs: the pod-grouper groups it, the scheduler finds no room for it and reports why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support import Cluster, labelled, wait_for

pytestmark = pytest.mark.cluster


def start(cluster: Cluster, component: str, scheduler_name: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "operators.cli", "run", component, f"--kubeconfig={cluster.kubeconfig}",
            f"--scheduler-name={scheduler_name}", "--log-format=json", f"--lease-name={scheduler_name}",
            "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def json_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_components_log_json_with_object_and_reason(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    name = f"json-{uuid.uuid4().hex[:6]}"
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
             "spec": {"resources": {"gpu": free, "cpu": free, "memory": free}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "too-big", "labels": {"kai.scheduler/queue": name}},
           "spec": {"schedulerName": name, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "busybox",
                                    "resources": {"limits": {"nvidia.com/gpu": "1000"}}}]}}
    procs = {c: start(cluster, c, name, tmp_path / f"{c}.log") for c in ("pod-grouper", "scheduler")}
    try:
        cluster.kubectl("apply", "-f", "-", input=labelled([queue]))
        cluster.kubectl("apply", "-f", "-", namespace=namespace, input=labelled([pod]))
        about_pod = {"kind": "Pod", "namespace": namespace, "name": "too-big"}

        def reported() -> dict[str, Any] | None:
            for c, proc in procs.items():
                assert proc.poll() is None, f"{c} exited:\n{(tmp_path / f'{c}.log').read_text()[-3000:]}"
            return next((line for line in json_lines(tmp_path / "scheduler.log")
                         if line["object"] == about_pod and line["reason"]), None)

        line = wait_for("the scheduler to report why the pod waits", reported, timeout=90)
        assert line["reason"] == "Unschedulable" and line["component"] == "scheduler", line
        grouped = wait_for("the pod-grouper's line about the pod", lambda: next(
            (x for x in json_lines(tmp_path / "pod-grouper.log") if x["object"] == about_pod), None), timeout=30)
        assert "PodGroup" in grouped["msg"], grouped
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=30)
    for component in procs:
        lines = json_lines(tmp_path / f"{component}.log")
        assert lines and {x["component"] for x in lines} == {component}
        assert all({"ts", "level", "logger", "msg", "object", "reason"} <= set(x) for x in lines)
