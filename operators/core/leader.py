"""Leader election on a coordination.k8s.io Lease, for the singleton controllers.

A standby keeps its caches warm; on losing the lease the process exits (Kubernetes restarts it), so no
half-cancelled state survives a leadership change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable

from kubernetes_asyncio import client
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


def identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


async def run_as_leader(api: client.ApiClient, *, name: str, namespace: str,
                        work: Callable[[], Awaitable[None]], lease_duration: float = 15,
                        renew_deadline: float = 10, retry_period: float = 2) -> None:
    """Run `work` while holding the lease; exit the process when leadership is lost."""
    me = identity()
    lost = asyncio.Event()

    async def started() -> None:
        log.info("%s became the leader of %s/%s", me, namespace, name)
        await work()

    async def stopped() -> None:
        log.warning("%s lost the leadership of %s/%s; exiting", me, namespace, name)
        lost.set()

    config = electionconfig.Config(LeaseLock(name, namespace, me, api), lease_duration, renew_deadline,
                                   retry_period, started, stopped)
    await leaderelection.LeaderElection(config).run()
    if lost.is_set():
        os._exit(1)
