"""The HTTP side every component serves: /metrics (prometheus-client), /healthz and /readyz.

Metric names are exposed as KAI's Go components expose them: a counter keeps exactly the name it is declared
with (Go's client adds no `_total`), and no `_created` series exist. Components therefore declare counters with
`operators.core.metrics.Counter`, never prometheus-client's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

log = logging.getLogger(__name__)

# Go's client has no `_created` series; dashboards written for KAI never query them.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


class Counter(prometheus_client.Counter):
    """A counter exposed under exactly its declared name: `kai_x` stays `kai_x`, `kai_y_total` stays `kai_y_total`."""

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: CollectorRegistry | None = REGISTRY,
                 _labelvalues: Any = None) -> None:
        # Children are built from the declared name too (prometheus-client passes `_original_name` on).
        self.exposed_name = "_".join(p for p in (namespace, subsystem, name) if p)
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry, _labelvalues)

    def _child_samples(self) -> Iterable[Sample]:
        # The sample name is the family name (`self._name`, `_total` stripped by the client) plus this suffix.
        suffix = self.exposed_name[len(self._name):]
        return (Sample(suffix, {}, self._value.get(), None, self._value.get_exemplar()),)

    def collect(self) -> Iterable[prometheus_client.Metric]:
        for family in super().collect():
            family.exposed_name = self.exposed_name  # type: ignore[attr-defined]
            yield family


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    escaped = (v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") for v in labels.values())
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, escaped, strict=True)) + "}"


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The Prometheus text format (0.0.4) of `registry`, with counters named as declared (see `Counter`)."""
    out: list[str] = []
    for family in registry.collect():
        name, kind = family.name, family.type
        if kind == "counter":
            # A counter of ours carries its declared name; anything else (process metrics, third-party
            # collectors) keeps the client's convention of `_total` samples.
            name = getattr(family, "exposed_name", name + "_total")
        elif kind == "info":
            name, kind = name + "_info", "gauge"
        elif kind == "stateset":
            kind = "gauge"
        elif kind == "gaugehistogram":
            kind = "histogram"
        elif kind == "unknown":
            kind = "untyped"
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for s in family.samples:
            stamp = f" {int(float(s.timestamp) * 1000):d}" if s.timestamp is not None else ""
            value = floatToGoString(s.value)  # type: ignore[no-untyped-call]
            out.append(f"{s.name}{_labels(dict(sorted(s.labels.items())))} {value}{stamp}\n")
    return "".join(out).encode()


async def serve(address: str, *, registry: CollectorRegistry = REGISTRY,
                ready: Callable[[], bool] = lambda: True, warm: Callable[[], bool] | None = None) -> web.AppRunner:
    """Start the probe/metrics server on `host:port` (":8080" = all interfaces) and return its runner.

    `/readyz?standby=true` answers `warm` instead of `ready`: a leader-elected replica that is ready to take over
    (caches synced) without leading. A Deployment's readiness probe needs that, or a standby is never Ready and a
    rolling update (a new pod up before an old one goes) never proceeds."""

    async def metrics(_: web.Request) -> web.Response:
        body = exposition(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        check = warm if warm is not None and request.query.get("standby") == "true" else ready
        return web.Response(text="ok") if check() else web.Response(status=503, text="not ready")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    await web.TCPSite(runner, host or None, int(port)).start()
    log.info("serving /metrics, /healthz, /readyz on %s", address)
    return runner
