"""The one validation of a Queue, beside its record (`queue.py`): what the queue webhook refuses, and warns of.

KAI refuses only a Queue without `spec.resources`. The other refusals here are of what cannot mean anything (a
value that is not a number, a negative other than -1, a parent cycle, a bad duration); every message names the
field at fault. How quotas compare (a quota above its limit, an unlimited quota under a limit, children's quotas
above their parent's) is never a refusal: KAI accepts such queues, and tools create them. With
`--enable-quota-validation` (KAI's opt-in flag, off by default) those comparisons come back as AdmissionReview
warnings (`quota_warnings`). A parent that does not exist yet is accepted (files and tools list children before
parents): the queue-controller reports it on the queue and the scheduler keeps the queue's workloads pending
until the parent appears.

The quota warnings (`quota_warnings`, never refusals) follow KAI's rule, its queue-controller flag of the same
name: on create, a queue with a parent is compared with that parent (its own CPU, GPU and memory quota, and the
CPU quotas of all the parent's children together); on update, the same, plus, when the queue has children, their
quotas against the queue's. The messages are KAI's. Two differences, both to avoid nonsense warnings: -1
(unlimited) takes part in no comparison (KAI compares it as the number -1), and a parent that does not exist yet
is skipped (KAI refuses the queue then, which would undo accepting children before parents). Ours also warns of a
quota above the queue's own limit, which KAI does not check at all.

Both read the object under review as it came, not its record: it has not been validated yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from operators.core.api.queue import UNLIMITED
from operators.core.durations import parse_delay

RESOURCES_REQUIRED = "resources must be specified"
RESOURCE_NAMES = ("cpu", "gpu", "memory")


def is_number(value: Any) -> TypeGuard[int | float]:
    # NaN and infinity are numbers to Python (and to a JSON decoder that accepts them) but no quota.
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _check_resources(resources: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    for name in RESOURCE_NAMES:
        settings = resources.get(name)
        if settings is None:
            continue
        if not isinstance(settings, Mapping):
            errors.append(f"spec.resources.{name}: must be an object with quota, limit and overQuotaWeight")
            continue
        for field in ("quota", "limit", "overQuotaWeight"):
            value = settings.get(field)
            if value is None:
                continue
            if not is_number(value):
                errors.append(f"spec.resources.{name}.{field}: must be a number, got {value!r}")
            elif value < 0 and value != UNLIMITED:
                errors.append(f"spec.resources.{name}.{field}: {value} is negative; "
                              f"only {UNLIMITED} (unlimited) is allowed")
    return errors


def _member(obj: Any, section: str, field: str) -> str:
    """`obj[section][field]` as a string, "" when any part is missing or not a string."""
    part = obj.get(section) if isinstance(obj, Mapping) else None
    value = part.get(field) if isinstance(part, Mapping) else None
    return value if isinstance(value, str) else ""


def _name(queue: Mapping[str, Any]) -> str:
    return _member(queue, "metadata", "name")


def _parent(queue: Mapping[str, Any]) -> str:
    return _member(queue, "spec", "parentQueue")


def _check_hierarchy(queue: Mapping[str, Any], queues: Iterable[Mapping[str, Any]]) -> list[str]:
    name, parent = _name(queue), _parent(queue)
    if not parent:
        return []
    parents = {_name(q): _parent(q) for q in queues}
    parents[name] = parent  # validate the incoming version, not the stored one
    if parent == name:
        return [f"spec.parentQueue: queue {name!r} cannot be its own parent"]
    path, current = [name], parent
    while current:
        path.append(current)
        if current == name:
            return [f"spec.parentQueue: setting parent {parent!r} creates a cycle: {' -> '.join(path)}"]
        if current in path[:-1]:
            break  # a cycle above us that this change does not create
        current = parents.get(current, "")
    return []


def validate_queue(queue: Mapping[str, Any], queues: Iterable[Mapping[str, Any]] | None = None) -> list[str]:
    """Every problem with a Queue, most important first; empty when valid.

    `queues`: all stored queues, for the hierarchy checks (skipped when None). The webhook denies with the
    first message (KAI also returns it as an admission warning).
    """
    spec = queue.get("spec") or {}
    if not isinstance(spec, Mapping):
        return [f"spec: must be an object with resources, got {spec!r}"]
    if spec.get("resources") is None:
        return [RESOURCES_REQUIRED]
    errors: list[str] = []
    parent = spec.get("parentQueue")
    if parent is not None and not isinstance(parent, str):
        errors.append(f"spec.parentQueue: must be the name of a queue, got {parent!r}")
    if isinstance(spec["resources"], Mapping):
        errors += _check_resources(spec["resources"])
    else:
        errors.append("spec.resources: must be an object with cpu, gpu and memory")
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        errors.append(f"spec.priority: must be an integer, got {priority!r}")
    for field in ("preemptMinRuntime", "reclaimMinRuntime"):
        value = spec.get(field)
        if value is None:
            continue
        try:  # a min runtime is a Go duration, and a negative one means nothing
            parse_delay(str(value))
        except ValueError:
            errors.append(f'spec.{field}: {value!r} is not a duration (e.g. "20s", "5m", "1h30m")')
    if queues is not None:
        errors += _check_hierarchy(queue, queues)
    return errors


# --- quota warnings (`--enable-quota-validation`) ----------------------------------------------------
# (resource key, KAI's name for it, format of the numbers): GPUs are shown with two decimals, as KAI does.
_RESOURCES = (("cpu", "CPU", ".0f"), ("gpu", "GPU", ".2f"), ("memory", "Memory", ".0f"))


def _quota(queue: Mapping[str, Any], resource: str) -> float | None:
    """The queue's quota of `resource`: 0 when unset (Go's zero value), None when unlimited or not a number."""
    resources = (queue.get("spec") or {}).get("resources")
    settings = resources.get(resource) if isinstance(resources, Mapping) else None
    value = settings.get("quota", 0) if isinstance(settings, Mapping) else 0
    if value is None:
        value = 0
    if not is_number(value) or value == UNLIMITED:
        return None
    return float(value)


def _own_limits(queue: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    resources = (queue.get("spec") or {}).get("resources")
    if not isinstance(resources, Mapping):
        return out
    for resource, _, _ in _RESOURCES:
        settings = resources.get(resource)
        if not isinstance(settings, Mapping):
            continue
        quota, limit = settings.get("quota"), settings.get("limit")
        if not (is_number(quota) and is_number(limit)) or limit == UNLIMITED:
            continue
        if quota == UNLIMITED or quota > limit:
            shown = "unlimited (-1)" if quota == UNLIMITED else quota
            out.append(f"spec.resources.{resource}: quota {shown} is greater than limit {limit}")
    return out


def _against_parent(queue: Mapping[str, Any], parent: Mapping[str, Any],
                    siblings: list[Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    parent_name = _name(parent)
    for resource, shown, fmt in _RESOURCES:
        mine, theirs = _quota(queue, resource), _quota(parent, resource)
        if mine is None or theirs is None:
            continue
        if mine > theirs:
            out.append(f"child queue {shown} quota ({mine:{fmt}}) exceeds parent queue {parent_name} "
                       f"{shown} quota ({theirs:{fmt}})")
        if resource == "cpu":
            # KAI sums the children's CPU quotas only, here as part of the parent check.
            total = mine + sum(q for s in siblings if (q := _quota(s, "cpu")) is not None)
            if total > theirs:
                out.append(f"total children CPU quota ({total:.0f}) exceeds parent queue {parent_name} "
                           f"CPU quota ({theirs:.0f})")
    return out


def _against_children(queue: Mapping[str, Any], children: list[Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    totals = {resource: 0.0 for resource, _, _ in _RESOURCES}
    mine_cpu = _quota(queue, "cpu")
    for child in children:
        for resource in totals:
            totals[resource] += _quota(child, resource) or 0.0
        child_cpu = _quota(child, "cpu")
        if child_cpu is not None and mine_cpu is not None and child_cpu > mine_cpu:
            out.append(f"child queue {_name(child)} CPU quota ({child_cpu:.0f}) exceeds parent CPU quota "
                       f"({mine_cpu:.0f})")
    for resource, shown, fmt in _RESOURCES:
        mine = _quota(queue, resource)
        if mine is not None and totals[resource] > mine:
            out.append(f"total children {shown} quota ({totals[resource]:{fmt}}) exceeds parent {shown} quota "
                       f"({mine:{fmt}})")
    return out


def quota_warnings(queue: Mapping[str, Any], queues: Iterable[Mapping[str, Any]], *, update: bool) -> list[str]:
    """The warnings for an admitted Queue (`queues`: the stored ones, this queue's old version included or not)."""
    name = _name(queue)
    stored = {_name(q): q for q in queues if _name(q) != name}
    out = _own_limits(queue)
    parent = stored.get(_parent(queue)) if _parent(queue) else None
    if parent is not None and isinstance((parent.get("spec") or {}).get("resources"), Mapping):
        siblings = [q for q in stored.values() if _parent(q) == _name(parent)]
        out += _against_parent(queue, parent, siblings)
    if update:
        children = [q for q in stored.values() if _parent(q) == name]
        if children:
            out += _against_children(queue, children)
    return out
