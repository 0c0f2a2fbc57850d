"""PodDisruptionBudgets as the victim search sees them, as pure functions.

A budget allows `status.disruptionsAllowed` more pods of its selector to go now. Walking a search's victim chunks
in the action's order, a chunk whose covered pods still fit every budget it touches keeps its place and spends
them; a chunk that would take a budget below its minimum goes after all the others (or is dropped, where the
victim's queue or the shard forbids it). The solver grows scenarios from the front, so unprotected pods are used
before a budget is broken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

ALLOW = "allow"
FORBID = "forbid"
SETTINGS = (ALLOW, FORBID)


def order_by_budget(chunks: Sequence[Sequence[T]], covered: Mapping[T, Sequence[int]], budget: list[int],
                    may_break: Callable[[T], bool]) -> list[int]:
    """Indexes of `chunks` to try: those within the budgets in their order, then those beyond (each chunk's
    first pod says whether its queue lets it break a budget; those that may not are left out). `budget` (per
    PDB index: disruptions still allowed) is consumed."""
    within: list[int] = []
    beyond: list[int] = []
    for i, pods in enumerate(chunks):
        need: dict[int, int] = {}
        for p in pods:
            for k in covered.get(p, ()):
                need[k] = need.get(k, 0) + 1
        if all(budget[k] >= n for k, n in need.items()):
            for k, n in need.items():
                budget[k] -= n
            within.append(i)
        elif may_break(pods[0]):
            beyond.append(i)
    return within + beyond


def budget_note(names: Sequence[str], allowed: Sequence[int], broken: bool) -> str:
    """Appended to the eviction message of a pod a PodDisruptionBudget covers."""
    listed = ", ".join(f"{n} ({a} disruption{'s' if a != 1 else ''} allowed)" for n, a in zip(names, allowed,
                                                                                            strict=True))
    if broken:
        return (f"PodDisruptionBudget {listed} covers it: no other victim set would do, and its queue allows "
                "going below the budget.")
    return f"PodDisruptionBudget {listed} covers it; the eviction stays within the budget."
