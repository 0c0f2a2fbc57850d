"""Elastic SubGroup trees (minSubGroup) and the preemption delay against a real control plane.

Admission: PodGroups and pods go through the API server and the webhooks (kubectl), which refuse the invalid
trees and delays with their messages and pass a minSubGroup above the children with one warning.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support import Cluster, labelled

pytestmark = pytest.mark.cluster


def podgroup(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"queue": "default-queue", **spec}}


def kubectl_create(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.kubectl("create", "-f", "-", input=labelled([doc]), namespace=namespace, check=False)
    return proc.returncode, proc.stderr


def refused(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> str:
    code, stderr = kubectl_create(cluster, namespace, doc)
    assert code != 0 and "denied the request" in stderr, (doc["metadata"]["name"], stderr)
    return stderr


LEAVES = [{"name": f"w{i}", "minMember": 2} for i in range(4)]


def test_subgroup_trees_are_refused_or_admitted_through_the_api_server(cluster: Cluster, namespace: str) -> None:
    code, stderr = kubectl_create(cluster, namespace, podgroup("three-of-four", {"minSubGroup": 3,
                                                                                 "subGroups": LEAVES}))
    assert code == 0 and "Warning" not in stderr, stderr
    stored = cluster.get_json("podgroup", "three-of-four", namespace=namespace)["spec"]
    assert stored["minSubGroup"] == 3 and stored["subGroups"][0] == {"name": "w0", "minMember": 2}

    assert ("spec.minMember and spec.minSubGroup are mutually exclusive" in
            refused(cluster, namespace, podgroup("both", {"minMember": 2, "minSubGroup": 1, "subGroups": LEAVES})))
    assert "subgroup 'w0': minSubGroup cannot be set on a leaf SubGroup" in refused(
        cluster, namespace, podgroup("leaf", {"subGroups": [{"name": "w0", "minSubGroup": 1}]}))
    assert "subgroup 'w0': minMember and minSubGroup are mutually exclusive" in refused(
        cluster, namespace, podgroup("leaf-both", {"subGroups": [{"name": "w0", "minMember": 1, "minSubGroup": 1}]}))
    assert "subgroup 'p': minMember cannot be set on a SubGroup that has child SubGroups (c)" in refused(
        cluster, namespace, podgroup("parent", {"subGroups": [{"name": "p", "minMember": 1},
                                                              {"name": "c", "parent": "p", "minMember": 1}]}))
    assert 'spec.preemptionDelay: must be a non-negative Go duration' in refused(
        cluster, namespace, podgroup("delay", {"minMember": 1, "preemptionDelay": "5"}))

    # Above the number of children: admitted, with exactly one warning that says so.
    code, stderr = kubectl_create(cluster, namespace, podgroup("five-of-four", {"minSubGroup": 5,
                                                                                "subGroups": LEAVES}))
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == ["Warning: minSubGroup (5) exceeds the number of direct child SubGroups (4)"], stderr

    # Editing the tree is judged again; the stored object stays as it was.
    changed = podgroup("three-of-four", {"minMember": 1, "minSubGroup": 3, "subGroups": LEAVES})
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(changed), namespace=namespace, check=False)
    assert proc.returncode != 0 and "mutually exclusive" in proc.stderr, proc.stderr


def test_a_malformed_preemption_delay_on_a_pod_is_refused_with_the_format(cluster: Cluster, namespace: str) -> None:
    def pod(name: str, where: str, value: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, where: {"kai.scheduler/preemption-delay": value}},
                "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "10m"}}}]}}

    stderr = refused(cluster, namespace, pod("bad-annotation", "annotations", "5 minutes"))
    assert ('metadata.annotations[kai.scheduler/preemption-delay]: must be a non-negative Go duration: numbers '
            'with units (ns, us, ms, s, m, h), e.g. "30s", "5m", "1h30m", got \'5 minutes\'') in stderr, stderr
    assert "metadata.labels[kai.scheduler/preemption-delay]" in refused(cluster, namespace,
                                                                         pod("bad-label", "labels", "5"))
    code, stderr = kubectl_create(cluster, namespace, pod("good", "labels", "90s"))
    assert code == 0, stderr
