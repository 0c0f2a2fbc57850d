"""The one PodGroup validator (the podgroup-controller's admission webhook calls it): subgroup names, parents,
cycles, the minMember/minSubGroup tree rules, the preemption delay and semi-preemptible minimums.

The tree rules: the PodGroup and every SubGroup with children (a parent) are gated by minSubGroup, how many of
their direct children must meet their own minimum; a leaf SubGroup is gated by minMember pods. So minMember and
minSubGroup are exclusive at every level, a leaf needs minMember, and a parent may not use minMember. On UPDATE
these rules (and the preemption delay) are only enforced when the update changes the fields they judge, so a
PodGroup stored before them stays writable (the scheduler and the pod-grouper patch its metadata).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from operators.core import keys
from operators.core.durations import delay_error

# Spec fields the tree rules and the delay check judge: an UPDATE leaving them as they were is not re-judged.
_RATCHETED_FIELDS = ("minMember", "minSubGroup", "subGroups", "preemptionDelay")


def validate_podgroup(podgroup: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> str | None:
    """The denial message for an invalid PodGroup, None when valid. Checks run in KAI's order.

    `old`: the stored object on UPDATE (None on CREATE).
    """
    if (problem := _shape_error(podgroup)) is not None:
        return problem
    if (problem := _structure_error(podgroup)) is not None:
        return problem
    if old is not None and (problem := raised_minimum_error(podgroup, old)) is not None:
        return problem
    if old is not None and not _judged_fields_changed(podgroup, old):
        return None
    spec = podgroup.get("spec") or {}
    if (problem := _tree_error(spec)) is not None:
        return problem
    if spec.get("preemptionDelay") is not None:
        return delay_error("spec.preemptionDelay", spec["preemptionDelay"])
    return None


def podgroup_warnings(podgroup: Mapping[str, Any]) -> list[str]:
    """Admission warnings for a valid PodGroup: a minSubGroup no set of children can meet (more than there are
    direct children). The PodGroup is accepted, and stays pending with that explanation."""
    spec = podgroup.get("spec")
    if not isinstance(spec, Mapping):
        return []
    subgroups = _subgroups(spec)
    children = _children(subgroups)
    out: list[str] = []
    root_min = spec.get("minSubGroup")
    if _is_int(root_min) and root_min > len(children.get(None, [])):
        out.append(f"minSubGroup ({root_min}) exceeds the number of direct child SubGroups "
                   f"({len(children.get(None, []))})")
    for subgroup in subgroups:
        name = str(subgroup.get("name") or "")
        wanted = subgroup.get("minSubGroup")
        have = len(children.get(name, []))
        if _is_int(wanted) and have and wanted > have:
            out.append(f"subgroup {name!r}: minSubGroup ({wanted}) exceeds the number of direct child SubGroups "
                       f"({have})")
    return out


def _structure_error(podgroup: Mapping[str, Any]) -> str | None:
    subgroups = _subgroups(podgroup.get("spec") or {})
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


def _tree_error(spec: Mapping[str, Any]) -> str | None:
    min_member, min_sub_group = spec.get("minMember"), spec.get("minSubGroup")
    if min_member is not None and min_sub_group is not None:
        return (f"spec.minMember and spec.minSubGroup are mutually exclusive: set minMember ({min_member}) to "
                "schedule a fixed number of pods, or minSubGroup to require a minimum number of child SubGroups, "
                "but not both")
    subgroups = _subgroups(spec)
    children = _children(subgroups)
    for subgroup in sorted(subgroups, key=lambda s: str(s.get("name") or "")):
        name = str(subgroup.get("name") or "")
        has_min_member, has_min_sub_group = subgroup.get("minMember") is not None, subgroup.get(
            "minSubGroup") is not None
        if has_min_member and has_min_sub_group:
            return (f"subgroup {name!r}: minMember and minSubGroup are mutually exclusive: a leaf SubGroup sets "
                    "minMember (pods), a SubGroup with children sets minSubGroup (children)")
        if name in children:
            if has_min_member:
                return (f"subgroup {name!r}: minMember cannot be set on a SubGroup that has child SubGroups "
                        f"({', '.join(children[name])}); use minSubGroup, the number of children that must meet "
                        "their own minimum")
        else:
            if has_min_sub_group:
                return (f"subgroup {name!r}: minSubGroup cannot be set on a leaf SubGroup (no SubGroup names it as "
                        "parent); use minMember, the number of its pods that must run")
            if not has_min_member:
                return (f"subgroup {name!r}: minMember is required on a leaf SubGroup (no SubGroup names it as "
                        "parent)")
    return None


def _judged_fields_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    if not isinstance(old_spec, Mapping):
        return True
    return any(new_spec.get(f) != old_spec.get(f) for f in _RATCHETED_FIELDS)


def _subgroups(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = spec.get("subGroups")
    return [s for s in raw if isinstance(s, Mapping)] if isinstance(raw, list) else []


def _children(subgroups: list[Mapping[str, Any]]) -> dict[str | None, list[str]]:
    """Parent name (None: the PodGroup itself) -> the names of its direct children, in spec order."""
    out: dict[str | None, list[str]] = {}
    for subgroup in subgroups:
        out.setdefault(subgroup.get("parent") or None, []).append(str(subgroup.get("name") or ""))
    return out


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_error(podgroup: Mapping[str, Any]) -> str | None:
    """Wrong types the CRD schema refuses before us; checked so that a body that skipped it is refused, not a
    crash."""
    spec = podgroup.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        return f"spec: must be an object, got {spec!r}"
    for field in ("minMember", "minSubGroup"):
        if (problem := _int32_error(f"spec.{field}", spec.get(field))) is not None:
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
        for field in ("minMember", "minSubGroup"):
            if (problem := _int32_error(f"spec.subGroups[{index}].{field}", subgroup.get(field))) is not None:
                return problem
    return None


INT32_MAX = 2**31 - 1


def _int32_error(path: str, value: Any) -> str | None:
    # The CRD declares these int32 but the API server does not enforce formats; KAI's own controllers could not
    # decode a larger value, so it is refused here.
    if isinstance(value, int) and not isinstance(value, bool) and value > INT32_MAX:
        return f"{path}: {value} is larger than {INT32_MAX}"
    return None


# Semi-preemptible PodGroups (KAI v0.18): on UPDATE, no minimum may rise. Such a PodGroup is non-preemptible and in
# quota up to its minimum (its core). Raising `minMember`, `minSubGroup` (of the PodGroup or of any SubGroup kept by
# name) or `minNonPreemptible` would turn pods already running over quota into core pods without a scheduling
# decision; lowering them only widens the preemptible part, so it is allowed. An unset field is compared at the
# value the scheduler uses: minMember 1, minSubGroup every direct child, minNonPreemptible the minMember.
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
