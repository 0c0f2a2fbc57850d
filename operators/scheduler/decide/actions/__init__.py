"""Action registry: each action class registers under its name with a default priority (higher runs first);
the built-in ones in KAI's default order (allocate 500, consolidation 400, reclaim 300, preempt 200,
stalegangeviction 100; resizeeviction 150, off unless configured). The configuration's `actions` map picks the
enabled set and order by these names."""

from __future__ import annotations

from operators.scheduler.decide.actionorder import PRIORITIES
from operators.scheduler.decide.actions.allocate import Allocate
from operators.scheduler.decide.actions.base import Action
from operators.scheduler.decide.actions.consolidate import Consolidation
from operators.scheduler.decide.actions.preempt import Preempt
from operators.scheduler.decide.actions.reclaim import Reclaim
from operators.scheduler.decide.actions.resizeeviction import ResizeEviction
from operators.scheduler.decide.actions.stalegang import StaleGangEviction

ACTIONS: dict[str, type[Action]] = {}


def register_action(cls: type[Action], priority: int) -> type[Action]:
    """Make `cls` available to the configuration under `cls.name`."""
    ACTIONS[cls.name] = cls
    PRIORITIES[cls.name] = priority
    return cls


for _cls in (Allocate, Consolidation, Reclaim, Preempt, StaleGangEviction, ResizeEviction):
    register_action(_cls, PRIORITIES[_cls.name])


def get_action(name: str) -> Action:
    try:
        return ACTIONS[name]()
    except KeyError:
        raise ValueError(f"unknown action {name!r} (known: {', '.join(ACTIONS)})") from None


__all__ = ["ACTIONS", "PRIORITIES", "Action", "get_action", "register_action"]
