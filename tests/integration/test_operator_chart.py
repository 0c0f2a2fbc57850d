"""The chart's default path (the kai-operator) with a values file written for KAI, on the local control plane.

Own cluster without the dev components (KAI_CHART_TEST_CLUSTER / KAI_CHART_TEST_PORT_BASE, as
tests/integration/test_chart.py). helm installs the CRDs, the operator and the Config/SchedulingShard; the
operator runs as a local process with a token of its chart ServiceAccount (so its RBAC is what is tested) and
renders the rest. kube-scheduler places every Deployment on kwok nodes, which report the pods Running.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm_chart import CHART, DEPLOYMENTS
from tests.integration import test_chart
from tests.integration.test_chart import KAI_VALUES, NS, RELEASE, Helm, token_kubeconfig
from tests.integration.test_operator import operator_process
from tests.support import Cluster, wait_for

pytestmark = pytest.mark.cluster

PORT_BASE = int(os.environ.get("KAI_CHART_TEST_PORT_BASE", "24000"))
# The chart test's fixtures: its cluster (KAI_CHART_TEST_CLUSTER, --no-components) and helm.
chart_cluster = test_chart.chart_cluster
helm = test_chart.helm
WEBHOOKS = {"mutating-kai-admission", "validating-kai-admission", "kai-topology-validation-v1alpha1",
            "kai-queue-validation-v2", "kai-podgroup-validation-v2alpha2"}


@pytest.fixture(scope="module")
def installed(chart_cluster: Cluster, helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # `kai dev up` creates a Config and a default shard of its own, which the chart would leave alone: the
    # release brings its own, from the values.
    chart_cluster.kubectl("delete", "config", "kai-config", "--ignore-not-found")
    chart_cluster.kubectl("delete", "schedulingshard", "default", "--ignore-not-found")
    out = helm("upgrade", "-i", RELEASE, str(CHART), "-n", NS, "--create-namespace", "-f", str(KAI_VALUES)).stdout
    root = tmp_path_factory.mktemp("operator")
    kubeconfig = token_kubeconfig(chart_cluster, "kai-operator", root / "operator.kubeconfig")
    try:
        with operator_process(kubeconfig, PORT_BASE + 960, root / "operator.log"):
            yield out
    finally:
        helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)


def deployments(cluster: Cluster) -> dict[str, Any]:
    return {d["metadata"]["name"]: d for d in cluster.get_json("deployments", namespace=NS)["items"]}


def test_a_kai_values_file_installs_the_operator_and_it_renders_the_suite(chart_cluster: Cluster, helm: Helm,
                                                                          installed: str) -> None:
    assert "STATUS: deployed" in installed
    assert "numaPlacementExporter" in installed, "KAI values without effect are named in the notes"
    # What the operator is given is what `helm get values` shows.
    given = json.loads(helm("get", "values", RELEASE, "-n", NS, "-o", "json").stdout)
    assert given == yaml.safe_load(KAI_VALUES.read_text())
    config = chart_cluster.get_json("config", "kai-config")
    for key in ("jsonLog", "nodePoolLabelKey", "leaderElection", "requireDefaultPodAntiAffinityTerm", "registry"):
        assert config["spec"]["global"][key] == given["global"][key], key
    assert config["spec"]["admission"]["gpuSharing"] is given["global"]["gpuSharing"] is True
    assert config["spec"]["scheduler"]["replicas"] == given["scheduler"]["replicaCount"] == 2
    assert config["spec"]["scheduler"]["service"]["podDisruptionBudget"] == given["scheduler"]["podDisruptionBudget"]

    every = {*DEPLOYMENTS, "kai-operator"}
    found = wait_for("the six Deployments and the operator's",
                     lambda: (d := deployments(chart_cluster)) and set(d) >= every and d, timeout=120)
    args = {name: d["spec"]["template"]["spec"]["containers"][0]["args"] for name, d in found.items()}
    assert all("--log-format=json" in args[name] for name in DEPLOYMENTS), args
    assert "--queue-label-key=example.com/queue" in args["pod-grouper"]
    assert "--runtime-class-name=nvidia" in args["binder"] and "--cdi-enabled=true" in args["binder"]
    for name in DEPLOYMENTS:
        assert found[name]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kai-operator"
    scheduler_config = yaml.safe_load(chart_cluster.get_json("configmap", "kai-scheduler-default",
                                                             namespace=NS)["data"]["config.yaml"])
    assert scheduler_config["plugins"]["proportion"] == {"arguments": {"kValue": "2.0"}}
    assert scheduler_config["args"]["max-consolidation-preemptees"] == "8", "KAI's scheduler.args"
    # The budget of the scheduler's two replicas, rendered by the operator (its chart RBAC allows it).
    budget = wait_for("the scheduler's PodDisruptionBudget", lambda: json.loads(chart_cluster.kubectl(
        "get", "pdb", "-n", NS, "-l", "app.kubernetes.io/managed-by=kai-operator", "-o", "json").stdout)["items"])
    assert [(b["metadata"]["name"], b["spec"]["maxUnavailable"]) for b in budget] == [("kai-scheduler-default", 1)]

    # The webhook registrations, with the CA of the chart's TLS Secrets.
    def registered() -> set[str] | None:
        names = {c["metadata"]["name"] for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
                 for c in chart_cluster.get_json(kind)["items"]}
        return names if names >= WEBHOOKS else None

    wait_for("the webhook configurations", registered)
    secret = chart_cluster.get_json("secret", "kai-admission-webhook-tls-secret", namespace=NS)
    mutating = chart_cluster.get_json("mutatingwebhookconfiguration", "mutating-kai-admission")
    assert mutating["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]

    # Everything Running (on kwok), the operator included, and the Config says so.
    def running() -> list[str] | None:
        pods = chart_cluster.get_json("pods", namespace=NS)["items"]
        apps = {p["metadata"]["labels"].get("app") for p in pods if p["status"].get("phase") == "Running"}
        return sorted(apps) if apps >= every else None

    wait_for("every pod Running", running, timeout=180)

    def available() -> dict[str, Any] | None:
        obj = chart_cluster.get_json("config", "kai-config")
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        c = conds.get("Available")
        return c if c and c["status"] == "True" and c["observedGeneration"] == obj["metadata"]["generation"] else None

    wait_for("Config Available", available, timeout=180)


def test_uninstalling_removes_what_the_operator_rendered(chart_cluster: Cluster, helm: Helm, installed: str) -> None:
    helm("uninstall", RELEASE, "-n", NS, "--wait")
    # The Config goes with the release; garbage collection takes what it owned.
    wait_for("the operator's Deployments gone",
             lambda: not [d for d in deployments(chart_cluster).values()
                          if d["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "kai-operator"],
             timeout=120)
    left = json.loads(chart_cluster.kubectl("get", "validatingwebhookconfigurations", "-o", "json").stdout)["items"]
    assert not [c for c in left if c["metadata"]["name"] in WEBHOOKS]
    assert Path(chart_cluster.kubeconfig).exists()
