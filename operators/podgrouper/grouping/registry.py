"""Rules keyed by the top owner's (group, kind) and version; adding a kind is adding one module."""

from __future__ import annotations

from collections.abc import Callable

from operators.podgrouper.grouping.common import Context, api_version_of, group_version, kind_of
from operators.podgrouper.grouping.model import Metadata, Obj

Rule = Callable[[Context, Obj], Metadata]
"""(context, top owner) -> metadata; raises GroupingFailure / MissingObjects."""

ANY_VERSION = "*"

_RULES: dict[tuple[str, str], dict[str, tuple[str, Rule]]] = {}


def register(group: str, kind: str, *versions: str, name: str | None = None) -> Callable[[Rule], Rule]:
    """Register a rule for a kind; no versions means every version."""
    def decorator(rule: Rule) -> Rule:
        table = _RULES.setdefault((group, kind), {})
        for version in versions or (ANY_VERSION,):
            table[version] = (name or rule.__name__, rule)
        return rule
    return decorator


def lookup(group: str, version: str, kind: str) -> tuple[str, Rule] | None:
    """Exact version first, then the wildcard; None means the Default grouper."""
    table = _RULES.get((group, kind))
    if not table:
        return None
    return table.get(version) or table.get(ANY_VERSION)


_fallback: list[tuple[str, Rule]] = []


def set_default(name: str, rule: Rule) -> None:
    _fallback[:] = [(name, rule)]


def dispatch(ctx: Context) -> tuple[str, Metadata]:
    """Apply the rule of the context's top owner (the Default grouper for unknown kinds)."""
    top = ctx.top
    group, version = group_version(api_version_of(top))
    found = lookup(group, version, kind_of(top))
    if found is None:
        found = _fallback[0]
    name, rule = found
    return name, rule(ctx, top)


def registered() -> list[tuple[str, str, str]]:
    return sorted((group, kind, version) for (group, kind), table in _RULES.items() for version in table)
