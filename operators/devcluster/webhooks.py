"""Webhook configurations for the local control plane: the chart's, with URL client configs to 127.0.0.1.

Only kai-scheduler pods are sent to the pod webhooks (matchCondition on schedulerName), outside kube-system and
the suite's namespace, so a stopped admission process never blocks anyone else's pods; and of those only the ones
each webhook can change or deny (`operators.core.podwebhooks`, as the chart and the operator register them).
"""

from __future__ import annotations

import base64
from typing import Any

from operators.core import keys, podwebhooks
from operators.core.api.topology import GROUP as TOPOLOGY_GROUP
from operators.core.api.topology import PLURAL as TOPOLOGY_PLURAL
from operators.core.api.topology import VERSION as TOPOLOGY_VERSION

TOPOLOGY_CONFIG = "kai-topology-validation-v1alpha1"
TOPOLOGY_PATH = "/validate-kai-scheduler-v1alpha1-topology"  # served by the admission component


def _client(port: int, path: str, ca_pem: bytes) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}


def _pod_webhook(name: str, port: int, path: str, ca_pem: bytes, operations: list[str],
                 conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": _client(port, path, ca_pem),
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations, "resources": ["pods"],
                   "scope": "Namespaced"}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                    "values": ["kube-system", keys.KAI_NAMESPACE]}]},
        "matchConditions": conditions,
    }


def configurations(*, ca_pem: bytes, admission_port: int | None, queue_port: int | None,
                   podgroup_port: int | None, admission_args: list[str] | None = None) -> list[dict[str, Any]]:
    """The configurations of the given servers; `admission_args`: the admission process's flags, which decide the
    pods its mutating webhook is called for."""
    out: list[dict[str, Any]] = []
    if admission_port:
        args = admission_args or []
        scope = podwebhooks.mutates(quota_gates=False, args=args)
        # The admission's own flag turns sharing on; any other mention of it leaves the validating condition wide.
        sharing_on = f"{podwebhooks.GPU_SHARING_FLAG}=true"
        sharing = podwebhooks.shares_gpus(enabled=sharing_on in args,
                                          extra_args=[a for a in args if a != sharing_on])
        mutating = _pod_webhook("admission.kai-scheduler.svc", admission_port, "/mutate--v1-pod", ca_pem,
                                ["CREATE"], podwebhooks.mutating_conditions(keys.SCHEDULER_NAME, scope))
        mutating["reinvocationPolicy"] = "IfNeeded"
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "mutating-kai-admission", "labels": {"app": "admission"}},
                    "webhooks": [mutating]})
        validating = _pod_webhook("admission.kai-scheduler.svc", admission_port, "/validate--v1-pod", ca_pem,
                                  ["CREATE", "UPDATE"],
                                  podwebhooks.validating_conditions(keys.SCHEDULER_NAME, gpu_sharing=sharing))
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": "validating-kai-admission", "labels": {"app": "admission"}},
                    "webhooks": [validating]})
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": TOPOLOGY_CONFIG, "labels": {"app": "admission"}},
                    "webhooks": [{
                        "name": "topology-validation.kai.scheduler",
                        "clientConfig": _client(admission_port, TOPOLOGY_PATH, ca_pem),
                        "rules": [{"apiGroups": [TOPOLOGY_GROUP], "apiVersions": [TOPOLOGY_VERSION],
                                   "operations": ["CREATE", "UPDATE"], "resources": [TOPOLOGY_PLURAL],
                                   "scope": "Cluster"}],
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }]})
    for port, name, webhook, path, plural, version in (
        (queue_port, "kai-queue-validation-v2", "queue-validation.kai.scheduler",
         "/validate-scheduling-run-ai-v2-queue", "queues", "v2"),
        (podgroup_port, "kai-podgroup-validation-v2alpha2", "podgroup-validation.kai.scheduler",
         "/validate-scheduling-run-ai-v2alpha2-podgroup", "podgroups", "v2alpha2"),
    ):
        if not port:
            continue
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": name},
                    "webhooks": [{
                        "name": webhook,
                        "clientConfig": _client(port, path, ca_pem),
                        "rules": [{"apiGroups": [keys.GROUP], "apiVersions": [version],
                                   "operations": ["CREATE", "UPDATE"], "resources": [plural], "scope": "*"}],
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }]})
    return out
