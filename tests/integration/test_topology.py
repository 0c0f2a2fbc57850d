"""Topology-aware scheduling on the local control plane: the Topology CRD and its admission webhook.

Each test builds its own Topology (labelled for the namespace fixture's cleanup) and, where placement matters, its
own kwok nodes labelled with zones and racks, which only its own workloads can use: the suite's other nodes carry
no zone or rack label, so they are in no domain of the test's Topology.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from operators.devcluster.nodes import RACK_LABEL, ZONE_LABEL
from tests.support import Cluster, labelled

pytestmark = pytest.mark.cluster


def topology(name: str, levels: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": levels}}


def create(cluster: Cluster, doc: dict[str, Any]) -> Any:
    return cluster.kubectl("apply", "-f", "-", input=labelled([doc]), check=False)


def test_topology_webhook_refuses_ambiguous_levels_and_label_changes(cluster: Cluster, namespace: str) -> None:
    name = f"dc-{uuid.uuid4().hex[:6]}"
    levels = [{"nodeLabel": ZONE_LABEL, "alias": "zone"}, {"nodeLabel": RACK_LABEL, "alias": "rack"},
              {"nodeLabel": "kubernetes.io/hostname"}]
    ok = create(cluster, topology(name, levels))
    assert ok.returncode == 0, ok.stderr
    stored = cluster.get_json("topology", name)
    assert stored["spec"]["levels"] == levels

    duplicate_alias = create(cluster, topology(f"{name}-x", [{"nodeLabel": ZONE_LABEL, "alias": "a"},
                                                             {"nodeLabel": RACK_LABEL, "alias": "a"}]))
    assert duplicate_alias.returncode != 0
    assert 'admission webhook "topology-validation.kai.scheduler" denied the request' in duplicate_alias.stderr
    assert "spec.levels[1].alias: alias 'a' is already used by level 0" in duplicate_alias.stderr

    alias_is_a_label = create(cluster, topology(f"{name}-y", [{"nodeLabel": ZONE_LABEL, "alias": RACK_LABEL},
                                                              {"nodeLabel": RACK_LABEL}]))
    assert alias_is_a_label.returncode != 0 and "equals the nodeLabel of level 1" in alias_is_a_label.stderr

    duplicate_label = create(cluster, topology(f"{name}-z", [{"nodeLabel": RACK_LABEL}, {"nodeLabel": RACK_LABEL}]))
    assert duplicate_label.returncode != 0 and "is already level 0" in duplicate_label.stderr
    assert cluster.kubectl("get", "topology", f"{name}-x", check=False).returncode != 0

    # Aliases may change; the node labels (values and order) may not.
    renamed = [{"nodeLabel": ZONE_LABEL, "alias": "az"}, {"nodeLabel": RACK_LABEL},
               {"nodeLabel": "kubernetes.io/hostname", "alias": "host"}]
    changed = create(cluster, topology(name, renamed))
    assert changed.returncode == 0, changed.stderr
    assert cluster.get_json("topology", name)["spec"]["levels"] == renamed
    reordered = create(cluster, topology(name, [renamed[1], renamed[0], renamed[2]]))
    assert reordered.returncode != 0 and "the node labels of a Topology cannot change" in reordered.stderr
    assert cluster.get_json("topology", name)["spec"]["levels"] == renamed
