"""The real node's cgroup: one per cluster (named by `NodeAddresses.cgroup`), in every hierarchy.

Its daemons (containerd with its shims, kubelet, kube-proxy) run in `<cgroup>/node`, its pods in
`<cgroup>/kubepods` (the kubelet's cgroupRoot). Stopping the node is then exact: kill every process in the
tree, whatever re-parenting or double-forking happened, and remove the directories.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")  # the kernel's cgroup v2 mount point: the same on every Linux host


def _unified() -> bool:
    return (CGROUP_FS / "cgroup.controllers").exists()


def hierarchies() -> list[Path]:
    """The roots to create our cgroup in: the one unified root, or each v1 hierarchy mounted here."""
    if _unified():
        return [CGROUP_FS]
    roots = []
    for entry in sorted(CGROUP_FS.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and (entry / "cgroup.procs").exists():
            roots.append(entry)
    return roots


def _init_cpuset(directory: Path) -> None:
    # A new v1 cpuset starts with no CPUs and no memory nodes, and refuses tasks until given its parent's.
    for name in ("cpuset.cpus", "cpuset.mems"):
        mine = directory / name
        if mine.exists() and not mine.read_text().strip():
            mine.write_text((directory.parent / name).read_text().strip() or "0")


KUBELET_CONTROLLERS = ("cpu", "cpuset", "memory", "pids", "io", "hugetlb")  # what the kubelet manages on v2


def _enable_v2_controllers() -> None:
    # The kubelet needs these in its cgroupRoot; a v2 host may not hand all of them down from the root yet.
    available = (CGROUP_FS / "cgroup.controllers").read_text().split()
    for controller in KUBELET_CONTROLLERS:
        if controller in available:
            try:
                (CGROUP_FS / "cgroup.subtree_control").write_text(f"+{controller}")
            except OSError:
                pass


def create(name: str) -> None:
    if _unified():
        _enable_v2_controllers()
    for root in hierarchies():
        for sub in (root / name, root / name / "node"):
            sub.mkdir(exist_ok=True)
            if root.name == "cpuset":
                _init_cpuset(sub)
            if root == CGROUP_FS and sub == root / name:  # v2: hand the controllers down to the children
                available = (root / "cgroup.controllers").read_text().split()
                for controller in (c for c in KUBELET_CONTROLLERS if c in available):
                    try:
                        (sub / "cgroup.subtree_control").write_text(f"+{controller}")
                    except OSError:
                        pass


def join(name: str) -> None:
    """Move the calling process into `<name>/node` (run in the child between fork and exec)."""
    for root in hierarchies():
        procs = root / name / "node" / "cgroup.procs"
        if procs.exists():
            procs.write_text("0")


def pids(name: str) -> set[int]:
    found: set[int] = set()
    for root in hierarchies():
        top = root / name
        if not top.is_dir():
            continue
        for directory, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    found |= {int(p) for p in (Path(directory) / "cgroup.procs").read_text().split()}
                except OSError:
                    pass
    return found


def kill_all(name: str, timeout: float = 10.0) -> set[int]:
    """SIGKILL every process in the tree until none is left; returns the pids still there at the deadline."""
    deadline = time.monotonic() + timeout
    while (left := pids(name)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
        for pid in left:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap any that were our own children
            except ChildProcessError:
                pass
    return pids(name)


def remove(name: str) -> list[str]:
    """Remove the tree, deepest first; returns the directories that would not go."""
    stuck: list[str] = []
    for root in hierarchies():
        top = root / name
        if not top.is_dir():
            continue
        for directory, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count("/")):
            for attempt in range(20):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05 * (attempt + 1))
            else:
                stuck.append(directory)
    return stuck
