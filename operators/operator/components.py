"""The six components as the operator renders them: the Config key (KAI's spelling), the Deployment name (= pod
label `app`, as KAI's operator names them), the `kai run` component, its ServiceAccount, whether it serves a
webhook and whether it may elect a leader. The same table as the chart's `kai.components`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Component:
    key: str  # spec.<key> of the Config
    name: str
    run: str
    service_account: str
    webhook: bool
    elects: bool
    lease: str = ""
    defaults: tuple[tuple[str, Any], ...] = ()  # component-specific settings and their defaults (chart values)


def _resources(cpu: str, memory_request: str, memory_limit: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory_request}, "limits": {"memory": memory_limit}}


# In the chart's order (`range` over a dict renders keys sorted: admission, binder, podgroupcontroller, ...).
COMPONENTS: tuple[Component, ...] = (
    Component("admission", "admission", "admission", "admission", webhook=True, elects=False),
    Component("binder", "binder", "binder", "binder", webhook=False, elects=True, lease="kai-binder"),
    Component("podGroupController", "podgroup-controller", "podgroup-controller", "podgroup-controller",
              webhook=True, elects=True),
    Component("podGrouper", "pod-grouper", "pod-grouper", "pod-grouper", webhook=False, elects=True),
    Component("queueController", "queue-controller", "queue-controller", "queue-controller", webhook=True,
              elects=True),
    Component("scheduler", "kai-scheduler-default", "scheduler", "scheduler", webhook=False, elects=True,
              lease="kai-scheduler-default"),
)
BY_KEY = {c.key: c for c in COMPONENTS}

# Defaults of the chart's values.yaml, so that a Config that sets little renders the suite the chart would.
RESOURCES = {
    "admission": _resources("50m", "128Mi", "512Mi"),
    "binder": _resources("50m", "128Mi", "1Gi"),
    "podGroupController": _resources("50m", "128Mi", "1Gi"),
    "podGrouper": _resources("50m", "128Mi", "1Gi"),
    "queueController": _resources("50m", "96Mi", "512Mi"),
    "scheduler": _resources("250m", "256Mi", "2Gi"),
}
CERT_SECRETS = {
    "admission": "kai-admission-webhook-tls-secret",
    "podGroupController": "podgroup-webhook-tls-secret",
    "queueController": "queue-webhook-tls-secret",
}
PORTS = {"webhookPort": 9443, "metricsPort": 8080, "probePort": 8081}
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
TMP_SIZE = "64Mi"  # the components' /tmp (an emptyDir: the root filesystem is read-only)
# The chart's hardening (global.podSecurityContext / global.securityContext), also for a Config that sets none;
# a Config that sets `{}` opts out.
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "capabilities": {"drop": ["ALL"]}}
