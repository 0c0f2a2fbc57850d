"""Queue validation for the admission webhook.

KAI refuses only a Queue without `spec.resources`. The other refusals here are of what cannot mean anything (a
value that is not a number, a negative other than -1, a parent cycle, a bad duration); every message names the
field at fault. How quotas compare (a quota above its limit, an unlimited quota under a limit, children's quotas
above their parent's) is never a refusal: KAI accepts such queues, and tools create them. With
`--enable-quota-validation` (KAI's opt-in flag, off by default) those comparisons come back as AdmissionReview
warnings (`quota_warnings`). A parent that does not exist yet is accepted (files and tools list children before
parents): the queue-controller reports it on the queue and the scheduler keeps the queue's workloads pending
until the parent appears.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from operators.core.durations import parse_delay

RESOURCES_REQUIRED = "resources must be specified"
RESOURCE_NAMES = ("cpu", "gpu", "memory")
UNLIMITED = -1

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
