"""The admission webhook on the local control plane: KAI's denials through kubectl, scoped to kai pods only."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.devcluster import cluster as dev
from tests.support import Cluster


def _pod(name: str, annotations: dict[str, str], *, limits: dict[str, str] | None = None,
         scheduler: str = "kai-scheduler") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if limits:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"schedulerName": scheduler, "containers": [container]}}


DENIALS = [
    ("fraction-too-big", {"gpu-fraction": "1.5"}, None,
     "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ("fraction-not-a-number", {"gpu-fraction": "half"}, None,
     "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ("fraction-and-whole", {"gpu-fraction": "0.5"}, {"nvidia.com/gpu": "1"},
     "cannot have both GPU fraction request and whole GPU resource request/limit"),
    ("memory-not-positive", {"gpu-memory": "-5"}, None,
     "gpu-memory annotation value must be a positive integer greater than 0"),
    ("fraction-and-memory", {"gpu-fraction": "0.5", "gpu-memory": "1000"}, None,
     "cannot request both GPU and GPU memory"),
    ("devices-without-portion", {"gpu-fraction-num-devices": "2"}, None,
     "cannot request multiple fractional devices without specifying fraction portion or gpu-memory"),
    ("mps-without-fraction", {"mps": "true"}, None, "MPS is only supported with GPU fraction request"),
]


@pytest.mark.parametrize(("name", "annotations", "limits", "message"), DENIALS, ids=[d[0] for d in DENIALS])
def test_invalid_gpu_requests_are_refused_by_kubectl_apply(cluster: Cluster, namespace: str, name: str,
                                                           annotations: dict[str, str],
                                                           limits: dict[str, str] | None, message: str) -> None:
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod(name, annotations, limits=limits)),
                           namespace=namespace, check=False)
    assert proc.returncode != 0
    assert 'admission webhook "admission.kai-scheduler.svc" denied the request' in proc.stderr
    assert message in proc.stderr


def test_valid_fraction_pod_is_mutated(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("ok", {"gpu-fraction": "0.25"})),
                    namespace=namespace)
    pod = cluster.get_json("pod", "ok", namespace=namespace)
    prefix = pod["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert prefix.startswith("ok-") and prefix.endswith("-shared-gpu")
    env = {e["name"]: e["valueFrom"]["configMapKeyRef"]["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": f"{prefix}-0", "RUNAI_NUM_OF_GPUS": f"{prefix}-0",
                   "GPU_PORTION": f"{prefix}-0"}
    assert pod["spec"]["containers"][0]["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar",
                                                                         "optional": False}}]
    assert {"name": f"{prefix}-0-vol", "configMap": {"name": f"{prefix}-0", "defaultMode": 420}} in \
        pod["spec"]["volumes"]


def _state(cluster: Cluster) -> dev.State:
    state = dev.load_state(cluster.name)
    assert state is not None
    return state


def _admission_requests(cluster: Cluster) -> float:
    state = _state(cluster)
    port = dev.component_ports(state.ports["apiserver"] - 443)["admission"]["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kai_admission_requests_total{"))


def test_pods_of_other_schedulers_never_reach_the_webhook(cluster: Cluster, namespace: str) -> None:
    before = _admission_requests(cluster)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("other", {"gpu-fraction": "7"},
                                                                   scheduler="default-scheduler")),
                    namespace=namespace)
    assert _admission_requests(cluster) == before
    # A GPU-sharing pod of ours reaches the mutating webhook (a plain one reaches neither: nothing to admit; the
    # validating one is skipped on CREATE for a pod its condition proves valid: test_admission_match counts them).
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("ours", {"gpu-fraction": "0.5"})),
                    namespace=namespace)
    assert _admission_requests(cluster) >= before + 1


@pytest.fixture
def admission_stopped(cluster: Cluster) -> Iterator[None]:
    state = _state(cluster)
    argv = dev.stop_component(state, "admission")
    assert argv, "could not read the admission process's command line"
    try:
        yield
    finally:
        dev.start_component(state, "admission", argv)
        port = dev.component_ports(state.ports["apiserver"] - 443)["admission"]["probe"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        Path(state.dir, "state.json").exists()


def test_without_the_webhook_other_pods_are_still_created(cluster: Cluster, namespace: str,
                                                          admission_stopped: None) -> None:
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("plain", {}, scheduler="default-scheduler")),
                           namespace=namespace, check=False)
    assert proc.returncode == 0, proc.stderr
    # kai-scheduler pods fail closed: a GPU-sharing pod must never run un-mutated.
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("ours", {"gpu-fraction": "0.5"})),
                           namespace=namespace, check=False)
    assert proc.returncode != 0 and "admission.kai-scheduler.svc" in proc.stderr
