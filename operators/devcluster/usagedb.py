"""A usage database for the time-based fair share: `kai dev up --usage-db`.

Debian's `prometheus` package, unpacked once into the cache (`apt-get download` + `dpkg-deb -x`: no system
install, no service), runs as one more supervised process of the cluster, scraping the suite's metrics endpoints
every second into a TSDB under the cluster's state directory. The default SchedulingShard is pointed at it.
The local control plane has no kube-state-metrics, so the shard's capacity metrics are the cluster's node totals
as constants (`vector(<n>)`, KAI's `extraParams` override).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from operators.devcluster import build

PACKAGE = "prometheus"
PROCESS = "prometheus"
PORT_OFFSET = 90  # base+90: free in the dev cluster's port plan


def binary() -> Path:
    """The cached `prometheus` binary of Debian's package, unpacked on first use (one unpacker at a time)."""
    root = build.CACHE / "prometheus"
    exe = root / "usr" / "bin" / "prometheus"
    if exe.exists():
        return exe
    build.CACHE.mkdir(parents=True, exist_ok=True)
    with open(build.CACHE / "prometheus.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.exists():
            return exe
        with tempfile.TemporaryDirectory(dir=build.CACHE) as tmp:
            if _download(tmp) != 0:  # stale package lists: refresh them once
                subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False)
                if _download(tmp) != 0:
                    raise RuntimeError(f"apt-get download {PACKAGE} failed (Debian's package lists reachable?)")
            deb = next(Path(tmp).glob(f"{PACKAGE}_*.deb"))
            unpacked = Path(tmp) / "root"
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True, capture_output=True)
            shutil.rmtree(root, ignore_errors=True)
            unpacked.rename(root)
    return exe


def _download(directory: str) -> int:
    return subprocess.run(["apt-get", "download", PACKAGE], cwd=directory, capture_output=True,
                          check=False).returncode


def scrape_config(targets: dict[str, str], interval: str = "1s") -> dict[str, Any]:
    """One job per metrics endpoint (`host:port`), labelled with its component."""
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": name, "static_configs": [{"targets": [target]}]}
                               for name, target in sorted(targets.items())]}


def argv(exe: Path, config: Path, data: Path, port: int) -> list[str]:
    return [str(exe), f"--config.file={config}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
            f"--web.console.templates={exe.parent.parent / 'share' / 'prometheus' / 'consoles'}",
            f"--web.console.libraries={exe.parent.parent / 'share' / 'prometheus' / 'console_libraries'}"]


def start(state: Any, targets: dict[str, str], *, port: int, timeout: float, name: str = PROCESS,
          interval: str = "1s") -> str:
    """Start a Prometheus scraping `targets` as the cluster's process `name`; its URL once ready."""
    from operators.devcluster import cluster

    exe = binary()
    root = Path(state.dir) / name
    shutil.rmtree(root, ignore_errors=True)  # a fresh TSDB: usage starts when the cluster does
    root.mkdir(parents=True)
    config = root / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(targets, interval)))
    launcher = cluster.Launcher(state)
    state.ports[name] = port
    launcher.start(name, argv(exe, config, root / "data", port))
    url = f"http://127.0.0.1:{port}"
    launcher.wait_http(name, f"{url}/-/ready", timeout)
    return url


def stop(state: Any, name: str = PROCESS) -> None:
    from operators.devcluster import cluster

    if name in state.pids:
        cluster.stop_component(state, name)
        state.pids.pop(name, None)
    state.ports.pop(name, None)
    state.save()


def usage_db_config(url: str, capacity: tuple[float, float, float], **params: Any) -> dict[str, Any]:
    """The SchedulingShard's `usageDBConfig` for a Prometheus at `url`; capacity = (GPUs, CPU cores, bytes)."""
    extra = {"gpuCapacityMetric": f"vector({capacity[0]:.15g})", "cpuCapacityMetric": f"vector({capacity[1]:.15g})",
             "memoryCapacityMetric": f"vector({capacity[2]:.15g})", **params.pop("extraParams", {})}
    return {"clientType": "prometheus", "connectionString": url,
            "usageParams": {"windowSize": "1h", "fetchInterval": "10s", **params, "extraParams": extra}}


def point_shard(kubectl: list[str], shard: str, config: dict[str, Any]) -> None:
    """Merge-patch the SchedulingShard's usageDBConfig."""
    subprocess.run(kubectl + ["patch", "schedulingshard", shard, "--type=merge", "-p",
                              json.dumps({"spec": {"usageDBConfig": config}})], check=True, capture_output=True)
