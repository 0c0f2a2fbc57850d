"""The Config fields the operator does not render, by dotted path (the condition `FieldsNotHonoured`): pure.

KAI's Config has more than this suite runs (node-scale-adjuster, Prometheus, per-component image names: one
image runs every component here, ...); such a field is accepted and kept, and named, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GLOBAL = frozenset({
    "registry", "image", "tag", "imagePullPolicy", "imagePullSecrets", "schedulerName", "queueLabelKey",
    "nodePoolLabelKey", "leaderElection", "logLevel", "jsonLog", "priorityClassName", "replicaCount",
    "requireDefaultPodAntiAffinityTerm", "namespaceLabelSelector", "podLabelSelector", "nodeSelector", "tolerations",
    "affinity", "podSecurityContext", "securityContext",
})
SERVICE = frozenset({"enabled", "image", "resources", "affinity", "nodeSelector", "tolerations", "podAnnotations",
                     "args", "podDisruptionBudget"})
IMAGE = frozenset({"tag", "pullPolicy"})
COMMON = frozenset({"service", "replicas", "ports", "leaderElection"})
COMPONENT = {
    "admission": COMMON | {"gpuSharing", "gpuPodRuntimeClassName", "queueLabelSelector", "quotaGates", "certSecretName",
                           "webhook", "serviceName"},
    "binder": COMMON | {"maxConcurrentReconciles", "cdiEnabled", "resourceReservation"},
    "podGrouper": COMMON | {"maxConcurrentReconciles"},
    "podGroupController": COMMON | {"webhooks", "certSecretName", "webhook"},
    "queueController": COMMON | {"webhooks", "metricsNamespace", "certSecretName", "webhook"},
    "scheduler": COMMON | {"staleGracePeriod", "schedulePeriod"},
}


def _unread(prefix: str, value: Any, known: frozenset[str]) -> list[str]:
    return [f"{prefix}.{k}" for k in sorted(value) if k not in known] if isinstance(value, Mapping) else []


def config_fields(spec: Mapping[str, Any]) -> list[str]:
    out = [f"spec.{k}" for k in sorted(spec) if k not in {"namespace", "global", *COMPONENT}]
    out += _unread("spec.global", spec.get("global"), GLOBAL)
    for key, known in COMPONENT.items():
        comp = spec.get(key)
        out += _unread(f"spec.{key}", comp, frozenset(known))
        service = comp.get("service") if isinstance(comp, Mapping) else None
        out += _unread(f"spec.{key}.service", service, SERVICE)
        image = service.get("image") if isinstance(service, Mapping) else None
        out += [f for f in _unread(f"spec.{key}.service.image", image, IMAGE)
                if (image or {}).get(f.rsplit(".", 1)[1])]  # KAI's empty defaults (name: "") change nothing
    return out
