"""The writes of suspend-instead-of-kill (the `suspend` plugin decides them): one merge patch of the top owner's
suspend field per suspended or resumed owner, and an event on the owner saying why.

A patch names the owner's uid, so a recreated owner of the same name is never touched. An owner of a kind the
scheduler does not know is read first and suspended only if it has a boolean at that field; otherwise, or when
the patch is refused, its victims are evicted as usual (returned to the writer).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import MERGE_PATCH, is_not_found, raw
from operators.scheduler.decide.decisions import Eviction, Resume, Suspension
from operators.scheduler.decide.plugins.suspend import rules

log = logging.getLogger("scheduler")

EVENT_SUSPENDED = "SuspendedByScheduler"  # the Job controller writes its own `Suspended`
EVENT_RESUMED = "ResumedByScheduler"
REPEAT_AFTER = 60.0  # seconds: a suspension decided again while the owner's pods are still going is not rewritten


def _nested(path: tuple[str, ...], value: object) -> dict[str, Any]:
    body: dict[str, Any] = {path[-1]: value}
    for key in reversed(path[:-1]):
        body = {key: body}
    return body


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> object:
    value: object = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


class Suspender:
    def __init__(self, api: Any, events: EventRecorder) -> None:
        self.api = api
        self.events = events
        self._written: dict[str, float] = {}  # owner uid -> monotonic time of our last suspend patch

    def _path(self, namespace: str, owner: tuple[str, str, str, str]) -> str:
        kind = rules.owner_kind(owner[0], owner[1])
        plural = kind.plural if kind else f"{owner[1].lower()}s"
        return rules.owner_path(owner[0], plural, namespace, owner[2])

    async def _patch(self, namespace: str, owner: tuple[str, str, str, str], path: tuple[str, ...],
                     value: bool) -> None:
        body = {**_nested(path, value), "metadata": {"uid": owner[3]}}  # the uid is a precondition
        await raw(self.api, "PATCH", self._path(namespace, owner), body=body, content_type=MERGE_PATCH)

    async def suspend(self, s: Suspension) -> tuple[Eviction, ...]:
        """Suspend the owner; the evictions to make instead when it cannot be suspended."""
        now = time.monotonic()
        if now - self._written.get(s.owner[3], -1e9) < REPEAT_AFTER:
            return ()
        try:
            if s.verify:
                live = await raw(self.api, "GET", self._path(s.namespace, s.owner))
                if not isinstance(_at(live, s.field_path), bool):
                    log.info("%s %s/%s has no boolean %s: its pods are evicted", s.owner[1], s.namespace,
                             s.owner[2], ".".join(s.field_path))
                    return s.evictions
            await self._patch(s.namespace, s.owner, s.field_path, True)
        except Exception as exc:
            if is_not_found(exc):
                return ()
            log.warning("suspending %s %s/%s failed (%s): its pods are evicted", s.owner[1], s.namespace,
                        s.owner[2], exc)
            return s.evictions
        self._written[s.owner[3]] = now
        await self.events.emit(ObjectRef(s.owner[0], s.owner[1], s.namespace, s.owner[2], s.owner[3]), "Normal",
                               EVENT_SUSPENDED, s.message)
        return ()

    async def resume(self, r: Resume) -> None:
        try:
            await self._patch(r.namespace, r.owner, r.field_path, False)
        except Exception as exc:
            if not is_not_found(exc):
                raise
            return
        self._written.pop(r.owner[3], None)
        await self.events.emit(ObjectRef(r.owner[0], r.owner[1], r.namespace, r.owner[2], r.owner[3]), "Normal",
                               EVENT_RESUMED, r.message)
