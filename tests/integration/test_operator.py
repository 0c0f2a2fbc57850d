"""The kai-operator (`kai run operator`, a host process here) against the local control plane's API server.

The operator renders the suite from the Config `kai-config` and the SchedulingShards into Deployments in
`kai-scheduler`, which kube-scheduler places on kwok nodes (no container runs; kwok reports the pods Running, so
`Available` is real). The scheduling itself is done by the cluster's `kai run` processes, which read the shards
live: a placement change still changes where the next pods land.

Tests run in file order: the operator is started once for the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Cluster, probe_status, wait_for

pytestmark = pytest.mark.cluster

NS = "kai-scheduler"
MANAGED = "app.kubernetes.io/managed-by=kai-operator"
SUITE = {"admission", "binder", "podgroup-controller", "pod-grouper", "queue-controller", "kai-scheduler-default"}
PORT = int(os.environ.get("KAI_TEST_PORT_BASE", "17000")) + 950
SHARD = "pool-b"
GPU = "nvidia.com/gpu"


@contextlib.contextmanager
def operator_process(kubeconfig: str | Path, port: int, log: Path, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """`kai run operator --leader-elect` as a local process (metrics on `port`, probes on `port + 1`); its log's
    tail is printed when it stops."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "operators.cli", "run", "operator", f"--kubeconfig={kubeconfig}",
             f"--namespace={NS}", f"--metrics-bind-address=127.0.0.1:{port}",
             f"--health-probe-bind-address=127.0.0.1:{port + 1}", "--leader-elect", *extra],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(log.read_text()[-4000:])


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    cluster.kubectl("create", "namespace", NS, check=False)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    try:
        with operator_process(cluster.kubeconfig, PORT, log, "--version=test") as proc:
            yield proc
    finally:
        cluster.kubectl("delete", "schedulingshard", SHARD, "pool-b-twin", "--ignore-not-found", "--wait=false",
                        check=False)
        cluster.kubectl("patch", "config", "kai-config", "--type=json",
                        "-p", '[{"op": "remove", "path": "/spec/scheduler"}]', check=False)
        cluster.kubectl("delete", "deployments,services,serviceaccounts,configmaps", "-l", MANAGED, "-n", NS,
                        "--wait=false", check=False)
        # The stopped operator took its Reconciling away, so the scheduler instance reports on these again.
        for kind, name in (("config", "kai-config"), ("schedulingshard", "default")):
            wait_for(f"no Reconciling left on {kind} {name}",
                     lambda kind=kind, name=name: "Reconciling" not in conditions(cluster, kind, name)[1], timeout=10)


def conditions(cluster: Cluster, kind: str, name: str) -> tuple[int, dict[str, dict[str, Any]]]:
    obj = cluster.get_json(kind, name)
    conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return int(obj["metadata"]["generation"]), conds


def condition_is(cluster: Cluster, kind: str, name: str, kind_of: str, status: str) -> dict[str, Any] | None:
    generation, conds = conditions(cluster, kind, name)
    c = conds.get(kind_of)
    return c if c and c["status"] == status and c.get("observedGeneration") == generation else None


def deployment(cluster: Cluster, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", "deployment", name, "-n", NS, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def writes(port: int = PORT) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^kai_operator_writes_total\{[^}]*\} (\S+)$", text, re.M))


def test_the_config_becomes_the_suite_deployed_and_available(cluster: Cluster,
                                                             operator: subprocess.Popen[bytes]) -> None:
    def suite() -> set[str] | None:
        names = {d["metadata"]["name"] for d in cluster.get_json("deployments", "-l", MANAGED, namespace=NS)["items"]}
        return names if names >= SUITE else None

    wait_for("the six Deployments", suite, timeout=90)
    d = deployment(cluster, "kai-scheduler-default")
    assert d is not None
    refs = d["metadata"]["ownerReferences"]
    assert [(r["kind"], r["name"]) for r in refs] == [("Config", "kai-config")], "garbage-collected with the Config"
    assert d["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    wait_for("Config Deployed", lambda: condition_is(cluster, "config", "kai-config", "Deployed", "True"))
    wait_for("Config Available (kwok runs the pods)",
             lambda: condition_is(cluster, "config", "kai-config", "Available", "True"), timeout=120)
    # On the Config the operator also names what it does not render (the dev cluster's Config: nothing).
    fields = wait_for("the operator's FieldsNotHonoured on the Config",
                      lambda: condition_is(cluster, "config", "kai-config", "FieldsNotHonoured", "False"))
    assert fields["message"] == "Every field set is honoured"
    # Kopf's bookkeeping only under the project's prefix, and no finalizer.
    for kind, name in (("config", "kai-config"), ("schedulingshard", "default")):
        meta = cluster.get_json(kind, name)["metadata"]
        assert not meta.get("finalizers")
        assert not [k for k in meta.get("annotations") or {} if k.startswith("kopf.")], meta
        assert "operator.kai.scheduler/last-handled-configuration" in meta["annotations"]


def test_the_default_shard_has_one_writer_per_condition(cluster: Cluster, operator: subprocess.Popen[bytes]) -> None:
    wait_for("default shard Available", lambda: condition_is(cluster, "schedulingshard", "default", "Available",
                                                              "True"), timeout=120)
    obj = cluster.get_json("schedulingshard", "default", "--show-managed-fields")
    owners: dict[str, set[str]] = {}
    for entry in obj["metadata"].get("managedFields") or []:
        if entry.get("subresource") != "status":
            continue
        conds = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions") or {}
        owners.setdefault(entry["manager"], set()).update(conds)
    _, conds = conditions(cluster, "schedulingshard", "default")
    assert {"Reconciling", "Deployed", "Available", "SpecValid", "FieldsNotHonoured"} <= set(conds)
    assert "kai-operator" in owners, owners
    # The scheduler instance sees the operator and stops writing Deployed/Available; its FieldsNotHonoured stays.
    time.sleep(6)
    before = conditions(cluster, "schedulingshard", "default")[1]
    time.sleep(6)
    assert conditions(cluster, "schedulingshard", "default")[1] == before, "two writers would flap"


def test_a_new_shard_gets_its_scheduler_and_deleting_it_removes_it(cluster: Cluster,
                                                                    operator: subprocess.Popen[bytes]) -> None:
    shard = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": SHARD},
             "spec": {"partitionLabelValue": "pool-b", "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
                      "queueDepthPerAction": {"allocate": 10}, "minRuntime": {"preemptMinRuntime": "5m"}}}
    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(shard))
    d = wait_for("kai-scheduler-pool-b", lambda: deployment(cluster, "kai-scheduler-pool-b"), timeout=60)
    assert time.monotonic() - started < 60
    assert d["metadata"]["labels"]["app"] == "kai-scheduler-pool-b"
    assert d["spec"]["selector"]["matchLabels"] == {"app": "kai-scheduler-pool-b"}
    args = d["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--shard-name=pool-b", "--partition-label-value=pool-b"} <= set(args)
    assert [(r["kind"], r["name"]) for r in d["metadata"]["ownerReferences"]] == [("SchedulingShard", SHARD)]
    wait_for("pool-b Available", lambda: condition_is(cluster, "schedulingshard", SHARD, "Available", "True"),
             timeout=120)

    cluster.kubectl("delete", "schedulingshard", SHARD)
    wait_for("kai-scheduler-pool-b gone", lambda: deployment(cluster, "kai-scheduler-pool-b") is None, timeout=60)
    assert cluster.kubectl("get", "service", "kai-scheduler-pool-b", "-n", NS, check=False).returncode != 0


def test_an_invalid_shard_is_refused_and_the_schedulers_stay(cluster: Cluster,
                                                             operator: subprocess.Popen[bytes]) -> None:
    shard = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": SHARD},
             "spec": {"partitionLabelValue": "pool-b"}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(shard))
    before = wait_for("kai-scheduler-pool-b", lambda: deployment(cluster, "kai-scheduler-pool-b"), timeout=60)
    default_before = deployment(cluster, "kai-scheduler-default")
    assert default_before is not None

    cluster.kubectl("patch", "schedulingshard", SHARD, "--type=merge", "-p",
                    json.dumps({"spec": {"plugins": {"nosuchplugin": {"enabled": True}}}}))
    refused = wait_for("SpecValid=False", lambda: condition_is(cluster, "schedulingshard", SHARD, "SpecValid",
                                                                "False"))
    assert "spec.plugins.nosuchplugin" in refused["message"]

    def warning() -> dict[str, Any] | None:
        events = cluster.get_json("events", "--field-selector", f"involvedObject.name={SHARD}",
                                  namespace="default")["items"]
        return next((e for e in events if e["type"] == "Warning" and e["reason"] == "InvalidSpec"
                     and "spec.plugins.nosuchplugin" in e["message"]), None)

    wait_for("a Warning event naming the field", warning)
    # A second shard on the same node pool is refused too, and gets no scheduler.
    twin = {**shard, "metadata": {"name": "pool-b-twin"}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(twin))
    conflict = wait_for("twin refused", lambda: condition_is(cluster, "schedulingshard", "pool-b-twin", "SpecValid",
                                                              "False"))
    assert "spec.partitionLabelValue" in conflict["message"]
    assert deployment(cluster, "kai-scheduler-pool-b-twin") is None
    cluster.kubectl("delete", "schedulingshard", "pool-b-twin")

    for name, old in (("kai-scheduler-pool-b", before), ("kai-scheduler-default", default_before)):
        now = deployment(cluster, name)
        assert now is not None and now["metadata"]["generation"] == old["metadata"]["generation"], name

    cluster.kubectl("patch", "schedulingshard", SHARD, "--type=json",
                    "-p", '[{"op": "remove", "path": "/spec/plugins"}]')
    wait_for("valid again", lambda: condition_is(cluster, "schedulingshard", SHARD, "SpecValid", "True"))
    cluster.kubectl("delete", "schedulingshard", SHARD)


def test_an_invalid_config_is_refused_and_the_suite_stays(cluster: Cluster, operator: subprocess.Popen[bytes]) -> None:
    before = {name: deployment(cluster, name) for name in SUITE}
    cluster.kubectl("patch", "config", "kai-config", "--type=merge", "-p",
                    json.dumps({"spec": {"binder": {"service": {"image": {"pullPolicy": "Sometimes"}}}}}))
    try:
        refused = wait_for("SpecValid=False", lambda: condition_is(cluster, "config", "kai-config", "SpecValid",
                                                                    "False"))
        assert "spec.binder.service.image.pullPolicy" in refused["message"]
        events = cluster.get_json("events", "--field-selector", "involvedObject.name=kai-config",
                                  namespace="default")["items"]
        assert [e for e in events if e["type"] == "Warning" and e["reason"] == "InvalidSpec"]
        for name, old in before.items():
            now = deployment(cluster, name)
            assert old and now and now["metadata"]["generation"] == old["metadata"]["generation"], name
    finally:
        cluster.kubectl("patch", "config", "kai-config", "--type=json",
                        "-p", '[{"op": "remove", "path": "/spec/binder"}]')
    wait_for("valid again", lambda: condition_is(cluster, "config", "kai-config", "SpecValid", "True"))


def test_patching_the_config_to_two_scheduler_replicas(cluster: Cluster, operator: subprocess.Popen[bytes]) -> None:
    cluster.kubectl("patch", "config", "kai-config", "--type=merge", "-p",
                    json.dumps({"spec": {"scheduler": {"replicas": 2}}}))

    def two() -> dict[str, Any] | None:
        d = deployment(cluster, "kai-scheduler-default")
        ready = d and d["spec"]["replicas"] == 2 and (d.get("status") or {}).get("readyReplicas") == 2
        return d if ready else None

    d = wait_for("2 ready scheduler replicas", two, timeout=90)
    args = d["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" in args and "--lease-name=kai-scheduler-default" in args
    wait_for("Available at the new generation",
             lambda: condition_is(cluster, "config", "kai-config", "Available", "True"), timeout=90)


def test_an_electing_shard_owns_its_lease_and_takes_it_when_deleted(cluster: Cluster,
                                                                      operator: subprocess.Popen[bytes]) -> None:
    """A shard created with kubectl while the schedulers elect: its Lease is rendered and owned by the shard, so
    deleting the shard leaves no Lease behind (the scheduler only renews it)."""
    cluster.kubectl("patch", "config", "kai-config", "--type=merge", "-p",
                    json.dumps({"spec": {"scheduler": {"replicas": 2}}}))
    shard = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": "pool-e"},
             "spec": {"partitionLabelValue": "pool-e"}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(shard))
    def the_lease() -> dict[str, Any] | None:
        got = cluster.kubectl("get", "lease", "kai-scheduler-pool-e", "-n", NS, "-o", "json", check=False)
        return json.loads(got.stdout) if got.returncode == 0 else None

    lease = wait_for("kai-scheduler-pool-e Lease", the_lease, timeout=60)
    assert [(r["kind"], r["name"]) for r in lease["metadata"]["ownerReferences"]] == [("SchedulingShard", "pool-e")]
    cluster.kubectl("delete", "schedulingshard", "pool-e")
    wait_for("the shard's Lease gone", lambda: the_lease() is None, timeout=60)


def test_a_quiet_minute_costs_no_write(cluster: Cluster, operator: subprocess.Popen[bytes]) -> None:
    def settled() -> float | None:
        first = writes()
        time.sleep(5)
        return first if writes() == first else None

    start = wait_for("the operator to settle", settled, timeout=90)
    time.sleep(60)
    assert writes() == start, "the operator's own writes re-triggered it"
    assert operator.poll() is None


def gpu_pods(prefix: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{prefix}{i}", "labels": {"kai.scheduler/queue": "default-queue"}},
             "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {GPU: "1"}}}]}}
            for i in range(2)]


def nodes_of(cluster: Cluster, namespace: str, prefix: str) -> set[str]:
    def bound() -> set[str] | None:
        items = [p for p in cluster.get_json("pods", namespace=namespace)["items"]
                 if p["metadata"]["name"].startswith(prefix)]
        placed = [p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")]
        return set(placed) if len(placed) == 2 else None

    return wait_for(f"both {prefix} pods bound", bound, timeout=60)


def test_a_second_operator_stands_by_without_writing(cluster: Cluster, operator: subprocess.Popen[bytes],
                                                     tmp_path: Path) -> None:
    """Leader election: the standby waits for the Lease before Kopf opens a watch, so it writes nothing."""
    port = PORT + 5
    with operator_process(cluster.kubeconfig, port, tmp_path / "standby.log", "--version=test") as standby:
        wait_for("the standby's probes", lambda: probe_status(port + 1, "/healthz") == 200)
        assert probe_status(port + 1, "/readyz?standby=true") == 200, "able to lead"
        assert probe_status(port + 1, "/readyz") != 200, "not leading"
        lease = cluster.get_json("lease", "kai-operator", namespace=NS)
        assert lease["spec"]["holderIdentity"], lease
        cluster.kubectl("patch", "config", "kai-config", "--type=merge", "-p",
                        json.dumps({"spec": {"podGroupController": {"replicas": 1}}}))
        try:
            wait_for("the leader reconciles the change",
                     lambda: condition_is(cluster, "config", "kai-config", "Available", "True"))
            time.sleep(3)
            assert writes(port) == 0, "the standby wrote"
            assert writes(PORT) > 0
            assert standby.poll() is None
        finally:
            cluster.kubectl("patch", "config", "kai-config", "--type=json",
                            "-p", '[{"op": "remove", "path": "/spec/podGroupController"}]')


def test_spread_placement_still_changes_where_pods_land(cluster: Cluster, namespace: str,
                                                         operator: subprocess.Popen[bytes]) -> None:
    """The scheduler reads its shard live; the operator also re-renders the default scheduler's config."""
    original = (cluster.get_json("schedulingshard", "default").get("spec") or {}).get("placementStrategy")
    post = {"apiVersion": "v1", "kind": "List"}
    cluster.kubectl("apply", "-f", "-", input=json.dumps({**post, "items": gpu_pods("bin")}), namespace=namespace)
    assert len(nodes_of(cluster, namespace, "bin")) == 1, "binpack puts both on one node"
    cluster.kubectl("delete", "pods", "--all", "--wait=true", namespace=namespace)
    cluster.kubectl("patch", "schedulingshard", "default", "--type=merge", "-p",
                    json.dumps({"spec": {"placementStrategy": {"gpu": "spread", "cpu": "spread"}}}))
    try:
        def rendered() -> bool:
            cm = cluster.get_json("configmap", "kai-scheduler-default", namespace=NS)
            return "spread" in cm["data"]["config.yaml"]

        wait_for("the operator's config.yaml to say spread", rendered)
        time.sleep(3)  # the next cycle has read the patched shard
        cluster.kubectl("apply", "-f", "-", input=json.dumps({**post, "items": gpu_pods("spread")}),
                        namespace=namespace)
        assert len(nodes_of(cluster, namespace, "spread")) == 2, "spread puts them on two nodes"
    finally:
        cluster.kubectl("patch", "schedulingshard", "default", "--type=merge",
                        "-p", json.dumps({"spec": {"placementStrategy": original}}), check=False)
