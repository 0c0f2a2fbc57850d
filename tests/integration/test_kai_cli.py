"""`kai why | what-if | queues | top` and `kubectl get pg` against the local control plane (4 nodes x 8 GPUs).

Each test waits until no pod holds a GPU, so the tests do not depend on each other's leftovers; queues are named
after the test namespace and labelled, so the namespace fixture removes them. The commands run as the user runs
them: `kai ...` (and `kubectl kai ...` through the plugin entry point) with the cluster's kubeconfig.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.core.resources import parse_quantity
from operators.devcluster.cluster import component_ports, load_state
from tests.support import Cluster, apply, items, queue, wait_for

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"


# --- helpers -------------------------------------------------------------------------------------


def _env(cluster: Cluster) -> dict[str, str]:
    # The venv's bin holds `kai` and `kubectl-kai`; kubectl finds plugins on the PATH.
    path = os.pathsep.join([str(Path(sys.executable).parent), str(Path(cluster.kubectl_bin).parent),
                            os.environ.get("PATH", "")])
    return {**os.environ, "KUBECONFIG": cluster.kubeconfig, "PATH": path}


def kai(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "operators.cli", *args], capture_output=True, text=True,
                          env=_env(cluster), timeout=300)


def kubectl_kai(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cluster.kubectl_bin, "kai", *args], capture_output=True, text=True, env=_env(cluster),
                          timeout=300)





def pod_spec(gpus: float = 0, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64M"}}
    if gpus >= 1:
        resources["limits"] = {GPU: str(int(gpus))}
    return {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox", "resources": resources}], **extra}


def pod(name: str, queue_name: str, gpus: float = 1, priority: str = "train", **annotations: str) -> dict[str, Any]:
    spec = pod_spec(gpus)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations,
                         "labels": {"kai.scheduler/queue": queue_name, "priorityClassName": priority}},
            "spec": spec}


def held_gpus(cluster: Cluster) -> float:
    total = 0.0
    for p in items(cluster, "pods", None, "--all-namespaces"):
        if not p["spec"].get("nodeName") or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        if p["metadata"]["namespace"] == "kai-resource-reservation":
            total += 1
        for c in p["spec"].get("containers", []):
            total += int((c.get("resources", {}).get("limits") or {}).get(GPU, 0))
    return total


def wait_cluster_idle(cluster: Cluster) -> None:
    wait_for("no GPU held by any pod (previous tests cleaned up)", lambda: held_gpus(cluster) == 0, timeout=180)


def running(cluster: Cluster, namespace: str, *selector: str) -> list[dict[str, Any]]:
    return [p for p in items(cluster, "pods", namespace, *selector)
            if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]


def scheduler_cycles(cluster: Cluster) -> float:
    state = load_state(cluster.name)
    assert state is not None
    port = component_ports(state.ports["apiserver"] - 443)["scheduler"]["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("kai_scheduler_cycles_total "):
                return float(line.split()[1])
    raise AssertionError("kai_scheduler_cycles_total not exported")


async def cycles_until_bound(cluster: Cluster, namespace: str, count: int, timeout: float = 60) -> float:
    """The scheduler's cycle counter as last read before `count` BindRequests were seen in the namespace."""
    from operators.core.cache import BINDREQUESTS
    from operators.core.kube import api_client, raw

    api = await api_client(cluster.kubeconfig)
    async with api:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cycles = scheduler_cycles(cluster)
            found = await raw(api, "GET", BINDREQUESTS.path(namespace))
            if len(found.get("items") or []) >= count:
                return cycles
            await asyncio.sleep(0.02)
    raise AssertionError(f"no {count} BindRequests in {namespace} after {timeout}s")


# --- kai why -------------------------------------------------------------------------------------


def raycluster(name: str, queue_name: str, workers: int, gpus: int) -> dict[str, Any]:
    labels = {"kai.scheduler/queue": queue_name, "priorityClassName": "train"}
    head = {"metadata": {"labels": labels}, "spec": pod_spec(0)}
    worker = {"metadata": {"labels": labels}, "spec": pod_spec(gpus)}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name, "labels": labels},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": head},
                     "workerGroupSpecs": [{"groupName": "worker", "replicas": workers, "minReplicas": workers,
                                           "maxReplicas": workers, "rayStartParams": {}, "template": worker}]}}


def test_why_a_raycluster_over_its_queue_limit_names_the_limit_and_the_value_that_unblocks_it(
        cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    team = f"team-{namespace}"
    apply(cluster, namespace, [queue(team, gpu=(1, 2, 1))])
    apply(cluster, namespace, [raycluster("ray", team, workers=2, gpus=2)])

    def pending_with_reason() -> dict[str, Any] | None:
        pgs = items(cluster, "podgroups", namespace)
        conds = [c for pg in pgs for c in (pg.get("status") or {}).get("schedulingConditions") or []]
        return pgs[0] if pgs and conds else None
    wait_for("the RayCluster's PodGroup to be explained by the scheduler", pending_with_reason, timeout=120)

    text = kai(cluster, "why", "raycluster", "ray", "-n", namespace)
    assert text.returncode == 1, text.stdout + text.stderr  # pending
    assert "OverLimit" in text.stdout and "Limit is 2 GPUs" in text.stdout, text.stdout
    assert f"raise queue {team} gpu limit from 2 to 4" in text.stdout, text.stdout
    report = json.loads(kai(cluster, "why", "raycluster", "ray", "-n", namespace, "-o", "json").stdout)
    assert report["state"] == "pending" and not report["runsNow"]
    raise_limit = next(s for s in report["suggestions"] if s["kind"] == "raise-limit")
    assert (raise_limit["queue"], raise_limit["resource"], raise_limit["from"], raise_limit["to"]) == \
        (team, "gpu", 2, 4)
    assert raise_limit["cycle"] <= 2

    # Apply exactly that value: the gang is bound within two cycles. Counted by the scheduler's cycle counter, read
    # just before each (fast, in-process) look for the BindRequests, so it holds the cycles completed before they
    # appeared; besides the two allowed, one cycle may already be running when the patch lands.
    before = scheduler_cycles(cluster)
    patch = {"spec": {"resources": {"gpu": {"limit": raise_limit["to"]}}}}
    cluster.kubectl("patch", "queue", team, "--type=merge", "-p", json.dumps(patch))
    cycles = asyncio.run(cycles_until_bound(cluster, namespace, 3))
    assert cycles - before <= 3, f"bound after {cycles - before} cycles"
    wait_for("the RayCluster's 3 pods Running", lambda: len(running(cluster, namespace, "-l", "ray.io/cluster=ray"))
             == 3, timeout=120)
    assert kai(cluster, "why", "raycluster", "ray", "-n", namespace).returncode == 0


def test_why_a_job_blocked_by_fragmentation_names_the_consolidation_that_would_help(
        cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    team = f"team-{namespace}"
    apply(cluster, namespace, [queue(team)])
    # Every node half full of non-preemptible (build) pods, placed directly: 16 GPUs free, but no node has 8, and
    # the scheduler may not move these pods itself.
    gpu_nodes = sorted(n["metadata"]["name"] for n in items(cluster, "nodes")
                       if (n["status"].get("allocatable") or {}).get(GPU) == "8")
    assert len(gpu_nodes) == 4, gpu_nodes
    fillers = []
    for i, node in enumerate(gpu_nodes):
        for j in range(2):
            filler = pod(f"fill-{i}{j}", team, gpus=2, priority="build")
            filler["spec"]["nodeName"] = node
            fillers.append(filler)
    apply(cluster, namespace, fillers)
    wait_for("the 8 filler pods Running", lambda: len(running(cluster, namespace)) == 8, timeout=120)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "wide"},
           "spec": {"template": {"metadata": {"labels": {"kai.scheduler/queue": team}},
                                 "spec": {**pod_spec(8), "restartPolicy": "Never"}}}}
    apply(cluster, namespace, [job])
    wait_for("the job's PodGroup explained as unschedulable",
             lambda: any((pg.get("status") or {}).get("schedulingConditions")
                         for pg in items(cluster, "podgroups", namespace)), timeout=120)

    out = kai(cluster, "why", "job", "wide", "-A")  # the name is unique cluster-wide
    assert out.returncode == 1, out.stdout + out.stderr
    assert "consolidation: move" in out.stdout, out.stdout
    report = json.loads(kai(cluster, "why", "job", "wide", "-n", namespace, "-o", "json").stdout)
    moves = next(s for s in report["suggestions"] if s["kind"] == "consolidate")["moves"]
    where = {f"{namespace}/{p['metadata']['name']}": p["spec"]["nodeName"] for p in running(cluster, namespace)}
    assert len(moves) == 2 and len({m["from"] for m in moves}) == 1
    for m in moves:
        assert where[m["pod"]] == m["from"] and m["to"] != m["from"]

    # Do the moves by hand: the job then lands on the node they left.
    source = moves[0]["from"]
    for m in moves:
        name = m["pod"].split("/")[1]
        original = next(p for p in fillers if p["metadata"]["name"] == name)
        cluster.kubectl("delete", "pod", name, "--wait=true", namespace=namespace)
        moved = {**original, "metadata": {**original["metadata"], "name": f"{name}-moved"},
                 "spec": {**original["spec"], "nodeName": m["to"]}}
        apply(cluster, namespace, [moved])
    wait_for("the job's pod Running on the node the moves freed",
             lambda: [p for p in running(cluster, namespace, "-l", "job-name=wide")
                      if p["spec"]["nodeName"] == source], timeout=120)


# --- kai what-if ---------------------------------------------------------------------------------


def test_what_if_an_inference_deployment_lists_exactly_the_pods_evicted_for_real(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    wait_cluster_idle(cluster)
    team = f"team-{namespace}"
    apply(cluster, namespace, [queue(team)])
    fillers = [pod(f"train-{i:02d}", team, gpus=2) for i in range(16)]  # 32 GPUs: the cluster is full
    apply(cluster, namespace, fillers)
    wait_for("the 16 training pods Running", lambda: len(running(cluster, namespace)) == 16, timeout=180)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
                           "template": {"metadata": {"labels": {"app": "serve", "kai.scheduler/queue": team}},
                                        "spec": pod_spec(4)}}}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(deployment))
    bindrequests = len(items(cluster, "bindrequests", namespace))

    result = kai(cluster, "what-if", "-f", str(path), "-n", namespace, "-o", "json")
    assert result.returncode == 0, result.stderr
    predicted = json.loads(result.stdout)
    text = kai(cluster, "what-if", "-f", str(path), "-n", namespace).stdout
    assert "evict" in text and "preempt" in text, text
    victims = sorted(e["pod"] for e in predicted["evictions"])
    assert len(victims) == 2 and {e["action"] for e in predicted["evictions"]} == {"preempt"}
    assert all(e["forPodGroup"].startswith(f"{namespace}/") for e in predicted["evictions"])
    # Nothing was written.
    assert len(running(cluster, namespace)) == 16
    assert len(items(cluster, "bindrequests", namespace)) == bindrequests
    assert items(cluster, "deployments", namespace) == []

    apply(cluster, namespace, [deployment])
    serving = wait_for("the inference pod Running", lambda: running(cluster, namespace, "-l", "app=serve"),
                       timeout=180)
    left = {p["metadata"]["name"] for p in items(cluster, "pods", namespace) if p["metadata"]["name"]
            .startswith("train-")}
    evicted = sorted({p["metadata"]["name"] for p in fillers} - left)
    assert evicted == victims
    assert serving[0]["spec"]["nodeName"] == predicted["placements"][0]["node"]
    running_now = kai(cluster, "why", "deployment", "serve", "-n", namespace)
    assert running_now.returncode == 0 and ": running" in running_now.stdout, running_now.stdout


# --- kai queues ----------------------------------------------------------------------------------


def _quantity(raw: dict[str, Any] | None, name: str, scale: Decimal) -> float:
    value = (raw or {}).get(name)
    return float(parse_quantity(value) * scale) if value is not None else 0.0


def test_queues_totals_equal_the_queue_statuses(cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    dept, a, b = f"dept-{namespace}", f"a-{namespace}", f"b-{namespace}"
    apply(cluster, namespace, [queue(dept, gpu=(8, -1, 1)), queue(a, dept, gpu=(4, 6, 1)),
                               queue(b, dept, gpu=(4, -1, 2))])
    apply(cluster, namespace, [pod("a-1", a, 2), pod("a-2", a, 2), pod("a-big", a, 8), pod("b-1", b, 1),
                               pod("b-half", b, 0, **{"gpu-fraction": "0.5"})])
    wait_for("four pods Running", lambda: len(running(cluster, namespace)) == 4, timeout=120)

    def settled() -> dict[str, Any] | None:
        qs = {q["metadata"]["name"]: q for q in items(cluster, "queues")}
        got = {n: (qs[n].get("status") or {}) for n in (dept, a, b) if n in qs}
        # Every queue's status is written on its own (coalesced per queue): wait for all three.
        want = {(dept, "allocated"): 5.5, (a, "allocated"): 4, (a, "requested"): 12, (b, "allocated"): 1.5,
                (b, "requested"): 1.5}
        ok = all(_quantity(got.get(q, {}).get(f), GPU, Decimal(1)) == v for (q, f), v in want.items())
        return got if ok else None
    statuses = wait_for("Queue statuses to count the pods", settled, timeout=120)

    out = kubectl_kai(cluster, "queues", "-o", "json")
    assert out.returncode == 0, out.stderr
    tree = {q["name"]: q for q in json.loads(out.stdout)["queues"]}
    for name in (dept, a, b):
        status = statuses[name]
        for field in ("allocated", "requested"):
            mine = tree[name]["resources"]
            assert mine["gpu"][field] == pytest.approx(_quantity(status.get(field), GPU, Decimal(1))), (name, field)
            assert mine["cpu"][field] == pytest.approx(_quantity(status.get(field), "cpu", Decimal(1000))), \
                (name, field)
            assert mine["memory"][field] == pytest.approx(
                _quantity(status.get(field), "memory", Decimal("1e-6")), abs=1e-3), (name, field)
    assert tree[a]["parent"] == dept and tree[a]["depth"] == tree[dept]["depth"] + 1
    assert tree[a]["resources"]["gpu"]["limit"] == 6 and tree[b]["resources"]["gpu"]["overQuotaWeight"] == 2
    assert len(tree[a]["pendingPodGroups"]) == 1 and "a-big" in tree[a]["pendingPodGroups"][0]
    text = kai(cluster, "queues").stdout
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(dept))
    assert lines[row + 1].startswith(f"  {a}") and lines[row + 2].startswith(f"  {b}")


# --- kai top -------------------------------------------------------------------------------------


def test_top_shows_whole_shared_and_idle_gpus_per_node(cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    team = f"team-{namespace}"
    apply(cluster, namespace, [queue(team)])
    apply(cluster, namespace, [pod("whole", team, 3), pod("half-a", team, 0, **{"gpu-fraction": "0.5"}),
                               pod("half-b", team, 0, **{"gpu-fraction": "0.5"})])
    wait_for("three pods Running", lambda: len(running(cluster, namespace)) == 3, timeout=120)
    pods = {p["metadata"]["name"]: p for p in running(cluster, namespace)}

    out = kai(cluster, "top", "-o", "json")
    assert out.returncode == 0, out.stderr
    nodes = {n["node"]: n for n in json.loads(out.stdout)["nodes"]}
    assert sum(n["wholeUsed"] for n in nodes.values()) == 3
    assert nodes[pods["whole"]["spec"]["nodeName"]]["wholePods"] == [{"pod": f"{namespace}/whole", "gpus": 3}]
    shared = {p["pod"]: (n["node"], g["id"]) for n in nodes.values() for g in n["shared"] for p in g["pods"]}
    for name in ("half-a", "half-b"):
        node, group = shared[f"{namespace}/{name}"]
        assert node == pods[name]["spec"]["nodeName"]
        assert group == pods[name]["metadata"]["labels"]["runai-gpu-group"]
    groups = sum(len(n["shared"]) for n in nodes.values())
    assert sum(n["idle"] for n in nodes.values()) == 32 - 3 - groups
    assert "gpu-group" in kai(cluster, "top").stdout


# --- kubectl get pg ------------------------------------------------------------------------------


def test_kubectl_get_pg_shows_queue_priority_min_member_reason_and_counts(cluster: Cluster, namespace: str) -> None:
    wait_cluster_idle(cluster)
    team = f"team-{namespace}"
    apply(cluster, namespace, [queue(team, gpu=(1, 1, 1))])
    apply(cluster, namespace, [pod("small", team, 1)])
    wait_for("the first pod Running", lambda: running(cluster, namespace), timeout=120)
    apply(cluster, namespace, [pod("over", team, 1)])

    def table() -> list[list[str]] | None:
        rows = columns(cluster.kubectl("get", "pg", namespace=namespace).stdout)
        body = {r[0]: r for r in rows[1:]}
        over = next((r for n, r in body.items() if "over" in n), None)
        small = next((r for n, r in body.items() if "small" in n), None)
        ready = over and small and over[4] == "OverLimit" and small[5] == "1" and over[6] == "1"
        return rows if ready else None
    rows = wait_for("kubectl get pg to show the OverLimit reason and the pod counts", table, timeout=120)
    assert rows[0] == ["NAME", "QUEUE", "PRIORITY", "MIN-MEMBER", "REASON", "RUNNING", "PENDING", "AGE"]
    small = next(r for r in rows[1:] if "small" in r[0])
    assert small[1:7] == [team, "train", "1", "", "1", "0"]  # a running group has no scheduling condition


def columns(table: str) -> list[list[str]]:
    """kubectl's table cut at the header's column starts (an empty cell is printed as blanks)."""
    lines = table.splitlines()
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[a:b].strip() for a, b in bounds] for line in lines]
