"""What every component process shares: flags, logging, the API client, probes/metrics, the controller runtime.

Every component process is a Kopf operator (`run_operator`: `kopf.operator(standalone=True, clusterwide=True)`)
whose registry holds only activity handlers and no resource handler, so Kopf opens no watch: it owns the process
lifecycle (start-up, clean-up on SIGTERM/SIGINT, the exit once the component's work ends) and the login (the
credentials of --kubeconfig, or the in-cluster ones). Its start-up handler starts the component's runtime as a
task; its clean-up handler stops it.

Every component declares itself as a `Component` (its flags, how to build it, its caches, its work, its readiness,
its webhook, whether it is leader-elected), and `Component.main` is its entry point: one shape and one lifecycle
for all six. Each resource a process reads comes from one `core.cache.Informer` (list + watch, relist on 410,
bookmarks, backoff), the only watch of that resource in the process; listeners turn its events into keys of a
`core.workqueue.WorkQueue`; the probes are served from process start; the work queues (and a controller's
webhook) run only while the process holds its Lease.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import kopf

from operators.core import keys, logs, metrics
from operators.core.webhook import Handler

if TYPE_CHECKING:
    from operators.core.webhook import WebhookServer

log = logging.getLogger(__name__)
T = TypeVar("T")


def base_parser(component: str, *, metrics_port: int = 8080, probe_port: int = 8081) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"kai run {component}")
    p.set_defaults(component=component)
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
    p.add_argument("--webhook-addr", default=":9443", help="host:port (or a bare port) of the HTTPS webhook server")
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
                        routes: Mapping[str, Handler]) -> WebhookServer:
    """Start the component's webhook server (TLS from --cert-dir; --webhook-addr may be a bare port) and stop it on
    clean-up."""
    server = webhook_server(args, routes)
    await server.start()
    life.on_close(server.stop)
    return server


def webhook_server(args: argparse.Namespace, routes: Mapping[str, Handler]) -> WebhookServer:
    """The webhook server --webhook-addr and --cert-dir describe, not started yet."""
    from operators.core.webhook import WebhookServer, cert_paths

    address = args.webhook_addr if ":" in args.webhook_addr else f":{args.webhook_addr}"
    certfile, keyfile = cert_paths(args.cert_dir)
    return WebhookServer(routes, address=address, certfile=certfile, keyfile=keyfile)


def lease_options(args: argparse.Namespace) -> dict[str, float]:
    return {"lease_duration": args.leader_elect_lease_duration, "renew_deadline": args.leader_elect_renew_deadline,
            "retry_period": args.leader_elect_retry_period}


def _nothing(_: Any) -> Iterable[Awaitable[Any]]:
    return ()


@dataclass(frozen=True)
class Component(Generic[T]):
    """One component process, declared: its flags and the parts of its runtime. Every component's `main` module
    holds one (`COMPONENT`) and its `main(argv)` is `COMPONENT.main(argv)`: one entry-point shape, one lifecycle.

    The lifecycle (`run`): a Kopf operator without resource handlers (`run_operator`: login, start-up, clean-up on
    SIGTERM/SIGINT). Its runtime serves the probes from process start (alive; ready once `ready` holds and, when
    elected, while leading), builds the component (`build`, with the API client and the `Lifecycle` its
    clean-ups go to) and runs `caches`, the informers, each the process's only watch of its resource, so that a
    standby keeps them warm. With --leader-elect (for a component with `leader_election`) it then contends for
    the Lease (named `lease_name(args)`, default --lease-name; first `synced`, if given, is awaited); on winning
    it (at once without election) it serves `webhook(args, built)`, if any, and runs `work`, the work queues fed
    by those informers. Losing the lease exits the process before any other task runs
    (`leader.run_as_leader`). A component with no work (admission: its webhook is its work) serves until stopped.

    The scheduler's shape (its loop holds its informers and waits for them before contending for its Lease)::

        COMPONENT = Component("scheduler", parser, build_loop, ready=lambda loop: loop.synced,
                              caches=lambda loop: [loop.run_informers(), loop.measure_lag()],
                              work=lambda loop: [loop.run()], synced=lambda loop: loop.wait_synced(),
                              lease_name=lambda args: args.lease_name or f"kai-scheduler-{args.shard_name}")
    """

    name: str
    parser: Callable[[], argparse.ArgumentParser]
    build: Callable[[argparse.Namespace, Any, Lifecycle], Awaitable[T]]
    work: Callable[[T], Iterable[Awaitable[Any]]]
    ready: Callable[[T], bool]
    caches: Callable[[T], Iterable[Awaitable[Any]]] = _nothing
    webhook: Callable[[argparse.Namespace, T], Mapping[str, Handler] | None] | None = None
    leader_election: bool = True  # False: active-active (admission); --leader-elect is then ignored
    lease_name: Callable[[argparse.Namespace], str] | None = None
    synced: Callable[[T], Awaitable[Any]] | None = None  # awaited before contending for the Lease
    # Connections of the API client `build` gets (default `kube.POOL_SIZE`): at least the requests its work has
    # in flight at once, or they wait for one another's connections.
    pool: Callable[[argparse.Namespace], int] | None = None

    def main(self, argv: list[str]) -> int:
        """`kai run <name> ARGS`: parse the flags, set up logging, run until SIGTERM/SIGINT; the exit code."""
        from operators.core.kube import set_user_agent

        args = self.parser().parse_args(argv)
        setup_logging(args.log_level, self.name, args.log_format)
        set_user_agent(self.name)
        return run(lambda: self.run(args))

    async def run(self, args: argparse.Namespace) -> None:
        await run_operator(self.name, args, lambda: self._runtime(args))

    def elected(self, args: argparse.Namespace) -> bool:
        return self.leader_election and bool(getattr(args, "leader_elect", False))

    async def _runtime(self, args: argparse.Namespace) -> None:
        from operators.core.kube import api_client
        from operators.core.leader import run_as_leader

        life = Lifecycle()
        elect = self.elected(args)
        try:
            await serve_probes(args, ready=lambda: False, elect=elect)
            api = await (api_client(args.kubeconfig) if self.pool is None else
                         api_client(args.kubeconfig, pool=self.pool(args)))
            life.on_close(api.close)
            built = await self.build(args, api, life)
            await serve_probes(args, ready=lambda: self.ready(built), elect=elect)
            life.spawn(*self.caches(built))

            async def lead() -> None:
                routes = self.webhook(args, built) if self.webhook is not None else None
                if routes is not None:
                    await serve_webhook(life, args, routes)
                try:
                    # Children of this task: cancelled with it when the lease is lost.
                    works = list(self.work(built))
                    await (asyncio.gather(*works) if works else asyncio.Event().wait())
                except Exception as exc:
                    # Work loops handle their own errors; one that escapes is a bug: restart rather than run half.
                    log.critical("the component's work stopped: %s: %s; exiting", type(exc).__name__, exc,
                                 exc_info=True)
                    os._exit(1)

            if elect:
                if self.synced is not None:
                    await self.synced(built)
                # Its own client: renewals never wait behind the work's requests for a connection.
                lease_api = await api_client(args.kubeconfig)
                life.on_close(lease_api.close)
                lease = self.lease_name(args) if self.lease_name is not None else args.lease_name
                await run_as_leader(lease_api, name=lease, namespace=args.namespace, work=lead,
                                    **lease_options(args))
            else:
                await lead()
        finally:
            await life.close()


def kopf_settings(component: str) -> kopf.OperatorSettings:
    """Settings under which Kopf opens no watch: no CRD or namespace scanning, no peering, no event posting."""
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.peering.standalone = True
    settings.posting.enabled = False
    settings.networking.request_timeout = 60
    return settings


def kopf_registry(kubeconfig: str | None = None) -> kopf.OperatorRegistry:
    """A registry whose login uses the same kubeconfig (or in-cluster config) as the component's own clients.

    Not `kopf.login_via_async_client`: it reads the kubeconfig named by $KUBECONFIG and ignores --kubeconfig.
    The credentials are checked with one request of that client before Kopf gets them: refused (401), they end
    the process with `kube.UNAUTHORIZED_EXIT`, also when Kopf logs in again after a 401 of its own.
    """
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry, id="kubeconfig")
    async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
        from operators.core.kube import api_client, raw

        api = await api_client(kubeconfig)
        try:
            try:
                await raw(api, "GET", "/api")  # a 401 ends the process here; nothing else is this check's business
            except Exception as exc:
                log.debug("login check: %s", exc)
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


async def run_operator(component: str, args: argparse.Namespace, runtime: Callable[[], Awaitable[None]]) -> None:
    """Run the component as a Kopf operator without a watch: the start-up handler runs `runtime` as a task, the
    clean-up handler (on SIGTERM/SIGINT) cancels it and waits for its own clean-up.

    The runtime ending ends the operator; its error is raised here, so the process exits non-zero with one line
    saying why (a 401 from the API server has already ended the process with its own exit code, see
    `kube.exit_on_unauthorized`; Kopf's own login is never retried in its place).
    """
    from operators.core.kube import api_client

    # Credentials that cannot be loaded end the process here, with one line, not in a retry loop of Kopf's login.
    await (await api_client(args.kubeconfig)).close()
    registry = kopf_registry(args.kubeconfig)
    stopped = asyncio.Event()
    failures: list[BaseException] = []

    async def guarded() -> None:
        try:
            await runtime()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            failures.append(exc)
        finally:
            stopped.set()

    @kopf.on.startup(registry=registry, id=f"{component}-runtime")
    async def start(memo: kopf.Memo, **_: Any) -> None:
        memo.runtime = asyncio.create_task(guarded(), name=f"{component} runtime")

    @kopf.on.cleanup(registry=registry, id=f"{component}-runtime")
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        task: asyncio.Task[None] | None = memo.get("runtime")
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    await kopf.operator(registry=registry, settings=kopf_settings(component), standalone=True, clusterwide=True,
                        stop_flag=stopped, memo=kopf.Memo())
    if failures:
        raise failures[0]


def setup_logging(level: str, component: str, fmt: str = "text") -> None:
    logs.setup(level, component, fmt)


class Probes:
    """The process's one probe/metrics server: /healthz answers while the process lives (a standby included);
    /readyz once the component's own check passes and, with --leader-elect, only while it holds the lease;
    /readyz?standby=true once the component's own check passes (the chart's readiness probe of elected replicas)."""

    def __init__(self) -> None:
        self.runners: list[Any] = []
        self.check: Callable[[], bool] = lambda: False
        self.elect = False

    def ready(self) -> bool:
        from operators.core.leader import is_leading

        return (not self.elect or is_leading()) and self.check()

    def warm(self) -> bool:
        """Ready to lead: the component's own check, whether or not it holds the lease (`/readyz?standby=true`)."""
        return self.check()


PROBES = Probes()


async def serve_probes(args: argparse.Namespace, ready: Callable[[], bool], elect: bool | None = None) -> list[Any]:
    """Serve the probes (once per process; a later call only replaces the readiness check). `elect`: readiness
    also needs the Lease (default: --leader-elect)."""
    PROBES.check = ready
    PROBES.elect = bool(getattr(args, "leader_elect", False)) if elect is None else elect
    if not PROBES.runners:
        PROBES.runners = [await metrics.serve(args.metrics_address, ready=PROBES.ready, warm=PROBES.warm)]
        if args.probe_address and args.probe_address != args.metrics_address:
            PROBES.runners.append(await metrics.serve(args.probe_address, ready=PROBES.ready, warm=PROBES.warm))
    return PROBES.runners


def run(main: Callable[[], Awaitable[None]]) -> int:
    """Run a component's coroutine until SIGTERM/SIGINT; exit code 0 on a clean stop, 1 (with one log line saying
    why) when it fails, e.g. on an unreadable kubeconfig."""
    failed = False

    async def wrapper() -> None:
        nonlocal failed
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await main()
        except asyncio.CancelledError:
            log.info("stopping")
        except Exception as exc:
            failed = True
            log.critical("stopped by an error: %s: %s", type(exc).__name__, exc,
                         exc_info=log.isEnabledFor(logging.DEBUG))

    try:
        asyncio.run(wrapper())
    except KeyboardInterrupt:
        pass
    return 1 if failed else 0
