"""Validation of Topology objects (`kai.scheduler/v1alpha1`): pure functions of the new and the old object.

Rules, each with a message naming the offending field:
- `spec.levels` is a non-empty list of at most 16 levels, each an object with a non-empty string `nodeLabel`;
- node labels are unique, and `kubernetes.io/hostname` may only be the last (finest) level;
- aliases are non-empty strings when given, unique, and never equal to any level's node label (a workload names a
  level by either, so an alias equal to another level's node label would be ambiguous);
- on UPDATE the node labels (values and order) are immutable: the domains every placed workload was checked
  against would change under it. Aliases may be added, changed or removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from operators.core.api.topology import HOSTNAME_LABEL, MAX_LEVELS

IMMUTABLE: Final = ("spec.levels: the node labels of a Topology cannot change (was {old}, now {new}); only aliases "
                    "may change. Create a Topology under a new name for a different hierarchy")
HOSTNAME_NOT_LAST: Final = "the kubernetes.io/hostname label can only be used at the lowest level of topology"


def _levels(obj: Mapping[str, Any] | None) -> Any:
    spec = (obj or {}).get("spec")
    return spec.get("levels") if isinstance(spec, Mapping) else None


def node_labels(obj: Mapping[str, Any] | None) -> list[str]:
    """The node labels of a Topology's levels, in order (entries that are not well-formed are skipped)."""
    levels = _levels(obj)
    if not isinstance(levels, list):
        return []
    return [str(level["nodeLabel"]) for level in levels
            if isinstance(level, Mapping) and isinstance(level.get("nodeLabel"), str)]


def validate_topology(new: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem of `new` (and of the change from `old`, on UPDATE); empty when it is valid."""
    levels = _levels(new)
    if not isinstance(new.get("spec"), Mapping):
        return ["spec is required: a Topology needs spec.levels, a list of {nodeLabel, alias}"]
    if not isinstance(levels, list) or not levels:
        return ["spec.levels must list at least one level {nodeLabel: <node label>, alias: <optional name>}, "
                "from the coarsest to the finest"]
    errors: list[str] = []
    if len(levels) > MAX_LEVELS:
        errors.append(f"spec.levels has {len(levels)} levels; at most {MAX_LEVELS} are allowed")
    labels: dict[str, int] = {}
    for i, level in enumerate(levels):
        where = f"spec.levels[{i}]"
        if not isinstance(level, Mapping):
            errors.append(f"{where} must be an object {{nodeLabel, alias}}")
            continue
        label = level.get("nodeLabel")
        if not isinstance(label, str) or not label.strip():
            errors.append(f"{where}.nodeLabel must be a non-empty node label key (e.g. topology.kubernetes.io/zone)")
            continue
        if label in labels:
            errors.append(f"{where}.nodeLabel: node label {label!r} is already level {labels[label]}; "
                          "each level needs its own node label")
            continue
        labels[label] = i
    if HOSTNAME_LABEL in labels and labels[HOSTNAME_LABEL] != len(levels) - 1:
        errors.append(HOSTNAME_NOT_LAST)
    aliases: dict[str, int] = {}
    for i, level in enumerate(levels):
        if not isinstance(level, Mapping) or level.get("alias") is None:
            continue
        where = f"spec.levels[{i}].alias"
        alias = level["alias"]
        if not isinstance(alias, str) or not alias.strip():
            errors.append(f"{where} must be a non-empty string when given (omit it for no alias)")
            continue
        if alias in aliases:
            errors.append(f"{where}: alias {alias!r} is already used by level {aliases[alias]}; aliases must be "
                          "unique")
            continue
        aliases[alias] = i
        if alias in labels:
            errors.append(f"{where}: alias {alias!r} equals the nodeLabel of level {labels[alias]}; an alias must "
                          "differ from every level's node label, or a workload naming it would be ambiguous")
    if old is not None and not errors:
        before, after = node_labels(old), node_labels(new)
        if before and before != after:
            errors.append(IMMUTABLE.format(old=before, new=after))
    return errors
