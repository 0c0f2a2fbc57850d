"""KEP-5004, extended resources backed by DRA: a pod asking `requests[<name>]: N` for a name a DeviceClass maps
(its `extendedResourceName`, or `deviceclass.resource.kubernetes.io/<class>`) is given N devices of that class
through a special ResourceClaim instead of node capacity. Until the binder has created that claim, the snapshot
carries a virtual one (requests `container-<i>-request-<j>`, `exactly` `count: N` of the class), so placement,
KAI's GPU count, quota and fair share treat it as any claim of the pod.

A name some node of the snapshot lists in its allocatable stays a device-plugin resource for every node (the KEP
lets one node use DRA and another the device plugin for one name; here a cluster uses one or the other).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from operators.core.dra import EXTENDED_RESOURCE_CLAIM, extended_resource_classes
from operators.scheduler.decide.devices import ClaimRecord, DeviceClassRecord, DeviceRequest


def virtual_claim_name(pod_name: str) -> str:
    """The name the snapshot gives a pod's special claim before the binder creates it (generateName's prefix)."""
    return f"{pod_name}-extended-resources"


def with_extended_claims(nodes: Sequence[Any], pods: Sequence[Any], classes: Iterable[DeviceClassRecord],
                         claims: tuple[ClaimRecord, ...]) -> tuple[list[Any], tuple[ClaimRecord, ...]]:
    """Pods whose DRA-backed extended resources become a claim (and leave their scalar requests), and the claims
    with the virtual ones added."""
    if not any(p.extended for p in pods):
        return list(pods), claims
    mapping = extended_resource_classes((c.name, c.extended_resource) for c in classes)
    plugin = {name for n in nodes for name, _ in n.scalars}
    known = {c.key for c in claims}  # `kai simulate` carries a bound pod's virtual claim, allocated, to its next cycle
    out, virtual = [], []
    for p in pods:
        mine = [e for e in p.extended if e[1] in mapping and e[1] not in plugin]
        if not mine:
            out.append(p)
            continue
        name = p.extended_claim or virtual_claim_name(p.name)
        if not p.extended_claim and f"{p.namespace}/{name}" not in known:
            virtual.append(ClaimRecord(
                namespace=p.namespace, name=name, uid=f"{p.uid}/extended-resources", owner_pod=p.uid,
                requests=tuple(DeviceRequest(request, mapping[resource], count=count)
                               for _, resource, request, count in sorted(mine, key=lambda e: e[2]))))
        backed = {e[1] for e in mine}
        out.append(replace(p, scalars=tuple(s for s in p.scalars if s[0] not in backed),
                           claims=(*p.claims, (EXTENDED_RESOURCE_CLAIM, name))))
    return out, (*claims, *virtual)
