"""PodGroup validation for the admission webhook (contract 2.2): subgroup names, parents, cycles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def validate_podgroup(podgroup: Mapping[str, Any]) -> str | None:
    """The denial message for an invalid PodGroup, None when valid. Checks run in KAI's order."""
    subgroups = [s for s in (podgroup.get("spec") or {}).get("subGroups") or [] if isinstance(s, Mapping)]
    parents: dict[str, str | None] = {}
    for subgroup in subgroups:
        name = str(subgroup.get("name") or "")
        if name in parents:
            return f"duplicate subgroup name {name}"
        parents[name] = subgroup.get("parent") or None
    for name, parent in parents.items():
        if parent is not None and parent not in parents:
            return f"parent {parent} of {name} was not found"
    for start in parents:
        seen = {start}
        current = parents[start]
        while current is not None:
            if current in seen:
                return "cycle detected in subgroups"
            seen.add(current)
            current = parents.get(current)
    return None
