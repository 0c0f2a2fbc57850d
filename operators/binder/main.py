"""The binder component: `kai run binder`. Turns BindRequests into bound pods.

BindRequests come from an informer whose events only enqueue keys into a bounded work queue; the reconcile binds
from the latest watched copy, so a burst of events costs one bind and a plain bind reads nothing. Pods come from
two informers on disjoint sets (kai-scheduler pods, and the reservation namespace) that also trigger reservation
garbage collection and report a reservation pod's GPU; nodes from a fourth. Each is the process's only watch of
what it covers. The reconcile is in `binding.py`; a bind runs KAI's plugin chain (`plugins/`: pre-bind, bind,
post-bind, rollback), whose GPU-sharing plugin reserves GPUs through `reservation_pods.py`.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from operators.binder.binding import Binder, requests_in_flight
from operators.binder.common import BinderConfig
from operators.core import component, keys
from operators.core.booleans import add_bool_flag
from operators.core.kube import api_client

log = logging.getLogger("binder")


def _json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value) if value else {}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("expected a JSON object (ResourceRequirements)")
    return parsed


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("binder")
    p.add_argument("--resource-reservation-namespace", default=keys.RESERVATION_NAMESPACE)
    p.add_argument("--resource-reservation-service-account", default=keys.RESERVATION_SERVICE_ACCOUNT)
    p.add_argument("--resource-reservation-app-label", default=keys.RESERVATION_APP_LABEL_VALUE)
    p.add_argument("--resource-reservation-pod-image", default=BinderConfig.image)
    p.add_argument("--resource-reservation-allocation-timeout", type=float, default=40.0, help="seconds")
    p.add_argument("--resource-reservation-pod-resources", type=_json_object, default={},
                   help="ResourceRequirements JSON added to reservation pods (cpu, memory, ...)")
    p.add_argument("--runtime-class-name", default="")
    # Go-style booleans: `--fake-gpu-nodes`, `--fake-gpu-nodes=true|false`.
    add_bool_flag(p, "--fake-gpu-nodes", default=False,
                  help=f"every node is a fake GPU node (nodes labelled {keys.FAKE_GPU_NODE_LABEL}=true are anyway)")
    add_bool_flag(p, "--cdi-enabled", default=False)
    # KAI's default is 10; each reconcile here is a chain of API round trips (a plain bind: the PodBound
    # condition, then the binding), so more run at once (asyncio tasks are cheap) to keep up with the API
    # server rather than with one another: a burst binds at 64 / (2 round trips) per round-trip time. Plain and
    # fraction binds each have this many (fraction binds wait on their reservation pods: see `binding.py`).
    p.add_argument("--max-concurrent-reconciles", type=int, default=64)
    p.add_argument("--rate-limiter-base-delay", type=float, default=1.0, help="seconds")
    p.add_argument("--rate-limiter-max-delay", type=float, default=60.0, help="seconds")
    p.set_defaults(lease_name="kai-binder")
    # Accepted for compatibility with KAI's flags; there is no node-scale-adjuster or volume binding yet (DRA is on).
    p.add_argument("--scale-adjust-namespace", default="kai-scale-adjust", help=argparse.SUPPRESS)
    p.add_argument("--volume-binding-timeout-seconds", type=float, default=120.0, help=argparse.SUPPRESS)
    return p


def config_from_args(args: argparse.Namespace) -> BinderConfig:
    return BinderConfig(
        scheduler_name=args.scheduler_name,
        reservation_namespace=args.resource_reservation_namespace,
        service_account=args.resource_reservation_service_account,
        app_label=args.resource_reservation_app_label,
        image=args.resource_reservation_pod_image,
        allocation_timeout=args.resource_reservation_allocation_timeout,
        runtime_class_name=args.runtime_class_name or None,
        reservation_resources=args.resource_reservation_pod_resources or None,
        fake_gpu_nodes=args.fake_gpu_nodes,
        cdi_enabled=args.cdi_enabled,
        workers=max(1, args.max_concurrent_reconciles),
        base_delay=args.rate_limiter_base_delay,
        max_delay=args.rate_limiter_max_delay,
    )


async def build(args: argparse.Namespace, api: Any, life: component.Lifecycle) -> Binder:
    # Watches pin connections: keep them off the client that does the binds.
    watch_api = await api_client(args.kubeconfig)
    life.on_close(watch_api.close)
    return Binder(api, watch_api, config_from_args(args))


COMPONENT = component.Component("binder", parser, build, caches=lambda b: [i.run() for i in b.informers],
                                work=lambda b: [b.work()], ready=lambda b: b.ready,
                                pool=lambda args: requests_in_flight(max(1, args.max_concurrent_reconciles)))


def main(argv: list[str]) -> int:
    return COMPONENT.main(argv)
