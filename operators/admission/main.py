"""The admission component: HTTPS endpoints mutating and validating kai-scheduler pods, validating Topologies.

Stateless and active-active (no leader election); a `component.Component` like every component, whose runtime is
the webhook server. Webhook configurations are static (the chart, or `kai dev up`) so they can carry the
`schedulerName` matchCondition, namespace exclusions and a short timeout, and narrower matchConditions
(`operators.core.podwebhooks`): a pod reaches a webhook only when it can change or deny it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from operators.admission.review import mutate_review, validate_review, validate_topology_review
from operators.core import component
from operators.core.booleans import add_bool_flag
from operators.core.metrics import Counter
from operators.core.webhook import WebhookServer

MUTATE_PATH = "/mutate--v1-pod"
VALIDATE_PATH = "/validate--v1-pod"
TOPOLOGY_PATH = "/validate-kai-scheduler-v1alpha1-topology"
Review = Callable[[dict[str, Any]], dict[str, Any]]
REQUESTS = Counter("kai_admission_requests_total", "AdmissionReviews answered", ["webhook", "allowed"])


def _counted(name: str, handler: Review) -> Review:
    def wrapped(review: dict[str, Any]) -> dict[str, Any]:
        answer = handler(review)
        REQUESTS.labels(name, str(bool((answer.get("response") or {}).get("allowed"))).lower()).inc()
        return answer

    return wrapped


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("admission")
    # Whole flag names only (as KAI's Go flags): the webhook registrations read `--quota-gates` and
    # `--gpu-pod-runtime-class-name` from extra arguments by name (operators.core.podwebhooks.mutates).
    p.allow_abbrev = False
    component.add_webhook_arguments(p)
    add_bool_flag(p, "--gpu-sharing-enabled", default=False, help="accept gpu-fraction / gpu-memory pods")
    p.add_argument("--gpu-pod-runtime-class-name", default="",
                   help="runtimeClassName set on every GPU pod (KAI up to v0.15); empty disables")
    p.add_argument("--gpu-fraction-runtime-class-name", default="",
                   help="runtimeClassName set on GPU-sharing pods only (KAI v0.16+; its default is nvidia); "
                        "empty disables")
    add_bool_flag(p, "--quota-gates", default=False,
                  help="beyond KAI: gate new pods of the scheduler (kai.scheduler/quota) until quota admits them")
    return p


def routes(args: argparse.Namespace) -> dict[str, Review]:
    sharing = bool(args.gpu_sharing_enabled)
    runtime_class = args.gpu_pod_runtime_class_name or None
    fraction_runtime_class = args.gpu_fraction_runtime_class_name or None
    return {
        MUTATE_PATH: _counted("mutate", lambda review: mutate_review(
            review, runtime_class_name=runtime_class, scheduler_name=args.scheduler_name,
            fraction_runtime_class_name=fraction_runtime_class, quota_gate=bool(args.quota_gates))),
        VALIDATE_PATH: _counted("validate", lambda review: validate_review(
            review, gpu_sharing_enabled=sharing, scheduler_name=args.scheduler_name)),
        TOPOLOGY_PATH: _counted("topology", validate_topology_review),
    }


async def build(args: argparse.Namespace, _: Any, life: component.Lifecycle) -> WebhookServer:
    return await component.serve_webhook(life, args, routes(args))


# Active-active: no Lease; the webhook server is the whole of its work, and it is ready once it listens.
COMPONENT = component.Component("admission", parser, build, work=lambda _: (), ready=lambda server: server.ready,
                                leader_election=False)


def main(argv: list[str]) -> int:
    return COMPONENT.main(argv)
