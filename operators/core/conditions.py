"""Status conditions as Kubernetes controllers keep them: one writer per condition type, merged into what is stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_COMPARED = ("status", "reason", "message", "observedGeneration")


def merge_conditions(existing: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]],
                     now: str) -> list[dict[str, Any]] | None:
    """The new condition list, or None when nothing changed. Other writers' conditions are kept as they are;
    lastTransitionTime moves only when a condition's status does."""
    by_type = {c.get("type"): c for c in existing}
    out: list[dict[str, Any]] = []
    changed = False
    for w in wanted:
        old = by_type.pop(w["type"], None)
        changed |= not (old is not None and all(old.get(k) == w[k] for k in _COMPARED))
        stamp = old.get("lastTransitionTime") if old and old.get("status") == w["status"] else now
        out.append({**w, "lastTransitionTime": stamp or now})
    out += [dict(c) for c in existing if c.get("type") in by_type]
    return out if changed else None
