"""The suite as users install it: the helm chart, every component a pod on the local control plane's real node.

`install` runs the seed's own command (`helm upgrade -i kai-scheduler charts/kai-scheduler -n kai-scheduler
--create-namespace --set global.gpuSharing=true`) with one values file added, `local_values`: the image built here
and imported into the node's containerd (no registry, `imagePullPolicy: IfNotPresent`), and the real node's
nodeSelector and toleration (the node is tainted so that only the suite's own pods land on it).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from operators.devcluster import build, image
from operators.devcluster.image import Image

RELEASE = "kai-scheduler"
NAMESPACE = "kai-scheduler"
CHART = build.REPO / "charts" / "kai-scheduler"
SEED = ["upgrade", "-i", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
        "--set", "global.gpuSharing=true"]
# The runtime class the chart's admission puts on fractional GPU pods (as KAI does). On a GPU cluster the GPU
# operator creates it; the local cluster's GPU nodes are kwok's, which run nothing, so only the object is needed.
GPU_RUNTIME_CLASS: dict[str, Any] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                     "metadata": {"name": "nvidia"}, "handler": "nvidia"}


class DeployError(RuntimeError):
    pass


def local_values(image: Image, node_selector: dict[str, str], taint_key: str) -> dict[str, Any]:
    """The values added to the seed's command: the local image, and where the suite's pods go."""
    registry, _, repository = image.repository.partition("/")
    return {"global": {
        "registry": registry,
        "image": {"repository": repository},
        "tag": image.tag,
        "imagePullPolicy": "IfNotPresent",
        "nodeSelector": dict(node_selector),
        "tolerations": [{"key": taint_key, "operator": "Exists", "effect": "NoSchedule"}],
    }}


def write_values(path: Path, values: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def install(*, helm: str, kubectl: list[str], kubeconfig: str, values: Path, timeout: float,
            extra: list[str] | None = None) -> float:
    """Install (or upgrade) the release and wait until every Deployment is available; returns the seconds."""
    began = time.monotonic()
    proc = subprocess.run(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", "-"],
                          input=yaml.safe_dump(GPU_RUNTIME_CLASS), capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeployError(f"creating RuntimeClass nvidia failed: {proc.stderr.strip()}")
    argv = [helm, f"--kubeconfig={kubeconfig}", *SEED, "-f", str(values), *(extra or []),
            "--wait", f"--timeout={int(timeout)}s"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        pods = subprocess.run(kubectl + ["get", "pods", "-n", NAMESPACE, "-o", "wide"], capture_output=True,
                              text=True).stdout
        raise DeployError(f"helm {' '.join(SEED[:2])} failed: {(proc.stderr or proc.stdout).strip()}\n{pods}")
    return time.monotonic() - began


def prepare(state_dir: Path, built: Image) -> Path:
    """Import the image into the real node's containerd and write the local values; returns their path."""
    from operators.devcluster.node import lifecycle
    from operators.devcluster.node.configs import SYSTEM_ROLE_LABEL, SYSTEM_TAINT_KEY

    lifecycle.import_image(state_dir, built.archive)
    return write_values(state_dir / "local-values.yaml",
                        local_values(built, {SYSTEM_ROLE_LABEL: ""}, SYSTEM_TAINT_KEY))


def deploy(*, state_dir: Path, kubeconfig: str, kubectl: list[str], helm: str, timeout: float) -> float:
    """`kai dev up --suite chart`: build (or find) the image, import it into the real node, install the chart.
    Returns the seconds from the start of the helm install to every Deployment available."""
    values = prepare(state_dir, image.build_image())
    return install(helm=helm, kubectl=kubectl, kubeconfig=kubeconfig, values=values, timeout=timeout)


def uninstall(*, helm: str, kubeconfig: str, timeout: float = 120) -> None:
    subprocess.run([helm, f"--kubeconfig={kubeconfig}", "uninstall", RELEASE, "-n", NAMESPACE, "--wait",
                    f"--timeout={int(timeout)}s"], capture_output=True, text=True)
