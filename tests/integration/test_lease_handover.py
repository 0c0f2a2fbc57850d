"""A leader stopped cleanly hands its Lease over at once; a crashed one does not.

Two replicas of a component (the queue-controller, the runtime of every controller; the scheduler, its own) run
as processes with --leader-elect (lease 8 s, retry period 1 s) on a control plane without the dev components.
SIGTERM of the leader (a rolling update, `helm upgrade`): it stops its work and releases the Lease (holderIdentity
cleared), so the standby holds it within 3 s, not after the 8 s expiry, and the stopped process exits 0. kill -9
of the leader: nothing is released, the standby keeps waiting until the lease expires (more than 4 s), then takes
over.

Own cluster: KAI_STANDBY_TEST_CLUSTER (default `lease-handover-test`) at KAI_STANDBY_TEST_PORT_BASE (default
25000), brought up with `--no-components` (or reused with KAI_TEST_REUSE=1) and taken down at the end unless
reused.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Cluster, Replicas, own_cluster, wait_for
from tests.support import probe_status as status

pytestmark = pytest.mark.cluster

NS = "kai-scheduler"
PORT_BASE = int(os.environ.get("KAI_STANDBY_TEST_PORT_BASE", "25000"))
LEASES = {"queue-controller": "queue-controller", "scheduler": "kai-scheduler-default"}
EXTRA = {"queue-controller": ["--enable-webhook=false"]}
REPLICAS = ("a", "b")
HANDOVER_BOUND = 3.0  # SIGTERM to the standby holding the lease: a retry period (1 s) and the requests
EXPIRY_FLOOR = 4.0  # kill -9 to the takeover: the 8 s lease must run out, whatever the machine's speed


@pytest.fixture(scope="module")
def handover_cluster() -> Iterator[Cluster]:
    yield from own_cluster(os.environ.get("KAI_STANDBY_TEST_CLUSTER", "lease-handover-test"),
                           port_base=PORT_BASE, components=False, timeout=300)


def probe_port(component: str, replica: str) -> int:
    return PORT_BASE + 850 + 20 * list(LEASES).index(component) + 10 * REPLICAS.index(replica) + 1


def holder(cluster: Cluster, lease: str) -> str:
    out = cluster.kubectl("get", "lease", lease, "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def replica_of(component: str, identity: str) -> str:
    """`queue-controller-b_1a2b3c4d` -> `b` (the identity is POD_NAME, then a random suffix)."""
    pod = identity.split("_")[0]
    return pod.rsplit("-", 1)[1] if pod.startswith(f"{component}-") else ""


def other(replica: str) -> str:
    return "b" if replica == "a" else "a"


@pytest.mark.parametrize("component", list(LEASES))
def test_sigterm_hands_the_lease_over_and_kill_9_does_not(handover_cluster: Cluster, tmp_path: Path,
                                                          component: str) -> None:
    cluster = handover_cluster
    lease = LEASES[component]

    def leader() -> str:
        return replica_of(component, holder(cluster, lease))

    def up(replica: str, probe: str = "/healthz") -> bool:
        return replicas.alive((component, replica)) and status(probe_port(component, replica), probe) == 200

    cluster.kubectl("create", "namespace", NS, check=False)
    cluster.kubectl("delete", "lease", lease, "-n", NS, "--ignore-not-found", check=False)
    replicas = Replicas(cluster, tmp_path, probe_port, EXTRA)
    try:
        for replica in REPLICAS:
            replicas.start(component, replica)
        first = str(wait_for("a leader", leader, timeout=60))
        wait_for(f"replica {first} ready", lambda: up(first, "/readyz"), timeout=60)
        standby = other(first)
        wait_for(f"replica {standby} up", lambda: up(standby), timeout=60)
        assert status(probe_port(component, standby), "/readyz") == 503

        # Clean stop: the lease is released once the leader's work has stopped.
        proc = replicas.procs[component, first]
        replicas.killed.add((component, first))
        stopped_at = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        wait_for(f"replica {standby} holds the lease", lambda: leader() == standby, timeout=20, interval=0.1)
        handover = time.monotonic() - stopped_at
        print(f"{component}: SIGTERM -> standby holds the lease: {handover:.2f}s")
        assert proc.wait(timeout=15) == 0, replicas.log(component, first)
        log = replicas.log(component, first, lines=200)
        assert "released the lease" in log, log
        assert handover < HANDOVER_BOUND, f"the standby took {handover:.2f}s to lead after a clean stop"
        wait_for(f"replica {standby} ready", lambda: up(standby, "/readyz"), timeout=30)

        # The stopped replica comes back as the standby; now the leader crashes: nothing is released.
        replicas.killed.discard((component, first))
        replicas.start(component, first)
        wait_for(f"replica {first} up", lambda: up(first), timeout=60)
        assert leader() == standby
        time.sleep(2)  # the new standby has read the lease and is waiting on it
        killed_at = time.monotonic()
        replicas.kill((component, standby))
        wait_for(f"replica {first} holds the lease", lambda: leader() == first, timeout=30, interval=0.1)
        takeover = time.monotonic() - killed_at
        print(f"{component}: kill -9 -> standby holds the lease: {takeover:.2f}s")
        assert takeover > EXPIRY_FLOOR, f"the lease of a crashed leader moved after {takeover:.2f}s"
    finally:
        replicas.stop_all()
        cluster.kubectl("delete", "lease", lease, "-n", NS, "--ignore-not-found", check=False)
