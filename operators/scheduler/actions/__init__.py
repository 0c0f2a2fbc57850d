"""Action registry, in KAI's default order."""

from __future__ import annotations

from operators.scheduler.actions.allocate import Allocate
from operators.scheduler.actions.base import Action
from operators.scheduler.actions.consolidate import Consolidation
from operators.scheduler.actions.preempt import Preempt
from operators.scheduler.actions.reclaim import Reclaim
from operators.scheduler.actions.stalegang import StaleGangEviction

ACTIONS: dict[str, type[Action]] = {
    "allocate": Allocate,
    "consolidation": Consolidation,
    "reclaim": Reclaim,
    "preempt": Preempt,
    "stalegangeviction": StaleGangEviction,
}


def get_action(name: str) -> Action:
    try:
        return ACTIONS[name]()
    except KeyError:
        raise ValueError(f"unknown action {name!r}") from None


__all__ = ["ACTIONS", "Action", "get_action"]
