"""What the suite costs the API server, counted by the API server itself (its audit log, `tests.support.audited`).

Binding N single-pod jobs is measured from the requests on the test's objects the API server answered, so a
component that starts reading on its hot path or writing twice shows up here. A standing backlog of pods that can
never be placed must cost (almost) no writes once it settled, however long it stands.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import Cluster, Request, audit_mark, audited, by_product, labelled, poll, unmanaged_raycluster

pytestmark = pytest.mark.cluster

READS = ("LIST", "WATCH")  # the test's own polling; single-object GETs are counted
# What the suite reads and writes (the controller-manager's own endpoint and lease traffic is not counted).
SUITE_RESOURCES = ("pods", "podgroups", "bindrequests", "nodes", "events", "queues", "configmaps")


def delta(cluster: Cluster, mark: int, where: Callable[[Request], bool]) -> Counter[str]:
    """The requests since `mark` for which `where` holds, reads of the test's own polling left out."""
    return Counter({k: n for k, n in audited(cluster, mark, where=where).items() if k.split()[0] not in READS})


def of_the_test(namespace: str) -> Callable[[Request], bool]:
    """The requests on the test's objects: those of its namespace and of its queue (named after it), and the KAI
    components' cluster-scoped reads (nodes). kwok's writes (the fake kubelet's Running, twice when its watch races
    the binder's patch) and other tests' leftovers are not counted."""
    return lambda r: r.agent != "kwok" and (r.namespace == namespace or (r.namespace == "" and (
        r.name == namespace or (by_product(r) and r.key.split()[0] == "GET"))))


def queue(name: str) -> dict[str, Any]:
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": free, "cpu": free, "memory": free}}}


def pod(name: str, queue_name: str, gpus: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "resources": resources}]}}


def pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.get_json("pods", namespace=namespace)["items"])


def test_binding_single_pod_jobs_costs_a_bounded_number_of_requests_per_pod(cluster: Cluster,
                                                                            namespace: str) -> None:
    count = 20
    cluster.kubectl("apply", "-f", "-", input=labelled([queue(namespace)]))
    time.sleep(2)  # the scheduler sees the queue before its pods
    mark = audit_mark(cluster)
    cluster.kubectl("create", "-f", "-", namespace=namespace,
                    input=labelled([pod(f"p-{i:02d}", namespace) for i in range(count)]))
    poll(lambda: sum(p["status"].get("phase") == "Running" for p in pods(cluster, namespace)) == count,
         f"{count} pods Running", timeout=120)
    time.sleep(6)  # status writes are coalesced for a few seconds; they belong to these binds
    spent = delta(cluster, mark, of_the_test(namespace))
    per_pod = {k: v / count for k, v in spent.items()}
    report = "\n".join(f"  {k:32} {v:5.2f}" for k, v in sorted(per_pod.items(), key=lambda kv: -kv[1]))

    # No component reads an object its informers hold: not the BindRequest, the pod, its node or its PodGroup.
    for kind in ("pods", "bindrequests", "nodes", "podgroups"):
        assert per_pod.get(f"GET {kind}", 0) <= 0.1, f"GET {kind} per pod\n{report}"
    # What the wire contract needs once per pod.
    for kind in ("POST pods", "POST podgroups", "POST bindrequests", "POST pods/binding",
                 "PATCH bindrequests/status"):
        assert per_pod.get(kind, 0) == 1, f"{kind} per pod\n{report}"
    assert per_pod.get("PATCH pods", 0) == 1, f"one pod-grouper patch, none by the binder\n{report}"
    # The binder's PodBound condition (kwok's Running is not counted); no PodScheduled=False for a pod bound at once.
    assert per_pod.get("PATCH pods/status", 0) == 1, report
    # kube-scheduler's `Scheduled` and the binder's `Bound`, nothing else for a normal bind.
    assert per_pod.get("POST events", 0) <= 2 and per_pod.get("PATCH events", 0) == 0, report
    assert per_pod.get("PATCH podgroups/status", 0) <= 1.2, f"PodGroup status writes coalesced\n{report}"
    # Eleven per pod: the user's create, the PodGroup create, the pod-grouper's patch, the BindRequest create,
    # the PodGroup's last-start-timestamp annotation, `Scheduled`, the binding, PodBound, `Bound`, the
    # BindRequest status and one PodGroup status write.
    per_job = sum(v for k, v in per_pod.items()
                  if k.split()[1].split("/")[0] in SUITE_RESOURCES and k != "PATCH queues/status")
    assert per_job <= 11.05, f"requests per bound pod\n{report}"
    # The queue's status is shared by all its jobs: coalesced to at most one write per 2 s while they bind.
    assert spent.get("PATCH queues/status", 0) <= count / 2, report


def test_grouping_a_gang_reads_its_owner_once_and_writes_its_podgroup_once(cluster: Cluster,
                                                                           namespace: str) -> None:
    size = 10
    cluster.kubectl("apply", "-f", "-", input=labelled([queue(namespace)]))
    owner_doc = unmanaged_raycluster("gang", namespace, size - 1, requests={"cpu": "100m", "memory": "64Mi"})
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=labelled([owner_doc]))
    owner = cluster.get_json("rayclusters.ray.io", "gang", namespace=namespace)
    ref = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "gang", "uid": owner["metadata"]["uid"],
           "controller": True}
    members = []
    for i in range(size):
        member = pod(f"gang-{i:02d}", namespace)
        head = i == 0
        member["metadata"]["labels"].update({"ray.io/cluster": "gang", "ray.io/node-type": "head" if head else
                                             "worker", "ray.io/group": "headgroup" if head else "workers"})
        member["metadata"]["ownerReferences"] = [ref]
        members.append(member)
    time.sleep(2)  # the scheduler sees the queue before its pods
    mark = audit_mark(cluster)
    cluster.kubectl("create", "-f", "-", namespace=namespace, input=labelled(members))
    poll(lambda: sum(p["status"].get("phase") == "Running" for p in pods(cluster, namespace)) == size,
         f"the gang's {size} pods Running", timeout=120)
    groups = {(p["metadata"].get("annotations") or {}).get("pod-group-name") for p in pods(cluster, namespace)}
    assert len(groups) == 1 and None not in groups, groups
    spent = delta(cluster, mark, of_the_test(namespace))
    report = "\n".join(f"  {k:32} {v:5}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
    # One PodGroup for the gang, created once and never rewritten, never read back (the pod-grouper watches
    # PodGroups and keeps its own writes); one read of the owner shared by all ten pods; one patch per pod.
    assert spent.get("POST podgroups", 0) == 1, report
    assert spent.get("PUT podgroups", 0) == 0 and spent.get("GET podgroups", 0) == 0, report
    assert spent.get("GET rayclusters", 0) == 1, report
    assert spent.get("PATCH pods", 0) == size, report


def test_a_standing_backlog_costs_no_periodic_writes(cluster: Cluster, namespace: str) -> None:
    count = 30
    cluster.kubectl("apply", "-f", "-", input=labelled([queue(namespace)]))
    time.sleep(2)
    # 9 GPUs: more than any node of the dev cluster has, so they stay pending and nothing changes.
    cluster.kubectl("create", "-f", "-", namespace=namespace,
                    input=labelled([pod(f"w-{i:02d}", namespace, gpus=9) for i in range(count)]))

    def explained() -> bool:
        return all(any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                       for c in p["status"].get("conditions") or []) for p in pods(cluster, namespace))

    poll(explained, "every pod marked unschedulable", timeout=120)
    time.sleep(10)  # the first explanations (events, PodGroup conditions and statuses) go out
    window = 45.0  # longer than the scheduler's interval for repeating an unchanged event
    mark = audit_mark(cluster)
    time.sleep(window)
    spent = delta(cluster, mark, of_the_test(namespace))
    writes = {k: v for k, v in spent.items()
              if not k.startswith("GET ") and k.split()[1].split("/")[0] in SUITE_RESOURCES}
    # Nothing rewrites a pod's condition, a PodGroup's status or conditions, or a queue's status.
    assert all(k.split()[1].startswith("events") for k in writes), writes
    # Repeated explanations only bump event counts, at doubling intervals per event and within one budget of
    # 0.2 writes/s for all of them together (the recorder's unit tests show it holds for any backlog size).
    assert writes.get("PATCH events", 0) / window <= 0.25, writes
    assert writes.get("POST events", 0) == 0, writes
