"""The real node's configuration files, as pure functions of its paths and addresses.

Every path is under the cluster's state directory, so two clusters' nodes share nothing on disk; the values are
the ones a small production node would use, except where the comment says why this machine needs another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from operators.devcluster.node.addresses import NODE_NAME, NodeAddresses
from operators.devcluster.node.hostpackages import CNI_BIN_DIR

PAUSE_IMAGE = "kai.local/pause:1"
SYSTEM_TAINT_KEY = "kai.scheduler/system"  # NoSchedule: only pods that tolerate it (the suite's own) land here
SYSTEM_ROLE_LABEL = "node-role.kubernetes.io/kai-system"
CONTAINERD_NAMESPACE = "k8s.io"  # the CRI plugin's namespace: images imported there are visible to the kubelet


@dataclass(frozen=True)
class NodePaths:
    root: Path  # <cluster state>/node

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def proxy_kubeconfig(self) -> Path:
        return self.root / "kube-proxy.kubeconfig"

    @property
    def images(self) -> Path:
        return self.root / "images"


def _toml(value: str | bool | int) -> str:
    return json.dumps(value)  # TOML basic strings, booleans and integers are spelled as in JSON


def containerd_config(paths: NodePaths) -> str:
    """containerd 1.6 (Debian bookworm), config version 2: its own root, state and socket, the CRI plugin with
    runc (cgroupfs: the kubelet's driver here), our CNI directories and our locally built pause image."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f"root = {_toml(str(paths.containerd_root))}",
        f"state = {_toml(str(paths.containerd_state))}",
        # Storage back-ends this node never uses: skipped rather than probed (and logged as failing) at start.
        'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", '
        '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", '
        '"io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]',
        "[grpc]",
        f"  address = {_toml(str(paths.containerd_socket))}",
        "[ttrpc]",
        f"  address = {_toml(str(paths.containerd_socket) + '.ttrpc')}",
        'plugins."io.containerd.internal.v1.opt".path = ' + _toml(str(paths.root / "containerd" / "opt")),
        f"[{cri}]",
        f"  sandbox_image = {_toml(PAUSE_IMAGE)}",
        '  stream_server_address = "127.0.0.1"',
        "  enable_selinux = false",
        # Without CAP_SYS_RESOURCE (this machine's root lacks it) runc cannot lower a pod's oom_score_adj below
        # containerd's own and every sandbox fails to start: clamp the kubelet's values instead.
        "  restrict_oom_score_adj = true",
        f"  [{cri}.containerd]",
        '    snapshotter = "overlayfs"',
        '    default_runtime_name = "runc"',
        "    discard_unpacked_layers = false",  # our images cannot be pulled again: keep their layers
        f"    [{cri}.containerd.runtimes.runc]",
        '      runtime_type = "io.containerd.runc.v2"',
        f"      [{cri}.containerd.runtimes.runc.options]",
        "        SystemdCgroup = false",
        # runc's state per cluster, not the host-wide /run/containerd/runc
        f"        Root = {_toml(str(paths.root / 'containerd' / 'runc'))}",
        f"  [{cri}.cni]",
        f"    bin_dir = {_toml(CNI_BIN_DIR)}",
        f"    conf_dir = {_toml(str(paths.cni_conf_dir))}",
        "    max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


def cni_conflist(paths: NodePaths, addrs: NodeAddresses) -> str:
    """A bridge with host-local addresses from the node's pod range, and portmap for hostPort.

    hairpinMode lets a pod reach itself through its own Service; no ipMasq: pods talk to the host and to each
    other by their own addresses (the host routes the pod range to the node), and there is nothing beyond."""
    return json.dumps({
        "cniVersion": "0.4.0",
        "name": "kai-dev",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(paths.cni_ipam_dir),
                      "ranges": [[{"subnet": addrs.pod_cidr, "gateway": addrs.pod_gateway}]]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2) + "\n"


def kubelet_config(paths: NodePaths, addrs: NodeAddresses, client_ca: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine has cgroup v1 only; kubelet 1.35 refuses to start there unless told otherwise.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",  # no systemd here; containerd's runc is set to cgroupfs as well
        "cgroupRoot": f"/{addrs.cgroup}",  # pods go under the cluster's own cgroup: `down` kills them by it
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": addrs.node_ip,
        "port": 10250,  # inside the node's network namespace: no clash with another cluster's node
        "readOnlyPort": 0,
        "healthzBindAddress": addrs.node_ip,  # on the node's IP: `kai dev up` waits on it from the host
        "healthzPort": 10248,
        "authentication": {"x509": {"clientCAFile": str(client_ca)}, "webhook": {"enabled": False},
                           "anonymous": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},  # only the API server holds a certificate from our CA
        "registerWithTaints": [{"key": SYSTEM_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        "clusterDomain": "cluster.local",  # no cluster DNS runs here: pods find Services by their env vars
        "podLogsDir": str(paths.pod_logs),
        "failSwapOn": False,
        "rotateCertificates": False,
        # Our images cannot be pulled again (no registry): never garbage-collect them, never evict for disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "maxPods": 110,
        "serializeImagePulls": False,
    }


def proxy_config(paths: NodePaths, addrs: NodeAddresses) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(paths.proxy_kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "mode": "iptables",
        "clusterCIDR": addrs.pod_cidr,
        "bindAddress": "0.0.0.0",
        "nodePortAddresses": ["primary"],  # NodePorts on the node's IP only, not on its loopback
        "healthzBindAddress": f"{addrs.node_ip}:10256",
        "metricsBindAddress": f"{addrs.node_ip}:10249",
        # A network namespace cannot set the host-wide conntrack table size: leave conntrack settings alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s"},
    }


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)
