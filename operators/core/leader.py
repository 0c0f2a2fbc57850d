"""Leader election on a coordination.k8s.io Lease, for the singleton controllers.

A standby keeps its caches warm; on losing the lease the process exits (Kubernetes restarts it), so no
half-cancelled state survives a leadership change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


_leading = False


def is_leading() -> bool:
    """This process holds its lease now (readiness of a leader-elected component)."""
    return _leading


class _Election(leaderelection.LeaderElection):
    """kubernetes_asyncio's election with two changes. A renewal that finds another holder on the Lease ends the
    leadership at once: the library (like client-go) would keep retrying until the renew deadline, writing as a
    leader for seconds while another replica already leads. And an API server that cannot be reached (refused
    connection, reset, timeout, a non-JSON error page) is a failed attempt, as in client-go, not an exception
    that ends the process: a standby keeps waiting through an API server restart, and a leader steps down only
    once its renew deadline passes without a renewal."""

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


def identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


async def run_as_leader(api: client.ApiClient, *, name: str, namespace: str,
                        work: Callable[[], Awaitable[None]], lease_duration: float = 15,
                        renew_deadline: float = 10, retry_period: float = 2) -> None:
    """Run `work` while holding the lease; exit the process when leadership is lost."""
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
    # The library cancels `work` before calling `stopped`, and nothing awaits between `stopped` and the exit
    # below: no other task of this process runs (so none writes) once the loss is noticed.
    await _Election(config).run()
    if lost.is_set():
        os._exit(1)
