"""The suite as users install it: the helm chart, every component a pod on the local control plane's real node.

`install` runs the seed's own command (`helm upgrade -i kai-scheduler charts/kai-scheduler -n kai-scheduler
--create-namespace --set global.gpuSharing=true`) with one values file added, `local_values`: the image built here
and imported into the node's containerd (no registry, `imagePullPolicy: IfNotPresent`), and the real node's
nodeSelector and toleration (the node is tainted so that only the suite's own pods land on it). The chart installs
the kai-operator (its default), which renders the components from the Config: `install` returns once they are
rolled out.
"""

from __future__ import annotations

import json
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
    adopt_defaults(kubectl)
    argv = [helm, f"--kubeconfig={kubeconfig}", *SEED, "-f", str(values), *(extra or []),
            "--wait", f"--timeout={int(timeout)}s"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeployError(f"helm {' '.join(SEED[:2])} failed: {(proc.stderr or proc.stdout).strip()}\n"
                          f"{diagnosis(kubectl)}")
    wait_rendered(kubectl, deadline=began + timeout)
    return time.monotonic() - began


def adopt_defaults(kubectl: list[str]) -> None:
    """The local cluster creates a Config `kai-config` and SchedulingShard `default` for its host components; the
    chart leaves objects of those names alone unless its release owns them, and the kai-operator would render the
    suite from the local Config (no real node's nodeSelector). So the local ones go, and the release brings its own
    from the values, as on a cluster where KAI was never installed."""
    for kind, name in (("config", "kai-config"), ("schedulingshard", "default")):
        obj = _json(kubectl, "get", kind, name)
        if obj and (obj["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name") != RELEASE:
            subprocess.run(kubectl + ["delete", kind, name, "--wait=true"], capture_output=True, text=True)


def _json(kubectl: list[str], *args: str) -> Any:
    proc = subprocess.run(kubectl + [*args, "-o", "json"], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def wait_rendered(kubectl: list[str], *, deadline: float) -> None:
    """With the kai-operator (the chart's default), helm's --wait covers only the operator: wait until the
    operator reports the Config `Available` at its generation (every Deployment it renders applied and available),
    then until each Deployment's rollout is complete."""
    if _json(kubectl, "get", "deployment", "kai-operator", "-n", NAMESPACE) is None:
        return  # operator.enabled=false: helm waited for the chart's own Deployments
    while True:
        config = _json(kubectl, "get", "config", "kai-config") or {}
        generation = (config.get("metadata") or {}).get("generation")
        if any(c.get("type") == "Available" and c.get("status") == "True" and c.get("observedGeneration") == generation
               for c in (config.get("status") or {}).get("conditions") or []):
            break
        if time.monotonic() > deadline:
            raise DeployError(f"the kai-operator did not report the Config Available: {config.get('status')}\n"
                              f"{diagnosis(kubectl)}")
        time.sleep(1)
    for item in (_json(kubectl, "get", "deployments", "-n", NAMESPACE) or {}).get("items") or []:
        name = item["metadata"]["name"]
        left = max(1, int(deadline - time.monotonic()))
        proc = subprocess.run(kubectl + ["rollout", "status", f"deployment/{name}", "-n", NAMESPACE,
                                         f"--timeout={left}s"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise DeployError(f"Deployment {name} not rolled out: {(proc.stderr or proc.stdout).strip()}\n"
                              f"{diagnosis(kubectl)}")


def diagnosis(kubectl: list[str], log_lines: int = 20) -> str:
    """What a failed install leaves to look at: the Deployments and pods, the namespace's latest events, and the
    last log lines (and the previous container's, after a restart) of every pod not ready and of the operator."""
    def run(*args: str) -> str:
        proc = subprocess.run(kubectl + list(args), capture_output=True, text=True)
        return (proc.stdout or proc.stderr).rstrip()

    parts = [run("get", "deployments,pods", "-n", NAMESPACE, "-o", "wide"),
             "\n".join(run("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp").splitlines()[-20:])]
    for pod in (_json(kubectl, "get", "pods", "-n", NAMESPACE) or {}).get("items") or []:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        name = pod["metadata"]["name"]
        if statuses and all(s.get("ready") for s in statuses) and not name.startswith("kai-operator"):
            continue
        parts.append(f"--- {name}: {json.dumps(statuses)}\n{run('logs', name, '-n', NAMESPACE, f'--tail={log_lines}')}")
        if any(s.get("restartCount") for s in statuses):
            parts.append(f"--- {name}, previous container:\n"
                         f"{run('logs', name, '-n', NAMESPACE, '--previous', f'--tail={log_lines}')}")
    return "\n".join(parts)


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
