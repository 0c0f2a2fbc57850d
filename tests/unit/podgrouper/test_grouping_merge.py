"""Updating a live PodGroup and patching the pod to point at its PodGroup and subgroup."""

from __future__ import annotations

import copy
from typing import Any

from pg_builders import World, child, ok, pod_from_template

from operators.core import keys
from operators.podgrouper.grouping import (
    GroupingResult,
    merge_with_existing,
    pod_patch,
    should_skip,
)


def desired() -> GroupingResult:
    sts = child("apps/v1", "StatefulSet", "s", None, labels={keys.QUEUE_LABEL: "new-q", "team": "a"})
    sts["metadata"]["namespace"] = "default"
    pod = pod_from_template("s-0", sts, {"spec": {"containers": []}})
    return ok(World().group(pod, [sts]))


def live_copy(obj: dict[str, Any]) -> dict[str, Any]:
    live = copy.deepcopy(obj)
    live["metadata"].update({"resourceVersion": "42", "uid": "pg-uid"})
    return live


def test_create_when_missing() -> None:
    want = desired().podgroup
    obj, changed = merge_with_existing(want, None)
    assert changed and obj == want and obj is not want


def test_unchanged_live_object_is_not_rewritten() -> None:
    want = desired().podgroup
    live = live_copy(want)
    live["metadata"]["labels"]["extra"] = "kept"
    live["spec"]["markUnschedulable"] = False
    obj, changed = merge_with_existing(want, live)
    assert not changed
    assert obj["metadata"]["labels"]["extra"] == "kept"
    assert obj["spec"]["markUnschedulable"] is False


def test_queue_never_changes_and_user_fields_survive() -> None:
    want = desired().podgroup
    live = live_copy(want)
    live["spec"].update({"queue": "old-q", "markUnschedulable": False, "schedulingBackoff": 1,
                         "minMember": 7})
    live["metadata"]["labels"][keys.QUEUE_LABEL] = "old-q"
    obj, changed = merge_with_existing(want, live)
    assert changed  # minMember differs
    assert obj["spec"]["minMember"] == 1
    assert obj["spec"]["queue"] == "old-q"
    assert obj["metadata"]["labels"][keys.QUEUE_LABEL] == "old-q"
    assert (obj["spec"]["markUnschedulable"], obj["spec"]["schedulingBackoff"]) == (False, 1)
    assert obj["metadata"]["resourceVersion"] == "42"  # an update of the live object, not a blind replace


def test_node_pool_label_is_kept_or_dropped_like_the_live_object() -> None:
    want = desired().podgroup
    want["metadata"]["labels"][keys.NODE_POOL_LABEL] = "pool-b"
    live = live_copy(want)
    del live["metadata"]["labels"][keys.NODE_POOL_LABEL]
    obj, changed = merge_with_existing(want, live)
    assert not changed and keys.NODE_POOL_LABEL not in obj["metadata"]["labels"]
    live["metadata"]["labels"][keys.NODE_POOL_LABEL] = "pool-a"
    obj, changed = merge_with_existing(want, live)
    assert not changed and obj["metadata"]["labels"][keys.NODE_POOL_LABEL] == "pool-a"


def test_changed_annotation_or_owner_triggers_update() -> None:
    want = desired().podgroup
    live = live_copy(want)
    live["metadata"]["annotations"][keys.TOP_OWNER_METADATA] = "stale"
    assert merge_with_existing(want, live)[1]
    live = live_copy(want)
    live["metadata"]["ownerReferences"] = []
    obj, changed = merge_with_existing(want, live)
    assert changed and obj["metadata"]["ownerReferences"] == want["metadata"]["ownerReferences"]


def test_pod_patch_only_when_needed() -> None:
    result = desired()
    pod: dict[str, Any] = {"metadata": {"name": "s-0", "annotations": {}, "labels": {}}}
    assert pod_patch(pod, result) == {"metadata": {"annotations": {keys.POD_GROUP_NAME: result.name}}}
    pod["metadata"]["annotations"][keys.POD_GROUP_NAME] = result.name
    assert pod_patch(pod, result) is None


def test_should_skip() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"schedulerName": "default-scheduler"}}
    assert should_skip(pod)
    pod["spec"]["schedulerName"] = keys.SCHEDULER_NAME
    assert not should_skip(pod)
    pod["metadata"]["annotations"] = {keys.POD_GROUP_NAME: "mine"}
    assert should_skip(pod)  # a user-managed group
    pod["metadata"]["ownerReferences"] = [{"kind": "Job"}]
    assert not should_skip(pod)
