"""What every component process shares: flags, logging, the API client, probes/metrics, Kopf wiring.

Each component is its own process with its own Kopf registry and settings (`kopf.operator(standalone=True)`):
Kopf serves the CRD side and the probes; pods and nodes come from `core.cache.Informer`, never from Kopf
handlers, so Kopf writes no bookkeeping onto user objects.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from operators.core import keys, logs, metrics
from operators.core.webhook import Handler

log = logging.getLogger(__name__)


def base_parser(component: str, *, metrics_port: int = 8080, probe_port: int = 8081) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"kai run {component}")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--scheduler-name", default=keys.SCHEDULER_NAME)
    p.add_argument("--namespace", default=os.environ.get("NAMESPACE", keys.KAI_NAMESPACE),
                   help="the namespace the suite runs in (leases live here)")
    p.add_argument("--metrics-bind-address", "--listen-address", dest="metrics_address",
                   default=f":{metrics_port}")
    p.add_argument("--health-probe-bind-address", dest="probe_address", default=f":{probe_port}")
    p.add_argument("--leader-elect", action="store_true", help="hold a Lease; only the leader works")
    p.add_argument("--lease-name", default=component, help="name of the Lease in --namespace")
    # Shorter than client-go's 15/10/2 s so that a standby takes over well within 15 s of a crash.
    # Whole seconds: the Lease's spec.leaseDurationSeconds is an integer.
    p.add_argument("--leader-elect-lease-duration", type=int, default=8, metavar="SECONDS")
    p.add_argument("--leader-elect-renew-deadline", type=int, default=6, metavar="SECONDS")
    p.add_argument("--leader-elect-retry-period", type=float, default=1.0, metavar="SECONDS")
    p.add_argument("--log-level", default=os.environ.get("KAI_LOG_LEVEL", "INFO"))
    p.add_argument("--log-format", choices=logs.FORMATS, default=os.environ.get("KAI_LOG_FORMAT", "text"),
                   help="text, or one JSON object per line with component, object and reason fields")
    p.add_argument("--dev", action="store_true", help=argparse.SUPPRESS)
    return p


def add_webhook_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--webhook-addr", default=":9443", help="host:port of the HTTPS webhook server")
    p.add_argument("--cert-dir", default="/tmp/k8s-webhook-server/serving-certs",
                   help="directory with tls.crt and tls.key (reloaded when they change)")


class Lifecycle:
    """What a component's start-up handler starts and its clean-up handler stops (in reverse order)."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []
        self.closers: list[Callable[[], Awaitable[Any]]] = []

    def spawn(self, *coroutines: Awaitable[Any]) -> None:
        self.tasks += [asyncio.ensure_future(c) for c in coroutines]

    def on_close(self, closer: Callable[[], Awaitable[Any]]) -> None:
        self.closers.append(closer)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for closer in reversed(self.closers):
            try:
                await closer()
            except Exception:
                log.exception("clean-up step failed")


async def serve_webhook(life: Lifecycle, args: argparse.Namespace,
                        routes: Mapping[str, Handler]) -> None:
    """Start the component's validating webhook server (TLS from --cert-dir) and stop it on clean-up."""
    from operators.core.webhook import WebhookServer, cert_paths

    certfile, keyfile = cert_paths(args.cert_dir)
    server = WebhookServer(routes, address=args.webhook_addr, certfile=certfile, keyfile=keyfile)
    await server.start()
    life.on_close(server.stop)


def lease_options(args: argparse.Namespace) -> dict[str, float]:
    return {"lease_duration": args.leader_elect_lease_duration, "renew_deadline": args.leader_elect_renew_deadline,
            "retry_period": args.leader_elect_retry_period}


def _custom_selectors(registry: kopf.OperatorRegistry) -> list[tuple[str, str, str]]:
    """(group, version, name) of every KAI resource (scheduling.run.ai, installed with KAI) the registry's
    handlers select; optional ones (KubeRay's, ...) are left out, their absence must not hold a start."""
    out: set[tuple[str, str, str]] = set()
    for handlers in (registry._changing, registry._watching, registry._webhooks, registry._indexing,
                     registry._spawning):
        for handler in handlers.get_all_handlers():
            selector = handler.selector
            if selector is None or selector.group != keys.GROUP or not selector.version:
                continue
            name = selector.plural or selector.any_name or selector.kind or selector.singular
            if name:
                out.add((selector.group, selector.version, str(name)))
    return sorted(out)


async def await_served(kubeconfig: str | None, registry: kopf.OperatorRegistry, interval: float = 1.0) -> None:
    """Return once the API server's discovery lists every custom resource the registry handles.

    Kopf resolves its resources once, at start-up (scanning is off). For some seconds after an API server
    (re)starts, discovery can lack the CRD-backed groups; a resource missing from that single scan would never
    be watched, and its objects would wait forever without a word. So Kopf starts only once they are served.
    """
    from operators.core.kube import api_client, raw

    wanted = _custom_selectors(registry)
    if not wanted:
        return
    try:
        api = await api_client(kubeconfig)
    except Exception:  # no usable kubeconfig: Kopf's own login reports it, as without this wait
        return
    waited = False
    async with api:
        while True:
            missing = []
            for group, version, name in wanted:
                try:
                    listing = await raw(api, "GET", f"/apis/{group}/{version}", timeout=10)
                    names = {n.lower() for r in (listing or {}).get("resources") or []
                             for n in (r.get("name"), r.get("singularName"), r.get("kind"), *(r.get("shortNames")
                                                                                            or [])) if n}
                except Exception as exc:  # unreachable, 503 while the group is not served yet, 404
                    names = set()
                    reason = str(getattr(exc, "status", "") or exc)
                else:
                    reason = "not listed"
                if name.lower() not in names:
                    missing.append(f"{name}.{group}/{version} ({reason})")
            if not missing:
                if waited:
                    log.info("the API server serves %s now", ", ".join(n for _, _, n in wanted))
                return
            if not waited:
                log.warning("waiting for the API server to serve %s", "; ".join(missing))
                waited = True
            await asyncio.sleep(interval)


async def run_kopf_operator(component: str, registry: kopf.OperatorRegistry, args: argparse.Namespace,
                            warm: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Run a controller's Kopf operator, as the holder of its Lease when --leader-elect is set.

    A standby serves its probes (alive, not ready: a Service never routes webhook calls to it) and runs `warm`,
    which starts the controller's informers, so that on winning the lease it works from a synced cache instead
    of relisting. Kopf itself (its watches and handlers, the work queue, the webhook) starts only on the leader.
    """
    settings = kopf_settings(component)

    async def operate() -> None:
        await await_served(args.kubeconfig, registry)
        await kopf.operator(registry=registry, settings=settings, standalone=True, clusterwide=True)

    if not args.leader_elect:
        await operate()
        return
    from operators.core.kube import api_client
    from operators.core.leader import run_as_leader

    await serve_probes(args, ready=lambda: False)
    if warm is not None:
        await warm()
    api = await api_client(args.kubeconfig)
    async with api:
        await run_as_leader(api, name=args.lease_name, namespace=args.namespace, work=operate,
                            **lease_options(args))


def setup_logging(level: str, component: str, fmt: str = "text") -> None:
    logs.setup(level, component, fmt)


def kopf_settings(component: str) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    prefix = f"{component}.kai.scheduler"
    settings.persistence.finalizer = f"{prefix}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    settings.scanning.disabled = True
    return settings


def kopf_registry(kubeconfig: str | None = None) -> kopf.OperatorRegistry:
    """A registry whose login uses the same kubeconfig (or in-cluster config) as our own clients.

    Not `kopf.login_via_async_client`: it reads the kubeconfig named by $KUBECONFIG and ignores --kubeconfig, so
    Kopf could watch another cluster than the one the component writes to.
    """
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
        from operators.core.kube import api_client

        api = await api_client(kubeconfig)
        try:
            cfg = api.configuration
            header: Any = cfg.get_api_key_with_prefix("BearerToken")
            if inspect.isawaitable(header):  # a coroutine in newer kubernetes_asyncio releases
                header = await header
            scheme, _sep, token = str(header or "").rpartition(" ")
            return kopf.ConnectionInfo(
                server=str(cfg.host), ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
                username=cfg.username or None, password=cfg.password or None, scheme=scheme or None,
                token=token or None, certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
                trust_env=settings.networking.trust_env)
        finally:
            await api.close()

    return registry


class Probes:
    """The process's one probe/metrics server: /healthz answers while the process lives (a standby included);
    /readyz once the component's own check passes and, with --leader-elect, only while it holds the lease."""

    def __init__(self) -> None:
        self.runners: list[Any] = []
        self.check: Callable[[], bool] = lambda: False
        self.elect = False

    def ready(self) -> bool:
        from operators.core.leader import is_leading

        return (not self.elect or is_leading()) and self.check()


PROBES = Probes()


async def serve_probes(args: argparse.Namespace, ready: Callable[[], bool]) -> list[Any]:
    """Serve the probes (once per process; a later call only replaces the readiness check)."""
    PROBES.check = ready
    PROBES.elect = bool(getattr(args, "leader_elect", False))
    if not PROBES.runners:
        PROBES.runners = [await metrics.serve(args.metrics_address, ready=PROBES.ready)]
        if args.probe_address and args.probe_address != args.metrics_address:
            PROBES.runners.append(await metrics.serve(args.probe_address, ready=PROBES.ready))
    return PROBES.runners


def run(main: Callable[[], Awaitable[None]]) -> int:
    """Run a component's coroutine until SIGTERM/SIGINT; exit code 0 on a clean stop."""

    async def wrapper() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await main()
        except asyncio.CancelledError:
            log.info("stopping")

    try:
        asyncio.run(wrapper())
    except KeyboardInterrupt:
        pass
    return 0
