"""Allocation of one ResourceClaim from one node's devices, as the structured-parameters allocator does it.

Each request of the claim (in order) takes devices of the node that match its DeviceClass's selectors and its own,
and that no other claim holds: `ExactCount` the first `count` of them (slice order, devices being released last),
`All` every matching device, all of which must be free. Devices held by claims whose pods are all going
(`releasing`) can be taken, as a pod's GPUs being released can: the node's GPU count decides whether the pod binds
or is pipelined onto them, and free devices are taken first so a bind never takes a device still allocated. A claim
that cannot be satisfied gets the reason: which request, which selector left too few devices, and how many free
devices there were.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from operators.scheduler.decide.devices import (
    ALL,
    AllocatedDevice,
    ClaimRecord,
    Device,
    DeviceClassRecord,
    SelectorError,
    selector,
)


@dataclass(frozen=True, slots=True)
class Allocation:
    node: str
    devices: tuple[AllocatedDevice, ...]


def _matching(devices: Sequence[Device], expressions: Sequence[str]) -> tuple[list[Device], str]:
    """The devices every expression selects, and the first expression that selected none of them ("" if some
    are left)."""
    out = list(devices)
    for expression in expressions:
        compiled = selector(expression)
        out = [d for d in out if compiled.matches(d).matches]
        if not out:
            return out, expression
    return out, ""


def allocate(claim: ClaimRecord, node: str, devices: Sequence[Device], taken: Container[tuple[str, str, str]],
             classes: Mapping[str, DeviceClassRecord], label: str,
             releasing: Container[tuple[str, str, str]] = ()) -> Allocation | str:
    """The claim's devices on `node`, or why it cannot be allocated there (`label` names the claim in it)."""
    chosen: list[AllocatedDevice] = []
    used: set[tuple[str, str, str]] = set()
    for request in claim.requests:
        where = f"{label} request {request.name!r}"
        if request.unsupported:
            return f"{where}: {request.unsupported}"
        cls = classes.get(request.device_class)
        if cls is None:
            return f"{where}: device class {request.device_class!r} does not exist"
        try:
            of_class, _ = _matching(devices, cls.selectors)
            if not of_class:
                return f"{where}: no device of class {request.device_class} on the node"
            free = sorted((d for d in of_class if d.id not in taken and d.id not in used),
                          key=lambda d: d.id in releasing)
            selected, emptied = _matching(free, request.selectors)
            if request.mode == ALL:
                wanted, _ = _matching(of_class, request.selectors)
                busy = [d for d in wanted if d.id in taken or d.id in used]
                if not wanted or busy:
                    return (f"{where}: allocationMode All needs every matching device free, "
                            f"{len(wanted) - len(busy)} of {len(wanted)} are")
                picks = wanted
            else:
                if len(selected) < request.count:
                    return _shortfall(where, request.count, len(selected), len(free), len(of_class), request.selectors,
                                      emptied, request.device_class)
                picks = selected[:request.count]
        except SelectorError as exc:
            return f"{where}: {exc}"
        for d in picks:
            used.add(d.id)
            chosen.append(AllocatedDevice(request.name, d.driver, d.pool, d.name))
    return Allocation(node, tuple(chosen))


def _shortfall(where: str, count: int, selected: int, free: int, total: int, selectors: Sequence[str],
               emptied: str, device_class: str) -> str:
    want = f"needs {count} device{'s' if count != 1 else ''} of class {device_class}"
    if not selectors:
        return f"{where}: {want}, {free} of {total} free"
    named = emptied or selectors[-1]
    return f"{where}: {want} matching selector {named!r}, {selected} of {free} free devices match ({total} on the node)"
