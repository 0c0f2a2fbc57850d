"""The local control plane's real node: kubelet, containerd and kube-proxy, tainted for the suite's own pods.

Own cluster: KAI_NODE_TEST_CLUSTER (default `node-test`) at KAI_NODE_TEST_PORT_BASE (default 22000), with the
real node, two kwok nodes and no KAI components (the pods here are placed by kube-scheduler). The last test
takes the cluster down and checks the host is as it was: no process, mount, interface, network namespace,
route, cgroup or iptables rule of the node left.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operators.devcluster import cluster as dev
from operators.devcluster.node import cgroups, lifecycle, netns
from operators.devcluster.node.addresses import NODE_NAME, NodeAddresses
from operators.devcluster.node.configs import SYSTEM_ROLE_LABEL, SYSTEM_TAINT_KEY
from operators.devcluster.node.images import BUSYBOX_IMAGE
from operators.devcluster.nodes import DEV_NODE_LABEL
from tests.support import Cluster

NAME = os.environ.get("KAI_NODE_TEST_CLUSTER", "node-test")
PORT_BASE = int(os.environ.get("KAI_NODE_TEST_PORT_BASE", "22000"))


@dataclass
class HostSnapshot:
    """The host-wide state a node could leave behind (other clusters may change it meanwhile: compare only what
    names this node)."""

    links: set[str]
    iptables: set[str]

    @classmethod
    def take(cls) -> HostSnapshot:
        lines = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
        names = {line.split(":")[1].strip().split("@")[0] for line in lines if ":" in line}
        rules = set()
        for tool in ("iptables-save", "ip6tables-save"):
            out = subprocess.run([tool], capture_output=True, text=True).stdout
            rules |= {ln for ln in out.splitlines() if not ln.startswith("#")}
        return cls(links=names, iptables=rules)


@pytest.fixture(scope="module")
def host_before() -> HostSnapshot:
    return HostSnapshot.take()


@pytest.fixture(scope="module")
def node_cluster(host_before: HostSnapshot) -> Iterator[Cluster]:
    if dev.load_state(NAME) is not None:
        dev.down(NAME, quiet=True)
    state = dev.up(dev.Options(name=NAME, port_base=PORT_BASE, nodes=2, gpus=8, components=False, kuberay=False,
                               real_node=True, timeout=300))
    yield Cluster(name=NAME, kubeconfig=state.kubeconfig, kubectl_bin=state.kubectl, state_dir=state.dir)
    if dev.load_state(NAME) is not None:  # the last test takes it down itself
        dev.down(NAME, quiet=True)


@pytest.fixture
def ns(node_cluster: Cluster) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    node_cluster.kubectl("create", "namespace", name)
    # The ServiceAccount controller creates `default` a moment after the namespace; pods need it.
    _wait(lambda: node_cluster.kubectl("get", "serviceaccount", "default", namespace=name,
                                       check=False).returncode == 0, "the default ServiceAccount", 30)
    yield name
    node_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _wait(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _pod(name: str, command: str, *, labels: dict[str, str] | None = None, tolerate: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {SYSTEM_ROLE_LABEL: ""},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", command]}],
    }
    if tolerate:
        spec["tolerations"] = [{"key": SYSTEM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def _apply(cluster: Cluster, ns: str, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}),
                    namespace=ns)


def _running(cluster: Cluster, ns: str, name: str, timeout: float = 90) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod: dict[str, Any] = cluster.get_json("pod", name, namespace=ns)
        return pod if pod["status"].get("phase") == "Running" else None

    try:
        return _wait(check, f"pod {ns}/{name} to run", timeout)  # type: ignore[no-any-return]
    except AssertionError:
        events = cluster.kubectl("get", "events", namespace=ns, check=False).stdout
        raise AssertionError(f"pod {ns}/{name} is not Running:\n{events}") from None


def _logs_contain(cluster: Cluster, ns: str, name: str, text: str, timeout: float = 60) -> str:
    def check() -> str | None:
        out = cluster.kubectl("logs", name, namespace=ns, check=False).stdout
        return out if text in out else None

    try:
        return _wait(check, f"{text!r} in the logs of {ns}/{name}", timeout)  # type: ignore[no-any-return]
    except AssertionError:
        out = cluster.kubectl("logs", name, namespace=ns, check=False)
        raise AssertionError(f"{text!r} not in the logs of {ns}/{name}:\n{out.stdout}{out.stderr}") from None


def _get_from_host(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return str(response.read().decode())
    except OSError:
        return None


def test_node_is_ready_tainted_and_labelled_beside_unchanged_kwok_nodes(node_cluster: Cluster) -> None:
    node = node_cluster.get_json("node", NODE_NAME)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert {"key": SYSTEM_TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["labels"][SYSTEM_ROLE_LABEL] == ""
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.35.4" and info["containerRuntimeVersion"].startswith("containerd://")
    state = dev.load_state(NAME)
    assert state is not None and state.node_addresses is not None
    addrs = state.node_addresses
    assert {"type": "InternalIP", "address": addrs.node_ip} in node["status"]["addresses"]
    print(f"real node started in {state.node['start_seconds']}s")
    kwok = node_cluster.get_json("nodes", "-l", f"{DEV_NODE_LABEL}=true")["items"]
    assert sorted(n["metadata"]["name"] for n in kwok) == ["kwok-node-0", "kwok-node-1"]
    for fake in kwok:
        assert not fake["spec"].get("taints") and fake["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert SYSTEM_ROLE_LABEL not in fake["metadata"]["labels"]


def test_a_pod_of_a_locally_built_image_runs_and_logs_and_the_taint_keeps_others_off(
        node_cluster: Cluster, ns: str) -> None:
    _apply(node_cluster, ns, _pod("hello", "echo hello from the real node; exec sleep 3600"),
           _pod("intruder", "sleep 3600", tolerate=False))
    pod = _running(node_cluster, ns, "hello")
    assert pod["spec"]["nodeName"] == NODE_NAME and pod["status"]["podIP"].startswith("10.202.")
    _logs_contain(node_cluster, ns, "hello", "hello from the real node")
    # Without the toleration, the node selector leaves no node: kube-scheduler says it is the taint.
    reason = _wait(lambda: next((c.get("message", "") for c in node_cluster.get_json(
        "pod", "intruder", namespace=ns)["status"].get("conditions", []) if c["type"] == "PodScheduled"
        and c["status"] == "False"), ""), "the intruder to be refused", 30)
    assert "1 node(s) had untolerated taint" in reason, reason


def test_kubernetes_default_answers_a_pod_with_its_service_account_token(node_cluster: Cluster, ns: str) -> None:
    # apiget logs in as a client library does: KUBERNETES_SERVICE_HOST (the Service's ClusterIP), the mounted
    # ServiceAccount token, and the mounted CA, which must verify the API server's certificate for that IP.
    script = f"apiget /api 2>&1; apiget /api/v1/namespaces/{ns}/secrets 2>&1; echo done; exec sleep 3600"
    _apply(node_cluster, ns, _pod("caller", script))
    pod = _running(node_cluster, ns, "caller")
    logs = _logs_contain(node_cluster, ns, "caller", "done")
    discovery, _, forbidden = logs.partition("\n403\n")
    assert discovery.startswith("200\n") and '"kind":"APIVersions"' in discovery, logs
    # The token is the pod's own identity: RBAC gives the default ServiceAccount no secrets.
    assert f"system:serviceaccount:{ns}:default" in forbidden, logs
    state = dev.load_state(NAME)
    assert state is not None and state.node_addresses is not None
    service = node_cluster.get_json("service", "kubernetes", namespace="default")
    assert service["spec"]["clusterIP"] == state.node_addresses.kubernetes_service_ip
    assert pod["spec"]["nodeName"] == NODE_NAME


def test_a_service_answers_another_pod_the_host_and_the_api_server(node_cluster: Cluster, ns: str) -> None:
    page = f"served-in-{ns}"
    server = _pod("web", f"mkdir -p /www && echo {page} > /www/index.html && exec httpd -f -p 8080 -h /www",
                  labels={"app": "web"})
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    _apply(node_cluster, ns, server, service)
    _running(node_cluster, ns, "web")
    cluster_ip = node_cluster.get_json("service", "web", namespace=ns)["spec"]["clusterIP"]
    client = _pod("client", f"for i in $(seq 60); do wget -q -O - http://{cluster_ip}/ && break; sleep 1; done; "
                            "echo finished; exec sleep 3600")
    _apply(node_cluster, ns, client)
    _running(node_cluster, ns, "client")
    assert page in _logs_contain(node_cluster, ns, "client", "finished", timeout=90)

    assert page in _wait(lambda: _get_from_host(f"http://{cluster_ip}/"), f"the Service {cluster_ip} from the host",
                         30)
    # The API server reaches the pod itself (its Service proxy resolves the Service to the pod's IP).
    proxied = node_cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/services/web:80/proxy/").stdout
    assert page in proxied


def test_a_second_clusters_real_node_coexists_and_goes_without_touching_the_first(
        node_cluster: Cluster, ns: str) -> None:
    """Two real nodes on one machine: another slot (veth, routes, ranges), the same node name, kubelet ports and
    bridge name inside their own namespaces; taking the second down leaves the first serving."""
    _apply(node_cluster, ns, _pod("web", "mkdir -p /www && echo first > /www/index.html && "
                                         "exec httpd -f -p 8080 -h /www"))
    first_ip = _running(node_cluster, ns, "web")["status"]["podIP"]
    other = f"{NAME}-b"
    if dev.load_state(other) is not None:
        dev.down(other, quiet=True)
    state = dev.up(dev.Options(name=other, port_base=PORT_BASE + 500, nodes=0, components=False, kuberay=False,
                               real_node=True, timeout=300))
    try:
        mine, theirs = dev.load_state(NAME), state
        assert mine is not None and mine.node_addresses is not None and theirs.node_addresses is not None
        assert mine.node_addresses.slot != theirs.node_addresses.slot
        second = Cluster(name=other, kubeconfig=state.kubeconfig, kubectl_bin=state.kubectl, state_dir=state.dir)
        second.kubectl("create", "namespace", ns)
        _wait(lambda: second.kubectl("get", "serviceaccount", "default", namespace=ns,
                                     check=False).returncode == 0, "the default ServiceAccount", 30)
        _apply(second, ns, _pod("probe", "apiget /version 2>&1; echo probed; exec sleep 3600"))
        pod = _running(second, ns, "probe")
        assert pod["status"]["podIP"].startswith(f"10.202.{theirs.node_addresses.slot}.")
        # Its own kubernetes.default (in its own Service range) answers, beside the first cluster's.
        assert _logs_contain(second, ns, "probe", "probed").startswith("200\n")
        assert theirs.node_addresses.kubernetes_service_ip != mine.node_addresses.kubernetes_service_ip
    finally:
        dev.down(other, quiet=True)

    assert "first" in _wait(lambda: _get_from_host(f"http://{first_ip}:8080/"),
                            "the first node's pod after the second node went", 20)
    node = node_cluster.get_json("node", NODE_NAME)
    assert [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]


def test_down_leaves_nothing_of_the_node_behind(node_cluster: Cluster, host_before: HostSnapshot, ns: str) -> None:
    # Pods running at `down`: containers, their mounts, network namespaces and CNI entries must all go.
    _apply(node_cluster, ns, _pod("web", "mkdir -p /www && echo up > /www/index.html && exec httpd -f -p 8080 -h /www"),
           _pod("sleeper", "exec sleep 3600"))
    _running(node_cluster, ns, "web")
    _running(node_cluster, ns, "sleeper")
    state = dev.load_state(NAME)
    assert state is not None and state.node_addresses is not None
    addrs: NodeAddresses = state.node_addresses
    node_pids = [state.pids[name] for name in ("containerd", "kubelet", "kube-proxy")]
    containers = cgroups.pids(addrs.cgroup) - set(node_pids)
    assert containers, "the pods' processes are in the node's cgroup"
    state_dir = Path(state.dir)
    assert lifecycle.mounts_under(state_dir), "a running node has volume and rootfs mounts"
    cni_cache = lifecycle.cni_results(lifecycle.paths_of(state_dir))
    assert cni_cache, "the running pods have CNI cache entries"
    pod_netns = lifecycle.pod_network_namespaces(addrs)
    assert len(pod_netns) >= 2, "each running pod has a network namespace pinned under /run/netns"
    began = time.monotonic()
    dev.down(NAME)
    print(f"down took {time.monotonic() - began:.1f}s")

    after = HostSnapshot.take()
    alive = [pid for pid in [*node_pids, *containers] if Path(f"/proc/{pid}").exists()
             and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()]
    assert alive == []
    assert not any(Path(root / addrs.cgroup).exists() for root in cgroups.hierarchies())
    assert not state_dir.exists() and lifecycle.mounts_under(state_dir) == []
    assert [entry for entry in cni_cache if entry.exists()] == []
    assert [path for path in pod_netns if path.exists()] == []
    assert addrs.host_veth not in after.links and netns.leftovers(addrs) == []
    assert not (netns.NETNS_DIR / addrs.netns).exists()
    marks = ("KUBE-", addrs.host_veth, f"10.201.{addrs.slot}.", f"10.202.{addrs.slot}.",
             addrs.service_cidr.rsplit(".", 2)[0] + ".")
    assert [rule for rule in after.iptables - host_before.iptables if any(m in rule for m in marks)] == []
    cmdlines = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdlines.append((proc / "cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                pass
    assert [c for c in cmdlines if str(state_dir) in c] == []
