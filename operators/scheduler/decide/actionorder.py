"""Default priority per registered action name (higher runs first): the order of an `actions` map that sets none.

KAI's default order for the built-ins; `actions.register_action` adds others. Kept below the actions so the
configuration can check action names without importing them.
"""

from __future__ import annotations

PRIORITIES: dict[str, int] = {"allocate": 500, "consolidation": 400, "reclaim": 300, "preempt": 200,
                              "stalegangeviction": 100, "resizeeviction": 150}
