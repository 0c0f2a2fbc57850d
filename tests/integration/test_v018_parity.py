"""KAI v0.17/v0.18 parity outside the scheduler, on the real API server with the running components.

- the queue webhook accepts an unlimited quota under a limit (`gpu: {quota: -1, limit: 0}`), and the scheduler
  keeps a GPU pod of that queue pending with OverLimit;
- `kai.scheduler/skip-podgrouper: "true"`: a Job's pods join a PodGroup someone else created, no other is made;
- a Deployment of 3 replicas gets one PodGroup, and its 3 pods bind;
- `kai.scheduler/batch-min-member` makes a Job a gang;
- an init container larger than the main container shows in Queue `allocated`.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from operators.core.resources import parse_quantity
from tests.conftest import Cluster, labelled
from tests.support import poll

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
FREE = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
PG_ANNOTATION = "pod-group-name"


def create(cluster: Cluster, docs: list[dict[str, Any]], namespace: str | None = None) -> None:
    cluster.kubectl("create", "-f", "-", input=labelled(docs), namespace=namespace)


def queue_doc(name: str, **resources: dict[str, Any]) -> dict[str, Any]:
    spec = {"cpu": FREE, "gpu": FREE, "memory": FREE, **resources}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": spec}}


def container(cpu: str, gpus: int = 0, name: str = "main") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    return {"name": name, "image": "busybox", "resources": resources}


def own_queue(cluster: Cluster, namespace: str) -> str:
    """A queue without quota or limit (a non-preemptible inference pod fits only in quota: -1 is unlimited)."""
    name = f"q-{namespace}"
    create(cluster, [queue_doc(name)])
    return name


def pod_spec(cpu: str = "100m", gpus: int = 0) -> dict[str, Any]:
    return {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
            "containers": [container(cpu, gpus)]}


def items(cluster: Cluster, kind: str, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.get_json(kind, namespace=namespace)["items"])


def live_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return [p for p in items(cluster, "pods", namespace) if not p["metadata"].get("deletionTimestamp")]


def bound(cluster: Cluster, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = live_pods(cluster, namespace)
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def annotation(obj: dict[str, Any], key: str) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(key)


# --- the queue webhook ------------------------------------------------------------------------------------------

def test_unlimited_quota_under_a_limit_is_accepted_and_its_gpu_pod_is_over_limit(cluster: Cluster,
                                                                                 namespace: str) -> None:
    name = f"ql-{namespace}"
    create(cluster, [queue_doc(name, gpu={"quota": -1, "limit": 0, "overQuotaWeight": 1}),
                     queue_doc(f"{name}-cpu", cpu={"quota": -1, "limit": 1000, "overQuotaWeight": 1})])
    stored = cluster.get_json("queues.scheduling.run.ai", name)
    assert stored["spec"]["resources"]["gpu"] == {"quota": -1, "limit": 0, "overQuotaWeight": 1}

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu", "labels": {"kai.scheduler/queue": name}},
           "spec": pod_spec(gpus=1)}
    create(cluster, [pod], namespace)

    def over_limit() -> dict[str, Any] | None:
        for pg in items(cluster, "podgroups", namespace):
            for condition in (pg.get("status") or {}).get("schedulingConditions") or []:
                for reason in condition.get("reasons") or []:
                    if reason.get("reason") == "OverLimit":
                        return dict(reason)
        return None

    reason = poll(over_limit, "the GPU pod's PodGroup to be explained as OverLimit", timeout=90)
    assert "Limit is 0 GPUs" in reason["message"], reason
    assert not cluster.get_json("pod", "gpu", namespace=namespace)["spec"].get("nodeName")


def restart_queue_controller(cluster: Cluster, argv: Callable[[list[str]], list[str]]) -> list[str]:
    """Restart the dev cluster's queue-controller with `argv(its current argv)`, wait until it is ready, and
    return the argv it ran with before."""
    import urllib.request

    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    probe = dev.component_ports(state.ports["apiserver"] - 443)["queue-controller"]["probe"]
    before = dev.stop_component(state, "queue-controller")
    dev.start_component(state, "queue-controller", argv(before))

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    poll(ready, "the restarted queue-controller to be ready")
    return before


def test_enable_quota_validation_warns_and_still_admits(cluster: Cluster, namespace: str) -> None:
    original = restart_queue_controller(cluster, lambda argv: [*argv, "--enable-quota-validation=true"])
    try:
        parent, child = f"qv-{namespace}", f"qv-child-{namespace}"
        create(cluster, [queue_doc(parent, gpu={"quota": 2, "limit": -1, "overQuotaWeight": 1})])
        doc = queue_doc(child, gpu={"quota": 3, "limit": 1, "overQuotaWeight": 1})
        doc["spec"]["parentQueue"] = parent

        def admitted() -> str | None:  # the webhook may take a moment to answer after the restart
            proc = cluster.kubectl("create", "-f", "-", input=labelled([doc]), check=False)
            return proc.stderr if proc.returncode == 0 else None

        warnings = poll(admitted, "the child queue to be admitted", timeout=60)
        assert "spec.resources.gpu: quota 3 is greater than limit 1" in warnings, warnings
        assert f"child queue GPU quota (3.00) exceeds parent queue {parent} GPU quota (2.00)" in warnings, warnings
    finally:
        restart_queue_controller(cluster, lambda _: original)


# --- the pod-grouper ----------------------------------------------------------------------------------------

def test_skip_podgrouper_job_joins_the_existing_podgroup(cluster: Cluster, namespace: str) -> None:
    external = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "external-gang"},
                "spec": {"minMember": 2, "queue": own_queue(cluster, namespace), "priorityClassName": "train"}}
    template = {"metadata": {"annotations": {PG_ANNOTATION: "external-gang"}},
                "spec": {**pod_spec(), "restartPolicy": "Never"}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "external", "annotations": {"kai.scheduler/skip-podgrouper": "true"}},
           "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}}
    create(cluster, [external, job], namespace)

    pods = poll(lambda: bound(cluster, namespace, 2), "the Job's 2 pods bound", timeout=120)
    assert {annotation(p, PG_ANNOTATION) for p in pods} == {"external-gang"}
    groups = items(cluster, "podgroups", namespace)
    assert [g["metadata"]["name"] for g in groups] == ["external-gang"]
    assert groups[0]["spec"]["minMember"] == 2  # untouched by the pod-grouper
    assert not groups[0]["metadata"].get("ownerReferences")


def test_deployment_of_three_replicas_has_one_podgroup(cluster: Cluster, namespace: str) -> None:
    labels = {"app": "web"}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "labels": {"kai.scheduler/queue": own_queue(cluster, namespace)}},
                  "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels}, "spec": pod_spec()}}}
    create(cluster, [deployment], namespace)
    pods = poll(lambda: bound(cluster, namespace, 3), "the Deployment's 3 pods bound", timeout=120)
    uid = cluster.get_json("deployments.apps", "web", namespace=namespace)["metadata"]["uid"]
    [pg] = poll(lambda: ((g := items(cluster, "podgroups", namespace)) and len(g) == 1 and g) or None,
                "one PodGroup")
    assert pg["metadata"]["name"] == f"pg-web-{uid}"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert (pg["spec"]["minMember"], pg["spec"]["priorityClassName"]) == (1, "inference")
    assert {annotation(p, PG_ANNOTATION) for p in pods} == {f"pg-web-{uid}"}


def test_batch_min_member_makes_a_job_a_gang(cluster: Cluster, namespace: str) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "hpo", "annotations": {"kai.scheduler/batch-min-member": "3"},
                        "labels": {"kai.scheduler/queue": own_queue(cluster, namespace)}},
           "spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0,
                    "template": {"spec": {**pod_spec(), "restartPolicy": "Never"}}}}
    create(cluster, [job], namespace)
    poll(lambda: bound(cluster, namespace, 3), "the Job's 3 pods bound together", timeout=120)
    [pg] = items(cluster, "podgroups", namespace)
    assert pg["spec"]["minMember"] == 3 and pg["metadata"]["ownerReferences"][0]["kind"] == "Job"


# --- accounting -------------------------------------------------------------------------------------------------

def test_an_init_container_larger_than_the_main_one_shows_in_queue_allocated(cluster: Cluster,
                                                                            namespace: str) -> None:
    name = f"qi-{namespace}"
    create(cluster, [queue_doc(name)])
    spec = pod_spec(cpu="250m")
    spec["initContainers"] = [container("3", name="warmup")]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "init", "labels": {"kai.scheduler/queue": name}},
           "spec": spec}
    create(cluster, [pod], namespace)

    def allocated_cpu() -> Decimal | None:
        status = cluster.get_json("queues.scheduling.run.ai", name).get("status") or {}
        value = (status.get("allocated") or {}).get("cpu")
        return parse_quantity(value) if value else None

    assert poll(allocated_cpu, f"queue {name} to count the running pod", timeout=90) == Decimal(3)
