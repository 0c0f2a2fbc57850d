"""The suite as users get it: the image built from the Dockerfile, the chart installed with the seed's command, and
every component a pod on the local control plane's real node. No component runs as a host process here.

Own cluster (KAI_DEPLOYED_TEST_CLUSTER, default `deployed-test`, ports KAI_DEPLOYED_TEST_PORT_BASE, default 28000)
with a real node and without the dev components. The chart's default path, as KAI's: helm installs the CRDs, the
kai-operator and the Config/SchedulingShard, and the operator (a pod too) renders the components. Tests run in file
order and build on each other: install, the seed flows (the e2e tests themselves, run against this cluster), the
webhooks through their Services, the operator (a new shard's scheduler, a refused shard, the Config patched to two
scheduler replicas), HA (two replicas of each elected component, each leader's pod deleted while 200 pods are
created), `helm upgrade` to an image of a newer commit while 200 pods are created, uninstall.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.test_priority_preemption import test_build_pod_preempts_a_train_pod as _build_preempts_train
from e2e.test_seed_gpu_sharing import ai_workloads  # noqa: F401  (the fixture of the vLLM test below)
from e2e.test_seed_gpu_sharing import test_ray_workers_share_one_gpu as _half_gpu_raycluster
from e2e.test_seed_gpu_sharing import test_vllm_deployments_share_one_gpu_and_a_third_goes_elsewhere as _vllm
from operators.devcluster import deployed, image
from tests.support import EXAMPLES, Cluster, labelled, load_yaml, own_cluster, wait_for

pytestmark = pytest.mark.cluster

NS = deployed.NAMESPACE
PORT_BASE = int(os.environ.get("KAI_DEPLOYED_TEST_PORT_BASE", "28000"))
DEPLOYMENTS = {"kai-operator", "admission", "binder", "pod-grouper", "podgroup-controller", "queue-controller",
               "kai-scheduler-default"}
READY_WITHIN = 120.0  # seconds from `helm upgrade -i` to every component Running and Ready


@pytest.fixture(scope="module")
def built() -> image.Image:
    return image.build_image()


@pytest.fixture(scope="module")
def cluster(built: image.Image) -> Iterator[Cluster]:
    """This module's cluster (it overrides the session's, so the e2e tests imported below run against it)."""
    yield from own_cluster(os.environ.get("KAI_DEPLOYED_TEST_CLUSTER", "deployed-test"), port_base=PORT_BASE,
                           components=False, real_node=True, timeout=300)


@pytest.fixture(scope="module")
def helm(cluster: Cluster) -> str:
    from operators.devcluster import build

    return str(build.ensure_binaries().helm)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True"


def suite_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in cluster.get_json("pods", namespace=NS)["items"] if not p["metadata"].get("deletionTimestamp")]


def all_ready(cluster: Cluster, deployments: set[str] = DEPLOYMENTS) -> list[dict[str, Any]] | None:
    pods = suite_pods(cluster)
    ready = {p["metadata"]["labels"]["app"] for p in pods if _ready(p)}
    return pods if ready == deployments and all(_ready(p) for p in pods) else None


# --- 1. install -----------------------------------------------------------------------------------------------
def test_seed_install_gives_every_component_running_and_ready_hardened_within_120s(
        cluster: Cluster, helm: str, built: image.Image) -> None:
    from operators.devcluster.node.addresses import NODE_NAME

    values = deployed.prepare(Path(cluster.state_dir), built)
    started = time.monotonic()
    deployed.install(helm=helm, kubectl=[cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}"],
                     kubeconfig=cluster.kubeconfig, values=values, timeout=READY_WITHIN)
    pods = wait_for("every component Running and Ready", lambda: all_ready(cluster), timeout=READY_WITHIN)
    took = time.monotonic() - started
    assert took < READY_WITHIN, f"{took:.0f}s"
    print(f"\nseed install to all Running and Ready: {took:.1f}s")
    # The user's own check: every line Running, every container ready.
    out = cluster.kubectl("get", "pods", "-n", NS, "--no-headers").stdout.splitlines()
    assert len(out) == len(DEPLOYMENTS) and all(line.split()[1:3] == ["1/1", "Running"] for line in out), out
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeName"] == NODE_NAME, "every component runs on the real node"
        (container,) = spec["containers"]
        assert container["image"] == built.ref and container["imagePullPolicy"] == "IfNotPresent"
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}}
        (status,) = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0, f"{pod['metadata']['name']} restarted: {status}"


def helm_values(helm: str, cluster: Cluster) -> dict[str, Any]:
    proc = subprocess.run([helm, f"--kubeconfig={cluster.kubeconfig}", "get", "values", deployed.RELEASE, "-n", NS,
                           "-o", "json"], capture_output=True, text=True, check=True)
    values: dict[str, Any] = json.loads(proc.stdout)
    return values


def test_the_operator_is_given_what_helm_get_values_shows(cluster: Cluster, helm: str) -> None:
    values = helm_values(helm, cluster)["global"]
    spec = cluster.get_json("config", "kai-config")["spec"]
    for key in ("registry", "image", "tag", "imagePullPolicy", "nodeSelector", "tolerations"):
        assert spec["global"][key] == values[key], key
    assert spec["admission"]["gpuSharing"] is values["gpuSharing"] is True
    operated = {d["metadata"]["name"] for d in cluster.get_json("deployments", "-l",
                                                                "app.kubernetes.io/managed-by=kai-operator",
                                                                namespace=NS)["items"]}
    assert operated == DEPLOYMENTS - {"kai-operator"}, "the operator renders every component"


def test_no_component_runs_on_the_host(cluster: Cluster) -> None:
    from operators import components
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    assert not set(state.pids) & set(components.COMPONENTS), state.pids


# --- 2. the seed flows, served by the pods ------------------------------------------------------------------
def test_raycluster_is_bound_as_one_gang(cluster: Cluster, namespace: str) -> None:
    docs = load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml")
    cluster.kubectl("apply", "-f", "-", input=labelled(docs), namespace=namespace)

    def bound() -> list[dict[str, Any]] | None:
        pods = cluster.get_json("pods", "-l", "ray.io/cluster=raycluster-sample", namespace=namespace)["items"]
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for("the RayCluster's three pods bound", bound, timeout=120)
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in pods} != {""}
    [group] = {p["metadata"]["annotations"]["pod-group-name"] for p in pods}
    pg = cluster.get_json("podgroup", group, namespace=namespace)
    assert pg["spec"]["minMember"] == 3
    assert all(p["spec"]["nodeName"].startswith("kwok-node-") for p in pods), "workloads never land on the real node"


test_half_gpu_raycluster_gives_the_seed_columns = _half_gpu_raycluster
test_two_vllm_deployments_share_one_gpu = _vllm


def test_pending_pod_explains_itself_in_kubectl_describe(cluster: Cluster, namespace: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "too-big", "labels": {"kai.scheduler/queue": "default-queue"}},
           "spec": {"schedulerName": "kai-scheduler",
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"limits": {"nvidia.com/gpu": "9"}}}]}}
    cluster.kubectl("apply", "-f", "-", input=labelled([pod]), namespace=namespace)

    def explained() -> str | None:
        out = cluster.kubectl("describe", "pod", "too-big", namespace=namespace).stdout
        return out if "Unschedulable" in out and "PodScheduled" in out else None

    out = wait_for("the pending pod's explanation", explained, timeout=60)
    assert "GPU" in out, out


test_build_pod_preempts_a_train_pod_in_cluster = _build_preempts_train


# --- 3. the webhooks, through their Services ----------------------------------------------------------------
def test_invalid_queue_and_gpu_fraction_are_refused_through_the_services(cluster: Cluster, namespace: str) -> None:
    cycle = [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": f"self-{namespace}"},
              "spec": {"parentQueue": f"self-{namespace}", "resources": {}}}]
    proc = cluster.kubectl("apply", "-f", "-", input=labelled(cycle), check=False)
    assert proc.returncode != 0 and "admission webhook" in proc.stderr, proc.stderr
    pod = _fraction_pod("bad-fraction", "1.5")
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod), namespace=namespace, check=False)
    assert proc.returncode != 0 and "admission webhook" in proc.stderr and "gpu-fraction" in proc.stderr, proc.stderr


def _fraction_pod(name: str, fraction: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "default-queue"},
                         "annotations": {"gpu-fraction": fraction}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]}}


def test_with_admission_scaled_to_zero_the_failure_policy_holds(cluster: Cluster, namespace: str) -> None:
    """failurePolicy Fail (the chart's default, documented in its README): no admission pod, no kai-scheduler pod;
    other pods are created as usual; with the webhook back, kai-scheduler pods are admitted again."""
    cluster.kubectl("scale", "deployment", "admission", "--replicas=0", namespace=NS)
    try:
        wait_for("no admission pod", lambda: not [p for p in cluster.get_json("pods", "-l", "app=admission",
                                                                           namespace=NS)["items"]] or None,
                 timeout=60)
        proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_fraction_pod("refused", "0.5")),
                               namespace=namespace, check=False)
        assert proc.returncode != 0 and "failed calling webhook" in proc.stderr, proc.stderr
        other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other"},
                 "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "kwok-node-0"}}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(other), namespace=namespace)
    finally:
        cluster.kubectl("scale", "deployment", "admission", "--replicas=1", namespace=NS)
    wait_for("every component Ready again", lambda: all_ready(cluster), timeout=120)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_fraction_pod("admitted", "0.5")), namespace=namespace)


# --- 4. the operator: shards and the Config, on the real node --------------------------------------------------
POOL_LABEL = "kai.scheduler/node-pool"  # the chart's global.nodePoolLabelKey
POOL_NODE = "kwok-node-3"


def _shard(name: str, **spec: Any) -> str:
    return json.dumps({"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": name},
                       "spec": spec})


def _condition(cluster: Cluster, shard: str, kind: str) -> dict[str, Any] | None:
    obj = cluster.get_json("schedulingshard", shard)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind
                 and c.get("observedGeneration") == obj["metadata"]["generation"]), None)


def test_a_pool_b_shard_gets_a_ready_scheduler_pod_that_schedules_only_pool_b(cluster: Cluster,
                                                                             namespace: str) -> None:
    from operators.devcluster.node.addresses import NODE_NAME

    cluster.kubectl("label", "node", POOL_NODE, f"{POOL_LABEL}=pool-b", "--overwrite")
    try:
        started = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=_shard("pool-b", partitionLabelValue="pool-b"))
        [pod] = wait_for("a Ready kai-scheduler-pool-b pod", lambda: [
            p for p in suite_pods(cluster) if p["metadata"]["labels"].get("app") == "kai-scheduler-pool-b"
            and _ready(p)] or None, timeout=60, interval=0.5)
        took = time.monotonic() - started
        print(f"\nSchedulingShard pool-b to a Ready scheduler pod: {took:.1f}s")
        assert took < 60 and pod["spec"]["nodeName"] == NODE_NAME
        assert "--shard-name=pool-b" in pod["spec"]["containers"][0]["args"]
        # A pod of pool b lands on pool b's node (the default shard serves only unlabelled PodGroups and nodes).
        workload = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "in-pool-b", "labels": {"kai.scheduler/queue": "default-queue",
                                                                 POOL_LABEL: "pool-b"}},
                    "spec": {"schedulerName": "kai-scheduler",
                             "containers": [{"name": "c", "image": "busybox",
                                             "resources": {"requests": {"cpu": "100m"}}}]}}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(workload), namespace=namespace)
        node = wait_for("the pool-b pod bound", lambda: cluster.get_json("pod", "in-pool-b", namespace=namespace)[
            "spec"].get("nodeName"), timeout=60)
        assert node == POOL_NODE
        [request] = [b for b in cluster.get_json("bindrequests.scheduling.run.ai", namespace=namespace)["items"]
                     if b["spec"]["podName"] == "in-pool-b"]
        assert request["metadata"]["labels"].get(POOL_LABEL) == "pool-b", "bound by the pool-b scheduler"

        cluster.kubectl("delete", "schedulingshard", "pool-b")
        wait_for("kai-scheduler-pool-b and its pod gone", lambda: not [
            p for p in cluster.get_json("pods", "-l", "app=kai-scheduler-pool-b", namespace=NS)["items"]]
            and cluster.kubectl("get", "deployment", "kai-scheduler-pool-b", "-n", NS, check=False).returncode != 0,
            timeout=60)
    finally:
        cluster.kubectl("delete", "schedulingshard", "pool-b", "--ignore-not-found", check=False)
        cluster.kubectl("label", "node", POOL_NODE, f"{POOL_LABEL}-", check=False)


def test_an_invalid_shard_leaves_the_running_schedulers_untouched_and_says_why(cluster: Cluster) -> None:
    def schedulers() -> dict[str, Any]:
        return {p["metadata"]["uid"]: p["metadata"]["name"] for p in suite_pods(cluster)
                if p["metadata"]["labels"]["app"].startswith("kai-scheduler-")}

    before = schedulers()
    generation = cluster.get_json("deployment", "kai-scheduler-default", namespace=NS)["metadata"]["generation"]
    cluster.kubectl("apply", "-f", "-", input=_shard("bad", partitionLabelValue="bad",
                                                      plugins={"nosuchplugin": {"enabled": True}}))
    try:
        refused = wait_for("SpecValid=False", lambda: (c := _condition(cluster, "bad", "SpecValid"))
                           and c["status"] == "False" and c, timeout=30)
        assert "spec.plugins.nosuchplugin" in refused["message"]
        events = cluster.get_json("events", "--field-selector", "involvedObject.name=bad", namespace="default")
        assert [e for e in events["items"] if e["type"] == "Warning" and e["reason"] == "InvalidSpec"
                and "spec.plugins.nosuchplugin" in e["message"]]
        assert cluster.kubectl("get", "deployment", "kai-scheduler-bad", "-n", NS, check=False).returncode != 0
        assert schedulers() == before
        assert cluster.get_json("deployment", "kai-scheduler-default", namespace=NS)["metadata"][
            "generation"] == generation
    finally:
        cluster.kubectl("delete", "schedulingshard", "bad", "--ignore-not-found")


def test_patching_the_config_to_two_scheduler_replicas_gives_two_pods_one_leading(cluster: Cluster) -> None:
    cluster.kubectl("patch", "config", "kai-config", "--type=merge", "-p",
                    json.dumps({"spec": {"scheduler": {"replicas": 2}}}))

    def led() -> tuple[list[str], str] | None:
        """Two Ready electing replicas (the rollout from one non-electing replica done), one holding the Lease."""
        pods = [p["metadata"]["name"] for p in suite_pods(cluster)
                if p["metadata"]["labels"]["app"] == "kai-scheduler-default" and _ready(p)
                and "--leader-elect" in p["spec"]["containers"][0]["args"]]
        holder = lease_holder(cluster, "kai-scheduler-default").split("_")[0]
        return (pods, holder) if len(pods) == 2 and holder in pods else None

    wait_for("two Ready kai-scheduler-default pods, one leading", led, timeout=READY_WITHIN)


# --- 5. HA and upgrade, under load ----------------------------------------------------------------------------
ELECTED = {"kai-scheduler-default": "kai-scheduler-default", "binder": "kai-binder"}  # Deployment -> its Lease
LOAD_PODS = 200
GANGS = 10  # RayClusters of a head and four workers (minMember 5) among the LOAD_PODS
GANG_SIZE = 5


def lease_holder(cluster: Cluster, lease: str) -> str:
    proc = cluster.kubectl("get", "lease", lease, "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _load(cluster: Cluster, namespace: str, prefix: str, spread: float) -> threading.Thread:
    """Create LOAD_PODS pods over about `spread` seconds: GANGS RayClusters and single pods, in batches."""
    [ray] = [d for d in load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml") if d["kind"] == "RayCluster"]
    queues = [d for d in load_yaml(EXAMPLES / "ray-cluster.kai-scheduler.yaml") if d["kind"] == "Queue"]
    cluster.kubectl("apply", "-f", "-", input=labelled(queues))
    docs: list[dict[str, Any]] = []
    for i in range(GANGS):
        gang = copy.deepcopy(ray)
        gang["metadata"]["name"] = f"{prefix}-ray-{i}"
        worker = gang["spec"]["workerGroupSpecs"][0]
        worker["replicas"] = worker["minReplicas"] = GANG_SIZE - 1
        docs.append(gang)
    for i in range(LOAD_PODS - GANGS * GANG_SIZE):
        docs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{prefix}-{i}", "labels": {"kai.scheduler/queue": "team-a",
                                                                      "load": prefix}},
                     "spec": {"schedulerName": "kai-scheduler",
                              "containers": [{"name": "c", "image": "busybox",
                                              "resources": {"requests": {"cpu": "100m"}}}]}})
    docs.sort(key=lambda d: d["metadata"]["name"].rsplit("-", 1)[-1])  # gangs interleaved with single pods
    batches = [docs[i:i + 10] for i in range(0, len(docs), 10)]

    def create() -> None:
        for batch in batches:
            proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(batch), namespace=namespace,
                                   check=False)
            if proc.returncode != 0:
                LOAD_ERRORS.append(proc.stderr.strip())
            time.sleep(spread / len(batches))

    LOAD_ERRORS.clear()
    thread = threading.Thread(target=create, name=f"load {prefix}")
    thread.start()
    return thread


LOAD_ERRORS: list[str] = []  # creates the API server refused during a load (none may be)


def assert_every_pod_bound_once(cluster: Cluster, namespace: str, prefix: str) -> None:
    assert not LOAD_ERRORS, LOAD_ERRORS

    def bound() -> list[dict[str, Any]] | None:
        pods = [p for p in cluster.get_json("pods", namespace=namespace)["items"]
                if p["metadata"]["name"].startswith(prefix + "-")]
        ok = [p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
        return pods if len(ok) == len(pods) == LOAD_PODS else None

    pods = wait_for(f"the {LOAD_PODS} pods of {prefix} bound and Running", bound, timeout=300, interval=2)
    # Bound once: one BindRequest per pod, naming the node the pod runs on, and one Scheduled event per pod.
    requests: dict[str, list[str]] = {}
    for br in cluster.get_json("bindrequests.scheduling.run.ai", namespace=namespace)["items"]:
        requests.setdefault(br["spec"]["podName"], []).append(br["spec"]["selectedNode"])
    events: dict[str, int] = {}
    for event in cluster.get_json("events", "--field-selector=reason=Scheduled", namespace=namespace)["items"]:
        name = event["involvedObject"]["name"]
        events[name] = events.get(name, 0) + event.get("count", 1)
    for pod in pods:
        name = pod["metadata"]["name"]
        assert requests.get(name) == [pod["spec"]["nodeName"]], (name, requests.get(name))
        assert events.get(name) == 1, (name, events.get(name))
    # No gang split: each RayCluster's pods are one PodGroup of minMember GANG_SIZE, all bound.
    gangs: dict[str, set[str]] = {}
    for pod in pods:
        if "ray.io/cluster" in pod["metadata"]["labels"]:
            gangs.setdefault(pod["metadata"]["labels"]["ray.io/cluster"], set()).add(
                pod["metadata"]["annotations"]["pod-group-name"])
    assert len(gangs) == GANGS and all(len(groups) == 1 for groups in gangs.values()), gangs
    for [group] in gangs.values():
        assert cluster.get_json("podgroup", group, namespace=namespace)["spec"]["minMember"] == GANG_SIZE


def test_ha_each_leader_hands_over_within_15s_and_no_bind_is_lost_or_doubled(cluster: Cluster, helm: str,
                                                                               namespace: str) -> None:
    values = Path(cluster.state_dir) / "local-values.yaml"
    replicas = ["--set", "scheduler.replicaCount=2", "--set", "binder.replicaCount=2"]
    deployed.install(helm=helm, kubectl=[cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}"],
                     kubeconfig=cluster.kubeconfig, values=values, extra=replicas, timeout=READY_WITHIN)

    def two_each() -> list[dict[str, Any]] | None:
        pods = all_ready(cluster)
        apps = [p["metadata"]["labels"]["app"] for p in pods or []]
        return pods if pods and all(apps.count(d) == 2 for d in ELECTED) else None

    wait_for("two Ready replicas of each elected component", two_each, timeout=READY_WITHIN)
    budgets = {b["metadata"]["name"] for b in cluster.get_json("poddisruptionbudgets", namespace=NS)["items"]}
    assert set(ELECTED) <= budgets
    load = _load(cluster, namespace, "ha", spread=40)
    try:
        for deployment, lease in ELECTED.items():
            holder = wait_for(f"a leader of {deployment}", lambda lease=lease: lease_holder(cluster, lease))
            leader = holder.split("_")[0]
            assert leader.startswith(deployment + "-"), holder
            deleted = time.monotonic()
            cluster.kubectl("delete", "pod", leader, "-n", NS, "--wait=false")
            new = wait_for(f"another {deployment} replica to lead",
                           lambda lease=lease, leader=leader: (h := lease_holder(cluster, lease))
                           and not h.startswith(leader + "_") and h, timeout=30, interval=0.2)
            took = time.monotonic() - deleted
            print(f"\n{deployment}: {new.split('_')[0]} leads {took:.1f}s after its leader's pod was deleted")
            assert took <= 15, f"{deployment} hand-over took {took:.1f}s"
    finally:
        load.join()
    assert_every_pod_bound_once(cluster, namespace, "ha")


def test_helm_upgrade_to_a_newer_image_under_load_loses_nothing(cluster: Cluster, helm: str, namespace: str,
                                                                 tmp_path: Path) -> None:
    # A newer commit: the same sources plus one line, so a new image tag (only its project layer is rebuilt).
    for name in image.SOURCES:
        src = image.build.REPO / name
        if src.is_dir():
            shutil.copytree(src, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(src, tmp_path / name)
    with (tmp_path / "operators" / "components.py").open("a") as f:
        f.write("# a newer commit\n")
    newer = image.build_image(tmp_path)
    values = deployed.prepare(Path(cluster.state_dir), newer)
    load = _load(cluster, namespace, "up", spread=30)
    try:
        time.sleep(5)  # the upgrade starts while the pods are being created
        started = time.monotonic()
        deployed.install(helm=helm, kubectl=[cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}"],
                         kubeconfig=cluster.kubeconfig, values=values,
                         extra=["--set", "scheduler.replicaCount=2", "--set", "binder.replicaCount=2"],
                         timeout=2 * READY_WITHIN)
        print(f"\nhelm upgrade to {newer.tag} under load: {time.monotonic() - started:.1f}s")
    finally:
        load.join()
    pods = wait_for("every component on the newer image", lambda: (p := all_ready(cluster)) and all(
        c["image"] == newer.ref for pod in p for c in pod["spec"]["containers"]) and p, timeout=READY_WITHIN)
    assert {pod["metadata"]["labels"]["app"] for pod in pods} == DEPLOYMENTS
    assert_every_pod_bound_once(cluster, namespace, "up")


# --- 6. uninstall -----------------------------------------------------------------------------------------------
def test_uninstall_leaves_no_webhook_finalizer_or_stuck_object(cluster: Cluster, helm: str) -> None:
    deployed.uninstall(helm=helm, kubeconfig=cluster.kubeconfig)
    wait_for("the suite's pods gone", lambda: not cluster.get_json("pods", namespace=NS)["items"] or None,
             timeout=120)
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        left = [c["metadata"]["name"] for c in cluster.get_json(kind)["items"]
                if "kai" in c["metadata"]["name"]]
        assert not left, f"{kind}: {left}"
    leftovers = cluster.kubectl("get", "all,leases,secrets,configmaps,serviceaccounts", "-n", NS,
                                "-o", "name").stdout.split()
    assert not [o for o in leftovers if not o.endswith(("/default", "/kube-root-ca.crt"))], leftovers
    for kind in ("podgroups", "queues", "bindrequests"):
        stuck = [o["metadata"]["name"] for o in cluster.get_json(kind, "-A")["items"]
                 if o["metadata"].get("deletionTimestamp") or o["metadata"].get("finalizers")]
        assert not stuck, f"{kind} with finalizers or stuck deleting: {stuck}"
    crds = {c["metadata"]["name"] for c in cluster.get_json("crds")["items"]}
    assert {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "bindrequests.scheduling.run.ai"} <= crds

