"""Two replicas of every leader-elected component, as processes with --leader-elect, on the local control plane.

A standby is alive (`/healthz` 200 from start to end) and not ready (`/readyz` 503); the leader is ready. After
kill -9 of every leader at once, each standby takes the lease and turns ready within 15 s, and then does its
work: a pod created at the moment of the kill is grouped, scheduled and bound, and its PodGroup and Queue get
their statuses. And a component whose token the API server rejects (401) exits with a clear line.

Own cluster without the dev components (they would do the work): KAI_STANDBY_TEST_CLUSTER (default
`standby-test`) at KAI_STANDBY_TEST_PORT_BASE (default 25000), brought up with `--no-components` (or reused
with KAI_TEST_REUSE=1) and taken down at the end unless reused.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import TEST_LABEL, Cluster, Replicas, labelled, own_cluster, wait_for
from tests.support import probe_status as status

pytestmark = pytest.mark.cluster

NS = "kai-scheduler"
PORT_BASE = int(os.environ.get("KAI_STANDBY_TEST_PORT_BASE", "25000"))
COMPONENTS = ["pod-grouper", "queue-controller", "podgroup-controller", "binder", "scheduler"]
LEASES = {"pod-grouper": "pod-grouper", "queue-controller": "queue-controller",
          "podgroup-controller": "podgroup-controller", "binder": "kai-binder", "scheduler": "kai-scheduler-default"}
EXTRA = {"queue-controller": ["--enable-webhook=false"], "podgroup-controller": ["--enable-podgroup-webhook=false"]}
REPLICAS = ("a", "b")
TAKEOVER_BOUND = 15.0


@pytest.fixture(scope="module")
def standby_cluster() -> Iterator[Cluster]:
    yield from own_cluster(os.environ.get("KAI_STANDBY_TEST_CLUSTER", "standby-test"), port_base=PORT_BASE,
                           components=False, timeout=300)


def probe_port(component: str, replica: str) -> int:
    return PORT_BASE + 600 + 100 * REPLICAS.index(replica) + 10 * COMPONENTS.index(component) + 1


def holder(cluster: Cluster, lease: str) -> str:
    out = cluster.kubectl("get", "lease", lease, "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def workload(name: str) -> list[dict[str, Any]]:
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return [
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
         "spec": {"resources": {"gpu": free, "cpu": free, "memory": free}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "after-failover", "namespace": name, "labels": {"kai.scheduler/queue": name}},
         "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                  "containers": [{"name": "main", "image": "busybox",
                                  "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}},
    ]


def test_standbys_stay_alive_and_take_over_within_the_lease(standby_cluster: Cluster,
                                                           tmp_path: Path) -> None:
    cluster = standby_cluster
    cluster.kubectl("create", "namespace", NS, check=False)
    for lease in LEASES.values():  # a reused cluster: no stale holder to wait out
        cluster.kubectl("delete", "lease", lease, "-n", NS, "--ignore-not-found", check=False)
    replicas = Replicas(cluster, tmp_path, probe_port, EXTRA)
    name = f"standby-{uuid.uuid4().hex[:6]}"
    try:
        started = time.monotonic()
        for component in COMPONENTS:
            for replica in REPLICAS:
                replicas.start(component, replica)
        # Probes are up from process start, before any cache is synced or lease is won.
        for key in replicas.procs:
            wait_for(f"{key} /healthz", lambda key=key: replicas.alive(key) and  # type: ignore[misc]
                     status(probe_port(*key), "/healthz") == 200, timeout=60, interval=0.3)
            replicas.watched.add(key)
        replicas.watch()
        print(f"every /healthz answered within {time.monotonic() - started:.1f}s of the start")

        leaders: dict[str, str] = {}
        for component in COMPONENTS:
            who = wait_for(f"a leader of {component}", lambda c=component: (  # type: ignore[misc]
                h := holder(cluster, LEASES[c])).split("_")[0] in (f"{c}-a", f"{c}-b") and h, timeout=60)
            leaders[component] = str(who).split("_")[0].rsplit("-", 1)[1]
        for component, leader in leaders.items():
            standby = "b" if leader == "a" else "a"
            wait_for(f"{component} leader ready", lambda c=component, r=leader:  # type: ignore[misc]
                     replicas.alive((c, r)) and status(probe_port(c, r), "/readyz") == 200, timeout=60)
            assert status(probe_port(component, standby), "/readyz") == 503, f"{component} standby is ready"
            assert status(probe_port(component, standby), "/healthz") == 200
        time.sleep(3)  # standbys stay not-ready while they wait (and the health watcher keeps polling)
        for component, leader in leaders.items():
            standby = "b" if leader == "a" else "a"
            assert status(probe_port(component, standby), "/readyz") == 503, f"{component} standby turned ready"

        # kill -9 every leader at once (no lease release), and create work at the same moment.
        killed = time.monotonic()
        for component, leader in leaders.items():
            replicas.kill((component, leader))
        cluster.kubectl("create", "namespace", name)
        cluster.kubectl("label", "namespace", name, f"{TEST_LABEL}=true")
        cluster.kubectl("apply", "-f", "-", input=labelled(workload(name)))

        took: dict[str, float] = {}
        done: dict[str, float] = {}
        standbys = {c: "b" if r == "a" else "a" for c, r in leaders.items()}

        def progress() -> bool:
            # Times are taken right after each observation (a poll takes a second or two of kubectl calls).
            for component, standby in standbys.items():
                replicas.alive((component, standby))
                if component not in took and status(probe_port(component, standby), "/readyz") == 200:
                    took[component] = time.monotonic() - killed
                    assert holder(cluster, LEASES[component]).startswith(f"{component}-{standby}_")
            pod = cluster.get_json("pod", "after-failover", namespace=name)
            groups = cluster.get_json("podgroups.scheduling.run.ai", namespace=name)["items"]
            brs = cluster.get_json("bindrequests.scheduling.run.ai", namespace=name)["items"]
            queue = cluster.get_json("queue.scheduling.run.ai", name)
            evidence = {
                "pod-grouper": bool(groups),
                "scheduler": bool(brs),
                "binder": bool(pod["spec"].get("nodeName")),
                "podgroup-controller": bool(groups and ((groups[0].get("status") or {}).get("resourcesStatus")
                                                        or {}).get("allocated")),
                "queue-controller": bool((queue.get("status") or {}).get("allocated")),
            }
            now = time.monotonic() - killed
            for component, seen in evidence.items():
                if seen and component not in done:
                    done[component] = now
            return len(took) == len(COMPONENTS) and len(done) == len(COMPONENTS)

        wait_for("every standby to take over and work", progress, timeout=60, interval=0.5)
        report = "\n".join(f"  {c:20} ready {took[c]:5.1f}s, first work {done[c]:5.1f}s after the kill"
                           for c in COMPONENTS)
        print(f"takeover after kill -9 of every leader:\n{report}")
        for component in COMPONENTS:
            assert took[component] <= TAKEOVER_BOUND, f"{component} took {took[component]:.1f}s\n{report}"
            # Its work, once its input exists, follows within the same bound of its takeover.
            assert done[component] - took[component] <= TAKEOVER_BOUND, report
        time.sleep(1)
        print(f"/healthz checks: {replicas.checks}, failures: {len(replicas.failures)}")
        assert not replicas.failures, replicas.failures[:10]
        for key in replicas.procs:
            if key not in replicas.killed:
                replicas.alive(key)
    finally:
        replicas.stop_all()
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        cluster.kubectl("delete", "queue.scheduling.run.ai", name, "--wait=false", check=False)


@pytest.mark.parametrize("component", ["scheduler", "pod-grouper"])
def test_a_rejected_token_exits_the_process_with_a_clear_line(standby_cluster: Cluster, tmp_path: Path,
                                                              component: str) -> None:
    """A rotated token: the API server answers 401 and the component exits (code 3) instead of retrying."""
    import yaml

    from operators.core.kube import UNAUTHORIZED_EXIT

    config = yaml.safe_load(Path(standby_cluster.kubeconfig).read_text())
    config["users"] = [{"name": u["name"], "user": {"token": "rotated-away"}} for u in config["users"]]
    kubeconfig = tmp_path / "rotated.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    port = PORT_BASE + 591
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "operators.cli", "run", component, f"--kubeconfig={kubeconfig}",
                           f"--metrics-bind-address=127.0.0.1:{port}",
                           f"--health-probe-bind-address=127.0.0.1:{port + 1}"],
                          capture_output=True, text=True, timeout=60, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == UNAUTHORIZED_EXIT, out[-3000:]
    assert re.search(r"CRITICAL .*401 Unauthorized to GET https://127\.0\.0\.1:\d+/api", out), out[-3000:]
