"""KAI v0.17/v0.18 grouping rules: one PodGroup per Deployment, `batch-min-member`, `skip-podgrouper`."""

from __future__ import annotations

from typing import Any

import pytest
from pg_builders import World, child, ok, pod_from_template

from operators.core import keys
from operators.podgrouper.grouping import GrouperConfig, GroupingError, should_skip
from operators.podgrouper.grouping.grouper import SKIP_PODGROUPER, owners_skip
from operators.podgrouper.grouping.minmember import MIN_MEMBER_KEY

TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"app": "web"}},
                            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}


def deployment(annotations: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    deploy = child("apps/v1", "Deployment", "web", None, annotations=annotations,
                   spec={"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE})
    deploy["metadata"]["namespace"] = "default"
    rs = child("apps/v1", "ReplicaSet", "web-7f", deploy, labels={"app": "web"})
    return deploy, rs


def replica(rs: dict[str, Any], i: int, group: str | None = None) -> dict[str, Any]:
    pod = pod_from_template(f"web-7f-{i}", rs, TEMPLATE)
    if group:
        pod["metadata"].setdefault("annotations", {})[keys.POD_GROUP_NAME] = group
    return pod


def podgroup(name: str, owner_kind: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default",
                         "ownerReferences": [{"apiVersion": "v1", "kind": owner_kind, "name": "x", "uid": "u"}]}}


def test_a_new_deployment_gets_one_podgroup() -> None:
    deploy, rs = deployment()
    pods = [replica(rs, i) for i in range(3)]
    world = World(*pods)
    names = {ok(world.group(pod, [rs, deploy])).name for pod in pods}
    assert names == {f"pg-web-{deploy['metadata']['uid']}"}
    result = ok(world.group(pods[0], [rs, deploy]))
    assert result.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert result.spec["minMember"] == 1


def test_deployment_min_member_annotation_makes_a_gang() -> None:
    deploy, rs = deployment({MIN_MEMBER_KEY: "3"})
    assert ok(World().group(replica(rs, 0), [rs, deploy])).spec["minMember"] == 3


@pytest.mark.parametrize(("value", "message"), [
    ("0", "invalid kai.scheduler/batch-min-member annotation on Deployment: value 0 must be >= 1"),
    ("two", 'invalid kai.scheduler/batch-min-member annotation on Deployment: strconv.ParseInt: parsing "two": '
            "invalid syntax"),
    ("4294967296", 'invalid kai.scheduler/batch-min-member annotation on Deployment: strconv.ParseInt: parsing '
                   '"4294967296": value out of range'),
])
def test_deployment_min_member_must_be_a_positive_int32(value: str, message: str) -> None:
    deploy, rs = deployment({MIN_MEMBER_KEY: value})
    result = World().group(replica(rs, 0), [rs, deploy])
    assert isinstance(result, GroupingError) and result.message == message


def test_a_deployment_grouped_per_pod_stays_so() -> None:
    # Pods of an older pod-grouper, each in its own PodGroup: an upgrade does not re-parent them.
    deploy, rs = deployment()
    old = [replica(rs, 0, "pg-web-7f-0-a"), replica(rs, 1, "pg-web-7f-1-b")]
    new = replica(rs, 2)
    result = ok(World(*old, new).group(new, [rs, deploy]))
    assert result.name == f"pg-web-7f-2-{new['metadata']['uid']}"
    assert result.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    # One pod left on its own PodGroup: its owner decides.
    one = [replica(rs, 0, "pg-only")]
    assert ok(World(*one, new, podgroup("pg-only", "Pod")).group(new, [rs, deploy])).name.startswith("pg-web-7f-2-")
    assert ok(World(*one, new, podgroup("pg-only", "Deployment")).group(new, [rs, deploy])).name == \
        f"pg-web-{deploy['metadata']['uid']}"
    assert ok(World(*one, new).group(new, [rs, deploy])).name == f"pg-web-{deploy['metadata']['uid']}"
    odd = World(*one, new, podgroup("pg-only", "Job")).group(new, [rs, deploy])
    assert isinstance(odd, GroupingError) and "podgroup pg-only has unexpected owner reference" in odd.message


def test_gang_schedule_deployment_off_keeps_one_podgroup_per_pod() -> None:
    deploy, rs = deployment({MIN_MEMBER_KEY: "3"})
    pod = replica(rs, 0)
    result = ok(World().group(pod, [rs, deploy], config=GrouperConfig(gang_schedule_deployment=False)))
    assert (result.name, result.spec["minMember"]) == (f"pg-web-7f-0-{pod['metadata']['uid']}", 1)


def test_job_batch_min_member() -> None:
    job = child("batch/v1", "Job", "train", None, annotations={MIN_MEMBER_KEY: "2"}, spec={"parallelism": 6})
    job["metadata"]["namespace"] = "default"
    results = [ok(World().group(pod_from_template(f"train-{i}", job, TEMPLATE), [job])) for i in range(6)]
    assert {(r.name, r.spec["minMember"]) for r in results} == {(f"pg-train-{job['metadata']['uid']}", 2)}


def test_skip_podgrouper_on_the_pod_or_any_owner() -> None:
    deploy, rs = deployment()
    pod = replica(rs, 0)
    assert not should_skip(pod) and not owners_skip([rs, deploy])
    pod["metadata"].setdefault("annotations", {})[SKIP_PODGROUPER] = "true"
    assert should_skip(pod)
    deploy["metadata"]["annotations"] = {SKIP_PODGROUPER: "true"}
    assert owners_skip([rs, deploy])
    deploy["metadata"]["annotations"] = {SKIP_PODGROUPER: "yes"}  # only "true" counts, as in KAI
    assert not owners_skip([rs, deploy])


def test_safe_to_consolidate_from_the_workload_then_its_pods() -> None:
    def pod(annotations: dict[str, str]) -> dict[str, Any]:
        return pod_from_template("p-0", sts, {"metadata": {"annotations": annotations},
                                               "spec": {"containers": [{"name": "c", "image": "busybox"}]}})

    sts = child("apps/v1", "StatefulSet", "s", None)
    sts["metadata"]["namespace"] = "default"
    assert "safeToConsolidate" not in ok(World().group(pod({}), [sts])).spec
    assert ok(World().group(pod({keys.SAFE_TO_CONSOLIDATE: "false"}), [sts])).spec["safeToConsolidate"] is False
    sts["metadata"]["annotations"] = {keys.SAFE_TO_CONSOLIDATE: "true"}  # the workload object's value wins
    assert ok(World().group(pod({keys.SAFE_TO_CONSOLIDATE: "false"}), [sts])).spec["safeToConsolidate"] is True
    sts["metadata"]["annotations"] = {keys.SAFE_TO_CONSOLIDATE: "maybe"}  # invalid: ignored
    assert ok(World().group(pod({keys.SAFE_TO_CONSOLIDATE: "false"}), [sts])).spec["safeToConsolidate"] is False
