"""The real node's network: a namespace of its own, a veth pair to the host, and the host's routes to it.

Inside: loopback, `eth0` (the node's IP), a default route to the host end and IP forwarding, so that the CNI
bridge's pods reach the API server on the host and the host (the API server included) reaches pod and Service
addresses through the node. Deleting the namespace removes the veth pair, and with it the host's routes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from operators.devcluster.node.addresses import NodeAddresses

NETNS_DIR = Path("/run/netns")


class NetworkError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetworkError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def exists(addrs: NodeAddresses) -> bool:
    return (NETNS_DIR / addrs.netns).exists()


def nsenter(addrs: NodeAddresses) -> list[str]:
    """The prefix that runs a command in the node's network namespace only (`ip netns exec` would also give it
    a mount namespace of its own, hiding the kubelet's volume mounts from containerd)."""
    return ["nsenter", f"--net={NETNS_DIR / addrs.netns}", "--"]


def _sysctl(addrs: NodeAddresses, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    proc = subprocess.run([*nsenter(addrs), "sh", "-c", f"test -e {path} && echo {value} > {path}"],
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: the key does not exist in this kernel
        raise NetworkError(f"cannot set {key}={value} in {addrs.netns}: {proc.stderr.strip()}")


def create(addrs: NodeAddresses) -> None:
    if _ip("link", "show", addrs.host_veth, check=False).returncode == 0:
        raise NetworkError(f"interface {addrs.host_veth} exists already (slot {addrs.slot}); "
                           f"remove it with `ip link del {addrs.host_veth}` if no cluster uses it")
    _ip("netns", "add", addrs.netns)
    _ip("link", "add", addrs.host_veth, "type", "veth", "peer", "name", addrs.node_veth)
    _ip("link", "set", addrs.node_veth, "netns", addrs.netns)
    _ip("addr", "add", f"{addrs.host_ip}/24", "dev", addrs.host_veth)
    _ip("link", "set", addrs.host_veth, "up")
    _ip("-n", addrs.netns, "link", "set", "lo", "up")
    _ip("-n", addrs.netns, "link", "set", addrs.node_veth, "name", "eth0")
    _ip("-n", addrs.netns, "addr", "add", f"{addrs.node_ip}/24", "dev", "eth0")
    _ip("-n", addrs.netns, "link", "set", "eth0", "up")
    _ip("-n", addrs.netns, "route", "add", "default", "via", addrs.host_ip)
    _ip("route", "add", addrs.pod_cidr, "via", addrs.node_ip)
    _ip("route", "add", addrs.service_cidr, "via", addrs.node_ip)
    _sysctl(addrs, "net.ipv4.ip_forward", "1")
    # Pod to Service to a pod on the same bridge: the bridged reply must pass iptables to be un-NATed.
    _sysctl(addrs, "net.bridge.bridge-nf-call-iptables", "1")


def delete(addrs: NodeAddresses) -> None:
    if exists(addrs):
        _ip("netns", "delete", addrs.netns, check=False)
    if _ip("link", "show", addrs.host_veth, check=False).returncode == 0:
        _ip("link", "delete", addrs.host_veth, check=False)
    for cidr in (addrs.pod_cidr, addrs.service_cidr):  # gone with the veth, unless the veth never came up
        _ip("route", "delete", cidr, check=False)


def leftovers(addrs: NodeAddresses) -> list[str]:
    """What of the node's network is still on the host (for `down` to report and the tests to check)."""
    found = []
    if exists(addrs):
        found.append(f"network namespace {addrs.netns}")
    if _ip("link", "show", addrs.host_veth, check=False).returncode == 0:
        found.append(f"interface {addrs.host_veth}")
    routes = _ip("route", "show", check=False).stdout
    found += [f"route {cidr}" for cidr in (addrs.pod_cidr, addrs.service_cidr) if cidr in routes]
    return found
