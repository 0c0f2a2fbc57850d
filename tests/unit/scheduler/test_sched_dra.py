"""DRA (resource.k8s.io/v1) in the scheduler: claims allocated from ResourceSlices during placement, shared claims,
CEL selectors, allocationMode All, KAI's GPU counting in quota and reclaim, and the reasons of unsatisfiable claims."""

from __future__ import annotations

import json
from typing import Any

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.devices import claim_record, selector, slice_record
from operators.scheduler.decide.plugins.dynamicresources.allocator import Allocation, allocate
from operators.scheduler.decide.snapshot import snapshot_from_objects

DRIVER = "gpu.nvidia.com"
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}
LATER = "2025-01-01T01:00:00Z"


def dra_node(name: str, gpus: int = 8, memory_mib: int = 81920, product: str = "NVIDIA-A100") -> list[dict[str, Any]]:
    """A node whose GPUs are DRA devices only (no nvidia.com/gpu), and its ResourceSlice."""
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "index": {"int": i},
                                                   "productName": {"string": product},
                                                   "uuid": {"string": f"GPU-{name}-{i}"}},
                "capacity": {"memory": {"value": f"{memory_mib}Mi"}}} for i in range(gpus)]
    return [node(name, gpus=0),
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-{DRIVER}"},
             "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1,
                                                                   "resourceSliceCount": 1}, "devices": devices}}]


def claim(name: str, count: int = 1, selectors: tuple[str, ...] = (), *, owner: str = "", mode: str = "",
          labels: dict[str, str] | None = None, allocated: tuple[str, list[str]] | None = None,
          reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER}
    if mode == "All":
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": f"uid-{owner}", "apiVersion": "v1"}]
    status: dict[str, Any] = {}
    if allocated:
        node_name, devices = allocated
        status["allocation"] = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node_name,
                                                         "device": d} for d in devices]},
                                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}
        status["reservedFor"] = [{"resource": "pods", "name": r, "uid": f"uid-{r}"} for r in reserved]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}, "status": status}


def dra_pod(name: str, group: str, claim_name: str, *, template: bool = True, **kwargs: Any) -> dict[str, Any]:
    """A pod with one claim `gpu`: from a template (its generated claim is `claim_name`) or named directly."""
    ref = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"} if template else \
        {"name": "gpu", "resourceClaimName": claim_name}
    obj = pod(name, group, spec_extra={"resourceClaims": [ref]}, **kwargs)
    if template:
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return obj


def bindrequest(pod_name: str, *devices: str, phase: str = "") -> dict[str, Any]:
    """The scheduler's BindRequest for `pod_name` on n1, allocating `devices` to its claim `gpu`."""
    return {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
            "metadata": {"name": pod_name, "namespace": "ns"},
            "spec": {"podName": pod_name, "selectedNode": "n1", "resourceClaimAllocations": [
                {"name": "gpu", "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": d} for d in devices]}}}]},
            "status": {"phase": phase} if phase else {}}


def base(*nodes: list[dict[str, Any]], queues: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [CLASS, *PRIORITY_CLASSES, *(queues or [queue("q")])]
    for n in nodes:
        out += n
    return out


def allocations(d: Any) -> dict[str, list[dict[str, Any]]]:
    return {b.pod: [json.loads(a) for _, a in b.claim_allocations] for b in d.binds}


def test_template_claim_binds_with_a_device_of_its_node() -> None:
    objs = base(dra_node("n1")) + [podgroup("a"), dra_pod("a-0", "a", "a-0-gpu", ), claim("a-0-gpu", owner="a-0")]
    d = cycle(objs)
    assert [(b.pod, b.node, b.gpu_count) for b in d.binds] == [("a-0", "n1", 1)]
    (alloc,) = allocations(d)["a-0"]
    assert alloc["devices"]["results"] == [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert d.binds[0].to_dict()["resourceClaimAllocations"] == [{"name": "gpu", "allocation": alloc}]


def test_nine_single_gpu_claims_on_an_eight_gpu_node_leave_one_pending() -> None:
    objs = base(dra_node("n1"))
    for i in range(9):
        objs += [podgroup(f"j{i}", created=f"2025-01-01T00:0{i}:00Z"), dra_pod(f"j{i}-0", f"j{i}", f"c{i}"),
                 claim(f"c{i}", owner=f"j{i}-0")]
    d = cycle(objs)
    assert len(d.binds) == 8
    devices = sorted(a["devices"]["results"][0]["device"] for allocs in allocations(d).values() for a in allocs)
    assert devices == sorted(f"gpu-{i}" for i in range(8))
    (u,) = d.unschedulable
    assert u.pod_group == "j8"
    assert "node(s) didn't have enough resources: GPUs" in u.pod_messages["j8-0"]


def test_devices_held_by_other_claims_are_taken() -> None:
    """Five devices are allocated to running pods' claims (and one to the BindRequest of a pod waiting for its bind,
    not yet written to its claim): the three new claims get the others."""
    objs = base(dra_node("n1")) + [podgroup("r"), claim("held", 5, owner="r-0", allocated=("n1", [
        "gpu-0", "gpu-2", "gpu-3", "gpu-5", "gpu-6"]), reserved=("r-0",)),
        dra_pod("r-0", "r", "held", node_name="n1", phase="Running"), podgroup("x"), pod("x", "x"),
        bindrequest("x", "gpu-1")]
    for i in range(3):
        objs += [podgroup(f"j{i}", created=LATER), dra_pod(f"j{i}-0", f"j{i}", f"c{i}"),
                 claim(f"c{i}", owner=f"j{i}-0")]
    d = cycle(objs)
    got = sorted(a["devices"]["results"][0]["device"] for allocs in allocations(d).values() for a in allocs)
    assert got == ["gpu-4", "gpu-7"]  # 8 - 5 held - 1 being bound: the third claim finds no free device
    assert [u.pod_group for u in d.unschedulable] == ["j2"]


def test_shared_claim_pins_its_pods_to_one_node() -> None:
    shared = claim("shared", labels={"kai.scheduler/queue": "q"})
    objs = base(dra_node("n1"), dra_node("n2")) + [shared, podgroup("s", min_member=2)]
    objs += [dra_pod(f"s-{i}", "s", "shared", template=False, cpu="40") for i in range(2)]  # 2 x 40 cpus: 2 nodes
    d = cycle(objs)
    assert d.binds == [] and d.unschedulable
    assert "is allocated on node" in d.unschedulable[0].message or "allocated on node" in str(
        d.unschedulable[0].pod_messages)
    objs = base(dra_node("n1"), dra_node("n2")) + [shared, podgroup("s", min_member=2)]
    objs += [dra_pod(f"s-{i}", "s", "shared", template=False) for i in range(2)]
    d = cycle(objs)
    assert len({b.node for b in d.binds}) == 1 and len(d.binds) == 2
    first, second = (allocations(d)[f"s-{i}"][0] for i in range(2))
    assert first == second  # the same device, allocated once


def test_shared_claim_already_allocated_pins_new_pods() -> None:
    shared = claim("shared", labels={"kai.scheduler/queue": "q"}, allocated=("n2", ["gpu-3"]), reserved=("s-0",))
    objs = base(dra_node("n1"), dra_node("n2")) + [shared, podgroup("s"), podgroup("t", created=LATER),
                                                   dra_pod("s-0", "s", "shared", template=False, node_name="n2",
                                                           phase="Running"),
                                                   dra_pod("t-0", "t", "shared", template=False)]
    d = cycle(objs)
    assert [(b.pod, b.node) for b in d.binds] == [("t-0", "n2")]
    assert allocations(d)["t-0"][0]["devices"]["results"][0]["device"] == "gpu-3"


def test_shared_gpu_claim_needs_the_queue_label() -> None:
    objs = base(dra_node("n1")) + [claim("shared"), podgroup("s"), dra_pod("s-0", "s", "shared", template=False)]
    d = cycle(objs)
    assert not d.binds
    assert "DRA claim shared is a shared GPU claim but does not have a queue label (kai.scheduler/queue)" in \
        d.unschedulable[0].pod_messages["s-0"]


def test_selector_larger_than_any_device_stays_pending_naming_the_selector() -> None:
    big = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0"
    objs = base(dra_node("n1"), dra_node("n2", memory_mib=40960)) + [
        podgroup("b"), dra_pod("b-0", "b", "b-gpu"), claim("b-gpu", selectors=(big,), owner="b-0")]
    d = cycle(objs)
    assert not d.binds
    message = d.unschedulable[0].pod_messages["b-0"]
    assert (f"DRA claim 'gpu' request 'gpu': needs 1 device of class gpu.nvidia.com matching selector "
            f"{big!r}, 0 of 8 free devices match (8 on the node)") in message
    objs[-1] = claim("b-gpu", selectors=("device.capacity['gpu.nvidia.com'].memory >= quantity('80Gi')",),
                     owner="b-0")
    assert [(b.pod, b.node) for b in cycle(objs).binds] == [("b-0", "n1")]


def test_selector_on_attributes_chooses_the_node() -> None:
    objs = base(dra_node("n1", product="NVIDIA-A100"), dra_node("n2", product="NVIDIA-H100")) + [
        podgroup("h"), dra_pod("h-0", "h", "h-gpu"),
        claim("h-gpu", 2, ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA-H100'",
                           "device.attributes['gpu.nvidia.com'].index >= 4"), owner="h-0")]
    d = cycle(objs)
    assert [(b.pod, b.node, b.gpu_count) for b in d.binds] == [("h-0", "n2", 2)]
    assert [r["device"] for r in allocations(d)["h-0"][0]["devices"]["results"]] == ["gpu-4", "gpu-5"]


def test_allocation_mode_all_takes_every_matching_device_or_none() -> None:
    objs = base(dra_node("n1", gpus=4)) + [podgroup("a"), dra_pod("a-0", "a", "a-gpu"),
                                           claim("a-gpu", mode="All", owner="a-0")]
    d = cycle(objs)
    assert [r["device"] for r in allocations(d)["a-0"][0]["devices"]["results"]] == [f"gpu-{i}" for i in range(4)]
    assert d.binds[0].gpu_count == 1  # KAI counts an All request as one GPU for bookkeeping
    objs += [claim("held", owner="r-0", allocated=("n1", ["gpu-2"]), reserved=("r-0",)), podgroup("r"),
             dra_pod("r-0", "r", "held", node_name="n1", phase="Running")]
    d = cycle(objs)
    assert not d.binds
    assert "allocationMode All needs every matching device free, 3 of 4 are" in d.unschedulable[0].pod_messages["a-0"]


def test_template_claim_not_created_yet_waits() -> None:
    obj = dra_pod("a-0", "a", "")
    d = cycle(base(dra_node("n1")) + [podgroup("a"), obj])
    assert "waiting for the ResourceClaim of pod claim 'gpu' to be created from its template" in \
        d.unschedulable[0].pod_messages["a-0"]


def test_dra_gpus_count_in_queue_quota_and_are_reclaimed() -> None:
    """Queue qa runs 8 DRA GPUs on the only node; qb (same quota) asks for 2: reclaim evicts two of qa's pods and
    their devices go to qb's claims."""
    queues = [queue("qa", gpu=(4, -1, 1)), queue("qb", gpu=(4, -1, 1))]
    objs = base(dra_node("n1"), queues=queues)
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"),
                 dra_pod(f"a{i}-0", f"a{i}", f"ca{i}", node_name="n1", phase="Running"),
                 claim(f"ca{i}", owner=f"a{i}-0", allocated=("n1", [f"gpu-{i}"]), reserved=(f"a{i}-0",))]
    for i in range(2):
        objs += [podgroup(f"b{i}", "qb", created=LATER), dra_pod(f"b{i}-0", f"b{i}", f"cb{i}"),
                 claim(f"cb{i}", owner=f"b{i}-0")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    shares = {q.name: q for q in d.queues}
    assert shares["qa"].allocated["gpu"] == 8.0 - 2  # 8 DRA GPUs, two of them released for qb
    assert sorted(e.pod for e in d.evictions) == ["a6-0", "a7-0"]
    assert {e.action for e in d.evictions} == {"reclaim"}
    assert sorted(p.pod for p in d.pipelined) == ["b0-0", "b1-0"]


def test_quota_limit_counts_dra_gpus() -> None:
    objs = base(dra_node("n1"), queues=[queue("q", gpu=(1, 1, 1))]) + [
        podgroup("a"), dra_pod("a-0", "a", "a-gpu"), claim("a-gpu", 2, owner="a-0")]
    d = cycle(objs)
    assert not d.binds
    assert "gpu" in d.unschedulable[0].message.lower() and "limit" in d.unschedulable[0].message.lower()


def test_records_and_snapshot_counts() -> None:
    sl = slice_record(dra_node("n1", gpus=2)[1])
    assert [d.name for d in sl.devices] == ["gpu-0", "gpu-1"]
    assert dict(sl.devices[0].capacity) == {"gpu.nvidia.com/memory": 81920 * 2**20}
    c = claim_record(claim("c", 3))
    assert c.gpus == 3 and c.is_gpu
    snap = snapshot_from_objects(base(dra_node("n1", gpus=2)) + [podgroup("a"), dra_pod("a-0", "a", "c"),
                                                                  claim("c", 3)])
    assert snap.nodes[0].gpus == 2 and snap.pods[0].gpu.whole == 3


def test_selector_compiles_once_and_reports_errors() -> None:
    assert selector("device.driver == 'x'") is selector("device.driver == 'x'")
    sl = slice_record(dra_node("n1", gpus=1)[1])
    from operators.scheduler.decide.devices import device_class_record
    classes = {DRIVER: device_class_record(CLASS)}
    bad = claim_record(claim("c", selectors=("device.driver ==",)))
    result = allocate(bad, "n1", sl.devices, set(), classes, "claim c")
    assert isinstance(result, str) and "does not compile" in result
    missing = claim_record(claim("c", selectors=("device.attributes['x'].y == 1",)))
    assert isinstance(allocate(missing, "n1", sl.devices, set(), classes, "claim c"), str)
    ok = claim_record(claim("c"))
    assert isinstance(allocate(ok, "n1", sl.devices, set(), classes, "claim c"), Allocation)


def test_devices_of_claims_whose_pods_are_gone_are_releasing() -> None:
    """Two reclaimed pods are gone but the controller has not deallocated their claims yet: the two pending pods
    are pipelined onto those devices (not bound to them, and no further pod is evicted)."""
    queues = [queue("qa", gpu=(4, -1, 1)), queue("qb", gpu=(4, -1, 1))]
    objs = base(dra_node("n1"), queues=queues)
    for i in range(8):
        objs.append(claim(f"ca{i}", owner=f"a{i}-0", allocated=("n1", [f"gpu-{i}"]), reserved=(f"a{i}-0",)))
        if i < 6:
            objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"),
                     dra_pod(f"a{i}-0", f"a{i}", f"ca{i}", node_name="n1", phase="Running")]
    for i in range(2):
        objs += [podgroup(f"b{i}", "qb", created=LATER), dra_pod(f"b{i}-0", f"b{i}", f"cb{i}"),
                 claim(f"cb{i}", owner=f"b{i}-0")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    assert not d.binds and not d.evictions
    assert sorted(p.pod for p in d.pipelined) == ["b0-0", "b1-0"]
    # Once the claims are deallocated, the pods bind to the freed devices.
    objs = [o for o in objs if o["metadata"]["name"] not in ("ca6", "ca7")]
    d = cycle(objs, SchedulerConfig(actions=("allocate", "reclaim")))
    got = sorted(a["devices"]["results"][0]["device"] for allocs in allocations(d).values() for a in allocs)
    assert got == ["gpu-6", "gpu-7"] and not d.evictions


def test_simulate_the_example_over_cycles(tmp_path: Any) -> None:
    """`kai simulate` on examples/dra: the template's claim is made (as the controller would), the shared claim's
    pods land together; over two cycles the binds' allocations are written to the claims, so nothing moves and
    cycle 2 allocates nothing twice."""
    import yaml

    from operators.scheduler.decide.simulation import run_simulation
    from tests.support import EXAMPLES

    docs = [d for d in yaml.safe_load_all((EXAMPLES / "dra" / "gpu-claims.yaml").read_text()) if d]
    for d in docs:
        d["metadata"]["uid"] = f"uid-{d['metadata']['name']}"
    train = next(d for d in docs if d["metadata"]["name"] == "dra-train")
    train["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "dra-train-gpu"}]}
    made = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")["spec"]
    generated = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "dra-train-gpu", "namespace": "default", "uid": "uid-c",
                              "ownerReferences": [{"kind": "Pod", "name": "dra-train", "uid": "uid-dra-train"}]},
                 **made}
    # Two GPUs per node: like KAI (pod_info.go), every pod of a shared claim counts its GPUs, on the node too.
    objs = [CLASS, queue("default-queue"), *dra_node("n1", gpus=3), *dra_node("n2", gpus=2, memory_mib=20480),
            generated, *docs]
    result = run_simulation(objs, cycles=2)
    placed = {p["pod"]: (p["status"], p["node"]) for p in result["placement"]}
    assert placed["dra-train"] == ("Running", "n1")  # n2's GPUs have 20 GiB, the template's selector asks 40
    assert placed["dra-shared-a"][0] == "Running" and placed["dra-shared-a"][1] == placed["dra-shared-b"][1]
    assert all(b["cycle"] == 1 for b in result["binds"]) and len(result["binds"]) == 3
    assert result["unschedulable"] == []


def test_a_deleted_pod_marked_failed_releases_its_devices() -> None:
    """A reclaimed pod is deleting and already Failed (as kwok and the kubelet mark it) while its claim is still
    allocated: the preemptor is pipelined onto its device, no second victim is evicted."""
    queues = [queue("org"), queue("qa", "org", gpu=(0, -1, 1)), queue("qb", "org", gpu=(2, -1, 1))]
    objs = base(dra_node("n1"), queues=queues)
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"),
                 dra_pod(f"a{i}-0", f"a{i}", f"ca{i}", node_name="n1", phase="Failed" if i == 6 else "Running",
                         deleting=i == 6),
                 claim(f"ca{i}", owner=f"a{i}-0", allocated=("n1", [f"gpu-{i}"]), reserved=(f"a{i}-0",))]
    objs += [podgroup("b0", "qb", created=LATER), dra_pod("b0-0", "b0", "cb0"), claim("cb0", owner="b0-0")]
    d = cycle(objs)
    assert not d.evictions and [p.pod for p in d.pipelined] == ["b0-0"]


def test_a_finished_bindrequest_of_a_gone_victim_holds_no_device() -> None:
    """The over-eviction defect: a reclaimed pod and its claim are gone, but the BindRequest that once bound it is
    still listed (the binder keeps a succeeded request until its pod goes; the informer may lag). Its devices are
    free: the preemptor binds to the victim's device, no second victim is evicted (the BindRequest of a pod still
    waiting for its bind does hold them: test_devices_held_by_other_claims_are_taken)."""
    queues = [queue("org"), queue("qa", "org", gpu=(0, -1, 1)), queue("qb", "org", gpu=(2, -1, 1))]
    objs = base(dra_node("n1"), queues=queues)
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"), bindrequest(f"a{i}-0", f"gpu-{i}",
                                                                                         phase="Succeeded")]
        if i < 7:  # a7 was reclaimed: pod and claim deleted
            objs += [dra_pod(f"a{i}-0", f"a{i}", f"ca{i}", node_name="n1", phase="Running"),
                     claim(f"ca{i}", owner=f"a{i}-0", allocated=("n1", [f"gpu-{i}"]), reserved=(f"a{i}-0",))]
    objs += [podgroup("b0", "qb", created=LATER), dra_pod("b0-0", "b0", "cb0"), claim("cb0", owner="b0-0")]
    d = cycle(objs)
    assert not d.evictions and [b.pod for b in d.binds] == ["b0-0"]
    assert allocations(d)["b0-0"][0]["devices"]["results"][0]["device"] == "gpu-7"


def test_a_victim_waiting_for_its_bind_releases_its_bindrequests_devices() -> None:
    """A reclaimed pod was bound a moment ago: its BindRequest is listed, its claim not yet written, the pod not yet
    seen bound. Evicting it makes the BindRequest's device releasing: one victim for one GPU, not two."""
    queues = [queue("org"), queue("qa", "org", gpu=(0, -1, 1)), queue("qb", "org", gpu=(2, -1, 1))]
    objs = base(dra_node("n1"), queues=queues)
    for i in range(8):
        objs += [podgroup(f"a{i}", "qa", created=f"2025-01-01T00:0{i}:00Z"), bindrequest(f"a{i}-0", f"gpu-{i}")]
        if i < 7:
            objs += [dra_pod(f"a{i}-0", f"a{i}", f"ca{i}", node_name="n1", phase="Running"),
                     claim(f"ca{i}", owner=f"a{i}-0", allocated=("n1", [f"gpu-{i}"]), reserved=(f"a{i}-0",))]
    objs += [dra_pod("a7-0", "a7", "ca7"), claim("ca7", owner="a7-0")]
    objs += [podgroup("b0", "qb", created=LATER), dra_pod("b0-0", "b0", "cb0"), claim("cb0", owner="b0-0")]
    d = cycle(objs)
    assert len(d.evictions) == 1 and [p.pod for p in d.pipelined] == ["b0-0"]
