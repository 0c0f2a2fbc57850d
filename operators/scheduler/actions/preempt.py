"""preempt: not implemented yet (next issue); registered so configs naming it are valid.

It will run on the same Session/Statement machinery as allocate: `stmt.evict(...)` for victims,
`allocate_job(..., pipeline_only=True)` for re-placements, `stmt.rollback(checkpoint)` per scenario.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from operators.scheduler.session import Session


class Preempt:
    name = "preempt"
    enabled = False

    def execute(self, session: Session) -> None:
        return None
