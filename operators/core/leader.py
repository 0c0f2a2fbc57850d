"""Leader election on a coordination.k8s.io Lease, for the singleton controllers.

A standby keeps its caches warm; on losing the lease the process exits (Kubernetes restarts it), so no
half-cancelled state survives a leadership change. A leader stopped cleanly (SIGTERM: a rolling update, `helm
upgrade`) releases its Lease once its work has stopped, as client-go's `ReleaseOnCancel` does, so its standby
takes over within one retry period instead of waiting for the lease to expire. A crash releases nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


_leading = False


def is_leading() -> bool:
    """This process holds its lease now (readiness of a leader-elected component)."""
    return _leading


class _Election(leaderelection.LeaderElection):
    """kubernetes_asyncio's election with three changes. A renewal that finds another holder on the Lease ends the
    leadership at once: the library (like client-go) would keep retrying until the renew deadline, writing as a
    leader for seconds while another replica already leads. And an API server that cannot be reached (refused
    connection, reset, timeout, a non-JSON error page) is a failed attempt, as in client-go, not an exception
    that ends the process: a standby keeps waiting through an API server restart, and a leader steps down only
    once its renew deadline passes without a renewal. And a leader cancelled (the process stopping cleanly)
    releases the lease once its work has ended."""

    def __init__(self, config: electionconfig.Config, api: client.ApiClient,
                 started: Callable[[], Coroutine[Any, Any, None]], stopped: Callable[[], Awaitable[None]]) -> None:
        super().__init__(config)
        self.api = api
        self.started = started
        self.stopped = stopped

    async def run(self) -> None:
        """The library's run, plus the clean stop: cancelled while leading (the process is stopping), it cancels
        the work, waits for it to end, releases the Lease and re-raises the cancellation."""
        config = self.election_config
        if not await self.acquire():
            return
        log.info("%s successfully acquired lease", config.lock.identity)
        work = asyncio.create_task(self.started())
        try:
            await self.renew_loop()
        except asyncio.CancelledError:
            global _leading
            _leading = False
            work.cancel()
            done, _ = await asyncio.wait({work}, timeout=config.renew_deadline)
            if done:
                await release(self.api, config.lock.name, config.lock.namespace, config.lock.identity)
            else:
                log.warning("the work did not stop within %ss; the lease is left to expire", config.renew_deadline)
            raise
        work.cancel()
        await self.stopped()

    async def try_acquire_or_renew(self) -> bool:
        try:
            return bool(await super().try_acquire_or_renew())
        except (aiohttp.ClientError, OSError, json.JSONDecodeError) as exc:  # OSError covers timeouts
            log.warning("the lease %s/%s could not be read or written: %s", self.election_config.lock.namespace,
                        self.election_config.lock.name, exc)
            return False

    async def renew_loop(self) -> None:
        config = self.election_config
        while True:
            deadline = time.monotonic() + config.renew_deadline
            while not await self.try_acquire_or_renew():
                holder = self.observed_record.holder_identity if self.observed_record else None
                if holder not in (None, "", config.lock.identity):
                    log.warning("the lease is held by %s now", holder)
                    return
                if time.monotonic() >= deadline:
                    return
                await asyncio.sleep(config.retry_period)
            await asyncio.sleep(config.retry_period)


RELEASED_LEASE_SECONDS = 1


async def release(api: client.ApiClient, name: str, namespace: str, me: str, timeout: float = 3) -> bool:
    """Give up the Lease `namespace/name` if `me` still holds it: holderIdentity cleared, a one-second duration,
    written under the resourceVersion just read, so a replica that took the lease meanwhile keeps it. True if it
    was released. Never raises: a lease that cannot be released simply expires."""
    leases = client.CoordinationV1Api(api_client=api)

    async def attempt() -> bool:
        lease = await leases.read_namespaced_lease(name, namespace)
        if lease.spec is None or lease.spec.holder_identity != me:
            log.info("the lease %s/%s is not held by %s; nothing to release", namespace, name, me)
            return False
        now = datetime.datetime.now(datetime.UTC)
        lease.spec.holder_identity = ""
        lease.spec.lease_duration_seconds = RELEASED_LEASE_SECONDS
        lease.spec.acquire_time = now
        lease.spec.renew_time = now
        await leases.replace_namespaced_lease(name, namespace, lease)  # carries the resourceVersion read above
        return True

    try:
        released = await asyncio.wait_for(attempt(), timeout=timeout)
    except ApiException as exc:
        log.warning("the lease %s/%s was not released: %s %s", namespace, name, exc.status, exc.reason)
        return False
    except (aiohttp.ClientError, OSError, json.JSONDecodeError, TimeoutError) as exc:
        log.warning("the lease %s/%s was not released: %s", namespace, name, exc or type(exc).__name__)
        return False
    if released:
        log.info("%s released the lease %s/%s", me, namespace, name)
    return released


def identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


async def run_as_leader(api: client.ApiClient, *, name: str, namespace: str,
                        work: Callable[[], Awaitable[None]], lease_duration: float = 15,
                        renew_deadline: float = 10, retry_period: float = 2) -> None:
    """Run `work` while holding the lease; exit the process when leadership is lost. Cancelled (a clean stop),
    the work is cancelled and awaited, then the lease released (`release`)."""
    me = identity()
    lost = asyncio.Event()

    async def started() -> None:
        global _leading
        _leading = True
        log.info("%s became the leader of %s/%s", me, namespace, name)
        await work()

    async def stopped() -> None:
        global _leading
        _leading = False
        log.warning("%s lost the leadership of %s/%s; exiting", me, namespace, name)
        lost.set()

    config = electionconfig.Config(LeaseLock(name, namespace, me, api), lease_duration, renew_deadline,
                                   retry_period, started, stopped)
    # `_Election.run` cancels `work` before calling `stopped`, and nothing awaits between `stopped` and the exit
    # below: no other task of this process runs (so none writes) once the loss is noticed.
    await _Election(config, api, started, stopped).run()
    if lost.is_set():
        os._exit(1)
