"""DRA on the local control plane: GPUs as devices of ResourceSlices, claimed through ResourceClaims (templates and
shared claims), allocated by the scheduler and written by the binder, judged by the API server's validation.

The test DRA driver (`kai dev up --dra`'s) runs for this module against the session's cluster. Each test creates
its own DRA nodes (no nvidia.com/gpu, GPUs only as devices, labelled with the test's namespace), and its pods select
them, so a cluster started with --dra (whose own nodes publish devices too) runs these tests as well.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from operators.devcluster.nodes import NodeShape, node_manifest
from tests.support import Cluster, apply, items, poll, queue

pytestmark = pytest.mark.cluster
DRIVER = "gpu.nvidia.com"
NODES = "kai.test/dra-nodes"  # the label of a test's DRA nodes, and its pods' node selector
EXTENDED = "example.com/dra-gpu"  # the DeviceClass's extendedResourceName (KEP-5004)
MEMORY = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0"


@pytest.fixture(scope="module")
def driver(cluster: Cluster) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-m", "operators.devcluster.dradriver",
                             f"--kubeconfig={cluster.kubeconfig}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: cluster.kubectl("get", "deviceclass", DRIVER, check=False).returncode == 0,
             "the DeviceClass", timeout=30)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def dra_nodes(cluster: Cluster, namespace: str, count: int, gpus: int = 8) -> list[str]:
    """`count` DRA nodes of `gpus` 80 GiB GPUs, with their ResourceSlices published."""
    names = [f"{namespace}-dra-{i}" for i in range(count)]
    docs = [node_manifest(n, NodeShape(gpus=gpus, dra=True), labels={"kai.test/owned": "true", NODES: namespace})
            for n in names]
    apply(cluster, namespace, docs)

    def published() -> bool:
        slices = {s["spec"]["nodeName"]: s for s in items(cluster, "resourceslices")}
        return all(n in slices and len(slices[n]["spec"]["devices"]) == gpus for n in names)

    poll(published, "the nodes' ResourceSlices", timeout=30)
    return names


def template(name: str, count: int = 1, selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def claim(name: str, queue_name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}}


def pod(name: str, queue_name: str, namespace: str, *, template_name: str = "", claim_name: str = "",
        priority: str = "train") -> dict[str, Any]:
    ref = {"name": "gpu", **({"resourceClaimTemplateName": template_name} if template_name
                             else {"resourceClaimName": claim_name})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name, "app": "dra"}},
            "spec": {"schedulerName": "kai-scheduler", "priorityClassName": priority, "resourceClaims": [ref],
                     "nodeSelector": {NODES: namespace},
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}


def get(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = cluster.get_json(kind, name, namespace=namespace)
    return out


def claim_of(cluster: Cluster, namespace: str, pod_obj: dict[str, Any]) -> dict[str, Any]:
    ref = pod_obj["spec"]["resourceClaims"][0]
    name = ref.get("resourceClaimName") or next(
        s["resourceClaimName"] for s in pod_obj["status"]["resourceClaimStatuses"] if s["name"] == ref["name"])
    return get(cluster, namespace, "resourceclaim", name)


def running(cluster: Cluster, namespace: str, selector: str = "app=dra") -> list[dict[str, Any]]:
    return [p for p in items(cluster, "pods", namespace, "-l", selector)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def unschedulable_message(cluster: Cluster, namespace: str, name: str) -> str:
    conditions = get(cluster, namespace, "pod", name)["status"].get("conditions") or ()
    return next((str(c.get("message") or "") for c in conditions
                 if c["type"] == "PodScheduled" and c["status"] == "False"), "")


def test_template_claim_binds_with_a_device_of_its_node(cluster: Cluster, namespace: str, driver: None) -> None:
    (node,) = dra_nodes(cluster, namespace, 1)
    q = f"q-{namespace}"
    apply(cluster, namespace, [queue(q), template("one-gpu"), pod("p", q, namespace, template_name="one-gpu")])
    bound = poll(lambda: [p for p in running(cluster, namespace) if p["spec"].get("nodeName") == node],
                 "the pod to run on its DRA node", timeout=60)
    c = claim_of(cluster, namespace, bound[0])
    # The binder's status write, accepted by the API server: a device of the pod's node, reserved for the pod.
    (result,) = c["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (DRIVER, node, "gpu")
    assert result["device"] in {f"gpu-{i}" for i in range(8)}
    terms = c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    assert [r["uid"] for r in c["status"]["reservedFor"]] == [bound[0]["metadata"]["uid"]]
    br = get(cluster, namespace, "bindrequest", "p")
    assert br["spec"]["resourceClaimAllocations"][0]["name"] == "gpu"
    assert br["spec"]["receivedGPU"]["count"] == 1  # KAI: a DRA GPU is a GPU
    # KAI's PodGroup and Queue status list the claim's GPUs under the device class name.
    group = bound[0]["metadata"]["annotations"]["pod-group-name"]
    poll(lambda: (get(cluster, namespace, "podgroup", group).get("status") or {}).get("resourcesStatus", {}).get(
        "allocated", {}).get(DRIVER) == "1", "the PodGroup's allocated DRA GPU", timeout=60)
    poll(lambda: (cluster.get_json("queues.scheduling.run.ai", q).get("status") or {}).get("allocated", {}).get(
        DRIVER) == "1", "the Queue's allocated DRA GPU", timeout=60)


def test_two_pods_sharing_a_claim_land_on_one_node(cluster: Cluster, namespace: str, driver: None) -> None:
    nodes = dra_nodes(cluster, namespace, 2, gpus=2)
    q = f"q-{namespace}"
    apply(cluster, namespace, [queue(q), claim("shared", q)] + [pod(f"s{i}", q, namespace, claim_name="shared")
                                                                  for i in range(2)])
    both = poll(lambda: (r := running(cluster, namespace)) and len(r) == 2 and r, "both pods to run", timeout=60)
    assert len({p["spec"]["nodeName"] for p in both}) == 1 and both[0]["spec"]["nodeName"] in nodes
    c = get(cluster, namespace, "resourceclaim", "shared")
    assert len(c["status"]["allocation"]["devices"]["results"]) == 1
    assert sorted(r["uid"] for r in c["status"]["reservedFor"]) == sorted(p["metadata"]["uid"] for p in both)


def test_nine_claims_on_eight_gpus_leave_one_pending_explained(cluster: Cluster, namespace: str,
                                                                driver: None) -> None:
    dra_nodes(cluster, namespace, 1)
    q = f"q-{namespace}"
    apply(cluster, namespace, [queue(q), template("one-gpu")] + [pod(f"p{i}", q, namespace, template_name="one-gpu")
                                                                 for i in range(9)])
    eight = poll(lambda: (r := running(cluster, namespace)) and len(r) == 8 and r, "8 pods to run", timeout=90)
    devices = {claim_of(cluster, namespace, p)["status"]["allocation"]["devices"]["results"][0]["device"]
               for p in eight}
    assert len(devices) == 8
    (pending,) = {f"p{i}" for i in range(9)} - {p["metadata"]["name"] for p in eight}
    message = poll(lambda: unschedulable_message(cluster, namespace, pending), "the pending pod's reason")
    assert "node(s) didn't have enough resources: GPUs" in message, message
    assert len(running(cluster, namespace)) == 8


def test_claim_no_device_can_satisfy_stays_pending_and_why_names_the_selector(
        cluster: Cluster, namespace: str, driver: None) -> None:
    dra_nodes(cluster, namespace, 1)
    q = f"q-{namespace}"
    apply(cluster, namespace, [queue(q), template("big", selector=MEMORY),
                               pod("big", q, namespace, template_name="big")])
    message = poll(lambda: unschedulable_message(cluster, namespace, "big"), "the pod's reason", timeout=60)
    assert f"matching selector {MEMORY!r}, 0 of 8 free devices match" in message, message
    why = subprocess.run([sys.executable, "-m", "operators.cli", "why", "pod", "big", "-n", namespace],
                         capture_output=True, text=True, timeout=120,
                         env={"KUBECONFIG": cluster.kubeconfig, "PATH": "/usr/bin:/bin"})
    assert why.returncode == 1, why.stdout + why.stderr  # pending
    assert "DRA claim 'gpu'" in why.stdout and MEMORY in why.stdout, why.stdout


def test_first_available_and_a_match_attribute_constraint_are_allocated(cluster: Cluster, namespace: str,
                                                                        driver: None) -> None:
    """A prioritized list whose first choice no device meets falls back to its second; a matchAttribute constraint
    across two requests holds; the API server accepts the sub-request names in the binder's write."""
    (node,) = dra_nodes(cluster, namespace, 1)
    q = f"q-{namespace}"
    absent = f"device.attributes['{DRIVER}'].productName == 'no-such-gpu'"
    spec = {"devices": {
        "requests": [{"name": "gpu", "firstAvailable": [
            {"name": "rare", "deviceClassName": DRIVER, "selectors": [{"cel": {"expression": absent}}]},
            {"name": "two", "deviceClassName": DRIVER, "count": 2}]},
            {"name": "peer", "exactly": {"deviceClassName": DRIVER}}],
        "constraints": [{"matchAttribute": f"{DRIVER}/productName"}]}}
    tpl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "fa"},
           "spec": {"spec": spec}}
    apply(cluster, namespace, [queue(q), tpl, pod("p", q, namespace, template_name="fa")])
    bound = poll(lambda: [p for p in running(cluster, namespace) if p["spec"].get("nodeName") == node],
                 "the pod to run on its DRA node", timeout=60)
    results = claim_of(cluster, namespace, bound[0])["status"]["allocation"]["devices"]["results"]
    assert sorted(r["request"] for r in results) == ["gpu/two", "gpu/two", "peer"]
    assert len({r["device"] for r in results}) == 3 and {r["pool"] for r in results} == {node}


def test_dra_gpus_count_in_quota_and_are_reclaimed(cluster: Cluster, namespace: str, driver: None) -> None:
    dra_nodes(cluster, namespace, 1)
    suffix = uuid.uuid4().hex[:6]
    org, qa, qb, capped = f"org-{suffix}", f"qa-{suffix}", f"qb-{suffix}", f"cap-{suffix}"
    apply(cluster, namespace, [queue(org), queue(qa, org, (0, -1, 1)), queue(qb, org, (2, -1, 1)),
                               queue(capped, org, (0, 1, 1)), template("one-gpu"), template("two-gpus", 2)])
    # A queue limited to 1 GPU cannot run a claim for 2 DRA GPUs.
    apply(cluster, namespace, [pod("capped", capped, namespace, template_name="two-gpus")])
    message = poll(lambda: unschedulable_message(cluster, namespace, "capped"), "the capped pod's reason")
    assert "limit" in message.lower() and "gpu" in message.lower(), message
    cluster.kubectl("delete", "pod", "capped", "--wait=false", namespace=namespace)
    # A borrows all 8 DRA GPUs; B, within its quota of 2, takes 2 back through reclaim.
    apply(cluster, namespace, [{**pod(f"a{i}", qa, namespace, template_name="one-gpu"),
                                "metadata": {"name": f"a{i}", "labels": {"kai.scheduler/queue": qa, "app": "a"}}}
                               for i in range(8)])
    poll(lambda: len(running(cluster, namespace, "app=a")) == 8, "A's 8 pods to run", timeout=90)
    apply(cluster, namespace, [{**pod(f"b{i}", qb, namespace, template_name="one-gpu"),
                                "metadata": {"name": f"b{i}", "labels": {"kai.scheduler/queue": qb, "app": "b"}}}
                               for i in range(2)])
    owners = poll(lambda: (r := running(cluster, namespace, "app=b")) and len(r) == 2 and r, "B's pods to run",
                  timeout=120)
    evicted = [e for e in items(cluster, "events", namespace, "--field-selector", "reason=Evict")
               if e["involvedObject"]["kind"] == "Pod"]
    victims = {e["involvedObject"]["name"] for e in evicted}
    assert victims and victims <= {f"a{i}" for i in range(8)}, evicted
    for e in evicted:
        assert f"(queue {qb}): queue {qa} uses" in e["message"], e
    # Exactly two victims for two GPUs: the victims' devices are releasing in every cycle until their claims are
    # deallocated (a succeeded BindRequest that outlives its pod holds no device).
    assert len(victims) == 2, victims
    assert len(running(cluster, namespace, "app=a")) == 6
    for p in owners:
        assert claim_of(cluster, namespace, p)["status"]["allocation"]["devices"]["results"][0]["pool"] == \
            p["spec"]["nodeName"]


def test_extended_resource_backed_by_dra_binds_with_its_special_claim(cluster: Cluster, namespace: str,
                                                                       driver: None) -> None:
    """KEP-5004 (feature gate DRAExtendedResource): `requests[example.com/dra-gpu]: 2` on a node without that
    capacity gets two devices of the class naming it, in the special claim the binder creates; the API server
    accepts the claim, its allocation and reservedFor, and the pod's extendedResourceClaimStatus."""
    assert cluster.get_json("deviceclass", DRIVER)["spec"]["extendedResourceName"] == EXTENDED
    (node,) = dra_nodes(cluster, namespace, 1, gpus=2)
    q = f"q-{namespace}"
    ext = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "e", "labels": {"kai.scheduler/queue": q,
                                                                                   "app": "dra-ext"}},
           "spec": {"schedulerName": "kai-scheduler", "priorityClassName": "train", "nodeSelector": {NODES: namespace},
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"requests": {"cpu": "100m"}, "limits": {EXTENDED: "2"}}}]}}
    apply(cluster, namespace, [queue(q), ext])
    (bound,) = poll(lambda: running(cluster, namespace, "app=dra-ext"), "the pod to run", timeout=60)
    assert bound["spec"]["nodeName"] == node
    status = bound["status"]["extendedResourceClaimStatus"]
    # Sorted request names of container 0: cpu, example.com/dra-gpu -> container-0-request-1.
    assert status["requestMappings"] == [{"containerName": "c", "resourceName": EXTENDED,
                                          "requestName": "container-0-request-1"}]
    c = get(cluster, namespace, "resourceclaim", status["resourceClaimName"])
    assert c["metadata"]["name"].startswith("e-extended-resources-")
    assert c["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    (owner,) = c["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", bound["metadata"]["uid"], True)
    assert c["spec"]["devices"]["requests"] == [{"name": "container-0-request-1", "exactly": {
        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2}}]
    results = c["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    assert {(r["pool"], r["request"]) for r in results} == {(node, "container-0-request-1")}
    assert [r["uid"] for r in c["status"]["reservedFor"]] == [bound["metadata"]["uid"]]
    assert get(cluster, namespace, "bindrequest", "e")["spec"]["receivedGPU"]["count"] == 2  # GPU class: 2 GPUs
    group = bound["metadata"]["annotations"]["pod-group-name"]
    poll(lambda: (get(cluster, namespace, "podgroup", group).get("status") or {}).get("resourcesStatus", {}).get(
        "allocated", {}).get(DRIVER) == "2", "the PodGroup's allocated DRA GPUs", timeout=60)
