"""The PodGroup webhook's rule for semi-preemptible PodGroups (KAI v0.18): on UPDATE, no minimum may rise.

A semi-preemptible PodGroup is non-preemptible and in quota up to its minimum (its core). Raising `minMember`,
`minSubGroup` (of the PodGroup or of any SubGroup kept by name) or `minNonPreemptible` would turn pods already
running over quota into core pods without a scheduling decision; lowering them only widens the preemptible part,
so it is allowed. An unset field is compared at the value the scheduler uses: minMember 1, minSubGroup every direct
child, minNonPreemptible the minMember.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.core import keys


def raised_minimum_error(new: Mapping[str, Any], old: Mapping[str, Any]) -> str | None:
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    if not isinstance(new_spec, Mapping) or not isinstance(old_spec, Mapping):
        return None
    if new_spec.get("preemptibility") != keys.SEMI_PREEMPTIBLE:
        return None
    pairs: list[tuple[str, int, int]] = [
        ("spec.minMember", _min_member(old_spec), _min_member(new_spec)),
        ("spec.minSubGroup", _min_sub_group(old_spec, None), _min_sub_group(new_spec, None)),
        ("spec.minNonPreemptible", _min_non_preemptible(old_spec), _min_non_preemptible(new_spec)),
    ]
    old_subgroups = {str(s.get("name") or ""): s for s in _subgroups(old_spec)}
    for subgroup in _subgroups(new_spec):
        name = str(subgroup.get("name") or "")
        before = old_subgroups.get(name)
        if before is None:
            continue
        pairs.append((f"subgroup {name!r} minMember", _int(before.get("minMember"), 1),
                      _int(subgroup.get("minMember"), 1)))
        pairs.append((f"subgroup {name!r} minSubGroup", _min_sub_group(old_spec, name),
                      _min_sub_group(new_spec, name)))
    for what, before_value, after_value in pairs:
        if after_value > before_value:
            return (f"{what} of a semi-preemptible PodGroup cannot be raised (from {before_value} to "
                    f"{after_value}): its running pods above the minimum would become non-preemptible; lower it, "
                    "or recreate the PodGroup")
    return None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _subgroups(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = spec.get("subGroups")
    return [s for s in raw if isinstance(s, Mapping)] if isinstance(raw, list) else []


def _min_member(spec: Mapping[str, Any]) -> int:
    return max(_int(spec.get("minMember"), 1), 1)


def _min_sub_group(spec: Mapping[str, Any], parent: str | None) -> int:
    subgroups = _subgroups(spec)
    children = [s for s in subgroups if (s.get("parent") or None) == parent]
    if parent is None:
        return _int(spec.get("minSubGroup"), len(children))
    own = next((s for s in subgroups if s.get("name") == parent), {})
    return _int(own.get("minSubGroup"), len(children))


def _min_non_preemptible(spec: Mapping[str, Any]) -> int:
    return max(_int(spec.get("minNonPreemptible"), 0), _min_member(spec))
