"""The usage database of the time-based fair share: Prometheus' HTTP API, read in the background.

What KAI's prometheus client asks (`/api/v1/query` at now): per resource, the capacity and the per-queue
allocation (`queue_name` label), each summed over the window at the query resolution
(`sum_over_time((metric)[window:resolution])`), multiplied by `0.5^((now - time()) / halfLife)` when a half-life is
set; a queue's usage is its sum over the capacity's. The allocation metrics are the queue-controller's
`kai_queue_allocated_*` gauges. A tumbling window is queried the same way from its last reset (KAI's range query
of it is not valid PromQL). A capacity query without data fails the whole fetch, as in KAI.

`UsageReader` fetches every `fetchInterval` in its own task, never on a cycle's path: the cycle takes the last
answer (`current`). An answer older than `stalenessPeriod` (Prometheus down, slow or wrong) is not used: the
cycle runs on plain fair share and the `UsageDBAvailable` condition on the shard says why, until a fetch
succeeds again. (KAI keeps using stale usage with a log line; plain fair share is the safer fallback here.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from operators.core.units import MS_PER_SECOND
from operators.scheduler.decide.plugins.proportion.usage import Usage, normalized, window_start
from operators.scheduler.decide.usageconfig import UsageDBSettings
from operators.scheduler.shell import metrics

log = logging.getLogger("scheduler.usagedb")

CONDITION = "UsageDBAvailable"
QUEUE_LABEL = "queue_name"


class UsageDBError(Exception):
    """The usage database could not answer (unreachable, an error status, no capacity data)."""


def connection_url(settings: UsageDBSettings, env: Mapping[str, str] | None = None) -> str:
    if settings.connection_string_env_var:
        return (env if env is not None else os.environ).get(settings.connection_string_env_var, "")
    return settings.connection_string


def window_query(metric: str, settings: UsageDBSettings, now: float) -> str | None:
    """The PromQL KAI sends for one metric at `now`; None for an empty (not yet started) tumbling window."""
    decayed = metric
    if settings.half_life:
        decayed = f"(({metric}) * (0.5^(({int(now)} - time()) / {settings.half_life:f})))"
    span = now - window_start(now, settings.window_size, settings.tumbling_start)
    if span <= 0:
        return None
    return f"sum_over_time(({decayed})[{int(span)}s:{int(max(settings.query_resolution, 1))}s])"


async def query(session: aiohttp.ClientSession, url: str, promql: str, at: float, timeout: float
                ) -> list[dict[str, Any]]:
    """One instant query; the result vector. Raises UsageDBError."""
    try:
        async with session.get(f"{url.rstrip('/')}/api/v1/query", params={"query": promql, "time": f"{at:.3f}"},
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            body = await resp.json(content_type=None)
    except TimeoutError as exc:
        raise UsageDBError(f"no answer within usageQueryTimeout ({timeout:g}s)") from exc
    except (aiohttp.ClientError, ValueError) as exc:
        raise UsageDBError(f"{url} unreachable: {exc.__class__.__name__}") from exc
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else body
        raise UsageDBError(f"query {promql!r} failed: {error}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise UsageDBError(f"query {promql!r}: expected a vector, got {data.get('resultType')}")
    return list(data.get("result") or [])


async def fetch_usage(session: aiohttp.ClientSession, settings: UsageDBSettings, url: str,
                      now: float) -> dict[str, Usage]:
    """Every queue's usage of (gpu, cpu, memory) as a fraction of the capacity over the window."""
    capacity = [0.0, 0.0, 0.0]
    sums: dict[str, list[float]] = {}
    for r in range(3):
        promql = window_query(settings.capacity_metrics[r], settings, now)
        if promql is None:
            return {}
        result = await query(session, url, promql, now, settings.query_timeout)
        if not result:
            raise UsageDBError(f"no data returned for cluster capacity metric {settings.capacity_metrics[r]}")
        capacity[r] = float(result[0]["value"][1])
    for r in range(3):
        promql = window_query(settings.allocation_metrics[r], settings, now)
        assert promql is not None
        for sample in await query(session, url, promql, now, settings.query_timeout):
            name = str((sample.get("metric") or {}).get(QUEUE_LABEL, ""))
            if name:  # one queue may have several series (its display name changed in the window): their sum
                sums.setdefault(name, [0.0, 0.0, 0.0])[r] += float(sample["value"][1])
    return normalized(sums, capacity)


class UsageReader:
    """The last usage fetched for the current settings, refreshed in a background task."""

    def __init__(self) -> None:
        self.settings: UsageDBSettings | None = None
        self.usage: dict[str, Usage] = {}
        self.fetched_at: float | None = None  # monotonic time of the last successful fetch
        self.error = ""
        self.used = False  # a usageDBConfig was seen: the condition is reported from then on
        self._task: asyncio.Task[None] | None = None
        self._attempted = asyncio.Event()  # a fetch for the current settings has answered (or failed)

    def configure(self, settings: UsageDBSettings | None) -> None:
        """Follow the shard's settings: (re)start the fetcher when they change, stop it when they go."""
        if settings == self.settings:
            return
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.settings, self.usage, self.fetched_at, self.error = settings, {}, None, ""
        self._attempted.clear()
        if settings is not None:
            self.used = True
            self._task = asyncio.create_task(self._run(settings), name="usagedb")

    async def wait_first(self) -> None:
        """KAI's WaitForCacheSync, before the first cycle only: until the first fetch has answered, at most
        `waitTimeout` (the first cycle then divides by usage rather than correcting itself with reclaims)."""
        if self.settings is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._attempted.wait(), self.settings.wait_timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self, settings: UsageDBSettings) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                await self.fetch_once(session, settings)
                await asyncio.sleep(settings.fetch_interval)

    async def fetch_once(self, session: aiohttp.ClientSession, settings: UsageDBSettings) -> None:
        started = time.monotonic()
        url = connection_url(settings)
        try:
            if not url:
                raise UsageDBError(f"environment variable {settings.connection_string_env_var} is empty")
            async with asyncio.timeout(settings.query_timeout):  # KAI: one usageQueryTimeout for the whole fetch
                usage = await fetch_usage(session, settings, url, time.time())
        except Exception as exc:  # any failure (a malformed answer too) leaves the last usage to go stale
            message = (str(exc) if isinstance(exc, UsageDBError) else
                       f"no answer within usageQueryTimeout ({settings.query_timeout:g}s)"
                       if isinstance(exc, TimeoutError) else f"unexpected answer: {exc!r}")
            if message != self.error:
                log.warning("usage database: %s", message)
            self.error = message
            self._attempted.set()
            return
        metrics.USAGE_QUERY_LATENCY.observe((time.monotonic() - started) * MS_PER_SECOND)
        if self.error or self.fetched_at is None:
            log.info("usage database: usage of %d queues read from %s", len(usage), url)
        self.usage, self.fetched_at, self.error = usage, time.monotonic(), ""
        self._attempted.set()

    def fresh(self) -> bool:
        s = self.settings
        return (s is not None and self.fetched_at is not None
                and time.monotonic() - self.fetched_at <= s.staleness_period)

    def current(self) -> dict[str, Usage]:
        """The usage for this cycle: the last answer while it is fresh, else none (plain fair share)."""
        return self.usage if self.fresh() else {}

    def conditions(self, generation: int) -> list[dict[str, Any]]:
        """`UsageDBAvailable` for the shard, once a usageDBConfig was seen."""
        if not self.used:
            return []
        s = self.settings
        if s is None:
            status, reason, message = False, "NotConfigured", "No usageDBConfig: plain fair share"
        elif self.fresh():
            status, reason = True, "UsageFetched"
            message = f"Time-based fair share: usage read from {connection_url(s)} every {s.fetch_interval:g}s"
        else:
            status, reason = False, "UsageDBUnavailable"
            message = (f"No usage from {connection_url(s) or s.connection_string_env_var} within the staleness "
                       f"period ({s.staleness_period:g}s): plain fair share. {self.error or 'No answer yet.'}")
        return [{"type": CONDITION, "status": "True" if status else "False", "reason": reason, "message": message,
                 "observedGeneration": generation}]
