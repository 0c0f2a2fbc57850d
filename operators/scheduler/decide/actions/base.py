"""The action plug-in interface: an action walks jobs through the session and changes state only through
statements, so allocations, pipelines and evictions share one rollback and accounting path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


class Action(Protocol):
    name: str
    # False for actions whose module exists but which are not implemented yet; run_cycle skips them.
    enabled: bool

    def execute(self, session: Session) -> None: ...
