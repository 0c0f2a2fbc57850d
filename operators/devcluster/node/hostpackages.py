"""Debian packages the real node runs on: installed with apt-get only when one is missing.

The container runtime pieces come from Debian rather than from source: they are what a node operator installs,
and building containerd would add minutes to a cold CI run. CI runs as root on a fresh Debian bookworm machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# package -> a file it installs (what we check; dpkg's database may be absent in minimal images)
PACKAGES = {
    "containerd": "/usr/bin/containerd",  # also ctr and containerd-shim-runc-v2
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",  # bridge, host-local, loopback, portmap
    "iptables": "/usr/sbin/iptables",  # kube-proxy (iptables mode) and the bridge plugin's masquerade
    "conntrack": "/usr/sbin/conntrack",  # kube-proxy clears stale UDP conntrack entries with it
    "busybox-static": "/bin/busybox",  # the test image's only binary
    "iproute2": "/usr/sbin/ip",  # network namespace and veth set-up
    "util-linux": "/usr/bin/nsenter",  # runs the node's processes in its network namespace only
}
CNI_BIN_DIR = "/usr/lib/cni"


class PackageError(RuntimeError):
    pass


def missing() -> list[str]:
    return [pkg for pkg, path in PACKAGES.items() if not os.path.exists(path)]


def ensure() -> None:
    """Install whatever is missing (apt-get needs root: say what to run otherwise)."""
    need = missing()
    if not need:
        return
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *need]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PackageError(f"the real node needs Debian packages {', '.join(need)}: run `sudo {' '.join(command)}`")
    print(f"installing {', '.join(need)} with apt-get", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:  # a fresh machine has no package lists yet
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or missing():
        raise PackageError(f"`{' '.join(command)}` failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
