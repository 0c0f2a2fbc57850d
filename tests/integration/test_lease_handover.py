"""A leader stopped cleanly hands its Lease over at once; a crashed one does not.

Two replicas of the queue-controller run as processes with --leader-elect (lease 8 s, retry period 1 s) on a
control plane without the dev components. SIGTERM of the leader (a rolling update, `helm upgrade`): it stops its
work and releases the Lease (holderIdentity cleared), so the standby holds it within 3 s, not after the 8 s
expiry, and the stopped process exits 0. kill -9 of the leader: nothing is released, the standby keeps waiting
until the lease expires (more than 4 s), then takes over.

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

from tests.support import Cluster, Replicas, wait_for
from tests.support import probe_status as status

pytestmark = pytest.mark.cluster

NS = "kai-scheduler"
PORT_BASE = int(os.environ.get("KAI_STANDBY_TEST_PORT_BASE", "25000"))
COMPONENT = "queue-controller"
LEASE = "queue-controller"
EXTRA = {COMPONENT: ["--enable-webhook=false"]}
REPLICAS = ("a", "b")
HANDOVER_BOUND = 3.0  # SIGTERM to the standby holding the lease: a retry period (1 s) and the requests
EXPIRY_FLOOR = 4.0  # kill -9 to the takeover: the 8 s lease must run out, whatever the machine's speed


@pytest.fixture(scope="module")
def handover_cluster() -> Iterator[Cluster]:
    from operators.devcluster import cluster as dev

    name = os.environ.get("KAI_STANDBY_TEST_CLUSTER", "lease-handover-test")
    reuse = os.environ.get("KAI_TEST_REUSE") == "1"
    state = dev.load_state(name)
    started = False
    if not (reuse and state is not None and dev.is_running(state)):
        if state is not None:
            dev.down(name, quiet=True)
        state = dev.up(dev.Options(name=name, port_base=PORT_BASE, components=False, timeout=300))
        started = True
    assert state is not None
    yield Cluster(name=name, kubeconfig=state.kubeconfig, kubectl_bin=state.kubectl, state_dir=state.dir)
    if started and not reuse:
        dev.down(name, quiet=True)


def probe_port(component: str, replica: str) -> int:
    return PORT_BASE + 850 + 10 * REPLICAS.index(replica) + 1


def holder(cluster: Cluster) -> str:
    out = cluster.kubectl("get", "lease", LEASE, "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def replica_of(identity: str) -> str:
    """`queue-controller-b_1a2b3c4d` -> `b` (the identity is POD_NAME, then a random suffix)."""
    pod = identity.split("_")[0]
    return pod.rsplit("-", 1)[1] if pod.startswith(f"{COMPONENT}-") else ""


def leading(cluster: Cluster, replicas: Replicas) -> str:
    """The replica that holds the lease and is ready, once there is one."""
    who = wait_for("a leader", lambda: replica_of(holder(cluster)), timeout=60)
    wait_for(f"replica {who} ready", lambda: replicas.alive((COMPONENT, str(who))) and
             status(probe_port(COMPONENT, str(who)), "/readyz") == 200, timeout=60)
    return str(who)


def other(replica: str) -> str:
    return "b" if replica == "a" else "a"


def test_sigterm_hands_the_lease_over_and_kill_9_does_not(handover_cluster: Cluster, tmp_path: Path) -> None:
    cluster = handover_cluster
    cluster.kubectl("create", "namespace", NS, check=False)
    cluster.kubectl("delete", "lease", LEASE, "-n", NS, "--ignore-not-found", check=False)
    replicas = Replicas(cluster, tmp_path, probe_port, EXTRA)
    try:
        for replica in REPLICAS:
            replicas.start(COMPONENT, replica)
        first = leading(cluster, replicas)
        standby = other(first)
        wait_for(f"replica {standby} up", lambda: replicas.alive((COMPONENT, standby)) and
                 status(probe_port(COMPONENT, standby), "/healthz") == 200, timeout=60)
        assert status(probe_port(COMPONENT, standby), "/readyz") == 503

        # Clean stop: the lease is released once the leader's work has stopped.
        proc = replicas.procs[COMPONENT, first]
        replicas.killed.add((COMPONENT, first))
        stopped_at = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        wait_for(f"replica {standby} holds the lease", lambda: replica_of(holder(cluster)) == standby,
                 timeout=20, interval=0.1)
        handover = time.monotonic() - stopped_at
        print(f"SIGTERM -> standby holds the lease: {handover:.2f}s")
        assert proc.wait(timeout=15) == 0, replicas.log(COMPONENT, first)
        log = replicas.log(COMPONENT, first, lines=200)
        assert "released the lease" in log, log
        assert handover < HANDOVER_BOUND, f"the standby took {handover:.2f}s to lead after a clean stop"
        wait_for(f"replica {standby} ready", lambda: status(probe_port(COMPONENT, standby), "/readyz") == 200,
                 timeout=30)

        # The stopped replica comes back as the standby; now the leader crashes: nothing is released.
        replicas.killed.discard((COMPONENT, first))
        replicas.start(COMPONENT, first)
        wait_for(f"replica {first} up", lambda: replicas.alive((COMPONENT, first)) and
                 status(probe_port(COMPONENT, first), "/healthz") == 200, timeout=60)
        leader_id = holder(cluster)
        assert replica_of(leader_id) == standby
        time.sleep(2)  # the new standby has read the lease and is waiting on it
        killed_at = time.monotonic()
        replicas.kill((COMPONENT, standby))
        wait_for(f"replica {first} holds the lease", lambda: replica_of(holder(cluster)) == first, timeout=30,
                 interval=0.1)
        takeover = time.monotonic() - killed_at
        print(f"kill -9 -> standby holds the lease: {takeover:.2f}s")
        assert takeover > EXPIRY_FLOOR, f"the lease of a crashed leader moved after {takeover:.2f}s"
    finally:
        replicas.stop_all()
        cluster.kubectl("delete", "lease", LEASE, "-n", NS, "--ignore-not-found", check=False)
