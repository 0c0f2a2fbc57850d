"""The queue-controller: keeps every Queue's status true and validates Queues.

Queues and PodGroups come from one informer each (the process's only watches; a status is a sum over the whole
hierarchy). A change anywhere enqueues the affected queue and its ancestors; each reconcile recomputes the queue's
totals from the PodGroups of its subtree, so a status is right after one pass (KAI climbs one level per
reconcile), and is written only when it changed. The echo of the controller's own status write enqueues nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Hashable, Mapping
from typing import Any

from prometheus_client import REGISTRY

from operators.core import component
from operators.core.api.podgroup import podgroup_queue
from operators.core.api.queue import queue_record, queue_status_record
from operators.core.api.queue_validation import quota_warnings, validate_queue
from operators.core.booleans import add_bool_flag
from operators.core.cache import PODGROUPS, QUEUES, Informer, run_when_synced
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import MERGE_PATCH, is_not_found, merge_patched, raw
from operators.core.times import rfc3339
from operators.core.webhook import verdict
from operators.core.workqueue import WorkQueue
from operators.queuecontroller import metrics as queue_metrics
from operators.queuecontroller.status import (
    ORPHAN,
    REASON_PARENT_FOUND,
    all_queue_statuses,
    ancestry_conditions,
    ancestry_problem,
    status_patch,
)

COALESCE_SECONDS = 2.0
log = logging.getLogger("queue-controller")
FIELD_MANAGER = "kai-queue-controller"
VALIDATE_PATH = "/validate-scheduling-run-ai-v2-queue"
RESYNC_SECONDS = 60.0


def _slim_podgroup(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
            "spec": {"queue": podgroup_queue(obj)},
            "status": {"resourcesStatus": (obj.get("status") or {}).get("resourcesStatus") or {}}}


def _queue(obj: dict[str, Any]) -> dict[str, Any]:
    """The stored Queue, without managedFields (never read, and the bulk of the object)."""
    return {**obj, "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}}


def _beyond_status(queue: dict[str, Any]) -> tuple[Any, ...]:
    """What a reconcile reads of a Queue apart from its status (the version changes with every write)."""
    meta = queue.get("metadata") or {}
    return (queue.get("spec"), meta.get("labels"), meta.get("annotations"), meta.get("deletionTimestamp"))


class QueueController:
    def __init__(self, api: Any, args: argparse.Namespace) -> None:
        self.api = api
        self.args = args
        self.queues: Informer[dict[str, Any]] = Informer(
            api, QUEUES, _queue, indexes={"parent": lambda q: [p] if (p := _parent(q)) else []})
        self.podgroups: Informer[dict[str, Any]] = Informer(
            api, PODGROUPS, _slim_podgroup, indexes={"queue": lambda pg: [podgroup_queue(pg)]}, freeze_records=True)
        self.work = WorkQueue(self.reconcile, workers=4, name="queue-controller", kind="Queue")
        self.events = EventRecorder(api, "queue-controller", min_interval=30)
        self.metrics = queue_metrics.QueueMetrics(
            queue_metrics.MetricsConfig(namespace=args.metrics_namespace), registry=REGISTRY)
        # name -> the status of the Queue as this process's last status write returned it, so that the watch's
        # echo of that write is recognised and reconciles nothing.
        self._written: dict[str, Any] = {}
        self.podgroups.add_listener(self._on_podgroup)
        self.queues.add_listener(self._on_queue)

    # --- triggers ---------------------------------------------------------------------------------
    def ancestors(self, name: str | None) -> list[str]:
        out: list[str] = []
        seen: set[str] = set()
        while name and name not in seen:
            seen.add(name)
            out.append(name)
            queue = self.queues.get(name)
            name = _parent(queue) if queue is not None else None
        return out

    def enqueue_with_ancestors(self, name: str | None) -> None:
        for queue in self.ancestors(name):
            self.work.add(queue)

    def _on_podgroup(self, _: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        # PodGroup changes come in bursts (one per pod bound): each queue's status is written at most once per
        # COALESCE_SECONDS from the latest sums, one write in flight per queue.
        for pg in (old, new):
            if pg is not None:
                for queue in self.ancestors(podgroup_queue(pg)):
                    self.work.add_after(queue, COALESCE_SECONDS)

    def _on_queue(self, event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if old is not None and new is not None and _beyond_status(old) == _beyond_status(new) \
                and new.get("status") == self._written.get(new["metadata"]["name"]):
            return  # our own status write coming back: nothing a reconcile reads changed
        if new is None and old is not None:
            self._written.pop(old["metadata"]["name"], None)
        parents = {_parent(q) if q is not None else None for q in (old, new)}
        for queue in (old, new):
            if queue is None:
                continue
            self.work.add(queue["metadata"]["name"])
            self.enqueue_with_ancestors(_parent(queue))
            if old is None or new is None or len(parents) > 1:
                # A queue appeared, went away or moved: the ancestry of everything below it changed.
                for descendant in self._subtree(queue["metadata"]["name"]):
                    self.work.add(descendant)
        if event == "DELETED" and old is not None:
            self.metrics.remove(old["metadata"]["name"])

    # --- reconcile -------------------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> None:
        name = str(key)
        queue = self.queues.get(name)
        if queue is None:
            self.metrics.remove(name)
            return
        subtree = self._subtree(name)
        queues = [q for q in self.queues.values() if q["metadata"]["name"] in subtree]
        podgroups = [pg for q in subtree for pg in self.podgroups.by_index("queue", q)]
        computed = dict(all_queue_statuses(queues, podgroups)[name])
        stored_conditions = list(queue_status_record(queue).conditions)
        problem = ancestry_problem(name, self._ancestry(name))
        computed["conditions"] = ancestry_conditions(stored_conditions, problem, rfc3339())
        patch = status_patch(queue, computed)
        if patch is not None:
            # The watch may deliver the write's echo before the PATCH returns: expect it from now on.
            previous = self._written.get(name)
            self._written[name] = merge_patched(queue.get("status"), patch["status"])
            # A merge patch, not server-side apply: SSA stores an emptied status as null, which the CRD
            # rejects, so a queue whose last workload ended would keep reporting it.
            try:
                updated = await raw(self.api, "PATCH", f"{QUEUES.path()}/{name}/status",
                                    query={"fieldManager": FIELD_MANAGER}, body=patch,
                                    content_type=MERGE_PATCH)
            except Exception as exc:
                self._written[name] = previous
                if is_not_found(exc):
                    return
                raise
            if updated:
                self._written[name] = updated.get("status")
            await self._report_ancestry(queue, stored_conditions, problem)
            queue = _queue(updated) if updated else queue
        self.metrics.update(queue)

    async def _report_ancestry(self, queue: dict[str, Any], stored: list[Mapping[str, Any]],
                               problem: tuple[str, str] | None) -> None:
        """An event when the Orphan condition appears, changes or clears (the condition itself is in status)."""
        before = next((c for c in stored if c.get("type") == ORPHAN and c.get("status") == "True"), None)
        ref = ObjectRef(queue.get("apiVersion", f"{QUEUES.group}/{QUEUES.version}"), "Queue", "",
                        queue["metadata"]["name"], queue["metadata"].get("uid", ""))
        if problem is not None and (before is None or (before.get("reason"), before.get("message")) != problem):
            log.info("queue %s: %s", queue["metadata"]["name"], problem[1])
            await self.events.emit(ref, "Warning", problem[0], problem[1])
        elif problem is None and before is not None:
            parent = _parent(queue)
            await self.events.emit(ref, "Normal", REASON_PARENT_FOUND,
                                   f"parent queue '{parent}' exists now; workloads of this queue can be scheduled")

    def _ancestry(self, name: str) -> dict[str, str]:
        """name -> parentQueue for the stored queues on the way up from `name` (a missing one ends it)."""
        chain: dict[str, str] = {}
        current = name
        while current and current not in chain:
            queue = self.queues.get(current)
            if queue is None:
                break
            parent = _parent(queue)
            chain[current] = parent
            current = parent
        return chain

    def _subtree(self, name: str) -> set[str]:
        out, stack = {name}, [name]
        while stack:
            for child in self.queues.by_index("parent", stack.pop()):
                child_name = child["metadata"]["name"]
                if child_name not in out:
                    out.add(child_name)
                    stack.append(child_name)
        return out

    async def resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for queue in self.queues.values():
                self.work.add(queue["metadata"]["name"])

    # --- admission -------------------------------------------------------------------------------
    async def validate(self, review: dict[str, Any]) -> dict[str, Any]:
        request = review.get("request") or {}
        queue = request.get("object") or {}
        name = queue.get("metadata", {}).get("name")
        # A missing parent is accepted (the queue reports it once stored); cycles are refused.
        others = [q for q in self.queues.values() if q["metadata"]["name"] != name]
        errors = validate_queue(queue, [*others, queue])
        if errors:
            return verdict(review, errors[0], warnings=errors[:1])  # KAI returns the refusal as a warning too
        warnings: list[str] = []
        if self.args.enable_quota_validation:
            warnings = quota_warnings(queue, others, update=request.get("operation") == "UPDATE")
        return verdict(review, None, warnings=warnings or None)

    @property
    def ready(self) -> bool:
        return self.queues.synced.is_set() and self.podgroups.synced.is_set()


def _parent(queue: Mapping[str, Any]) -> str:
    return queue_record(queue).parent


async def build(args: argparse.Namespace, api: Any, _: component.Lifecycle) -> QueueController:
    return QueueController(api, args)


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("queue-controller")
    component.add_webhook_arguments(p)
    add_bool_flag(p, "--enable-webhook", default=True)
    p.add_argument("--metrics-namespace", default="kai")
    # KAI's opt-in: quota comparisons (child above parent, quota above limit) as admission warnings.
    add_bool_flag(p, "--enable-quota-validation", default=False)
    return p


COMPONENT = component.Component(
    "queue-controller", parser, build, caches=lambda c: [c.queues.run(), c.podgroups.run()],
    work=lambda c: [run_when_synced((c.queues, c.podgroups), c.work.run()), c.resync()], ready=lambda c: c.ready,
    webhook=lambda args, c: {VALIDATE_PATH: c.validate} if args.enable_webhook else None)


def main(argv: list[str]) -> int:
    return COMPONENT.main(argv)
