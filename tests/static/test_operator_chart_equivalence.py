"""The operator renders what the chart renders: for a few value sets, `helm template` with `operator.enabled`
off (the chart's own component objects) equals the operator's rendering of the Config and SchedulingShards that
`helm template` with `operator.enabled` on writes. Labels that name the manager (helm vs the operator) and the
checksum of the scheduler's config (helm hashes its template text) are left out of the comparison; the
ConfigMap's YAML is compared parsed."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from operators.operator import render, unhonoured
from operators.operator.components import BY_KEY, CERT_SECRETS
from tests.helm_chart import KAI_DEFAULT_VALUES, KAI_VALUES
from tests.helm_chart import render as helm_template

KINDS = ("Deployment", "Service", "ServiceAccount", "ConfigMap", "PodDisruptionBudget", "Lease",
         "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
MANAGER_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart")
VALUE_SETS = {
    "defaults with GPU sharing": ["global.gpuSharing=true"],
    "replicas, placement, image, args": [
        "scheduler.replicaCount=2", "binder.replicaCount=3", "global.tag=9.9", "podgrouper.image.tag=1.2",
        "binder.tolerations[0].key=a", "global.tolerations[0].key=g", "binder.nodeSelector.zone=z",
        "global.nodeSelector.pool=sys", "queuecontroller.extraArgs[0]=--x=1",
        "admission.extraArgs[0]=--gpu-pod-runtime-class-name=nvidia-gpu", "scheduler.staleGracePeriod=60s",
        "binder.resources.limits.memory=3Gi", "global.jsonLog=true", "global.logLevel=DEBUG"],
    "global switches": [
        "global.leaderElection=true", "global.priorityClassName=high", "global.requireDefaultPodAntiAffinityTerm=true",
        "global.nodePoolLabelKey=example.com/pool", "global.queueLabelKey=example.com/q",
        "binder.resourceReservationPodResources.requests.memory=20Mi", "global.resourceReservation.fakeGpuNodes=true",
        "admission.gpuFractionRuntimeClassName=", "admission.queueLabelSelector=true", "admission.quotaGates=true",
        "global.podLabelSelector.team=a", "admission.serviceName=kai-admission", "admission.replicaCount=2",
        "podgrouper.replicaCount=3", "podgrouper.podDisruptionBudget.maxUnavailable=2", "admission.pdb.minAvailable=1",
        "queuecontroller.replicaCount=2", "queuecontroller.podDisruptionBudget.enabled=false"],
    "components off, a node-pool shard": [
        "podgrouper.enabled=false", "queuecontroller.webhook.enabled=false", "scheduler.placementStrategy=spread",
        "schedulingShards[0].name=pool-b", "schedulingShards[0].partitionLabelValue=b",
        "schedulingShards[0].placementStrategy.gpu=spread", "global.leaderElection=true"],
}


def normal(obj: dict[str, Any]) -> dict[str, Any]:
    obj = yaml.safe_load(yaml.safe_dump(obj))  # a deep copy, plain types
    labels = obj["metadata"].get("labels") or {}
    for key in MANAGER_LABELS:
        labels.pop(key, None)
    labels.pop("app.kubernetes.io/version", None)
    template = (obj.get("spec") or {}).get("template")
    if template:
        template["metadata"]["annotations"].pop("checksum/config", None)
    if obj["kind"] == "ConfigMap":
        obj["data"] = {k: yaml.safe_load(v) for k, v in obj["data"].items()}
    return obj


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): normal(o) for o in objs if o["kind"] in KINDS}


@pytest.mark.parametrize("sets", [*VALUE_SETS.values(), ["kai-values"], ["kai-defaults"]],
                         ids=[*VALUE_SETS, "a KAI values file", "KAI's default values file"])
def test_the_operator_renders_what_the_chart_renders(sets: list[str]) -> None:
    files = {"kai-values": KAI_VALUES, "kai-defaults": KAI_DEFAULT_VALUES}
    values = yaml.safe_load(files[sets[0]].read_text()) if sets[0:1] and sets[0] in files else None
    sets = [] if values else sets
    chart = helm_template(*sets, values=values)
    operated = helm_template(*sets, "operator.enabled=true", values=values)
    # With the operator on, the chart renders no component object; only its own operator Deployment.
    assert [o["metadata"]["name"] for o in operated if o["kind"] == "Deployment"] == ["kai-operator"]
    config = next(o for o in operated if o["kind"] == "Config")
    assert unhonoured.config_fields(config["spec"]) == [], "the operator reads every value the chart hands it"
    shards = {o["metadata"]["name"]: o.get("spec") or {} for o in operated if o["kind"] == "SchedulingShard"}
    labels = config["metadata"]["labels"]
    s = render.Settings(config["spec"], instance=labels["app.kubernetes.io/instance"],
                        version=labels["app.kubernetes.io/version"])
    # The webhook servers' CA bundles: the ones this chart rendering generated (each rendering makes new ones).
    secrets = {o["metadata"]["name"]: o for o in chart if o["kind"] == "Secret"}
    secret_of = {key: s.comp(BY_KEY[key], "certSecretName", default=name) for key, name in CERT_SECRETS.items()}
    cas = {key: secrets[name]["data"]["ca.crt"] for key, name in secret_of.items() if name in secrets}
    assert all(base64.b64decode(ca) for ca in cas.values())
    ours = render.render(config["spec"], shards, instance=s.instance, version=s.version)
    ours += render.webhook_configurations(s, cas)
    # What the chart stops rendering when the operator is on is what the operator renders.
    kept = set(by_key(operated))
    expected = {k: v for k, v in by_key(chart).items() if k not in kept}
    got = by_key(ours)
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert got[key] == expected[key], key
