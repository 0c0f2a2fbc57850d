"""The admission component: HTTPS endpoints mutating and validating kai-scheduler pods, validating Topologies.

Stateless and active-active (no leader election); a Kopf operator without resource handlers
(`component.run_operator`) whose runtime is the webhook server. Webhook configurations are static (the chart, or
`kai dev up`) so they can carry the `schedulerName` matchCondition, namespace exclusions and a short timeout.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from operators.admission.review import mutate_review, validate_review, validate_topology_review
from operators.core import component
from operators.core.booleans import add_bool_flag
from operators.core.metrics import Counter
from operators.core.webhook import WebhookServer, cert_paths

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
    p.add_argument("--webhook-addr", default=":9443", help="host:port (or a bare port) of the HTTPS server")
    p.add_argument("--cert-dir", default="/tmp/k8s-webhook-server/serving-certs",
                   help="directory with tls.crt and tls.key (reloaded when they change)")
    add_bool_flag(p, "--gpu-sharing-enabled", default=False, help="accept gpu-fraction / gpu-memory pods")
    p.add_argument("--gpu-pod-runtime-class-name", default="",
                   help="runtimeClassName set on every GPU pod (KAI up to v0.15); empty disables")
    p.add_argument("--gpu-fraction-runtime-class-name", default="",
                   help="runtimeClassName set on GPU-sharing pods only (KAI v0.16+; its default is nvidia); "
                        "empty disables")
    return p


def routes(args: argparse.Namespace) -> dict[str, Review]:
    sharing = bool(args.gpu_sharing_enabled)
    runtime_class = args.gpu_pod_runtime_class_name or None
    fraction_runtime_class = args.gpu_fraction_runtime_class_name or None
    return {
        MUTATE_PATH: _counted("mutate", lambda review: mutate_review(
            review, runtime_class_name=runtime_class, scheduler_name=args.scheduler_name,
            fraction_runtime_class_name=fraction_runtime_class)),
        VALIDATE_PATH: _counted("validate", lambda review: validate_review(
            review, gpu_sharing_enabled=sharing, scheduler_name=args.scheduler_name)),
        TOPOLOGY_PATH: _counted("topology", validate_topology_review),
    }


async def serve(args: argparse.Namespace) -> None:
    address = args.webhook_addr if ":" in args.webhook_addr else f":{args.webhook_addr}"
    certfile, keyfile = cert_paths(args.cert_dir)
    server = WebhookServer(routes(args), address=address, certfile=certfile, keyfile=keyfile)
    await server.start()
    await component.serve_probes(args, ready=lambda: server.ready)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    component.setup_logging(args.log_level, "admission", args.log_format)
    return component.run(lambda: component.run_operator("admission", args, lambda: serve(args)))
