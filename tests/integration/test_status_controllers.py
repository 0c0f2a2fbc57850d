"""podgroup-controller and queue-controller against the real API server.

Pods are scheduled and bound by the cluster's own scheduler and binder and turned Running by kwok; the tests read
PodGroup `status.resourcesStatus`, Queue `status` up a queue hierarchy, the queue-controller's /metrics, and the
validating webhooks' denials, as a user would with kubectl.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from operators.core.resources import parse_quantity
from tests.conftest import Cluster, labelled
from tests.support import EXAMPLES, audit_mark, audited, audited_requests, load_yaml, poll, reconciles, settled

pytestmark = pytest.mark.cluster

T = TypeVar("T")
GPU = "nvidia.com/gpu"
UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


# --- helpers ---------------------------------------------------------------------------------------------------

wait_for = poll


def wait_equal(fetch: Callable[[], Any], expected: Any, what: str, timeout: float = 60) -> None:
    """Poll `fetch` until it returns `expected`; fail showing both."""
    deadline = time.monotonic() + timeout
    while (seen := fetch()) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}:\n"
                                 f"expected {expected}\nseen     {seen}")
        time.sleep(0.5)


def quantities(raw: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """A ResourceList as numbers, zero entries dropped (absent and "0" mean the same)."""
    out = {name: parse_quantity(value) for name, value in (raw or {}).items()}
    return {name: value for name, value in out.items() if value != 0}


def rl(cpu: str = "0", memory: str = "0", gpu: str = "0") -> dict[str, Decimal]:
    return quantities({"cpu": cpu, "memory": memory, GPU: gpu})


def queue_doc(name: str, parent: str | None = None, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": resources if resources is not None
                            else {"cpu": UNLIMITED, "gpu": UNLIMITED, "memory": UNLIMITED}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod_doc(name: str, queue: str, cpu: str, memory: str | None = None, gpus: int | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu}
    if memory:
        requests["memory"] = memory
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue},
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "ubuntu", "resources": resources}]}}


def create(cluster: Cluster, docs: list[dict[str, Any]], namespace: str | None = None) -> None:
    cluster.kubectl("create", "-f", "-", input=labelled(docs), namespace=namespace)


def queue_status(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(cluster.get_json("queues.scheduling.run.ai", name).get("status") or {})


def pod_phase(cluster: Cluster, namespace: str, name: str) -> str:
    return str(cluster.get_json("pod", name, namespace=namespace).get("status", {}).get("phase"))


def podgroup_status(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any] | None:
    meta = cluster.get_json("pod", pod, namespace=namespace)["metadata"]
    pg = (meta.get("annotations") or {}).get("pod-group-name")
    if not pg:
        return None
    found = cluster.get_json("podgroups.scheduling.run.ai", pg, namespace=namespace)
    return dict((found.get("status") or {}).get("resourcesStatus") or {})


def wait_running(cluster: Cluster, namespace: str, *names: str) -> None:
    wait_for(lambda: all(pod_phase(cluster, namespace, n) == "Running" for n in names) or None,
             f"pods {names} to be Running", timeout=90)


def wait_sums(cluster: Cluster, expected: dict[str, tuple[dict[str, Decimal], dict[str, Decimal]]],
              what: str, timeout: float = 60) -> None:
    """Wait until every named queue's (status.allocated, status.requested) equal the expected sums."""
    def seen() -> dict[str, tuple[dict[str, Decimal], dict[str, Decimal]]]:
        statuses = {queue: queue_status(cluster, queue) for queue in expected}
        return {queue: (quantities(status.get("allocated")), quantities(status.get("requested")))
                for queue, status in statuses.items()}
    wait_equal(seen, expected, what, timeout=timeout)


@pytest.fixture
def hierarchy(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Three levels: root -> mid -> (leaf-a, leaf-b), unique to the test, removed with its namespace."""
    names = {level: f"{level}-{namespace}" for level in ("root", "mid", "leaf-a", "leaf-b")}
    create(cluster, [queue_doc(names["root"]), queue_doc(names["mid"], names["root"]),
                     queue_doc(names["leaf-a"], names["mid"]), queue_doc(names["leaf-b"], names["mid"])])
    wait_for(lambda: queue_status(cluster, names["mid"]).get("childQueues") == sorted(
        [names["leaf-a"], names["leaf-b"]]) or None, "mid's childQueues")
    return names


# --- resourcesStatus and Queue status ---------------------------------------------------------------------------

def test_sums_climb_the_hierarchy_and_drop_back(cluster: Cluster, namespace: str,
                                                hierarchy: dict[str, str]) -> None:
    leaf_a, leaf_b, mid, root = hierarchy["leaf-a"], hierarchy["leaf-b"], hierarchy["mid"], hierarchy["root"]
    create(cluster, [pod_doc("a1", leaf_a, "500m", "1Gi"),
                     pod_doc("a2", leaf_a, "500m", "1Gi", gpus=1),
                     pod_doc("b1", leaf_b, "250m", "512Mi"),
                     # no node has 16 GPUs: requested, never allocated
                     pod_doc("b-big", leaf_b, "100m", gpus=16)], namespace)
    wait_running(cluster, namespace, "a1", "a2", "b1")

    a1 = wait_for(lambda: (s := podgroup_status(cluster, namespace, "a1")) and s.get("allocated") and s,
                  "a1's PodGroup resourcesStatus")
    assert quantities(a1["allocated"]) == quantities(a1["requested"]) == rl("500m", "1Gi")
    a2 = wait_for(lambda: (s := podgroup_status(cluster, namespace, "a2")) and s.get("allocated") and s,
                  "a2's PodGroup resourcesStatus")
    assert quantities(a2["allocated"]) == rl("500m", "1Gi", "1")
    big = wait_for(lambda: (s := podgroup_status(cluster, namespace, "b-big")) and s.get("requested") and s,
                   "b-big's PodGroup requested")
    assert quantities(big["requested"]) == rl("100m", gpu="16")
    assert not quantities(big.get("allocated"))
    assert pod_phase(cluster, namespace, "b-big") == "Pending"

    leaf_a_sum = rl("1", "2Gi", "1")
    leaf_b_alloc, leaf_b_req = rl("250m", "512Mi"), rl("350m", "512Mi", "16")
    wait_sums(cluster, {
        leaf_a: (leaf_a_sum, leaf_a_sum),
        leaf_b: (leaf_b_alloc, leaf_b_req),
        mid: (rl("1250m", "2560Mi", "1"), rl("1350m", "2560Mi", "17")),
        root: (rl("1250m", "2560Mi", "1"), rl("1350m", "2560Mi", "17")),
    }, "the running pods summed up three levels")

    # a2 finishes: it no longer counts, neither allocated nor requested
    cluster.kubectl("patch", "pod", "a2", "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"phase": "Succeeded"}}), namespace=namespace)
    wait_sums(cluster, {
        leaf_a: (rl("500m", "1Gi"), rl("500m", "1Gi")),
        mid: (rl("750m", "1536Mi"), rl("850m", "1536Mi", "16")),
        root: (rl("750m", "1536Mi"), rl("850m", "1536Mi", "16")),
    }, "the finished pod dropped from the sums")

    # deletions: a1 (allocated) and b-big (only requested)
    cluster.kubectl("delete", "pod", "a1", "b-big", "--wait=false", namespace=namespace)
    wait_sums(cluster, {
        leaf_a: ({}, {}),
        leaf_b: (leaf_b_alloc, leaf_b_alloc),
        mid: (leaf_b_alloc, leaf_b_alloc),
        root: (leaf_b_alloc, leaf_b_alloc),
    }, "the deleted pods dropped from the sums")
    assert queue_status(cluster, mid)["childQueues"] == sorted([leaf_a, leaf_b])
    assert queue_status(cluster, root)["childQueues"] == [mid]


def test_gpu_fraction_is_allocated_as_a_fraction(cluster: Cluster, namespace: str,
                                                 hierarchy: dict[str, str]) -> None:
    leaf = hierarchy["leaf-a"]
    create(cluster, [pod_doc("half", leaf, "100m", annotations={"gpu-fraction": "0.5"})], namespace)
    wait_running(cluster, namespace, "half")
    pod = cluster.get_json("pod", "half", namespace=namespace)
    assert pod["metadata"]["annotations"].get("received-resource-type") == "Fraction"

    status = wait_for(lambda: (s := podgroup_status(cluster, namespace, "half")) and s.get("allocated") and s,
                      "the fractional pod's PodGroup allocated")
    assert quantities(status["allocated"]) == quantities(status["requested"]) == rl("100m", gpu="0.5")
    expected = (rl("100m", gpu="0.5"), rl("100m", gpu="0.5"))
    wait_sums(cluster, {leaf: expected, hierarchy["mid"]: expected, hierarchy["root"]: expected},
              "0.5 GPU allocated up the hierarchy")
    assert queue_status(cluster, leaf)["allocated"][GPU] == "0.5"

    cluster.kubectl("delete", "pod", "half", "--wait=false", namespace=namespace)
    wait_sums(cluster, {leaf: ({}, {}), hierarchy["root"]: ({}, {})}, "the fraction released")


# --- metrics ----------------------------------------------------------------------------------------------------

def queue_metrics(cluster: Cluster, queue: str) -> dict[str, float]:
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    port = dev.component_ports(state.ports["apiserver"] - 443)["queue-controller"]["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name: sample.value
            for family in text_string_to_metric_families(text) if family.name.startswith("kai_queue_")
            for sample in family.samples if sample.labels.get("queue_name") == queue}


def test_queue_metrics_show_live_values(cluster: Cluster, namespace: str) -> None:
    name = f"metrics-{namespace}"
    create(cluster, [queue_doc(name, resources={
        "cpu": {"quota": 4000, "limit": -1, "overQuotaWeight": 1},
        "gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": 1000, "limit": -1, "overQuotaWeight": 1}})])
    create(cluster, [pod_doc("m1", name, "1500m", "1Gi", gpus=1)], namespace)
    wait_running(cluster, namespace, "m1")

    live = {"kai_queue_info": 1.0, "kai_queue_deserved_gpus": 2.0, "kai_queue_quota_cpu_cores": 4.0,
            "kai_queue_quota_memory_bytes": 1e9, "kai_queue_allocated_gpus": 1.0,
            "kai_queue_allocated_cpu_cores": 1.5, "kai_queue_allocated_memory_bytes": float(1 << 30),
            # KAI v0.18's gauges: the pod is preemptible (train), requested = allocated while it runs.
            "kai_queue_allocated_non_preemptible_gpus": 0.0, "kai_queue_allocated_non_preemptible_cpu_cores": 0.0,
            "kai_queue_allocated_non_preemptible_memory_bytes": 0.0, "kai_queue_requested_gpus": 1.0,
            "kai_queue_requested_cpu_cores": 1.5, "kai_queue_requested_memory_bytes": float(1 << 30),
            "kai_queue_limit_gpus": -1.0, "kai_queue_limit_cpu_cores": -1.0, "kai_queue_limit_memory_bytes": -1.0}
    wait_equal(lambda: queue_metrics(cluster, name), live, f"kai_queue_* of {name} with the running pod")

    cluster.kubectl("delete", "pod", "m1", "--wait=false", namespace=namespace)
    released = {**live, "kai_queue_allocated_gpus": 0.0, "kai_queue_allocated_cpu_cores": 0.0,
                "kai_queue_allocated_memory_bytes": 0.0, "kai_queue_requested_gpus": 0.0,
                "kai_queue_requested_cpu_cores": 0.0, "kai_queue_requested_memory_bytes": 0.0}
    wait_equal(lambda: queue_metrics(cluster, name), released, f"kai_queue_allocated_* of {name} back to 0")

    cluster.kubectl("delete", "queue", name)
    wait_equal(lambda: queue_metrics(cluster, name), {}, f"the series of the deleted queue {name} to go")


# --- validating webhooks ----------------------------------------------------------------------------------------

def rejected(cluster: Cluster, verb: str, doc: dict[str, Any], namespace: str | None = None) -> str:
    proc = cluster.kubectl(verb, "-f", "-", input=labelled([doc]), namespace=namespace, check=False)
    assert proc.returncode != 0, f"{doc['kind']} {doc['metadata']['name']} was admitted: {proc.stdout}"
    assert "denied the request" in proc.stderr, proc.stderr
    return proc.stderr


def test_bad_queues_are_rejected(cluster: Cluster, namespace: str) -> None:
    top, child = f"vq-top-{namespace}", f"vq-child-{namespace}"
    no_resources = queue_doc(f"vq-none-{namespace}")
    del no_resources["spec"]["resources"]
    assert "resources must be specified" in rejected(cluster, "create", no_resources)

    create(cluster, [queue_doc(top), queue_doc(child, top)])  # valid ones are admitted
    cycle = queue_doc(top, parent=child)
    assert "creates a cycle" in rejected(cluster, "apply", cycle)
    assert not cluster.get_json("queue", top)["spec"].get("parentQueue")

    # A quota above its limit is KAI's to accept (its quota checks are opt-in warnings).
    over = queue_doc(f"vq-over-{namespace}", resources={"gpu": {"quota": 5, "limit": 2, "overQuotaWeight": 1}})
    create(cluster, [over])

    negative = queue_doc(f"vq-neg-{namespace}", resources={"cpu": {"quota": -2, "limit": -1}})
    assert "spec.resources.cpu.quota: -2 is negative" in rejected(cluster, "create", negative)
    unlimited = queue_doc(f"vq-unl-{namespace}", resources={"cpu": {"quota": -1, "limit": -1}})
    create(cluster, [unlimited])  # -1 is the one negative value allowed


def podgroup_doc(name: str, subgroups: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"minMember": 1, "queue": "default-queue", "subGroups": subgroups}}


def test_bad_podgroups_are_rejected(cluster: Cluster, namespace: str) -> None:
    good = podgroup_doc("good", [{"name": "workers", "minSubGroup": 1},
                                 {"name": "w-0", "minMember": 1, "parent": "workers"}])
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(good), namespace=namespace)

    duplicate = podgroup_doc("dup", [{"name": "a", "minMember": 1}, {"name": "a", "minMember": 1}])
    assert "duplicate subgroup name a" in rejected(cluster, "create", duplicate, namespace)

    unknown = podgroup_doc("unknown", [{"name": "a", "minMember": 1, "parent": "nope"}])
    assert "parent nope of a was not found" in rejected(cluster, "create", unknown, namespace)

    cycle = podgroup_doc("cycle", [{"name": "a", "minMember": 1, "parent": "b"},
                                   {"name": "b", "minMember": 1, "parent": "a"}])
    assert "cycle detected in subgroups" in rejected(cluster, "create", cycle, namespace)

    # UPDATE is validated too
    updated = podgroup_doc("good", [{"name": "x", "minMember": 1}, {"name": "x", "minMember": 1}])
    assert "duplicate subgroup name x" in rejected(cluster, "apply", updated, namespace)


def test_bad_queue_under_a_missing_parent_is_still_rejected(cluster: Cluster, namespace: str) -> None:
    child = f"vq-orphan-{namespace}"
    create(cluster, [queue_doc(child, parent=f"late-{namespace}")])  # a missing parent alone is fine
    cycle = queue_doc(f"late-{namespace}", parent=child)
    assert "creates a cycle" in rejected(cluster, "create", cycle)
    no_resources = queue_doc(f"vq-none-{namespace}", parent=f"late-{namespace}")
    del no_resources["spec"]["resources"]
    assert "resources must be specified" in rejected(cluster, "create", no_resources)


def test_parent_and_child_created_in_one_apply_are_both_admitted(cluster: Cluster, namespace: str) -> None:
    """Users apply a parent queue and its child in one file: the child must not race the parent's informer."""
    for i in range(10):
        parent, child = f"race-{i}-{namespace}", f"race-{i}-child-{namespace}"
        create(cluster, [queue_doc(parent), queue_doc(child, parent)])


# --- queues applied in any order ----------------------------------------------------------------------------------

def queue_events(cluster: Cluster, name: str) -> list[tuple[str, str, str]]:
    found = cluster.get_json("events", "--all-namespaces", "--field-selector",
                             f"involvedObject.kind=Queue,involvedObject.name={name}")["items"]
    return [(e["type"], e["reason"], e["message"]) for e in found]


def orphan_condition(cluster: Cluster, name: str) -> dict[str, Any] | None:
    conditions = queue_status(cluster, name).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Orphan"), None)


def test_example_listing_the_child_first_applies_cleanly(cluster: Cluster, namespace: str) -> None:
    docs = load_yaml(EXAMPLES / "queues-child-first.yaml")
    assert [d["metadata"]["name"] for d in docs] == ["research-team", "research"]  # the child comes first
    rename = {d["metadata"]["name"]: f"{d['metadata']['name']}-{namespace}" for d in docs}
    for doc in docs:
        doc["metadata"]["name"] = rename[doc["metadata"]["name"]]
        if doc["spec"].get("parentQueue"):
            doc["spec"]["parentQueue"] = rename[doc["spec"]["parentQueue"]]
    cluster.kubectl("apply", "-f", "-", input=labelled(docs))
    child, parent = rename["research-team"], rename["research"]
    wait_for(lambda: queue_status(cluster, parent).get("childQueues") == [child] or None, "the parent's childQueues")
    wait_for(lambda: orphan_condition(cluster, child) is None or None, "no Orphan condition on the child")


def test_child_queue_waits_for_its_parent_then_schedules(cluster: Cluster, namespace: str) -> None:
    child, parent = f"child-{namespace}", f"parent-{namespace}"
    create(cluster, [queue_doc(child, parent)])
    condition = wait_for(lambda: orphan_condition(cluster, child), "the Orphan condition on the child queue")
    assert condition["status"] == "True" and condition["reason"] == "ParentQueueNotFound"
    assert condition["message"].startswith(f"parent queue '{parent}' does not exist")
    wait_for(lambda: ("Warning", "ParentQueueNotFound", condition["message"]) in queue_events(cluster, child) or None,
             "a ParentQueueNotFound event on the child queue")

    create(cluster, [pod_doc("waits", child, cpu="100m")], namespace)
    expected = f"Queue '{child}' cannot be scheduled: its parent queue '{parent}' does not exist"

    def scheduling_reason() -> dict[str, Any] | None:
        meta = cluster.get_json("pod", "waits", namespace=namespace)["metadata"]
        pg_name = (meta.get("annotations") or {}).get("pod-group-name")
        if not pg_name:
            return None
        pg = cluster.get_json("podgroups.scheduling.run.ai", pg_name, namespace=namespace)
        conditions = (pg.get("status") or {}).get("schedulingConditions") or []
        reasons = [r for c in conditions for r in c.get("reasons") or []]
        return reasons[-1] if reasons else None
    reason = wait_for(scheduling_reason, "the PodGroup's scheduling condition")
    assert reason["reason"] == "QueueDoesNotExist" and reason["message"] == expected
    pod = cluster.get_json("pod", "waits", namespace=namespace)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    scheduled = next(c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and expected in scheduled["message"]

    create(cluster, [queue_doc(parent)])  # the parent appears: no restart, the pod binds, the condition clears
    wait_running(cluster, namespace, "waits")
    wait_for(lambda: orphan_condition(cluster, child) is None or None, "the Orphan condition to clear")
    wait_for(lambda: any(e[:2] == ("Normal", "ParentQueueFound") for e in queue_events(cluster, child)) or None,
             "a ParentQueueFound event on the child queue")


def test_missing_grandparent_is_reported_down_the_subtree_and_clears(cluster: Cluster, namespace: str) -> None:
    top, mid, leaf = f"top-{namespace}", f"mid-{namespace}", f"leaf-{namespace}"
    create(cluster, [queue_doc(leaf, mid), queue_doc(mid, top)])
    conditions = {name: wait_for(lambda name=name: orphan_condition(cluster, name), f"the Orphan condition on {name}")
                  for name in (mid, leaf)}
    assert conditions[mid]["message"].startswith(f"parent queue '{top}' does not exist")
    assert conditions[leaf]["message"].startswith(f"ancestor queue '{top}' (parent of queue '{mid}') does not exist")
    create(cluster, [queue_doc(top)])
    for name in (mid, leaf):
        wait_for(lambda name=name: orphan_condition(cluster, name) is None or None, f"{name}'s condition to clear")


# --- what makes a controller reconcile ------------------------------------------------------------------------
# A status write comes back through the controller's own watch. The echo must not reconcile again: the property is
# counted live, for the test's object only (other tests' leftovers and kwok change other objects meanwhile), at the
# API server (its audit log) and by the controller's work queue (a DEBUG line per reconcile, with its object).
DEBUG = "--log-level=DEBUG"


def restart_component(cluster: Cluster, name: str, debug: bool = False) -> int:
    """Restart the dev cluster's process of component `name` (same arguments and ports; logging each reconcile's
    object when `debug`) and return its metrics port once it is ready: its periodic resync (every minute or more)
    is then not due during the test."""
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None and name in state.pids, f"the cluster runs no {name}"
    ports = dev.component_ports(state.ports["apiserver"] - 443)[name]
    argv = [arg for arg in dev.stop_component(state, name) if arg != DEBUG]
    dev.start_component(state, name, [*argv, DEBUG] if debug else argv)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['probe']}/readyz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    wait_for(ready, f"the restarted {name} to be ready")
    return ports["metrics"]


def writes_since(cluster: Cluster, mark: int) -> dict[str, int]:
    """Every write since the audit mark `mark`, by "VERB resource namespace/name agent": what else happened."""
    return dict(Counter(f"{r.key} {r.namespace}/{r.name} {r.agent}" for r in audited_requests(cluster, mark)
                        if r.key.split()[0] not in ("GET", "LIST")))


def clobber_status(cluster: Cluster, kind: str, name: str, status: dict[str, Any],
                   namespace: str | None = None) -> None:
    """Another writer's status write (a merge patch of the status subresource)."""
    cluster.kubectl("patch", kind, name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}), namespace=namespace)


def corrected_once(cluster: Cluster, component: str, writes: str, clobber: Callable[[], None],
                   corrected: Callable[[], None], name: str, namespace: str = "") -> None:
    """After `clobber` (another writer's status) and until `corrected` returns, `component` reconciles once and
    writes once (`writes`: "VERB resource/status", of the object `name` in `namespace`), and the echo of its write
    reconciles nothing."""
    port = restart_component(cluster, component, debug=True)
    log, start = component_log(cluster, component), audit_mark(cluster)
    since = log.stat().st_size
    key = f"{namespace}/{name}" if namespace else name
    try:
        def counts() -> tuple[int, int, int]:
            written = audited(cluster, start, namespace=namespace, name=name)[writes]
            return reconciles_of(log, since, component, key), written, reconciles(port, component)

        reconciled, written, everything = settled(counts, f"the {component}'s reconciles and {writes}")
        clobber()
        corrected()
        now_reconciled, now_written, now_everything = settled(counts, f"the {component} after the correction")
    finally:
        restart_component(cluster, component)  # back to the cluster's log level
    assert (now_reconciled - reconciled, now_written - written) == (1, 2), (
        f"{component}: reconciles of {key} {now_reconciled - reconciled} (1 expected; of every object "
        f"{now_everything - everything}), {writes} {now_written - written} (the test's and one correction "
        f"expected); writes meanwhile: {writes_since(cluster, start)}")


def component_log(cluster: Cluster, component: str) -> Path:
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    return Path(state.logs[component])


def reconciles_of(log: Path, since: int, component: str, key: str) -> int:
    """How many reconciles of the object `key` ("namespace/name" or a cluster-scoped name) the component's log
    shows after offset `since`, successful or failed (it logs each at DEBUG)."""
    done = re.compile(rf"{component}: (reconciled {re.escape(key)}( \[|$)|reconciling {re.escape(key)} failed)")
    with log.open("rb") as text:
        text.seek(since)
        return sum(1 for line in text.read().decode(errors="replace").splitlines() if done.search(line))


def one_running_pod(cluster: Cluster, namespace: str, queue: str) -> None:
    create(cluster, [queue_doc(queue)])
    create(cluster, [pod_doc("e1", queue, "500m")], namespace)
    wait_running(cluster, namespace, "e1")


def test_queue_controller_corrects_a_foreign_status_once_and_ignores_its_own_echo(cluster: Cluster,
                                                                                  namespace: str) -> None:
    name = f"echo-{namespace}"
    one_running_pod(cluster, namespace, name)

    def allocating() -> None:
        wait_sums(cluster, {name: (rl(cpu="500m"), rl(cpu="500m"))}, f"{name} allocating the running pod")

    allocating()
    corrected_once(cluster, "queue-controller", "PATCH queues/status", lambda: clobber_status(
        cluster, "queues.scheduling.run.ai", name, {"allocated": {"cpu": "7"}}), allocating, name)


def test_podgroup_controller_corrects_a_foreign_status_once_and_ignores_its_own_echo(cluster: Cluster,
                                                                                     namespace: str) -> None:
    one_running_pod(cluster, namespace, f"pg-echo-{namespace}")

    def allocating() -> None:
        wait_equal(lambda: quantities((podgroup_status(cluster, namespace, "e1") or {}).get("allocated")),
                   rl(cpu="500m"), "the PodGroup allocating the running pod")

    allocating()
    group = cluster.get_json("pod", "e1", namespace=namespace)["metadata"]["annotations"]["pod-group-name"]
    # Counted within 20 s of the clobber: the controller looks at a PodGroup again 20 s after it first found a
    # status to write (in case its pods were still undecided; a reconcile that then writes nothing).
    corrected_once(cluster, "podgroup-controller", "PATCH podgroups/status", lambda: clobber_status(
        cluster, "podgroups.scheduling.run.ai", group, {"resourcesStatus": {"allocated": {"cpu": "7"}}}, namespace),
        allocating, group, namespace)
