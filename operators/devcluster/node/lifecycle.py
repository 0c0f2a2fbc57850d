"""Start and stop the real node: containerd, kubelet and kube-proxy in the node's network namespace and cgroup.

`start` runs after the API server (which advertises the host end of the node's veth) and the controller
manager are up; `stop` removes everything `start` made (processes, containers, mounts, network namespaces,
interfaces, routes, cgroups, log links) and says what it could not.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from operators.devcluster import pki
from operators.devcluster.node import cgroups, configs, hostpackages, images, netns
from operators.devcluster.node.addresses import NODE_NAME, NodeAddresses
from operators.devcluster.node.configs import NodePaths

LEGACY_LOG_LINKS = Path("/var/log/containers")  # the kubelet links every container log here, whatever podLogsDir
CNI_RESULTS = Path("/var/lib/cni/results")  # containerd 1.6's CNI library caches every attachment here, host-wide


class NodeError(RuntimeError):
    pass


# (name, argv, preexec) -> None: the cluster's launcher, which records the pid and log for `down`
Start = Callable[[str, list[str], Callable[[], None]], None]
Wait = Callable[[str, str, float], None]


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kube_proxy: Path
    pause: Path
    apiget: Path

    @classmethod
    def from_dir(cls, directory: Path) -> NodeBinaries:
        return cls(kubelet=directory / "kubelet", kube_proxy=directory / "kube-proxy", pause=directory / "pause",
                   apiget=directory / "apiget")


def paths_of(state_dir: str | Path) -> NodePaths:
    return NodePaths(Path(state_dir) / "node")


def apiserver_flags(addrs: NodeAddresses, kubelet_client: pki.KeyPair) -> list[str]:
    """What the API server needs for a real node: listen where the node reaches it (the veth's host end, as
    well as 127.0.0.1 for host clients), advertise that address as `kubernetes.default`'s endpoint, allocate
    Services from the node's routed range, and present a client certificate to the kubelet (logs, exec)."""
    return ["--bind-address=0.0.0.0", f"--advertise-address={addrs.host_ip}",
            f"--service-cluster-ip-range={addrs.service_cidr}",
            f"--kubelet-client-certificate={kubelet_client.cert}", f"--kubelet-client-key={kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP"]


def start(*, state_dir: Path, addrs: NodeAddresses, ca: pki.CertificateAuthority, api_port: int,
          binaries: NodeBinaries, kubectl: list[str], start_process: Start, wait_http: Wait,
          timeout: float) -> float:
    """Bring the node up and wait until it is Ready and labelled; returns the seconds it took."""
    began = time.monotonic()
    if os.geteuid() != 0:
        raise NodeError("it needs root (a network namespace, cgroups, containerd); start without it: --no-real-node")
    hostpackages.ensure()
    paths = paths_of(state_dir)
    for directory in (paths.containerd_root, paths.containerd_state, paths.cni_conf_dir, paths.cni_ipam_dir,
                      paths.kubelet_root, paths.pod_logs, paths.images):
        directory.mkdir(parents=True, exist_ok=True)
    if len(str(paths.containerd_socket)) + len(".ttrpc") > 107:
        raise NodeError(f"containerd's socket path is too long for a unix socket: {paths.containerd_socket}; "
                        "use a shorter cluster name or KAI_DEV_CACHE")
    server = f"https://{addrs.host_ip}:{api_port}"
    kubelet_cert = ca.issue("kubelet", f"system:node:{NODE_NAME}", org="system:nodes", client=True)
    proxy_cert = ca.issue("kube-proxy", "system:kube-proxy", client=True)
    pki.write_kubeconfig(paths.kubelet_kubeconfig, server=server, ca=ca.cert_path, client=kubelet_cert,
                         user=f"system:node:{NODE_NAME}")
    pki.write_kubeconfig(paths.proxy_kubeconfig, server=server, ca=ca.cert_path, client=proxy_cert,
                         user="system:kube-proxy")
    paths.containerd_config.write_text(configs.containerd_config(paths))
    (paths.cni_conf_dir / "10-kai-dev.conflist").write_text(configs.cni_conflist(paths, addrs))
    paths.kubelet_config.write_text(configs.to_yaml(configs.kubelet_config(paths, addrs, ca.cert_path)))
    paths.proxy_config.write_text(configs.to_yaml(configs.proxy_config(paths, addrs)))

    cgroups.create(addrs.cgroup)
    netns.create(addrs)

    def join() -> None:
        cgroups.join(addrs.cgroup)

    enter = netns.nsenter(addrs)
    start_process("containerd", [*enter, "containerd", "--config", str(paths.containerd_config)], join)
    _wait_containerd(paths, timeout)
    images.import_local_images(paths, binaries.pause, binaries.apiget)
    start_process("kubelet", [*enter, str(binaries.kubelet), f"--config={paths.kubelet_config}",
                              f"--kubeconfig={paths.kubelet_kubeconfig}", f"--root-dir={paths.kubelet_root}",
                              f"--hostname-override={NODE_NAME}", f"--node-ip={addrs.node_ip}", "--v=1"], join)
    start_process("kube-proxy", [*enter, str(binaries.kube_proxy), f"--config={paths.proxy_config}"], join)
    wait_http("kubelet", f"http://{addrs.node_ip}:10248/healthz", timeout)
    wait_http("kube-proxy", f"http://{addrs.node_ip}:10256/healthz", timeout)
    _wait_ready(kubectl, timeout)
    _run(kubectl + ["label", "node", NODE_NAME, "--overwrite", f"{configs.SYSTEM_ROLE_LABEL}="], "label the node")
    return time.monotonic() - began


def _wait_containerd(paths: NodePaths, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc = subprocess.run([*images.ctr(paths), "version"], capture_output=True, text=True)
        if proc.returncode == 0:
            return
        last = proc.stderr.strip()
        time.sleep(0.2)
    raise NodeError(f"containerd did not answer on {paths.containerd_socket} within {timeout:.0f}s: {last}")


def _wait_ready(kubectl: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "not registered"
    while time.monotonic() < deadline:
        proc = subprocess.run(kubectl + ["get", "node", NODE_NAME, "-o", "json"], capture_output=True, text=True)
        if proc.returncode == 0:
            conditions = json.loads(proc.stdout).get("status", {}).get("conditions", [])
            ready = [c for c in conditions if c.get("type") == "Ready"]
            if ready and ready[0].get("status") == "True":
                return
            last = ready[0].get("message", "") if ready else "no Ready condition yet"
        time.sleep(0.5)
    raise NodeError(f"node {NODE_NAME} did not become Ready within {timeout:.0f}s ({last})")


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NodeError(f"cannot {what}: {proc.stderr.strip()}")


def import_image(state_dir: str | Path, archive: Path) -> None:
    """Import an image archive (OCI or docker format, e.g. from buildah) into a running node's containerd;
    pods use it with `imagePullPolicy: IfNotPresent` (or Never), no registry involved."""
    images.import_archive(paths_of(state_dir), archive)


# --- stop -------------------------------------------------------------------------------------------------


def _terminate(pids: list[int], grace: float) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_exists(pid) for pid in pids):
        time.sleep(0.1)


def _exists(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return Path(f"/proc/{pid}").exists() and "State:\tZ" not in _status(pid)


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def _delete_tasks(paths: NodePaths) -> None:
    """Kill and delete every container through containerd, so that its shims unmount and clean up after them."""
    if not paths.containerd_socket.exists():
        return
    ctr = images.ctr(paths)
    listing = subprocess.run([*ctr, "tasks", "list", "--quiet"], capture_output=True, text=True, timeout=20)
    for task in listing.stdout.split():
        subprocess.run([*ctr, "tasks", "kill", "--signal", "SIGKILL", task], capture_output=True, timeout=20)
    for task in listing.stdout.split():
        subprocess.run([*ctr, "tasks", "delete", "--force", task], capture_output=True, timeout=20)


def _netns_inodes(pids: set[int]) -> set[int]:
    found = set()
    for pid in pids:
        try:
            found.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
        except OSError:
            pass
    return found


def pod_network_namespaces(addrs: NodeAddresses) -> list[Path]:
    """The files under /run/netns that pin the network namespaces of the node's running pods."""
    return _pod_netns_files(_netns_inodes(cgroups.pids(addrs.cgroup)) - {_own_netns_inode(addrs)})


def _pod_netns_files(inodes: set[int]) -> list[Path]:
    """The pod network namespaces containerd pinned under /run/netns for the node's pods (matched by inode)."""
    if not netns.NETNS_DIR.is_dir():
        return []
    found = []
    for entry in netns.NETNS_DIR.iterdir():
        try:
            if entry.name.startswith("cni-") and os.stat(entry).st_ino in inodes:
                found.append(entry)
        except OSError:
            pass
    return found


def cni_results(paths: NodePaths) -> list[Path]:
    """The CNI cache entries of the node's pods: their bridge entries name our IPAM directory; the loopback
    entries of the same sandboxes go with them. (Pods deleted by the kubelet had theirs removed already.)"""
    if not CNI_RESULTS.is_dir():
        return []
    ours, sandboxes = [], set()
    entries = list(CNI_RESULTS.iterdir())
    for entry in entries:
        try:
            cached = json.loads(entry.read_text())
            config = base64.b64decode(cached.get("config", "")).decode(errors="replace")
        except (OSError, ValueError):
            continue
        if str(paths.cni_ipam_dir) in config:
            sandboxes.add(str(cached.get("containerId")))
    for entry in entries:
        if any(f"-{sandbox}-" in entry.name for sandbox in sandboxes):
            ours.append(entry)
    return ours


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: -p.count("/"))


def _umount(point: str) -> bool:
    return subprocess.run(["umount", "--lazy", point], capture_output=True).returncode == 0


def stop(*, state_dir: str | Path, addrs: NodeAddresses, pids: dict[str, int]) -> list[str]:
    """Stop the node and remove what it made; returns the leftovers it could not remove (empty when clean)."""
    paths = paths_of(state_dir)
    # The agents first, so that nothing restarts containers behind our back.
    _terminate([pids[name] for name in ("kube-proxy", "kubelet") if name in pids], grace=5)
    pod_namespaces = _netns_inodes(cgroups.pids(addrs.cgroup)) - {_own_netns_inode(addrs)}
    try:
        _delete_tasks(paths)
    except subprocess.TimeoutExpired:
        pass  # containerd is stuck: the cgroup kill below ends everything regardless
    _terminate([pids["containerd"]] if "containerd" in pids else [], grace=5)
    left: list[str] = [f"process {pid}" for pid in sorted(cgroups.kill_all(addrs.cgroup))]
    for entry in _pod_netns_files(pod_namespaces):
        _umount(str(entry))
        entry.unlink(missing_ok=True)
    if paths.root.exists():
        for point in mounts_under(paths.root):
            if not _umount(point):
                left.append(f"mount {point}")
    netns.delete(addrs)
    left += netns.leftovers(addrs)
    left += [f"cgroup {d}" for d in cgroups.remove(addrs.cgroup)]
    for entry in cni_results(paths):
        entry.unlink(missing_ok=True)
    logs = str(paths.pod_logs.resolve()) + "/"
    if LEGACY_LOG_LINKS.is_dir():
        for link in LEGACY_LOG_LINKS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(logs):
                link.unlink(missing_ok=True)
    return left


def _own_netns_inode(addrs: NodeAddresses) -> int:
    try:
        return os.stat(netns.NETNS_DIR / addrs.netns).st_ino
    except OSError:
        return -1
