"""The scheduler's assume cache: what it decided and is writing is put into its informers' stores at once, so the
next cycles decide on it before a watch event delivers it (KAI's assumed binds); and taken back when the write
fails. Also the informer transforms of the loop (pure functions of the watched object, except the PodGroup
overlay's bookkeeping of its outstanding annotations, see `PodGroupOverlay`).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from operators.core.cache import Informer
from operators.scheduler.decide.records import PodGroupRecord, PodRecord
from operators.scheduler.decide.snapshot import pod_record, podgroup_record

R = TypeVar("R")


class Assumed(Generic[R]):
    """The assume/forget API over one informer's store (through `Informer.put`): besides its own watch, the
    scheduler's only writer of it."""

    def __init__(self, informer: Informer[R]) -> None:
        self._informer = informer

    def assume(self, key: str, record: R) -> None:
        """`record` is being written: the store holds it now (listeners see ASSUMED, which is no news)."""
        self._informer.put(key, record, "ASSUMED")

    def forget(self, key: str) -> None:
        """The write failed or is moot: drop the assumption (a later watch event brings what is there)."""
        self._informer.put(key, None, "FORGOTTEN")

    def correct(self, key: str, record: R | None, event: str) -> None:
        """What the API server answered replaces the assumption (a re-read after a conflict: REREAD; a delete
        this process made: DELETED)."""
        self._informer.put(key, record, event)


def pod_transform(scheduler_name: str, obj: dict[str, Any]) -> PodRecord | None:
    """The pod informer's record: finished pods of other schedulers hold nothing, so they are not kept."""
    phase = (obj.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed") and (obj.get("spec") or {}).get("schedulerName") != scheduler_name:
        return None
    return pod_record(obj)


class PodGroupOverlay:
    """PodGroup annotations this process is writing (last-start, stale, last-eviction) and has not yet seen in a
    watched copy, and the PodGroups' schedulingConditions as last watched (so a condition write needs no read).

    `parse` is the PodGroup informer's transform: every copy parsed while an annotation is outstanding carries it,
    so later cycles decide as if it had landed (min-runtime protects a job from the cycle that started it, whether
    or not its annotation was written yet); the first copy that carries it ends the assumption."""

    def __init__(self) -> None:
        self.assumed: dict[str, dict[str, str | None]] = {}
        self.conditions: dict[str, list[dict[str, Any]]] = {}

    def parse(self, obj: dict[str, Any]) -> PodGroupRecord | None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        conditions = (obj.get("status") or {}).get("schedulingConditions")
        if conditions:
            self.conditions[key] = conditions
        else:
            self.conditions.pop(key, None)
        assumed = self.assumed.get(key)
        if assumed:
            live = meta.get("annotations") or {}
            if all(live.get(k) == v for k, v in assumed.items()):
                del self.assumed[key]  # landed
            else:
                merged = {k: v for k, v in {**live, **assumed}.items() if v is not None}
                obj = {**obj, "metadata": {**meta, "annotations": merged}}
        return podgroup_record(obj)

    def gone(self, key: str) -> None:
        """The PodGroup was deleted: nothing of it is outstanding."""
        self.conditions.pop(key, None)
        self.assumed.pop(key, None)
