"""The opt-in quota checks of the queue webhook (`--enable-quota-validation`): warnings, never refusals.

KAI's rule (its queue-controller flag of the same name, off by default): on create, a queue with a parent is
compared with that parent (its own CPU, GPU and memory quota, and the CPU quotas of all the parent's children
together); on update, the same, plus, when the queue has children, their quotas against the queue's. The
messages are KAI's. Two differences, both to avoid nonsense warnings: -1 (unlimited) takes part in no
comparison (KAI compares it as the number -1), and a parent that does not exist yet is skipped (KAI refuses the
queue then, which would undo accepting children before parents). Ours also warns of a quota above the queue's
own limit, which KAI does not check at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.queuecontroller.validation import UNLIMITED, is_number

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


def _name(queue: Mapping[str, Any]) -> str:
    return str((queue.get("metadata") or {}).get("name") or "")


def _parent(queue: Mapping[str, Any]) -> str:
    parent = (queue.get("spec") or {}).get("parentQueue")
    return parent if isinstance(parent, str) else ""


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
