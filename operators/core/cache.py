"""A small list+watch informer: the in-memory view every component keeps of pods, nodes and CRDs.

Why not `@kopf.index`: its initial population grows super-linearly with the number of objects. This one lists in
pages, watches from the list's resourceVersion with bookmarks, relists on 410 Gone, and keeps only the slim
record a caller's `parse` function makes of each object (full pod dicts are large and slow down the GC).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes_asyncio import client

from operators.core.kube import RawError, raw_stream

log = logging.getLogger(__name__)

R = TypeVar("R")
Listener = Callable[[str, "R | None", "R | None"], None]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives on the API: `/api/v1/pods`, `/apis/scheduling.run.ai/v2/queues`, ..."""

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/namespaces/{namespace}/{self.plural}" if namespace else f"{base}/{self.plural}"


PODS = Resource("", "v1", "pods")
NODES = Resource("", "v1", "nodes")
CONFIGMAPS = Resource("", "v1", "configmaps")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses")
QUEUES = Resource("scheduling.run.ai", "v2", "queues")
PODGROUPS = Resource("scheduling.run.ai", "v2alpha2", "podgroups")
BINDREQUESTS = Resource("scheduling.run.ai", "v1alpha2", "bindrequests")
TOPOLOGIES = Resource("kai.scheduler", "v1alpha1", "topologies")
PDBS = Resource("policy", "v1", "poddisruptionbudgets")
# Records stored (and listeners called) between two yields to the event loop while a list is applied or a watch
# burst is read: a 150,000-pod list or a burst of buffered events would otherwise hold the loop for seconds, and
# probes, lease renewals and the work queues' workers with it.
YIELD_EVERY = 100
# With `freeze_records`, the records are moved out of the collector's view (`gc.freeze`) after every list page and
# every this many watch events: 150,000 pods' records are ~0.5-2 million objects, which each full collection of
# the cyclic garbage collector would traverse (seconds under load, at unpredictable moments, the loop held).
FREEZE_EVERY = 5000


def object_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


class Informer(Generic[R]):
    """Keeps `key -> parse(obj)` for every object of one resource matching the selectors.

    `parse` may return None to drop an object. Listeners are called synchronously for every change of a record
    with (event type, old record, new record), not for events that leave the record as it was; they must be
    quick (e.g. set an asyncio.Event or enqueue a key).
    """

    def __init__(self, api: client.ApiClient, resource: Resource, parse: Callable[[dict[str, Any]], R | None], *,
                 namespace: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, page_size: int = 500,
                 indexes: dict[str, Callable[[R], Iterable[Hashable]]] | None = None,
                 freeze_records: bool = False) -> None:
        self.api = api
        self.resource = resource
        self.parse = parse
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.store: dict[str, R] = {}
        self.version = 0  # counts every write to `store` (views built from it are current while it holds)
        self.resource_version: str | None = None
        self._index_fns = indexes or {}
        self._indexes: dict[str, dict[Hashable, set[str]]] = {name: {} for name in self._index_fns}
        self._listeners: list[Listener[R]] = []
        self._left: list[Callable[[R], None]] = []
        self.synced = asyncio.Event()
        self.freeze_records = freeze_records

    # --- reading -----------------------------------------------------------------------------------
    def get(self, key: str) -> R | None:
        return self.store.get(key)

    def values(self) -> Iterator[R]:
        return iter(list(self.store.values()))

    def by_index(self, index: str, value: Hashable) -> list[R]:
        return [self.store[k] for k in self._indexes[index].get(value, ()) if k in self.store]

    def add_listener(self, listener: Listener[R]) -> None:
        self._listeners.append(listener)

    def on_left(self, hear: Callable[[R], None]) -> None:
        """`hear(record)` for every record object the store stops holding: deleted, updated, or replaced by an
        equal new object (a write listeners do not hear of)."""
        self._left.append(hear)

    async def wait_synced(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self.synced.wait(), timeout)

    # --- maintaining ----------------------------------------------------------------------------------
    def put(self, key: str, record: R | None, event: str) -> None:
        """A write of this process, known before its watch event delivers it: the store holds `record` (None:
        drops the key) and listeners hear `event` if it changed something. The later watch event overwrites it."""
        self._put(key, record, event)

    def _put(self, key: str, record: R | None, event: str) -> None:
        self.version += 1
        old = self.store.get(key)
        if old is not None:
            self._unindex(key, old)
            if old is not record:
                for hear in self._left:
                    hear(old)
        if record is None:
            self.store.pop(key, None)
        else:
            self.store[key] = record
            self._index(key, record)
        if old == record:
            return  # nothing the caller keeps changed (e.g. a status field its `parse` drops): no event
        for listener in self._listeners:
            try:
                listener(event, old, record)
            except Exception:
                log.exception("informer listener failed for %s %s", self.resource.plural, key)

    def _index(self, key: str, record: R) -> None:
        for name, fn in self._index_fns.items():
            for value in fn(record):
                self._indexes[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, record: R) -> None:
        for name, fn in self._index_fns.items():
            for value in fn(record):
                keys = self._indexes[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]

    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}

    async def _list(self) -> None:
        fresh: dict[str, R | None] = {}
        cont: str | None = None
        while True:
            resp = await raw_stream(self.api, "GET", self.resource.path(self.namespace),
                                    query={**self._query(), "limit": self.page_size, "continue": cont},
                                    timeout=120)
            async with resp:
                body = await resp.read()
            meta = self.take_page(body, fresh)
            self._freeze()
            await asyncio.sleep(0)  # a page holds the loop once (tens of ms for 500 pods), never a whole list
            cont = meta.get("continue")
            if not cont:
                self.resource_version = meta["resourceVersion"]
                break
        for _ in self._install(fresh):
            await asyncio.sleep(0)

    def take_page(self, body: bytes, fresh: dict[str, R | None]) -> dict[str, Any]:
        """One page of a list (the API server's JSON): each item's record into `fresh` (what `replace_all`
        installs); returns the list's metadata. The page is decoded and parsed with the cyclic GC paused: its
        objects are acyclic and short-lived, and collections triggered by them would traverse the growing record
        heap again and again (at 150,000 pods that was four fifths of the list's CPU). The decoded page must be
        freed before the GC resumes: the first allocation after it triggers a young collection, which would
        otherwise traverse the whole page (~150 objects a pod) once per page, a quarter of the list's CPU."""
        with paused_gc():
            return self._parse_items(json.loads(body), fresh)  # the page is freed when this call returns

    def _parse_items(self, page: dict[str, Any], fresh: dict[str, R | None]) -> dict[str, Any]:
        parse = self.parse
        for obj in page.get("items") or []:
            fresh[object_key(obj)] = parse(obj)
        meta: dict[str, Any] = page.get("metadata") or {}
        return meta

    def replace_all(self, fresh: dict[str, R | None]) -> None:
        """A completed list: the store becomes `fresh`; listeners hear only what differs from what was held."""
        for _ in self._install(fresh):
            pass

    def _install(self, fresh: dict[str, R | None]) -> Iterator[None]:
        """`replace_all`, pausing every YIELD_EVERY records so that an async caller can yield to the loop there."""
        for key in [k for k in self.store if k not in fresh]:
            self._put(key, None, "DELETED")
        for n, (key, record) in enumerate(fresh.items()):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                yield None
            # A relist after 410 Gone returns everything; listeners hear only what changed while the watch was
            # away, not a copy of every object they already had (each would trigger a reconcile).
            if key in self.store and self.store[key] == record:
                continue
            self._put(key, record, "ADDED" if key not in self.store else "MODIFIED")
        self._freeze()

    def _freeze(self) -> None:
        """Records are plain acyclic data freed by reference counting: the young generations are collected (what
        is cyclic garbage there is freed) and everything older is frozen, so full collections stay small."""
        if self.freeze_records:
            gc.collect(1)
            gc.freeze()

    async def _watch(self) -> None:
        query = {**self._query(), "watch": "true", "allowWatchBookmarks": "true",
                 "resourceVersion": self.resource_version, "timeoutSeconds": 300}
        resp = await raw_stream(self.api, "GET", self.resource.path(self.namespace), query=query,
                                timeout=(10, 330))
        async with resp:
            for n in itertools.count(1):
                if n % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # readline does not yield while the stream has buffered lines
                if n % FREEZE_EVERY == 0:
                    self._freeze()
                line = await resp.content.readline()
                if not line:
                    return
                self.apply_event(json.loads(line))

    def apply_event(self, event: dict[str, Any]) -> None:
        """One decoded watch event: the store follows it (raises `_Gone` on 410, RuntimeError on other errors)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error on {self.resource.plural}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            key = object_key(obj)
            self._put(key, None if kind == "DELETED" else self.parse(obj), str(kind))
        self.resource_version = rv

    async def run(self) -> None:
        """List, then watch forever; relist after 410 Gone; back off on errors."""
        delay = 0.5
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    self.synced.set()
                    need_list = False
                await self._watch()
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except _Gone:
                need_list = True
            except RawError as exc:
                if exc.status == 410:
                    need_list = True
                else:
                    log.warning("watch of %s failed (%s); retrying in %.1fs", self.resource.plural, exc.status,
                                delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30)
            except Exception as exc:
                log.warning("watch of %s failed (%s); retrying in %.1fs", self.resource.plural, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic GC off for a synchronous section (no await inside: nothing else runs meanwhile)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


async def run_when_synced(informers: Iterable[Informer[Any]], work: Awaitable[None]) -> None:
    """Run `work` once every informer has listed: a reconcile that read a store still being listed (150,000 pods
    take tens of seconds) would write a status computed from part of the objects."""
    for informer in informers:
        await informer.wait_synced()
    await work


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""
