"""Kubernetes Events with client-side aggregation, as client-go's recorder does.

The scheduler re-emits its explanations every cycle; the recorder turns repeats of the same (object, reason,
message) into a count/lastTimestamp patch of one Event instead of a new object per cycle, and drops repeats
within `min_interval` entirely so that a pending workload costs no API traffic per cycle.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from operators.core import logs
from operators.core.kube import MERGE_PATCH, raw

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about; namespace "" for a cluster-scoped object (its Events go to "default")."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj["metadata"]
        return cls(obj.get("apiVersion", "v1"), obj.get("kind", "Pod"), meta.get("namespace") or "default",
                   meta["name"], meta.get("uid", ""))


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(self, api: client.ApiClient, component: str, *, min_interval: float = 30.0,
                 max_entries: int = 20000) -> None:
        self.api = api
        self.component = component
        self.min_interval = min_interval
        self.max_entries = max_entries
        # (ref, type, reason, message) -> (event name, count, last sent monotonic time)
        self._seen: dict[tuple[ObjectRef, str, str, str], tuple[str, int, float]] = {}
        self._lock = asyncio.Lock()

    async def emit(self, ref: ObjectRef, event_type: str, reason: str, message: str,
                   annotations: dict[str, str] | None = None) -> None:
        """Create or bump an Event; never raises (events are best effort)."""
        key = (ref, event_type, reason, message[:1024])
        now = time.monotonic()
        namespace = ref.namespace or "default"  # client-go files a cluster-scoped object's events there too
        try:
            seen = self._seen.get(key)
            if seen is not None:
                name, count, last = seen
                if now - last < self.min_interval:
                    return
                self._seen[key] = (name, count + 1, now)
                body = {"count": count + 1, "lastTimestamp": _now()}
                try:
                    await raw(self.api, "PATCH", f"/api/v1/namespaces/{namespace}/events/{name}", body=body,
                              content_type=MERGE_PATCH)
                    return
                except Exception:
                    pass  # expired or deleted: create a fresh one below
            if len(self._seen) > self.max_entries:
                self._seen.clear()
            name = f"{ref.name}.{uuid.uuid4().hex[:16]}"
            stamp = _now()
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
                "involvedObject": {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": ref.namespace,
                                   "name": ref.name, "uid": ref.uid},
                "type": event_type,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
            await raw(self.api, "POST", f"/api/v1/namespaces/{namespace}/events", body=event)
            self._seen[key] = (name, 1, now)
            # The first occurrence only (repeats bump the count above): one line per distinct event.
            log.info("%s event %s: %s", event_type, reason, message[:1024],
                     extra=logs.about(ref.kind, ref.namespace, ref.name, reason))
        except Exception as exc:
            log.debug("event %s/%s on %s/%s not recorded: %s", event_type, reason, ref.namespace, ref.name, exc)
