"""Process logging of every component: text (the default) or one JSON object per line (`--log-format json`,
the chart's `global.jsonLog`).

A JSON line always carries `ts`, `level`, `component`, `logger`, `msg`, `object` and `reason`. `object` is the
Kubernetes object the line is about ({kind, namespace, name}, or null): given per call
(`log.info(..., extra=about(...))`), or taken from the reconcile in progress (`working_on`), or from Kopf's
per-object logger. `reason` is the event or condition reason the line reports, or null.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import Any

FORMATS = ("text", "json")
_current: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("kai_log_object", default=None)


def object_ref(kind: str, namespace: str | None, name: str) -> dict[str, str]:
    return {"kind": kind, "namespace": namespace or "", "name": name}


def about(kind: str, namespace: str | None, name: str, reason: str | None = None) -> dict[str, Any]:
    """`extra=` of a log call about one object (and the reason it reports)."""
    out: dict[str, Any] = {"kai_object": object_ref(kind, namespace, name)}
    if reason:
        out["kai_reason"] = reason
    return out


@contextlib.contextmanager
def working_on(kind: str, key: object) -> Iterator[None]:
    """Every line logged inside (in this task) is about the object `key` ("ns/name", (ns, name) or name)."""
    if isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key):
        ref = object_ref(kind, key[0], key[1])
    else:
        namespace, _, name = str(key).rpartition("/")
        ref = object_ref(kind, namespace, name)
    token = _current.set(ref)
    try:
        yield
    finally:
        _current.reset(token)


_base_factory = logging.getLogRecordFactory()


def _record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    # Stamp the object of the reconcile in progress when the line is logged (formatting may happen later).
    record = _base_factory(*args, **kwargs)
    current = _current.get()
    if current is not None:
        record.kai_current_object = current
    return record


logging.setLogRecordFactory(_record_factory)


def _object_of(record: logging.LogRecord) -> dict[str, str] | None:
    explicit = getattr(record, "kai_object", None)
    if isinstance(explicit, Mapping):
        return dict(explicit)
    kopf_ref = getattr(record, "k8s_ref", None)  # Kopf's per-object logger
    if isinstance(kopf_ref, Mapping) and kopf_ref.get("name"):
        return object_ref(str(kopf_ref.get("kind", "")), kopf_ref.get("namespace"), str(kopf_ref["name"]))
    current = getattr(record, "kai_current_object", None)
    return dict(current) if isinstance(current, Mapping) else None


class JsonFormatter(logging.Formatter):
    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "component": self.component,
            "logger": record.name,
            "msg": record.getMessage(),
            "object": _object_of(record),
            "reason": getattr(record, "kai_reason", None),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self, component: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)s {component} %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        obj, reason = _object_of(record), getattr(record, "kai_reason", None)
        if obj is not None and "k8s_ref" not in record.__dict__:
            where = f"{obj['namespace']}/{obj['name']}" if obj["namespace"] else obj["name"]
            text += f" [{obj['kind']} {where}]"
        if reason:
            text += f" reason={reason}"
        return text


def setup(level: str, component: str, fmt: str = "text") -> None:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(component) if fmt == "json" else TextFormatter(component))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # library warnings become log lines too (JSON in JSON mode)
    for noisy in ("aiohttp.access", "kubernetes_asyncio.client.rest", "kopf.objects"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
