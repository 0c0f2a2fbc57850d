"""The helm chart (charts/kai-scheduler), rendered with the cached helm: structure, flags, RBAC, webhooks, TLS.

No cluster: `helm template` (lookup answers nothing, so everything the chart may create renders). The cluster
side (install, upgrade, uninstall, RBAC sufficiency with ServiceAccount tokens) is tests/integration/test_chart.py.
"""

from __future__ import annotations

import base64
import filecmp
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.core import podwebhooks
from tests.helm_chart import (
    CHART,
    DEPLOYMENTS,
    KAI_DEFAULT_VALUES,
    KAI_VALUES,
    NS,
    ROOT,
    allows,
    by_kind,
    helm_binary,
    render,
    rules_of,
)


@pytest.fixture(scope="module")
def default_docs() -> list[dict[str, Any]]:
    return render("global.gpuSharing=true")


def test_the_default_install_is_the_operator_path() -> None:
    """As KAI's chart: CRDs, the operator and the Config/SchedulingShard; the operator renders the components."""
    docs = _default_install()
    assert list(by_kind(docs, "Deployment")) == ["kai-operator"]
    assert {"kai-config"} == set(by_kind(docs, "Config")) and "default" in by_kind(docs, "SchedulingShard")
    assert by_kind(docs, "Config")["kai-config"]["spec"]["scheduler"]["replicas"] == 1


def _default_install() -> list[dict[str, Any]]:
    proc = subprocess.run([helm_binary(), "template", "kai-scheduler", str(CHART), "-n", NS], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


# --- CRDs -----------------------------------------------------------------------------------------------
def test_chart_crds_are_the_generated_ones() -> None:
    """charts/kai-scheduler/crds is a copy of crds/ (generated from the models): same files, same bytes.

    Refresh after `python -m operators.core.api.crdgen crds/` with `cp crds/*.yaml charts/kai-scheduler/crds/`.
    """
    repo = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    chart = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart == repo
    mismatch = [n for n in repo if not filecmp.cmp(ROOT / "crds" / n, CHART / "crds" / n, shallow=False)]
    assert not mismatch, f"stale chart CRDs {mismatch}: cp crds/*.yaml charts/kai-scheduler/crds/"


# --- lint and render ------------------------------------------------------------------------------------
def test_helm_lint_is_clean() -> None:
    for extra in ([], ["--set", "global.gpuSharing=true", "--set", "scheduler.replicaCount=2"]):
        proc = subprocess.run([helm_binary(), "lint", "--strict", str(CHART), *extra], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def test_six_deployments_named_and_labelled_like_kai(default_docs: list[dict[str, Any]]) -> None:
    deployments = by_kind(default_docs, "Deployment")
    assert set(deployments) == set(DEPLOYMENTS)
    images = set()
    for name, (component, sa) in DEPLOYMENTS.items():
        d = deployments[name]
        assert d["metadata"]["namespace"] == NS
        assert d["metadata"]["labels"]["app"] == name
        assert d["spec"]["selector"]["matchLabels"] == {"app": name}
        pod = d["spec"]["template"]
        assert pod["metadata"]["labels"]["app"] == name
        assert pod["spec"]["serviceAccountName"] == sa
        (container,) = pod["spec"]["containers"]
        images.add(container["image"])
        assert container["args"][:2] == ["run", component]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}}
        # The only writable path: /tmp, an emptyDir (the webhook certificates are mounted below it).
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["spec"]["volumes"]
    assert images == {"ghcr.io/kai-scheduler-py/kai-scheduler:0.1.0"}, "one image for every component"


def _parse_args(deployment: dict[str, Any]) -> Any:
    from operators import components

    container = deployment["spec"]["template"]["spec"]["containers"][0]
    component = container["args"][1]
    return components.load(component).parser().parse_args(container["args"][2:])  # type: ignore[attr-defined]


def test_every_deployment_flag_is_one_its_component_accepts(default_docs: list[dict[str, Any]]) -> None:
    """The chart passes nothing a component's parser rejects (argparse would exit the container)."""
    parsed = {name: _parse_args(d) for name, d in by_kind(default_docs, "Deployment").items()}
    assert parsed["admission"].gpu_sharing_enabled is True
    assert parsed["admission"].gpu_fraction_runtime_class_name == "nvidia"
    assert parsed["admission"].gpu_pod_runtime_class_name == ""
    assert parsed["binder"].resource_reservation_namespace == "kai-resource-reservation"
    assert parsed["kai-scheduler-default"].config == "/etc/config/config.yaml"
    assert parsed["pod-grouper"].queue_label_key == "kai.scheduler/queue"
    for name, args in parsed.items():
        assert args.scheduler_name == "kai-scheduler", name
        assert args.namespace == NS, name
        assert args.leader_elect is False, name
    everything = render("global.leaderElection=true", "binder.resourceReservationPodResources.requests.cpu=2m",
                        "global.resourceReservation.runtimeClassName=nvidia", "scheduler.actions=allocate\\,reclaim",
                        "scheduler.staleGracePeriod=30s", "scheduler.extraArgs={--schedule-period=2s}")
    parsed = {name: _parse_args(d) for name, d in by_kind(everything, "Deployment").items()}
    assert parsed["binder"].resource_reservation_pod_resources == {"requests": {"cpu": "2m"}}
    assert parsed["binder"].runtime_class_name == "nvidia"
    assert parsed["kai-scheduler-default"].actions is None, "actions live in the scheduler's configuration"
    assert scheduler_config(everything).actions == ("allocate", "reclaim")
    assert parsed["kai-scheduler-default"].schedule_period == "2s"


def scheduler_config(docs: list[dict[str, Any]]) -> Any:
    """The scheduler's configuration as `kai run scheduler --config` loads it from the chart's ConfigMap."""
    from operators.scheduler.decide.config import config_from_mapping

    config = by_kind(docs, "ConfigMap")["kai-scheduler-default"]
    return config_from_mapping(yaml.safe_load(config["data"]["config.yaml"]))


def test_scheduler_config_is_a_shard_spec_the_scheduler_loads(default_docs: list[dict[str, Any]]) -> None:
    from operators.scheduler.decide.config import config_from_mapping

    docs = render("scheduler.placementStrategy=spread", "scheduler.config.queueDepthPerAction.allocate=5")
    config = by_kind(docs, "ConfigMap")["kai-scheduler-default"]
    loaded = config_from_mapping(yaml.safe_load(config["data"]["config.yaml"]))
    assert (loaded.gpu_placement, loaded.cpu_placement) == ("spread", "spread")
    assert dict(loaded.queue_depth_per_action) == {"allocate": 5}


# --- leader election ------------------------------------------------------------------------------------
def _leader_elect(docs: list[dict[str, Any]]) -> dict[str, bool]:
    return {name: "--leader-elect" in d["spec"]["template"]["spec"]["containers"][0]["args"]
            for name, d in by_kind(docs, "Deployment").items()}


def test_leader_election_follows_replicas_and_switches() -> None:
    docs = render("scheduler.replicaCount=2", "binder.replicaCount=2", "admission.replicaCount=3")
    elect = _leader_elect(docs)
    assert elect["kai-scheduler-default"] and elect["binder"]
    assert not elect["admission"], "the webhook runs active-active"
    assert not elect["queue-controller"]
    roles = by_kind(docs, "Role")
    assert set(roles) == {"kai-scheduler-default-leader-election", "binder-leader-election", "kai-binder-reservation"}
    lease_rule = roles["binder-leader-election"]["rules"][1]
    assert lease_rule["resourceNames"] == ["kai-binder"] and "delete" not in lease_rule["verbs"]
    budgets = by_kind(docs, "PodDisruptionBudget")
    assert set(budgets) == {"admission", "binder", "kai-scheduler-default"}, "replicas > 1 only"
    assert budgets["admission"]["spec"]["maxUnavailable"] == 1
    strategies = {n: d["spec"]["strategy"]["type"] for n, d in by_kind(docs, "Deployment").items()}
    assert strategies["kai-scheduler-default"] == "RollingUpdate"
    assert strategies["queue-controller"] == "Recreate", "a singleton without a lease never runs twice"
    # An elected replica is Ready as a warm standby (the new pod of a rolling update starts as one).
    probes = {n: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
              for n, d in by_kind(docs, "Deployment").items()}
    assert probes["kai-scheduler-default"] == probes["binder"] == "/readyz?standby=true"
    assert probes["admission"] == probes["queue-controller"] == "/readyz"
    # Webhook servers outlive their removal from the Service's endpoints; the others stop at once.
    stops = {n: d["spec"]["template"]["spec"]["containers"][0].get("lifecycle")
             for n, d in by_kind(docs, "Deployment").items()}
    assert {n for n, s in stops.items() if s} == {"admission", "queue-controller", "podgroup-controller"}
    assert stops["admission"] == {"preStop": {"sleep": {"seconds": 5}}}
    # The release owns the Leases of its elected components, so that uninstall removes them.
    assert set(by_kind(docs, "Lease")) == {"kai-scheduler-default", "kai-binder"}
    assert not by_kind(render(), "Lease"), "no election, no Lease"
    everything = _leader_elect(render("global.leaderElection=true"))
    assert everything == {name: name != "admission" for name in DEPLOYMENTS}
    off = _leader_elect(render("scheduler.replicaCount=2", "scheduler.leaderElection=false"))
    assert not off["kai-scheduler-default"]


# --- RBAC -----------------------------------------------------------------------------------------------
def test_rbac_is_least_privilege(default_docs: list[dict[str, Any]]) -> None:
    docs = render("global.leaderElection=true")
    for kind in ("ClusterRole", "Role"):
        for name, role in by_kind(docs, kind).items():
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], name
                assert "*" not in rule["apiGroups"], name
                assert "secrets" not in rule["resources"], f"{name} must not read secrets"
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), name
                assert not {"nodes", "namespaces"} & set(rule["resources"]) or set(rule["verbs"]) <= {
                    "get", "list", "watch"}, f"{name} may only read nodes and namespaces"
    for binding in by_kind(docs, "ClusterRoleBinding").values():
        assert binding["roleRef"]["name"] not in ("cluster-admin", "admin", "edit")
    # The webhook reads nothing from the API server: its ServiceAccount has no rules. Its token is mounted all
    # the same, as the component runtime logs in (discovery only, which every authenticated client may read).
    assert rules_of(docs, "admission") == [], "the webhook never calls the API server"
    assert "automountServiceAccountToken" not in by_kind(docs, "ServiceAccount")["admission"]
    # What each component does, in one line each (the integration test proves it is enough).
    expect = {
        "scheduler": [("scheduling.run.ai", "bindrequests", "create"), ("", "pods", "delete"),
                      ("", "pods/eviction", "create"), ("policy", "poddisruptionbudgets", "watch"),
                      ("kai.scheduler", "topologies", "watch"),
                      ("kai.scheduler", "topologies", "watch"), ("resource.k8s.io", "resourceslices", "watch"),
                      ("resource.k8s.io", "resourceclaims", "watch"), ("resource.k8s.io", "deviceclasses", "list"),
                      ("scheduling.run.ai", "podgroups/status", "patch"), ("", "configmaps", "watch"),
                      ("autoscaling.x-k8s.io", "provisioningrequests", "create"), ("", "podtemplates", "delete"),
                      ("batch", "jobs", "patch"), ("ray.io", "rayjobs", "patch"),  # suspend instead of kill
                      ("kubeflow.org", "pytorchjobs", "patch")],
        "binder": [("", "pods/binding", "create"), ("scheduling.run.ai", "bindrequests/status", "patch"),
                   ("", "configmaps", "create"), ("", "nodes", "get"),
                   ("resource.k8s.io", "resourceclaims/status", "update")],
        "pod-grouper": [("scheduling.run.ai", "podgroups", "create"), ("scheduling.run.ai", "podgroups", "update"),
                        ("", "pods", "patch"), ("ray.io", "rayclusters", "get"), ("ray.io", "rayjobs", "patch"),
                        ("scheduling.run.ai", "queues", "watch")],
        "podgroup-controller": [("scheduling.run.ai", "podgroups/status", "patch"), ("", "nodes", "watch")],
        "queue-controller": [("scheduling.run.ai", "queues/status", "patch"),
                             ("scheduling.run.ai", "podgroups", "watch")],
    }
    forbid = {
        "scheduler": [("", "pods/binding", "create"), ("scheduling.run.ai", "queues/status", "patch"),
                      ("resource.k8s.io", "resourceclaims/status", "update")],
        "binder": [("scheduling.run.ai", "bindrequests", "create"), ("", "pods", "create")],
        "pod-grouper": [("", "pods", "delete"), ("scheduling.run.ai", "podgroups", "delete")],
        "podgroup-controller": [("scheduling.run.ai", "podgroups", "patch"), ("", "pods", "patch")],
        "queue-controller": [("scheduling.run.ai", "queues", "update"), ("", "pods", "list")],
    }
    for sa, wanted in expect.items():
        rules = rules_of(docs, sa)
        for group, resource, verb in wanted:
            assert allows(rules, group, resource, verb), (sa, group, resource, verb)
        for group, resource, verb in forbid[sa]:
            assert not allows(rules, group, resource, verb), (sa, group, resource, verb)
    reservation = by_kind(docs, "Role")["kai-binder-reservation"]
    assert reservation["metadata"]["namespace"] == "kai-resource-reservation"
    assert reservation["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]


def test_pod_grouper_may_read_every_owner_kind_it_has_a_rule_for(default_docs: list[dict[str, Any]]) -> None:
    from operators.podgrouper.grouping import registry
    from operators.podgrouper.grouping.grouper import group_pod  # noqa: F401  (registers every rule)

    rules = rules_of(default_docs, "pod-grouper")
    readable = {g for r in rules if "get" in r["verbs"] for g in r["apiGroups"]}
    wanted = {group for group, _, _ in registry.registered()}
    assert wanted - {""} <= readable, f"owner groups the pod-grouper cannot read: {sorted(wanted - readable)}"


# --- webhooks and TLS -----------------------------------------------------------------------------------
def _verify(cert_b64: str, ca_b64: str, dns: str) -> None:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(base64.b64decode(cert_b64))
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_b64))
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert dns in sans.get_values_for_type(x509.DNSName)


def test_webhooks_are_registered_like_kai_with_the_chart_certificates(default_docs: list[dict[str, Any]]) -> None:
    secrets = by_kind(default_docs, "Secret")
    mutating = by_kind(default_docs, "MutatingWebhookConfiguration")
    validating = by_kind(default_docs, "ValidatingWebhookConfiguration")
    assert set(mutating) == {"mutating-kai-admission"}
    assert set(validating) == {"validating-kai-admission", "kai-queue-validation-v2",
                               "kai-podgroup-validation-v2alpha2", "kai-topology-validation-v1alpha1"}
    for config, secret, svc, path in (
        (mutating["mutating-kai-admission"], "kai-admission-webhook-tls-secret", "admission", "/mutate--v1-pod"),
        (validating["validating-kai-admission"], "kai-admission-webhook-tls-secret", "admission",
         "/validate--v1-pod"),
        (validating["kai-queue-validation-v2"], "queue-webhook-tls-secret", "queue-controller",
         "/validate-scheduling-run-ai-v2-queue"),
        (validating["kai-podgroup-validation-v2alpha2"], "podgroup-webhook-tls-secret", "podgroup-controller",
         "/validate-scheduling-run-ai-v2alpha2-podgroup"),
        (validating["kai-topology-validation-v1alpha1"], "kai-admission-webhook-tls-secret", "admission",
         "/validate-kai-scheduler-v1alpha1-topology"),
    ):
        (webhook,) = config["webhooks"]
        client = webhook["clientConfig"]
        assert client["service"] == {"name": svc, "namespace": NS, "path": path, "port": 443}
        data = secrets[secret]["data"]
        assert client["caBundle"] == data["ca.crt"]
        _verify(data["tls.crt"], data["ca.crt"], f"{svc}.{NS}.svc")
        assert webhook["failurePolicy"] == "Fail" and webhook["sideEffects"] == "None"
        service = by_kind(default_docs, "Service")[svc]
        assert {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"} in service["spec"]["ports"]
        if svc == "admission" and path.endswith("-pod"):
            assert webhook["namespaceSelector"]["matchExpressions"] == [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NS]}]
            # KAI's condition first, unchanged; then ours, the pods this webhook can change or deny.
            assert webhook["matchConditions"][0] == {"name": "scheduler-name-match",
                                                     "expression": "object.spec.schedulerName == 'kai-scheduler'"}
            assert webhook["matchConditions"] == (
                podwebhooks.mutating_conditions("kai-scheduler", podwebhooks.Mutates.SHARING)
                if path.startswith("/mutate") else podwebhooks.validating_conditions("kai-scheduler", gpu_sharing=True))
    assert mutating["mutating-kai-admission"]["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    (topology,) = validating["kai-topology-validation-v1alpha1"]["webhooks"]
    assert topology["rules"] == [{"apiGroups": ["kai.scheduler"], "apiVersions": ["v1alpha1"],
                                  "operations": ["CREATE", "UPDATE"], "resources": ["topologies"],
                                  "scope": "Cluster"}]
    assert "namespaceSelector" not in topology and "matchConditions" not in topology
    assert mutating["mutating-kai-admission"]["webhooks"][0]["rules"][0]["operations"] == ["CREATE"]


def test_the_admission_service_name_is_configurable() -> None:
    """KAI's spec.admission.serviceName: the Service, every admission webhook's target, the certificate's names."""
    from cryptography import x509

    docs = render("admission.serviceName=kai-admission")
    service = by_kind(docs, "Service")["kai-admission"]
    assert "admission" not in by_kind(docs, "Service") and service["spec"]["selector"] == {"app": "admission"}
    assert "admission" in by_kind(docs, "Deployment"), "the Deployment keeps its name"
    hooks = [w for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
             for c in by_kind(docs, kind).values() if c["metadata"]["labels"]["app"] == "admission"
             for w in c["webhooks"]]
    assert len(hooks) == 3 and {w["clientConfig"]["service"]["name"] for w in hooks} == {"kai-admission"}
    secret = by_kind(docs, "Secret")["kai-admission-webhook-tls-secret"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert f"kai-admission.{NS}.svc" in names


def test_webhook_url_and_extra_sans_for_out_of_cluster_servers() -> None:
    docs = render("admission.webhook.url=https://127.0.0.1:9443", "global.webhookCert.ipAddresses={127.0.0.1}",
                  "global.namespaceLabelSelector.team=a", "admission.queueLabelSelector=true")
    config = by_kind(docs, "MutatingWebhookConfiguration")["mutating-kai-admission"]["webhooks"][0]
    assert config["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate--v1-pod"
    assert "service" not in config["clientConfig"]
    assert config["namespaceSelector"]["matchLabels"] == {"team": "a"}
    assert config["namespaceSelector"]["matchExpressions"][1] == {"key": "kai.scheduler/queue", "operator": "Exists"}
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(base64.b64decode(
        by_kind(docs, "Secret")["kai-admission-webhook-tls-secret"]["data"]["tls.crt"]))
    ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.IPAddress)
    assert [str(ip) for ip in ips] == ["127.0.0.1"]


def test_cert_manager_mode_issues_certificates_instead_of_secrets() -> None:
    docs = render("global.certManager.enabled=true")
    assert not by_kind(docs, "Secret")
    certificates = by_kind(docs, "Certificate")
    assert set(certificates) == {"admission-webhook", "queue-controller-webhook", "podgroup-controller-webhook"}
    assert certificates["admission-webhook"]["spec"]["secretName"] == "kai-admission-webhook-tls-secret"
    assert "kai-selfsigned" in by_kind(docs, "Issuer")
    config = by_kind(docs, "ValidatingWebhookConfiguration")["kai-queue-validation-v2"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NS}/queue-controller-webhook"
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]


# --- cluster objects ------------------------------------------------------------------------------------
def test_priority_classes_queues_and_reservation_namespace(default_docs: list[dict[str, Any]]) -> None:
    classes = {n: d["value"] for n, d in by_kind(default_docs, "PriorityClass").items()}
    assert classes == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    queues = by_kind(default_docs, "Queue")
    assert set(queues) == {"default-parent-queue", "default-queue"}
    for queue in queues.values():
        annotations = queue["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install", "before the queue webhook exists; never deleted"
        assert annotations["helm.sh/resource-policy"] == "keep"
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert queues["default-queue"]["spec"]["resources"]["gpu"] == {"quota": 0, "limit": -1, "overQuotaWeight": 1}
    namespace = by_kind(default_docs, "Namespace")["kai-resource-reservation"]
    assert namespace["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    sa = [d for d in default_docs if d["kind"] == "ServiceAccount"
          and d["metadata"]["namespace"] == "kai-resource-reservation"]
    assert [d["metadata"]["name"] for d in sa] == ["kai-resource-reservation"]
    binding = by_kind(default_docs, "RoleBinding")["kai-resource-reservation"]
    assert binding["roleRef"]["name"] == "kai-resource-reservation"
    off = render("defaultPriorityClasses.enabled=false", "defaultQueue.createDefaultQueue=false",
                 "global.resourceReservation.createNamespace=false")
    assert not by_kind(off, "PriorityClass") and not by_kind(off, "Queue") and not by_kind(off, "Namespace")
    assert [d["metadata"]["name"] for d in off if d["kind"] == "ServiceAccount"
            and d["metadata"]["namespace"] == "kai-resource-reservation"] == ["kai-resource-reservation"]


def test_grafana_dashboard_is_valid_and_uses_exported_metrics(default_docs: list[dict[str, Any]]) -> None:
    from tests.promtext import dashboard_queries, exposed, query_metrics
    from tests.unit.core.test_metric_names import KAI_QUEUE_CONTROLLER, KAI_SCHEDULER, scheduler_exposition

    dashboard = json.loads((CHART / "dashboards" / "kai-scheduler.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    titles = [p["title"] for p in panels]
    for wanted in ("fair share vs allocated", "Pending pods by reason", "Cycle latency by action", "Bind latency",
                   "Evicted pods"):
        assert any(wanted in t for t in titles), (wanted, titles)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
    queries = dashboard_queries(dashboard)
    assert all(query_metrics(q) for q in queries), [q for q in queries if not query_metrics(q)]
    used = set().union(*(query_metrics(q) for q in queries))
    # KAI's own series where KAI has one (no `_total` on its counters); the live check of every name is
    # tests/integration/test_dashboard.py.
    assert {"kai_queue_fair_share_gpu", "kai_queue_allocated_gpus", "kai_action_scheduling_latency_milliseconds",
            "kai_task_bind_latency_milliseconds_bucket", "kai_pod_group_evicted_pods_total",
            "kai_podgroups_scheduled_by_action", "kai_total_preemption_attempts"} <= used
    # Every other name is one the scheduler exposes (its additions) or the binder's own.
    kai = set(KAI_SCHEDULER) | set(KAI_QUEUE_CONTROLLER) | exposed(scheduler_exposition())
    unknown = [m for m in used if m.removesuffix("_bucket") not in kai and not m.startswith("kai_binder_")]
    assert not unknown, unknown
    assert not by_kind(default_docs, "ConfigMap").get("kai-scheduler-dashboard")
    docs = render("grafanaDashboard.enabled=true", "metrics.serviceMonitor.enabled=true")
    configmap = by_kind(docs, "ConfigMap")["kai-scheduler-dashboard"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["kai-scheduler.json"]) == dashboard
    assert set(by_kind(docs, "ServiceMonitor")) == set(DEPLOYMENTS)


def test_services_expose_metrics_for_every_component(default_docs: list[dict[str, Any]]) -> None:
    services = by_kind(default_docs, "Service")
    assert set(services) == set(DEPLOYMENTS)
    for name, svc in services.items():
        assert svc["spec"]["selector"] == {"app": name}
        assert any(p["name"] == "http-metrics" for p in svc["spec"]["ports"])
    assert services["kai-scheduler-default"]["spec"]["clusterIP"] == "None"


# --- KAI's values -----------------------------------------------------------------------------------------


def args_of(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {name: d["spec"]["template"]["spec"]["containers"][0]["args"]
            for name, d in by_kind(docs, "Deployment").items()}


def test_kais_default_values_file_installs_with_kais_meaning() -> None:
    """KAI's own default values (v0.18 keys): an empty global.nodePoolLabelKey is the default key, and
    gpuSharingMode NonMemoryEnforced turns GPU sharing on (Disabled: off)."""
    values = yaml.safe_load(KAI_DEFAULT_VALUES.read_text())
    docs = render(values=values)
    assert set(by_kind(docs, "Deployment")) == set(DEPLOYMENTS)
    assert _parse_args(by_kind(docs, "Deployment")["admission"]).gpu_sharing_enabled is True
    assert scheduler_config(docs).node_pool_label == "kai.scheduler/node-pool"
    values["global"]["gpuSharingMode"] = "Disabled"
    docs = render(values=values)
    assert _parse_args(by_kind(docs, "Deployment")["admission"]).gpu_sharing_enabled is False


def test_a_kai_values_file_renders_with_kais_meaning() -> None:
    docs = render(values=yaml.safe_load(KAI_VALUES.read_text()))
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == set(DEPLOYMENTS)
    parsed = {name: _parse_args(d) for name, d in deployments.items()}
    assert {name: args.log_format for name, args in parsed.items()} == dict.fromkeys(DEPLOYMENTS, "json")
    assert parsed["admission"].gpu_fraction_runtime_class_name == "", "KAI: an empty class disables the injection"
    assert parsed["admission"].gpu_sharing_enabled is True
    assert parsed["binder"].runtime_class_name == "nvidia" and parsed["binder"].cdi_enabled is True
    assert parsed["binder"].resource_reservation_pod_resources == {"requests": {"cpu": "1m", "memory": "10Mi"}}
    assert parsed["pod-grouper"].queue_label_key == "example.com/queue"
    assert all(parsed[n].leader_elect for n in DEPLOYMENTS if n != "admission")
    grouper = deployments["pod-grouper"]["spec"]["template"]["spec"]
    assert grouper["containers"][0]["imagePullPolicy"] == "Always"
    assert grouper["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKey"] == "kubernetes.io/hostname"
    assert not [a for a in args_of(docs)["kai-scheduler-default"] if a.startswith("--actions")]
    config = scheduler_config(docs)
    # Map-form actions: consolidation and stale-gang eviction off, reclaim (550) before allocate (500).
    assert config.effective_actions == ("reclaim", "allocate", "preempt")
    assert (config.gpu_placement, config.cpu_placement) == ("spread", "spread")
    assert config.k_value == 2.0 and config.default_preempt_min_runtime == 300
    assert config.reclaim_min_runtime_resolve == "queue"
    assert config.node_pool_label == "example.com/node-pool"
    assert config.max_consolidation_preemptees == 8, "KAI's scheduler.args: the default shard's args"
    budgets = by_kind(docs, "PodDisruptionBudget")
    assert set(budgets) == {"kai-scheduler-default"}, "the only component with 2 replicas"
    assert budgets["kai-scheduler-default"]["spec"]["maxUnavailable"] == 1
    assert not by_kind(docs, "PriorityClass"), "defaultPriorityClasses.enabled=false"
    assert not by_kind(docs, "Namespace"), "createNamespace=false"
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"
            and d["metadata"]["namespace"] == "kai-resource-reservation"] == ["kai-resource-reservation"]


def test_actions_in_every_accepted_shape_load() -> None:
    for actions in ({"allocate": {}, "reclaim": {"enabled": False}}, ["allocate", "preempt"], "allocate,preempt"):
        config = scheduler_config(render(values={"scheduler": {"actions": actions}}))
        assert config.actions[0] == "allocate" and "reclaim" not in config.actions, actions
    assert scheduler_config(render()).actions == ("allocate", "consolidation", "reclaim", "preempt",
                                                  "stalegangeviction")


def test_disabled_components_are_not_installed() -> None:
    docs = render("admission.enabled=false", "podgroupcontroller.enabled=false")
    assert set(by_kind(docs, "Deployment")) == set(DEPLOYMENTS) - {"admission", "podgroup-controller"}
    assert set(by_kind(docs, "Service")) == set(DEPLOYMENTS) - {"admission", "podgroup-controller"}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"} == {
        "binder", "pod-grouper", "queue-controller", "scheduler", "kai-resource-reservation"}
    assert "kai-podgroup-controller" not in by_kind(docs, "ClusterRole")
    webhooks = {d["metadata"]["name"] for d in docs if d["kind"].endswith("WebhookConfiguration")}
    assert webhooks == {"kai-queue-validation-v2"}
    assert "kai-admission-webhook-tls-secret" not in by_kind(docs, "Secret")


def test_deprecated_spellings_still_apply() -> None:
    docs = render("admission.gpuPodRuntimeClassName=custom", "priorityClasses.create=false",
                  "global.resourceReservation.create=false", "admission.replicaCount=3", "admission.pdb.minAvailable=2")
    assert _parse_args(by_kind(docs, "Deployment")["admission"]).gpu_fraction_runtime_class_name == "custom"
    assert not by_kind(docs, "PriorityClass") and not by_kind(docs, "Namespace")
    assert not [d for d in docs if d["kind"] == "ServiceAccount"
                and d["metadata"]["namespace"] == "kai-resource-reservation"]
    assert by_kind(docs, "PodDisruptionBudget")["admission"]["spec"] == {
        "minAvailable": 2, "selector": {"matchLabels": {"app": "admission"}}}


def notes(tmp_path: Path, *sets: str, values: dict[str, Any] | None = None) -> str:
    """NOTES.txt as helm renders it after an install. `helm template` leaves NOTES out, and a dry-run install
    needs a cluster, so a copy of the chart renders the same text into a ConfigMap."""
    chart = tmp_path / "chart"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        notes_text = (CHART / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "_test_notes.tpl").write_text('{{- define "test.notes" -}}' + notes_text + "{{- end -}}")
        (chart / "templates" / "test-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: test-notes}\n"
            'data: {notes: {{ include "test.notes" . | toJson }}}\n')
    argv = [helm_binary(), "template", "kai-scheduler", str(chart), "-n", NS, "--show-only",
            "templates/test-notes.yaml", "-f", "-"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, input=yaml.safe_dump(values or {}), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return str(yaml.safe_load(proc.stdout)["data"]["notes"])


def test_notes_name_deprecated_and_ignored_values(tmp_path: Path) -> None:
    plain = notes(tmp_path)
    assert "KAI Scheduler" in plain and "WARNING" not in plain and "NOTE:" not in plain
    text = notes(tmp_path, "admission.gpuPodRuntimeClassName=custom", "priorityClasses.create=false",
                 values={"operator": {"replicaCount": 1, "qps": 50, "burst": 300},
                         "global": {"clusterAutoscaling": True}})
    assert "admission.gpuPodRuntimeClassName: use admission.gpuFractionRuntimeClassName" in text
    assert "priorityClasses: use defaultPriorityClasses" in text
    assert "operator.qps, operator.burst: KAI's operator settings with no counterpart here" in text
    assert "operator.replicaCount" not in text
    assert "global.clusterAutoscaling" in text


def test_the_newest_kai_keys_are_accepted_and_the_ineffective_ones_named(tmp_path: Path) -> None:
    kai = yaml.safe_load(KAI_VALUES.read_text())
    text = notes(tmp_path, values=kai)
    for key in ("numaPlacementExporter", "kaiConfigDeployer", "nodescaleadjuster", "operator.qps, operator.burst"):
        assert key in text, key
    assert "goMemLimitRatio" not in text and "openshift" not in text, "KAI's defaults are not noise"
    text = notes(tmp_path, "openshift=true", "global.fipsMode=on", "global.blockNvidiaVisibleDevices=true",
                 "global.vpa.enabled=true", "podgrouper.genericKartaFallback=false", "binder.plugins.x.enabled=true",
                 "scheduler.scenarioSearchBudgets.x=1", "operator.logLevel=debug")
    for key in ("openshift", "global.fipsMode", "global.blockNvidiaVisibleDevices", "global.vpa",
                "podgrouper.genericKartaFallback", "binder.plugins", "scheduler.scenarioSearchBudgets",
                "operator.logLevel"):
        assert f"- {key}" in text, key
    assert not by_kind(render("defaultShard.enabled=false"), "SchedulingShard"), "KAI's defaultShard.enabled"


@pytest.mark.parametrize(("sets", "error"), [
    (["scheduler.unknownKey=1"], "unknownKey"),
    (["global.jsonLogs=true"], "jsonLogs"),
    (["scheduler.replicaCount=two"], "replicaCount"),
    (["global.jsonLog=yes"], "jsonLog"),
    (["scheduler.actions.alocate.enabled=false"], "alocate"),
    (["scheduler.placementStrategy=diagonal"], "placementStrategy"),
    (["schedulingShards[0].placementStrategy.gpu=spread"], "name"),
])
def test_schema_refuses_unknown_or_mistyped_keys(sets: list[str], error: str) -> None:
    argv = [helm_binary(), "template", "kai-scheduler", str(CHART), "-n", NS]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr and error in proc.stderr, proc.stderr


def test_schema_accepts_the_keys_of_shards_and_config() -> None:
    shard = {"name": "pool-a", "partitionLabelValue": "a", "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
             "args": {"detailed-fit-errors": "true"}, "queueDepthPerAction": {"allocate": 10},
             "minRuntime": {"preemptMinRuntime": "1m"}, "plugins": {"proportion": {"arguments": {"kValue": "1.5"}}},
             "actions": {"consolidation": {"enabled": False}}}
    render(values={"schedulingShards": [shard], "config": {"create": False},
                   "global": {"nodePoolLabelKey": "example.com/pool"}})


@pytest.mark.parametrize(("sets", "proven_valid_skip"), [
    ((), False),
    (("global.gpuSharing=true",), True),
    (("global.gpuSharingMode=HamiCore",), True),
    (("global.gpuSharing=true", "global.gpuSharingMode=Disabled"), False),
    (("global.gpuSharing=true", "admission.extraArgs[0]=--gpu-sharing-enabled=false"), False),
], ids=["sharing off", "sharing on", "sharing mode", "sharing mode disabled", "sharing flag in extra arguments"])
def test_a_proven_valid_create_skips_the_validating_webhook_only_with_sharing_surely_on(
        sets: tuple[str, ...], proven_valid_skip: bool) -> None:
    docs = render(*sets)
    (validating,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"
                     and d["metadata"]["name"] == "validating-kai-admission"]
    (webhook,) = validating["webhooks"]
    assert webhook["matchConditions"] == podwebhooks.validating_conditions("kai-scheduler",
                                                                           gpu_sharing=proven_valid_skip)
    args = [a for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "admission"
            for a in d["spec"]["template"]["spec"]["containers"][0]["args"]]
    # The process is told sharing is on whenever the skip is rendered (the last mention of the flag wins).
    flags = [a for a in args if a.startswith(podwebhooks.GPU_SHARING_FLAG)]
    if proven_valid_skip:
        assert flags[-1] == f"{podwebhooks.GPU_SHARING_FLAG}=true", flags


@pytest.mark.parametrize(("sets", "scope"), [
    ((), podwebhooks.Mutates.SHARING),
    (("admission.extraArgs[0]=--gpu-pod-runtime-class-name=nvidia-gpu",), podwebhooks.Mutates.GPU),
    (("admission.quotaGates=true",), podwebhooks.Mutates.EVERY_POD),
    (("admission.extraArgs[0]=--gpu-pod-runtime-class-name=x", "admission.extraArgs[1]=--quota-gates=true"),
     podwebhooks.Mutates.EVERY_POD),
], ids=["sharing pods", "GPU pods with a GPU-pod runtime class", "every pod with quota gates",
        "every pod with quota gates as an extra argument"])
def test_the_mutating_webhook_is_called_for_the_pods_it_can_change(sets: tuple[str, ...],
                                                                   scope: podwebhooks.Mutates) -> None:
    docs = render(*sets)
    (mutating,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = mutating["webhooks"]
    assert webhook["matchConditions"] == podwebhooks.mutating_conditions("kai-scheduler", scope)
    args = [a for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "admission"
            for a in d["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert podwebhooks.mutates(quota_gates=False, args=args) is scope  # what the admission process is told
