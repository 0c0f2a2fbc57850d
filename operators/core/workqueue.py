"""A deduplicating work queue with per-key exponential backoff, like client-go's rate-limited queue.

A key is processed by at most one worker at a time; a key added while it is processed is processed again
afterwards (level-triggered: the reconciler always reads the latest state).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable

from prometheus_client import Gauge, Histogram

from operators.core import logs
from operators.core.metrics import Counter

log = logging.getLogger(__name__)

RECONCILES = Counter("kai_controller_reconcile_total", "Reconciles by work queue and result", ["queue", "result"])
RECONCILE_SECONDS = Histogram("kai_controller_reconcile_duration_seconds", "Reconcile duration", ["queue"])
DEPTH = Gauge("kai_controller_workqueue_depth", "Keys waiting in the work queue", ["queue"])


def key_text(key: Hashable) -> str:
    """A work queue key as logged: "namespace/name" for a (namespace, name) pair, else the key itself."""
    if isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key):
        return f"{key[0]}/{key[1]}"
    return str(key)


class WorkQueue:
    def __init__(self, reconcile: Callable[[Hashable], Awaitable[None]], *, workers: int = 10,
                 base_delay: float = 1.0, max_delay: float = 60.0, name: str = "queue", kind: str = "") -> None:
        self.reconcile = reconcile
        # The kind of object a key names: lines logged during its reconcile carry it as their `object`.
        self.kind = kind
        self.workers = workers
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.name = name
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}

    def add(self, key: Hashable) -> None:
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        if key in self._timers:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop(key, None)
            self.add(key)

        self._timers[key] = loop.call_later(delay, fire)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return self._queue.qsize()

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            DEPTH.labels(self.name).set(self._queue.qsize())
            started = time.monotonic()
            try:
                if self.kind:
                    with logs.working_on(self.kind, key):
                        await self.reconcile(key)
                else:
                    await self.reconcile(key)
                self._failures.pop(key, None)
                RECONCILES.labels(self.name, "success").inc()
                # Which object each reconcile was for (the counter cannot say): what tests count per object.
                log.debug("%s: reconciled %s", self.name, key_text(key))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                RECONCILES.labels(self.name, "error").inc()
                count = self._failures.get(key, 0) + 1
                self._failures[key] = count
                delay = min(self.base_delay * 2 ** (count - 1), self.max_delay)
                with logs.working_on(self.kind or self.name, key):
                    log.warning("%s: reconciling %s failed (%s); retry in %.0fs", self.name, key_text(key), exc,
                                delay)
                log.debug("%s: failure detail", self.name, exc_info=True)
                self.add_after(key, delay)
            finally:
                RECONCILE_SECONDS.labels(self.name).observe(time.monotonic() - started)
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._worker(), name=f"{self.name}-{i}") for i in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for timer in self._timers.values():
                timer.cancel()
