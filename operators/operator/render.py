"""Config `kai-config` + SchedulingShards -> the objects of the suite: a pure function, no I/O.

`render(config_spec, shards, ...)` returns the Deployments, Services, ServiceAccounts and the default scheduler's
ConfigMap exactly as the chart renders them for the same settings (the chart's `operator.enabled` writes its
values into the Config, in KAI's Config shape: `global`, `admission`, `binder`, `podGrouper`,
`podGroupController`, `queueController`, `scheduler`, each component with KAI's `service` block). A key the
Config does not set takes the chart's default. `webhook_configurations` renders the webhook registrations
given each server's CA bundle. Every object carries `app: <name>` and the operator's managed-by label; the
operator sets the owner references.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from operators.core import podwebhooks
from operators.core.booleans import flag_text
from operators.operator.components import (
    BY_KEY,
    CERT_DIR,
    CERT_SECRETS,
    COMPONENTS,
    CONTAINER_SECURITY,
    POD_SECURITY,
    PORTS,
    RESOURCES,
    TMP_SIZE,
    Component,
)

MANAGED_BY = "kai-operator"
DEFAULT_SHARD = "default"
DEFAULT_NAMESPACE = "kai-scheduler"
Obj = dict[str, Any]


def _get(mapping: Mapping[str, Any] | None, *path: str, default: Any = None) -> Any:
    cur: Any = mapping or {}
    for key in path:
        if not isinstance(cur, Mapping) or cur.get(key) is None:
            return default
        cur = cur[key]
    return cur


@dataclass(frozen=True)
class Settings:
    """The Config spec with the chart's defaults filled in (what every object is rendered from)."""

    spec: Mapping[str, Any]
    instance: str = "kai-scheduler"
    version: str = ""

    @property
    def namespace(self) -> str:
        return str(self.spec.get("namespace") or DEFAULT_NAMESPACE)

    def glob(self, key: str, default: Any = None) -> Any:
        return _get(self.spec, "global", key, default=default)

    def comp(self, c: Component, *path: str, default: Any = None) -> Any:
        return _get(self.spec, c.key, *path, default=default)

    def enabled(self, c: Component) -> bool:
        return bool(self.comp(c, "service", "enabled", default=True))

    def replicas(self, c: Component) -> int:
        return int(self.comp(c, "replicas", default=self.glob("replicaCount", 1)))

    def port(self, c: Component, name: str) -> int:
        return int(self.comp(c, "ports", name, default=PORTS[name]))

    def leader_elect(self, c: Component) -> bool:
        if not c.elects:
            return False
        own = self.comp(c, "leaderElection")
        if own is not None:
            return bool(own)
        return bool(self.glob("leaderElection", False)) or self.replicas(c) > 1

    def service_name(self, c: Component) -> str:
        """The component's Service: its own name, but admission's is `spec.admission.serviceName` when set (KAI)."""
        return str(self.comp(c, "serviceName") or c.name) if c.key == "admission" else c.name

    def disruption_budget(self, c: Component) -> Mapping[str, Any] | None:
        """KAI's `service.podDisruptionBudget`: rendered when enabled and the component runs more than one
        replica (a budget on a single replica would block every node drain)."""
        pdb = self.comp(c, "service", "podDisruptionBudget") or {}
        return pdb if pdb.get("enabled") and self.replicas(c) > 1 else None

    def webhook_enabled(self, c: Component) -> bool:
        return c.key == "admission" or bool(self.comp(c, "webhooks", "enableValidation", default=True))

    def serves(self, c: Component) -> bool:
        return c.webhook and self.webhook_enabled(c)

    def image(self, c: Component) -> str:
        repo = str(self.glob("image", {}).get("repository") or "kai-scheduler")
        registry = str(self.glob("registry") or "")
        if registry:
            repo = f"{registry.rstrip('/')}/{repo}"
        tag = self.comp(c, "service", "image", "tag") or self.glob("tag") or self.version
        return f"{repo}:{tag}"

    def pull_policy(self, c: Component) -> str:
        return str(self.comp(c, "service", "image", "pullPolicy") or self.glob("imagePullPolicy", "IfNotPresent"))

    def labels(self) -> Obj:
        out = {"app.kubernetes.io/name": "kai-scheduler", "app.kubernetes.io/instance": self.instance,
               "app.kubernetes.io/managed-by": MANAGED_BY}
        if self.version:
            out["app.kubernetes.io/version"] = self.version
        return out

    @property
    def node_pool_label_key(self) -> str:
        return str(self.glob("nodePoolLabelKey") or "kai.scheduler/node-pool")


def _meta(name: str, s: Settings, app: str, *, namespaced: bool = True, extra: Mapping[str, str] | None = None
          ) -> Obj:
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = s.namespace
    meta["labels"] = {"app": app, **(extra or {}), **s.labels()}
    return meta


def _pod_placement(s: Settings, c: Component, app: str, *, default_anti_affinity: bool) -> Obj:
    """imagePullSecrets, securityContext, nodeSelector, tolerations and affinity of a pod spec (global < own)."""
    out: Obj = {}
    if s.glob("imagePullSecrets"):
        out["imagePullSecrets"] = copy.deepcopy(s.glob("imagePullSecrets"))
    if s.glob("podSecurityContext", POD_SECURITY):
        out["securityContext"] = copy.deepcopy(s.glob("podSecurityContext", POD_SECURITY))
    selector = {**(s.comp(c, "service", "nodeSelector") or {}), **(s.glob("nodeSelector") or {})}
    if selector:
        out["nodeSelector"] = selector
    tolerations = [*(s.glob("tolerations") or []), *(s.comp(c, "service", "tolerations") or [])]
    if tolerations:
        out["tolerations"] = copy.deepcopy(tolerations)
    affinity = s.comp(c, "service", "affinity") or s.glob("affinity")
    if affinity:
        out["affinity"] = copy.deepcopy(affinity)
    elif default_anti_affinity and s.glob("requireDefaultPodAntiAffinityTerm"):
        out["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}}
    return out


def _probes(standby: bool = False) -> Obj:
    """A leader-elected replica is Ready once it could lead (`?standby=true`), or a rolling update, whose new
    pod starts as a standby, never proceeds."""
    ready = "/readyz?standby=true" if standby else "/readyz"
    return {"livenessProbe": {"httpGet": {"path": "/healthz", "port": "probes"}, "initialDelaySeconds": 15,
                              "periodSeconds": 20},
            "readinessProbe": {"httpGet": {"path": ready, "port": "probes"}, "initialDelaySeconds": 3,
                               "periodSeconds": 5}}


def _env() -> list[Obj]:
    return [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]


def _component_args(s: Settings, c: Component) -> list[str]:
    """The flags of one component, in the chart's order."""
    args = ["run", c.run, f"--scheduler-name={s.glob('schedulerName', 'kai-scheduler')}",
            f"--namespace={s.namespace}", f"--metrics-bind-address=:{s.port(c, 'metricsPort')}",
            f"--health-probe-bind-address=:{s.port(c, 'probePort')}", f"--log-level={s.glob('logLevel', 'INFO')}",
            f"--log-format={'json' if flag_text(s.glob('jsonLog', False)) == 'true' else 'text'}"]
    if s.leader_elect(c):
        args.append("--leader-elect")
    if c.lease:
        args.append(f"--lease-name={c.lease}")
    webhook = [f"--webhook-addr=:{s.port(c, 'webhookPort')}", f"--cert-dir={CERT_DIR}"]
    if c.key == "admission":
        args += webhook
        args += [f"--gpu-sharing-enabled={flag_text(s.comp(c, 'gpuSharing', default=False))}",
                 f"--gpu-fraction-runtime-class-name={s.comp(c, 'gpuPodRuntimeClassName', default='nvidia')}"]
        if flag_text(s.comp(c, "quotaGates", default=False)) == "true":  # beyond KAI: spec.admission.quotaGates
            args.append("--quota-gates=true")
    elif c.key == "binder":
        rr = s.comp(c, "resourceReservation") or {}
        args += [f"--resource-reservation-namespace={rr.get('namespace', 'kai-resource-reservation')}",
                 f"--resource-reservation-service-account={rr.get('serviceAccountName', 'kai-resource-reservation')}",
                 f"--resource-reservation-app-label={rr.get('appLabel', 'kai-resource-reservation')}",
                 f"--resource-reservation-pod-image={rr.get('image', '')}",
                 f"--resource-reservation-allocation-timeout={rr.get('allocationTimeout', 40)}"]
        if rr.get("podResources"):
            args.append("--resource-reservation-pod-resources="
                        + json.dumps(rr["podResources"], separators=(",", ":"), sort_keys=True))
        args += [f"--runtime-class-name={rr.get('runtimeClassName') or ''}",
                 f"--fake-gpu-nodes={flag_text(rr.get('fakeGpuNodes', False))}",
                 f"--cdi-enabled={flag_text(s.comp(c, 'cdiEnabled', default=False))}",
                 f"--max-concurrent-reconciles={s.comp(c, 'maxConcurrentReconciles', default=64)}"]
    elif c.key == "podGrouper":
        args += [f"--queue-label-key={s.glob('queueLabelKey', 'kai.scheduler/queue')}",
                 f"--max-concurrent-reconciles={s.comp(c, 'maxConcurrentReconciles', default=32)}"]
    elif c.key == "podGroupController":
        args += webhook + [f"--enable-podgroup-webhook={flag_text(s.webhook_enabled(c))}"]
    elif c.key == "queueController":
        args += webhook + [f"--enable-webhook={flag_text(s.webhook_enabled(c))}",
                           f"--metrics-namespace={s.comp(c, 'metricsNamespace', default='kai')}"]
    elif c.key == "scheduler":
        args.append("--config=/etc/config/config.yaml")
        for field, flag in (("staleGracePeriod", "stale-grace-period"), ("schedulePeriod", "schedule-period")):
            if s.comp(c, field):
                args.append(f"--{flag}={s.comp(c, field)}")
    return args + [str(a) for a in s.comp(c, "service", "args", default=[])]


def _container(s: Settings, c: Component, name: str, args: list[str], *, serves: bool, mounts: list[Obj],
               standby: bool = False) -> Obj:
    ports = []
    if serves:
        ports.append({"name": "webhook", "containerPort": s.port(c, "webhookPort"), "protocol": "TCP"})
    ports += [{"name": "http-metrics", "containerPort": s.port(c, "metricsPort"), "protocol": "TCP"},
              {"name": "probes", "containerPort": s.port(c, "probePort"), "protocol": "TCP"}]
    container: Obj = {"name": name, "image": s.image(c), "imagePullPolicy": s.pull_policy(c), "args": args,
                      "env": _env(), "ports": ports}
    if serves:
        # Keep serving while the pod leaves the Service's endpoints: a webhook that stops at once refuses the
        # calls still routed to it (with failurePolicy Fail, refused creates).
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": 5}}}
    container.update(_probes(standby))
    resources = s.comp(c, "service", "resources", default=RESOURCES[c.key])
    if resources:
        container["resources"] = copy.deepcopy(resources)
    if s.glob("securityContext", CONTAINER_SECURITY):
        container["securityContext"] = copy.deepcopy(s.glob("securityContext", CONTAINER_SECURITY))
    container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}, *mounts]
    return container


def _strategy(rolling: bool) -> Obj:
    if rolling:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    return {"type": "Recreate"}


def _annotations(s: Settings, c: Component, extra: Mapping[str, str] | None = None) -> Obj:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(s.port(c, "metricsPort")), **(extra or {}),
            **(s.comp(c, "service", "podAnnotations") or {})}


def component_deployment(s: Settings, c: Component, scheduler_config: str = "") -> Obj:
    """The Deployment of one component (the chart's deployments.yaml)."""
    serves = s.serves(c)
    mounts: list[Obj] = []
    volumes: list[Obj] = [{"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}}]
    if serves:
        secret = s.comp(c, "certSecretName", default=CERT_SECRETS[c.key])
        mounts.append({"name": "webhook-certs", "mountPath": CERT_DIR, "readOnly": True})
        volumes.append({"name": "webhook-certs", "secret": {"secretName": secret}})
    extra: dict[str, str] = {}
    if c.key == "scheduler":
        mounts.append({"name": "config", "mountPath": "/etc/config", "readOnly": True})
        volumes.append({"name": "config", "configMap": {"name": c.name}})
        extra["checksum/config"] = hashlib.sha256(scheduler_config.encode()).hexdigest()
    pod: Obj = {"serviceAccountName": c.service_account}
    pod.update(_pod_placement(s, c, c.name, default_anti_affinity=True))
    if s.glob("priorityClassName"):
        pod["priorityClassName"] = s.glob("priorityClassName")
    pod["terminationGracePeriodSeconds"] = 30
    pod["containers"] = [_container(s, c, c.run, _component_args(s, c), serves=serves, mounts=mounts,
                                    standby=s.leader_elect(c))]
    pod["volumes"] = volumes
    component = {"app.kubernetes.io/component": c.run}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(c.name, s, c.name, extra=component),
        "spec": {
            "replicas": s.replicas(c),
            "selector": {"matchLabels": {"app": c.name}},
            "strategy": _strategy(s.leader_elect(c) or c.key == "admission"),
            "template": {
                "metadata": {"labels": {"app": c.name, **component, "app.kubernetes.io/name": "kai-scheduler",
                                        "app.kubernetes.io/instance": s.instance},
                             "annotations": _annotations(s, c, extra)},
                "spec": pod,
            },
        },
    }


def _service(s: Settings, c: Component, app: str, *, serves: bool, headless: bool, name: str = "") -> Obj:
    """The Service `name` (default `app`) in front of the pods labelled `app`."""
    spec: Obj = {"clusterIP": "None"} if headless else {}
    ports = [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}] if serves else []
    ports.append({"name": "http-metrics", "port": s.port(c, "metricsPort"), "targetPort": "http-metrics",
                  "protocol": "TCP"})
    spec.update({"selector": {"app": app}, "ports": ports})
    meta = _meta(name or app, s, app)
    meta["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": str(s.port(c, "metricsPort"))}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def service_account(s: Settings, c: Component) -> Obj:
    sa: Obj = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(c.service_account, s, c.name)}
    if s.glob("imagePullSecrets"):
        sa["imagePullSecrets"] = copy.deepcopy(s.glob("imagePullSecrets"))
    return sa


def scheduler_config(s: Settings, default_shard: Mapping[str, Any] | None) -> str:
    """config.yaml of the default shard's scheduler: its SchedulingShard spec plus the node-pool label key."""
    spec: Obj = {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}, "partitionLabelValue": ""}
    spec.update(copy.deepcopy(dict(default_shard or {})))
    for key in ("actions", "plugins"):  # empty: the scheduler's defaults, as if unset
        if not spec.get(key):
            spec.pop(key, None)
    spec["args"] = {"nodepool-label-key": s.node_pool_label_key, **(spec.get("args") or {})}
    return yaml.safe_dump(spec, sort_keys=True)


def scheduler_configmap(s: Settings, config_yaml: str) -> Obj:
    c = BY_KEY["scheduler"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(c.name, s, c.name),
            "data": {"config.yaml": config_yaml}}


def shard_name(shard: str) -> str:
    return f"kai-scheduler-{shard}"


def shard_deployment(s: Settings, shard: str, spec: Mapping[str, Any]) -> Obj:
    """The scheduler Deployment of a node-pool shard (the chart's scheduling-shards.yaml): it reads its
    SchedulingShard live, so only the shard's name and partition are flags."""
    c = BY_KEY["scheduler"]
    name = shard_name(shard)
    elect = s.leader_elect(c)
    args = ["run", "scheduler", f"--scheduler-name={s.glob('schedulerName', 'kai-scheduler')}",
            f"--namespace={s.namespace}", f"--metrics-bind-address=:{s.port(c, 'metricsPort')}",
            f"--health-probe-bind-address=:{s.port(c, 'probePort')}", f"--log-level={s.glob('logLevel', 'INFO')}",
            f"--shard-name={shard}", f"--partition-label-value={spec.get('partitionLabelValue') or ''}"]
    if elect:
        args += ["--leader-elect", f"--lease-name={name}"]
    pod: Obj = {"serviceAccountName": c.service_account}
    pod.update(_pod_placement(s, c, name, default_anti_affinity=False))
    pod["terminationGracePeriodSeconds"] = 30
    container = _container(s, c, "scheduler", args, serves=False, mounts=[])
    pod["containers"] = [container]
    pod["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    component = {"app.kubernetes.io/component": "scheduler"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(name, s, name, extra=component),
        "spec": {
            "replicas": s.replicas(c),
            "selector": {"matchLabels": {"app": name}},
            "strategy": _strategy(elect),
            "template": {
                "metadata": {"labels": {"app": name, **component, "app.kubernetes.io/name": "kai-scheduler",
                                        "app.kubernetes.io/instance": s.instance, "kai.scheduler/shard": shard},
                             "annotations": _annotations(s, c)},
                "spec": pod,
            },
        },
    }


def component_objects(s: Settings, c: Component, default_shard: Mapping[str, Any] | None = None) -> list[Obj]:
    """One component's ServiceAccount, Deployment and Service (the scheduler's also its ConfigMap, rendered from
    the SchedulingShard `default`)."""
    out = [service_account(s, c)]
    config_yaml = ""
    if c.key == "scheduler":
        config_yaml = scheduler_config(s, default_shard)
        out.append(scheduler_configmap(s, config_yaml))
    out.append(component_deployment(s, c, config_yaml))
    out.append(_service(s, c, c.name, serves=s.serves(c), headless=c.key == "scheduler", name=s.service_name(c)))
    if s.disruption_budget(c) is not None:
        out.append(disruption_budget(s, c))
    if c.lease and s.leader_elect(c):
        out.append(lease(s, c.lease, c.name))
    return out


def lease(s: Settings, name: str, app: str) -> Obj:
    """An electing Deployment's Lease, empty (its holder fills it in): owned, so that it goes with its owner, the
    Config or a shard (the component cannot delete it once its RBAC is gone) - the chart's `kai.lease`."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": _meta(name, s, app), "spec": {}}


def disruption_budget(s: Settings, c: Component) -> Obj:
    """The component's PodDisruptionBudget (the chart's pdb.yaml): maxUnavailable (default 1) or minAvailable."""
    pdb = s.disruption_budget(c) or {}
    spec: Obj = {"minAvailable": pdb["minAvailable"]} if "minAvailable" in pdb else {
        "maxUnavailable": pdb.get("maxUnavailable") or 1}
    spec["selector"] = {"matchLabels": {"app": c.name}}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(c.name, s, c.name),
            "spec": spec}


def unwanted_budgets(s: Settings) -> list[Obj]:
    """The budgets no component should have now (one replica, budget off, component off), to delete if present."""
    return [disruption_budget(s, c) for c in COMPONENTS if not s.enabled(c) or s.disruption_budget(c) is None]


def config_objects(s: Settings, default_shard: Mapping[str, Any] | None) -> list[Obj]:
    """What the Config owns: the objects of every enabled component."""
    return [obj for c in COMPONENTS if s.enabled(c) for obj in component_objects(s, c, default_shard)]


def shard_objects(s: Settings, shard: str, spec: Mapping[str, Any]) -> list[Obj]:
    """What a node-pool SchedulingShard owns: its scheduler Deployment, headless metrics Service and, when it
    elects, its Lease (so that deleting a shard created with kubectl leaves no Lease behind). The default shard's
    scheduler is the Config's `kai-scheduler-default`."""
    if shard == DEFAULT_SHARD or not s.enabled(BY_KEY["scheduler"]):
        return []
    c = BY_KEY["scheduler"]
    name = shard_name(shard)
    out = [shard_deployment(s, shard, spec), _service(s, c, name, serves=False, headless=True)]
    if s.leader_elect(c):
        out.append(lease(s, name, name))
    return out


def render(config_spec: Mapping[str, Any], shards: Mapping[str, Mapping[str, Any]], *, instance: str = "kai-scheduler",
           version: str = "") -> list[Obj]:
    """Every object of the suite, the Config's first, then each shard's (by name)."""
    s = Settings(config_spec, instance=instance, version=version)
    out = config_objects(s, shards.get(DEFAULT_SHARD))
    for name in sorted(shards):
        out += shard_objects(s, name, shards[name])
    return out


def webhook_configurations(s: Settings, ca_bundles: Mapping[str, str]) -> list[Obj]:
    """The webhook registrations of the enabled webhook servers whose CA bundle (base64, by Config key) is known."""
    out: list[Obj] = []

    def client(svc: str, path: str, ca: str, url: str) -> Obj:
        if url:
            return {"url": f"{url.rstrip('/')}{path}", "caBundle": ca}
        return {"service": {"name": svc, "namespace": s.namespace, "path": path, "port": 443}, "caBundle": ca}

    def hook(c: Component, name: str, path: str, rules: list[Obj], ca: str) -> Obj:
        w = s.comp(c, "webhook") or {}
        return {"name": name, "clientConfig": client(s.service_name(c), path, ca, str(w.get("url") or "")),
                "rules": rules,
                "failurePolicy": w.get("failurePolicy", "Fail"), "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": int(w.get("timeoutSeconds", 10))}

    def registration(kind: str, name: str, app: str, hooks: list[Obj]) -> Obj:
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": _meta(name, s, app, namespaced=False), "webhooks": hooks}

    def pod_rules(operations: Sequence[str]) -> list[Obj]:
        return [{"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations), "resources": ["pods"],
                 "scope": "Namespaced"}]

    def pod_selectors(conditions: list[Obj]) -> Obj:
        expressions: list[Obj] = [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                   "values": ["kube-system", s.namespace]}]
        if s.comp(BY_KEY["admission"], "queueLabelSelector"):
            expressions.append({"key": s.glob("queueLabelKey", "kai.scheduler/queue"), "operator": "Exists"})
        ns: Obj = {"matchExpressions": expressions}
        if s.glob("namespaceLabelSelector"):
            ns["matchLabels"] = dict(s.glob("namespaceLabelSelector"))
        out: Obj = {"namespaceSelector": ns}
        if s.glob("podLabelSelector"):
            out["objectSelector"] = {"matchLabels": dict(s.glob("podLabelSelector"))}
        out["matchConditions"] = conditions
        return out

    a = BY_KEY["admission"]
    if s.enabled(a) and ca_bundles.get(a.key):
        ca = ca_bundles[a.key]
        # KAI's schedulerName condition, narrowed to the pods each webhook can change or deny (core.podwebhooks).
        scheduler = str(s.glob("schedulerName", "kai-scheduler"))
        extra_args = [str(x) for x in s.comp(a, "service", "args", default=[])]
        scope = podwebhooks.mutates(quota_gates=flag_text(s.comp(a, "quotaGates", default=False)) == "true",
                                    args=extra_args)
        sharing = podwebhooks.shares_gpus(enabled=flag_text(s.comp(a, "gpuSharing", default=False)) == "true",
                                          extra_args=extra_args)
        out.append(registration("MutatingWebhookConfiguration", "mutating-kai-admission", a.name, [
            {**hook(a, "admission.kai-scheduler.svc", "/mutate--v1-pod", pod_rules(["CREATE"]), ca),
             "reinvocationPolicy": "IfNeeded", **pod_selectors(podwebhooks.mutating_conditions(scheduler, scope))}]))
        out.append(registration("ValidatingWebhookConfiguration", "validating-kai-admission", a.name, [
            {**hook(a, "admission.kai-scheduler.svc", "/validate--v1-pod", pod_rules(["CREATE", "UPDATE"]), ca),
             **pod_selectors(podwebhooks.validating_conditions(scheduler, gpu_sharing=sharing))}]))
        out.append(registration("ValidatingWebhookConfiguration", "kai-topology-validation-v1alpha1", a.name, [
            hook(a, "topology-validation.kai.scheduler", "/validate-kai-scheduler-v1alpha1-topology",
                 [{"apiGroups": ["kai.scheduler"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                   "resources": ["topologies"], "scope": "Cluster"}], ca)]))
    for key, config, webhook, path, resource, version in (
            ("queueController", "kai-queue-validation-v2", "queue-validation.kai.scheduler",
             "/validate-scheduling-run-ai-v2-queue", "queues", "v2"),
            ("podGroupController", "kai-podgroup-validation-v2alpha2", "podgroup-validation.kai.scheduler",
             "/validate-scheduling-run-ai-v2alpha2-podgroup", "podgroups", "v2alpha2")):
        c = BY_KEY[key]
        if s.enabled(c) and s.webhook_enabled(c) and ca_bundles.get(key):
            out.append(registration("ValidatingWebhookConfiguration", config, c.name, [
                hook(c, webhook, path, [{"apiGroups": ["scheduling.run.ai"], "apiVersions": [version],
                                         "operations": ["CREATE", "UPDATE"], "resources": [resource],
                                         "scope": "*"}], ca_bundles[key])]))
    return out
