"""Topology, `kai.scheduler/v1alpha1` (cluster-scoped, no status): the node-label hierarchy of a data center.

`spec.levels` is ordered from the coarsest level (e.g. a zone) to the finest (e.g. `kubernetes.io/hostname`).
A domain of level i is the set of nodes sharing the values of the labels of levels 0..i. Workloads name a level by
its `nodeLabel` or by its optional `alias` (an addition to KAI's schema: a short name such as `rack`).
The admission webhook keeps the levels consistent: node labels non-empty and unique, aliases unique and never
equal to a level's node label, and the node labels (values and order) immutable; aliases may change.
`TopologyRecord` (`topology_record`) is what the scheduler reads of one: its name and its (node label, alias) levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from operators.core.api.base import ObjectMeta, WireModel
from operators.core.api.fields import meta as _meta

GROUP = "kai.scheduler"
VERSION = "v1alpha1"
API_VERSION: Literal["kai.scheduler/v1alpha1"] = "kai.scheduler/v1alpha1"
KIND: Literal["Topology"] = "Topology"
PLURAL = "topologies"
HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_LEVELS = 16
# A Kubernetes label key: an optional DNS-subdomain prefix and a name of up to 63 characters.
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")


class TopologyLevel(WireModel):
    node_label: str = Field(
        min_length=1, max_length=316, pattern=LABEL_KEY_PATTERN,
        description="The node label whose values divide the nodes at this level, e.g. cloud.provider.com/rack.")
    alias: str | None = Field(
        default=None, max_length=63,
        description="Optional short name workloads may use instead of the node label, e.g. rack.")


class TopologySpec(WireModel):
    levels: list[TopologyLevel] = Field(
        min_length=1, max_length=MAX_LEVELS,
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
        description="Levels from the coarsest (e.g. zone) to the finest (e.g. kubernetes.io/hostname).")


class Topology(WireModel):
    api_version: Literal["kai.scheduler/v1alpha1"] = API_VERSION
    kind: Literal["Topology"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TopologySpec

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> Topology:
        return cls.model_validate(obj)


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    """A Topology: its levels from the coarsest to the finest, each (node label, alias or "")."""

    name: str
    levels: tuple[tuple[str, str], ...]


def topology_record(obj: Mapping[str, Any]) -> TopologyRecord:
    meta, spec = _meta(obj), obj.get("spec") or {}
    levels = tuple((str(level.get("nodeLabel") or ""), str(level.get("alias") or ""))
                   for level in spec.get("levels") or () if isinstance(level, Mapping))
    return TopologyRecord(str(meta.get("name", "")), levels)
