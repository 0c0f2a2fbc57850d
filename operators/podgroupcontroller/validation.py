"""PodGroup validation for the admission webhook (contract 2.2): subgroup names, parents, cycles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def validate_podgroup(podgroup: Mapping[str, Any]) -> str | None:
    """The denial message for an invalid PodGroup, None when valid. Checks run in KAI's order."""
    if (problem := _shape_error(podgroup)) is not None:
        return problem
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


def _shape_error(podgroup: Mapping[str, Any]) -> str | None:
    """Wrong types the CRD schema refuses before us; checked so that a body that skipped it is refused, not a
    crash."""
    spec = podgroup.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        return f"spec: must be an object, got {spec!r}"
    if (problem := _int32_error("spec.minMember", spec.get("minMember"))) is not None:
        return problem
    subgroups = spec.get("subGroups")
    if subgroups is None:
        return None
    if not isinstance(subgroups, list):
        return f"spec.subGroups: must be a list of subgroups, got {subgroups!r}"
    for index, subgroup in enumerate(subgroups):
        if not isinstance(subgroup, Mapping):
            return f"spec.subGroups[{index}]: must be an object with a name, got {subgroup!r}"
        for field in ("name", "parent"):
            value = subgroup.get(field)
            if value is not None and not isinstance(value, str):
                return f"spec.subGroups[{index}].{field}: must be a subgroup name, got {value!r}"
        if (problem := _int32_error(f"spec.subGroups[{index}].minMember", subgroup.get("minMember"))) is not None:
            return problem
    return None


INT32_MAX = 2**31 - 1


def _int32_error(path: str, value: Any) -> str | None:
    # The CRD declares these int32 but the API server does not enforce formats; KAI's own controllers could not
    # decode a larger value, so it is refused here.
    if isinstance(value, int) and not isinstance(value, bool) and value > INT32_MAX:
        return f"{path}: {value} is larger than {INT32_MAX}"
    return None
