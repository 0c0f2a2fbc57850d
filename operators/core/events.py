"""Kubernetes Events with client-side aggregation and rate limits, as client-go's recorder does.

The scheduler re-emits its explanations every cycle; the recorder turns repeats of the same (object, reason,
message) into a count/lastTimestamp patch of one Event instead of a new object per cycle. What reaches the API
server is limited three ways, so that a standing backlog of pending work costs (almost) no writes however large
it is:
- a repeat is sent no sooner than `min_interval` after the previous send of the same event, and that interval
  doubles with every send (up to `max_interval`); repeats in between are only counted, and the next patch
  carries the total count;
- every object has a token bucket (client-go's spam filter: a burst of 25 events, then one per 5 minutes);
- all repeat patches together share one budget of `repeat_rate` per second (a repeat over budget is counted
  and sent later).

What the recorder remembers follows the objects that still emit, not every object it ever saw: once a minute it
forgets what can no longer change an outcome (`EventRecorder._sweep`).
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio import client

from operators.core import logs
from operators.core.kube import MERGE_PATCH, raw
from operators.core.times import rfc3339

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


class TokenBucket:
    def __init__(self, rate: float, burst: float, now: float | None = None) -> None:
        self.rate, self.burst, self.tokens, self.stamp = rate, burst, burst, now

    def take(self, now: float) -> bool:
        if self.stamp is None:
            self.stamp = now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class _Sent:
    name: str
    count: int  # occurrences so far, sent or not
    last: float  # monotonic time of the last send
    interval: float  # the earliest next send after `last`
    seen: float  # monotonic time of the last occurrence, sent or not


def _forget_oldest(entries: dict[Any, Any], limit: int) -> None:
    """Keep memory bounded: drop the oldest tenth once over `limit` (dicts keep insertion order)."""
    if len(entries) > limit:
        for key in list(itertools.islice(entries, len(entries) // 10 + 1)):
            del entries[key]


SPAM_BURST = 25.0
SPAM_RATE = 1 / 300.0
SWEEP_EVERY = 60.0  # seconds between two sweeps of the recorder's maps


class EventRecorder:
    def __init__(self, api: client.ApiClient, component: str, *, min_interval: float = 30.0,
                 max_interval: float = 3600.0, repeat_rate: float = 0.2, max_entries: int = 200000) -> None:
        self.api = api
        self.component = component
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.max_entries = max_entries
        self._seen: dict[tuple[ObjectRef, str, str, str], _Sent] = {}
        self._objects: dict[ObjectRef, TokenBucket] = {}
        self._repeats = TokenBucket(repeat_rate, max(1.0, repeat_rate * 10))
        self._next_sweep = 0.0

    def _sweep(self, now: float) -> None:
        """Forget the entries that can no longer change an outcome, so that the maps hold the objects still
        emitting rather than every pod ever scheduled (two entries each, forgotten only past `max_entries`):
        - a bucket untouched for as long as an empty one takes to refill is full: the same as a new one;
        - an event not seen for `max_interval` has stopped repeating: should it come back, it creates a new Event
          instead of patching the old one's count, as client-go's correlator does once its LRU (4,096 entries)
          has dropped it, and the old Event has most likely expired (the API server's event TTL is 1 h by default).
        Rebuilt rather than deleted from, so that the dicts' tables shrink too.
        """
        self._next_sweep = now + SWEEP_EVERY
        refill = SPAM_BURST / SPAM_RATE
        self._objects = {ref: bucket for ref, bucket in self._objects.items()
                         if bucket.stamp is not None and now - bucket.stamp < refill}
        self._seen = {key: sent for key, sent in self._seen.items() if now - sent.seen < self.max_interval}

    def _allowed(self, ref: ObjectRef, now: float) -> bool:
        bucket = self._objects.get(ref)
        if bucket is None:
            _forget_oldest(self._objects, self.max_entries)
            bucket = self._objects[ref] = TokenBucket(SPAM_RATE, SPAM_BURST, now)
        return bucket.take(now)

    def plan(self, key: tuple[ObjectRef, str, str, str], now: float) -> _Sent | Literal["create"] | None:
        """What one occurrence of an event costs: nothing (None), a new Event, or a count patch of `_Sent`."""
        if now >= self._next_sweep:
            self._sweep(now)
        ref = key[0]
        seen = self._seen.get(key)
        if seen is None:
            return "create" if self._allowed(ref, now) else None
        seen.count += 1
        seen.seen = now
        if now - seen.last < seen.interval or not self._allowed(ref, now) or not self._repeats.take(now):
            return None
        seen.last, seen.interval = now, min(seen.interval * 2, self.max_interval)
        return seen

    async def emit(self, ref: ObjectRef, event_type: str, reason: str, message: str,
                   annotations: dict[str, str] | None = None) -> None:
        """Create or bump an Event; never raises (events are best effort)."""
        key = (ref, event_type, reason, message[:1024])
        namespace = ref.namespace or "default"  # client-go files a cluster-scoped object's events there too
        try:
            verdict = self.plan(key, time.monotonic())
            if verdict is None:
                return
            if verdict != "create":
                body = {"count": verdict.count, "lastTimestamp": rfc3339()}
                try:
                    await raw(self.api, "PATCH", f"/api/v1/namespaces/{namespace}/events/{verdict.name}",
                              body=body, content_type=MERGE_PATCH)
                    return
                except Exception:
                    pass  # expired or deleted: create a fresh one below
            name = f"{ref.name}.{uuid.uuid4().hex[:16]}"
            stamp = rfc3339()
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
            _forget_oldest(self._seen, self.max_entries)
            sent = time.monotonic()
            self._seen[key] = _Sent(name, 1, sent, self.min_interval, sent)
            # The first occurrence only (repeats bump the count above): one line per distinct event.
            log.info("%s event %s: %s", event_type, reason, message[:1024],
                     extra=logs.about(ref.kind, ref.namespace, ref.name, reason))
        except Exception as exc:
            log.debug("event %s/%s on %s/%s not recorded: %s", event_type, reason, ref.namespace, ref.name, exc)
