"""Allocation of one ResourceClaim from one node's devices, as the structured-parameters allocator does it.

Each request of the claim (in order) takes devices of the node that match its DeviceClass's selectors and its own,
carry no taint it does not tolerate, satisfy the claim's matchAttribute constraints, and that no other claim holds
(a `firstAvailable` request: its first sub-request that can be met): `ExactCount` the first `count` of them (slice
order, devices being released last), `All` every matching device, all of which must be free. Devices held by claims
whose pods are all going (`releasing`) can be taken, as a pod's GPUs being released can: the node's GPU count decides
whether the pod binds or is pipelined onto them, and free devices are taken first so a bind never takes a device
still allocated. A claim that cannot be satisfied gets the reason: which request, which selector left too few
devices, and how many free devices there were.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from operators.scheduler.decide.devices import (
    ALL,
    AllocatedDevice,
    ClaimRecord,
    Device,
    DeviceClassRecord,
    DeviceRequest,
    SelectorError,
    selector,
)

# Combinations of constrained attribute values tried per claim and node (one constraint: one per distinct value).
MAX_CONSTRAINT_TRIES = 64


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
    """The claim's devices on `node`, or why it cannot be allocated there (`label` names the claim in it).

    With `constraints` (matchAttribute), each combination of the constrained attributes' values on the node is
    tried in order (devices without the attribute never satisfy a constrained request); the first that satisfies
    every request wins, as the structured allocator's search does."""
    if not claim.constraints:
        return _allocate(claim, node, devices, taken, classes, label, releasing, {})
    values = [sorted({str(v) for d in devices for k, v in d.attributes if k == c.match_attribute})
              for c in claim.constraints]
    first: str = ""
    for combination in itertools.islice(itertools.product(*values), MAX_CONSTRAINT_TRIES):
        fixed = dict(zip(range(len(claim.constraints)), combination, strict=True))
        result = _allocate(claim, node, devices, taken, classes, label, releasing, fixed)
        if isinstance(result, Allocation):
            return result
        first = first or result
    names = ", ".join(c.match_attribute for c in claim.constraints)
    return first or f"{label}: no device on the node has the attribute {names} its constraints match"


def _constrained(claim: ClaimRecord, request: str, fixed: Mapping[int, str]) -> list[tuple[str, str]]:
    """(attribute, value) every device of `request` (the claim's request name) must have."""
    return [(c.match_attribute, fixed[i]) for i, c in enumerate(claim.constraints)
            if i in fixed and (not c.requests or request in c.requests)]


def _allocate(claim: ClaimRecord, node: str, devices: Sequence[Device], taken: Container[tuple[str, str, str]],
              classes: Mapping[str, DeviceClassRecord], label: str, releasing: Container[tuple[str, str, str]],
              fixed: Mapping[int, str]) -> Allocation | str:
    chosen: list[AllocatedDevice] = []
    used: set[tuple[str, str, str]] = set()
    for request in claim.requests:
        where = f"{label} request {request.name!r}"
        required = _constrained(claim, request.name, fixed)
        eligible = [d for d in devices if all(str(dict(d.attributes).get(k)) == v for k, v in required)] \
            if required else devices
        picks: list[Device] | str = ""
        for option in request.alternatives or (request,):  # firstAvailable: the first sub-request that fits
            found = _pick(option, eligible, taken, used, classes, releasing,
                          f"{label} request {option.name!r}" if request.alternatives else where)
            if not isinstance(found, str):
                picks = found
                chosen.extend(AllocatedDevice(option.name, d.driver, d.pool, d.name) for d in found)
                break
            picks = picks or found  # the reason of the preferred sub-request
        if isinstance(picks, str):
            if request.alternatives and len(request.alternatives) > 1:
                return f"{picks} (no alternative of {where} fits)"
            return picks
        used.update(d.id for d in picks)
    return Allocation(node, tuple(chosen))


def _pick(request: DeviceRequest, devices: Sequence[Device], taken: Container[tuple[str, str, str]],
          used: set[tuple[str, str, str]], classes: Mapping[str, DeviceClassRecord],
          releasing: Container[tuple[str, str, str]], where: str) -> list[Device] | str:
    """The devices one `exactly` request takes, or why not."""
    if request.unsupported:
        return f"{where}: {request.unsupported}"
    cls = classes.get(request.device_class)
    if cls is None:
        return f"{where}: device class {request.device_class!r} does not exist"
    try:
        of_class, _ = _matching(devices, cls.selectors)
        if not of_class:
            return f"{where}: no device of class {request.device_class} on the node"
        # A device with a taint the request does not tolerate is not allocated (KEP-5055).
        tainted = [d for d in of_class if not _tolerated(d, request)]
        if tainted:
            of_class = [d for d in of_class if d not in tainted]
        free = sorted((d for d in of_class if d.id not in taken and d.id not in used),
                      key=lambda d: d.id in releasing)
        selected, emptied = _matching(free, request.selectors)
        if request.mode == ALL:
            wanted, _ = _matching(of_class, request.selectors)
            busy = [d for d in wanted if d.id in taken or d.id in used]
            if not wanted or busy:
                return (f"{where}: allocationMode All needs every matching device free, "
                        f"{len(wanted) - len(busy)} of {len(wanted)} are" + _tainted(tainted))
            return wanted
        if len(selected) < request.count:
            return _shortfall(where, request.count, len(selected), len(free), len(of_class), request.selectors,
                              emptied, request.device_class) + _tainted(tainted)
        return selected[:request.count]
    except SelectorError as exc:
        return f"{where}: {exc}"


def _tolerated(device: Device, request: DeviceRequest) -> bool:
    return all(any(t.tolerates(taint) for t in request.tolerations) for taint in device.taints
               if taint.effect in ("NoSchedule", "NoExecute"))


def _tainted(tainted: Sequence[Device]) -> str:
    return f" ({len(tainted)} more tainted, not tolerated)" if tainted else ""


def _shortfall(where: str, count: int, selected: int, free: int, total: int, selectors: Sequence[str],
               emptied: str, device_class: str) -> str:
    want = f"needs {count} device{'s' if count != 1 else ''} of class {device_class}"
    if not selectors:
        return f"{where}: {want}, {free} of {total} free"
    named = emptied or selectors[-1]
    return f"{where}: {want} matching selector {named!r}, {selected} of {free} free devices match ({total} on the node)"
