"""The pod-grouper: derives a PodGroup for every kai-scheduler pod from its top owner.

Pods come from an informer filtered by the API server (`spec.schedulerName`); the owner chain is read with
GETs through a short-lived cache shared by the pods grouped at the same time (a gang's pods cost one read of
their owner); PodGroups come from the process's own watch plus its own writes, so they are never read; the grouping
itself is the pure `grouping` package. Many reconciles run at once, but at most `2 x --max-concurrent-reconciles`
requests are in flight: a reconcile that waits for a read or PodGroup write another pod of its gang started holds
no request slot, so a gang's pods are grouped as fast as single pods. Problems become Warning
events `PodGrouperWarning` on the pod and the pod is retried with exponential backoff (1 s -> 60 s).
PodGroups come from an informer too (each the process's only watch of its resource), so a deleted PodGroup is
recreated for its live pods. Where KubeRay is installed, RayJobs are looked at too: a RayJob KubeRay refused
(K8sJobMode under kai-scheduler) never produces a pod, so it gets a Warning event of its own (`rayjob.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Hashable
from typing import Any

from operators.core import component, keys, slim
from operators.core.booleans import add_bool_flag
from operators.core.cache import PODGROUPS, PODS, PRIORITY_CLASSES, Informer, Resource, object_key, run_when_synced
from operators.core.discovery import Discovery
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import MERGE_PATCH, is_conflict, is_not_found, raw, status_of
from operators.core.times import parse_rfc3339
from operators.core.workqueue import WorkQueue
from operators.podgrouper.grouping.grouper import (
    PODGROUP_API_VERSION,
    failed_to_find_message,
    group_pod,
    merge_with_existing,
    owner_not_found_message,
    owners_skip,
    pod_patch,
    should_skip,
)
from operators.podgrouper.grouping.model import GrouperConfig, GroupingError, Lookups, NeedObjects
from operators.podgrouper.grouping.model import ObjectRef as NeededRef
from operators.podgrouper.rayjob import (
    GRACE_SECONDS,
    RAYJOBS_API_VERSION,
    REASON,
    may_be_refused,
    refusal_message,
    slim_rayjob,
)
from operators.podgrouper.rayjob_controller import RayJobAdmission

log = logging.getLogger("pod-grouper")
OWNER_TTL = 10.0
RESYNC_SECONDS = 300.0
RAYJOBS = Resource("ray.io", "v1", "rayjobs")
RAYCLUSTERS = Resource("ray.io", "v1", "rayclusters")
RAYJOB_POLL_SECONDS = 15.0
WAITING_FACTOR = 4  # reconciles per request slot pair: most of a gang's pods wait for their first pod's reads
DISCOVERY_RETRY_SECONDS = 60.0


def _version(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup without managedFields and status (an update leaves both as they are on the server)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _shows(pod: dict[str, Any], patch: dict[str, Any]) -> bool:
    """Whether the pod carries every annotation and label of the merge patch."""
    meta = pod.get("metadata") or {}
    wanted = patch.get("metadata") or {}
    return all((meta.get(field) or {}).get(k) == v
               for field in ("annotations", "labels") for k, v in (wanted.get(field) or {}).items())


class GroupingProblem(Exception):
    """A user-facing grouping failure (already reported as an event); retried with backoff."""


class PodGrouper:
    def __init__(self, api: Any, args: argparse.Namespace) -> None:
        self.api = api
        self.args = args
        self.config = GrouperConfig(queue_label_key=args.queue_label_key,
                                    gang_schedule_deployment=args.gang_schedule_deployment)
        self.pods: Informer[dict[str, Any]] = Informer(
            api, PODS, slim.grouping_pod, field_selector=f"spec.schedulerName={args.scheduler_name}",
            indexes={"group": lambda p: [(p["metadata"].get("namespace"), g)]
                     if (g := (p["metadata"].get("annotations") or {}).get(keys.POD_GROUP_NAME)) else [],
                     "namespace": lambda p: [p["metadata"].get("namespace")]},
            freeze_records=True)
        self.priority_classes: Informer[str] = Informer(api, PRIORITY_CLASSES, lambda o: o["metadata"]["name"])
        self.discovery = Discovery(api)
        self.events = EventRecorder(api, "pod-grouper", min_interval=10)
        # The API budget: a reconcile sends at most two requests at once (the PodGroup write and the pod's patch),
        # so `--max-concurrent-reconciles` reconciles that all write fill it. Reconciles waiting for what another
        # one is reading or writing hold no slot, so more of them run than the budget has slots.
        slots = max(1, args.max_concurrent_reconciles)
        self._api_gate = asyncio.Semaphore(2 * slots)
        self.work = WorkQueue(self.reconcile, workers=WAITING_FACTOR * slots, name="pod-grouper", kind="Pod")
        self._owners: dict[tuple[str, str, str, str], tuple[float, dict[str, Any] | None]] = {}
        self._reading: dict[tuple[str, str, str, str], asyncio.Future[dict[str, Any] | None]] = {}
        # PodGroups as their watch shows them, and our own writes until the watch catches up with them, so
        # grouping a pod whose PodGroup is unchanged costs no request and takes no lock; the writes of one
        # PodGroup are serialised so that a gang's second pod finds the PodGroup its first pod created.
        self.podgroups: Informer[dict[str, Any]] = Informer(api, PODGROUPS, _strip)
        self._written: dict[str, dict[str, Any]] = {}
        # Pod -> the merge patch this process sent it, until the pod watch shows it: a reconcile of a copy the
        # watch has not brought up to date (the 5-minute resync at a backlog, when the watch lags by minutes) would
        # send the same patch again, a write and two webhook reviews for nothing.
        self._patched: dict[str, dict[str, Any]] = {}
        self._group_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self.informers = (self.pods, self.priority_classes, self.podgroups)
        self.pods.add_listener(self._on_pod)
        self.podgroups.add_listener(self._on_podgroup)
        self._rayjob_done: set[str] = set()  # uids of RayJobs already looked at past the grace period

    def _on_pod(self, event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        current = new if new is not None else old
        assert current is not None  # the informer never reports a change from nothing to nothing
        key = object_key(current)
        if new is None or new["metadata"].get("deletionTimestamp"):
            self._patched.pop(key, None)
            return
        if key in self._patched and _shows(new, self._patched[key]):
            del self._patched[key]  # the watch caught up with our patch
        if old is None or self._grouping_inputs(old) != self._grouping_inputs(new):
            self.work.add(f"{new['metadata']['namespace']}/{new['metadata']['name']}")

    @staticmethod
    def _grouping_inputs(pod: dict[str, Any]) -> tuple[Any, ...]:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        return (str(meta.get("ownerReferences")), str(meta.get("labels")),
                annotations.get(keys.POD_GROUP_NAME))

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request to the API server, within the pod-grouper's request budget."""
        async with self._api_gate:
            return await raw(self.api, method, path, **kwargs)

    # --- reading owners ---------------------------------------------------------------------------
    async def _get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        key = (api_version, kind, namespace, name)
        cached = self._owners.get(key)
        if cached and time.monotonic() - cached[0] < OWNER_TTL:
            return cached[1]
        # The pods of a gang are grouped concurrently and share their owners: one read serves them all.
        pending = self._reading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        task = asyncio.ensure_future(self._read(api_version, kind, namespace, name))
        self._reading[key] = task
        try:
            obj = await asyncio.shield(task)
        finally:
            self._reading.pop(key, None)
        self._owners[key] = (time.monotonic(), obj)
        if len(self._owners) > 5000:
            self._owners.clear()
        return obj

    async def _read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        resource = await self.discovery.resolve(api_version, kind)
        if resource is None:
            raise LookupError(f"the API server does not serve {kind} in {api_version}")
        obj: dict[str, Any] | None
        try:
            obj = await self._call("GET", resource.path(namespace, name))
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise
        if obj is not None:
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
        return obj

    async def _list(self, ref: NeededRef) -> list[dict[str, Any]]:
        resource = await self.discovery.resolve(ref.api_version, ref.kind)
        if resource is None:
            return []
        selector = ",".join(f"{k}={v}" for k, v in ref.labels) or None
        page = await self._call("GET", resource.path(ref.namespace), query={"labelSelector": selector})
        return [{**o, "apiVersion": ref.api_version, "kind": ref.kind} for o in page.get("items") or []]

    async def owner_chain(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """Direct owner first, top owner last; stops at an owner RBAC forbids reading."""
        chain: list[dict[str, Any]] = []
        namespace = pod["metadata"]["namespace"]
        refs = pod["metadata"].get("ownerReferences") or []
        seen: set[str] = set()
        while len(refs) == 1:
            ref = refs[0]
            if ref.get("uid") in seen:
                break
            seen.add(ref.get("uid", ""))
            try:
                owner = await self._get(ref["apiVersion"], ref["kind"], namespace, ref["name"])
            except Exception as exc:
                if status_of(exc) == 403:
                    break
                raise GroupingProblem(failed_to_find_message(ref["kind"], namespace, ref["name"],
                                                             ref.get("uid", ""), str(exc))) from exc
            if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
                raise GroupingProblem(owner_not_found_message(ref.get("uid", "")))
            chain.append(owner)
            refs = owner["metadata"].get("ownerReferences") or []
        return chain

    # --- reconcile -------------------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> None:
        pod = self.pods.get(str(key))
        if pod is None or pod["metadata"].get("deletionTimestamp") or should_skip(pod, self.args.scheduler_name):
            return
        try:
            await self._group(pod)
        except GroupingProblem as problem:
            await self.events.emit(ObjectRef.of(pod), "Warning", keys.EVENT_POD_GROUPER_WARNING, str(problem))
            raise

    async def _group(self, pod: dict[str, Any]) -> None:
        chain = await self.owner_chain(pod)
        if owners_skip(chain):
            return  # an owner's creator grouped its pods itself (kai.scheduler/skip-podgrouper)
        lookups = Lookups(priority_classes=frozenset(self.priority_classes.values()))
        for _ in range(5):
            result = group_pod(pod, chain, lookups, self.config)
            if not isinstance(result, NeedObjects):
                break
            answers: dict[NeededRef, Any] = {}
            for ref in result.refs:
                if ref.is_list and (ref.api_version, ref.kind) == ("v1", "Pod") and self.pods.synced.is_set():
                    answers[ref] = self._watched_pods(ref)  # a Deployment's kai-scheduler pods: all watched
                elif ref.is_list:
                    answers[ref] = await self._list(ref)
                else:
                    assert ref.name is not None
                    if ref.kind == "PodGroup" and ref.api_version == PODGROUP_API_VERSION \
                            and self.podgroups.synced.is_set():
                        # Watched, and our own writes on top: absent here means absent (only we create them).
                        answers[ref] = self.podgroup(f"{ref.namespace}/{ref.name}")
                        continue
                    answers[ref] = await self._get(ref.api_version, ref.kind, ref.namespace, ref.name)
            lookups = lookups.with_related(answers)
        else:
            raise GroupingProblem("the grouping rules kept asking for more objects; this is a bug")
        if isinstance(result, GroupingError):
            raise GroupingProblem(result.message)
        assert not isinstance(result, NeedObjects)
        # The PodGroup write and the pod's patch go out together: one round trip per pod instead of two. Nothing
        # schedules a pod before both landed (its PodGroup is what the scheduler schedules), and a failed write
        # fails the reconcile, which is retried. Except for a pod without owners: one that carries the annotation
        # counts as grouped by its user and is never looked at again (`should_skip`), so its PodGroup must exist
        # before the annotation does, or a grouper stopped in between (a rolling upgrade) leaves it ungrouped.
        if pod["metadata"].get("ownerReferences"):
            await asyncio.gather(self._write_podgroup_locked(result), self._patch_pod(pod, result))
        else:
            await self._write_podgroup_locked(result)
            await self._patch_pod(pod, result)

    def _watched_pods(self, ref: NeededRef) -> list[dict[str, Any]]:
        labels = dict(ref.labels)
        return [p for p in self.pods.by_index("namespace", ref.namespace)
                if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())]

    async def _write_podgroup_locked(self, result: Any) -> None:
        key = f"{result.namespace}/{result.name}"
        if key not in self._group_locks:
            existing = self.podgroup(key)
            if existing is not None and not merge_with_existing(result.podgroup, existing, self.config)[1]:
                return  # already as wanted, and no write of it in flight: nothing to wait for
        lock, users = self._group_locks.get(key) or (asyncio.Lock(), 0)
        self._group_locks[key] = (lock, users + 1)
        try:
            async with lock:
                await self._write_podgroup(result)
        finally:
            lock, users = self._group_locks[key]
            if users <= 1:
                del self._group_locks[key]
            else:
                self._group_locks[key] = (lock, users - 1)

    async def _patch_pod(self, pod: dict[str, Any], result: Any) -> None:
        patch = pod_patch(pod, result)
        key = object_key(pod)
        if patch is None or self._patched.get(key) == patch:
            return  # as wanted, or our same patch already went out and the watch has not shown it yet
        meta = pod["metadata"]
        try:
            await self._call("PATCH", f"{PODS.path(meta['namespace'])}/{meta['name']}", body=patch,
                             content_type=MERGE_PATCH)
        except Exception as exc:
            if not is_not_found(exc):
                raise
            return
        if not _shows(self.pods.get(key) or pod, patch):
            self._patched[key] = patch

    def podgroup(self, key: str) -> dict[str, Any] | None:
        """The newest known copy of a PodGroup: the watched one, or our own write's answer while it is newer."""
        watched = self.podgroups.get(key)
        own = self._written.get(key)
        if own is not None and (watched is None or _version(own) > _version(watched)):
            return own
        return watched

    def _on_podgroup(self, _: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            key = f"{new['metadata'].get('namespace')}/{new['metadata'].get('name')}"
            own = self._written.get(key)
            if own is not None and _version(new) >= _version(own):
                del self._written[key]  # the watch caught up with our write
            return
        if old is None:
            return
        # A deleted PodGroup is recreated for its live pods.
        namespace, name = old["metadata"].get("namespace"), old["metadata"].get("name")
        self._written.pop(f"{namespace}/{name}", None)
        for pod in self.pods.by_index("group", (namespace, name)):
            self.work.add(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")

    async def _write_podgroup(self, result: Any) -> None:
        """Create the PodGroup, or update it when the grouping changed; reads it back only on a conflict."""
        path = PODGROUPS.path(result.namespace)
        key = f"{result.namespace}/{result.name}"
        existing = self.podgroup(key)
        for attempt in range(2):
            desired, changed = merge_with_existing(result.podgroup, existing, self.config)
            if not changed:
                return
            try:
                if existing is None:
                    created = await self._call("POST", path, body=desired)
                    log.info("created PodGroup %s/%s (%s)", result.namespace, result.name, result.rule)
                else:
                    created = await self._call("PUT", f"{path}/{result.name}", body=desired)
                self._written[key] = _strip(created)
                return
            except Exception as exc:
                if is_conflict(exc) and attempt == 0:
                    # Created meanwhile, or our copy is stale: read it once and merge again.
                    try:
                        existing = await self._call("GET", f"{path}/{result.name}")
                    except Exception as get_exc:
                        if not is_not_found(get_exc):
                            raise
                        existing = None
                    continue
                if is_conflict(exc):
                    raise RuntimeError(f"PodGroup {result.name} changed meanwhile; retrying") from exc
                if status_of(exc) in (400, 403, 422):
                    raise GroupingProblem(f"cannot write PodGroup {result.name}: "
                                          f"{getattr(exc, 'body', exc)}") from exc
                raise

    async def resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for pod in self.pods.values():
                self.work.add(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")

    # --- RayJobs KubeRay refused -----------------------------------------------------------------
    async def watch_rayjobs(self) -> None:
        """List RayJobs every RAYJOB_POLL_SECONDS once the API server serves them (KubeRay may come later).

        A list, not a watch: the owner kinds the pod-grouper may read are granted get and list only, and a
        refused RayJob is rare and stays refused, so a slow look is enough.
        """
        while True:
            try:
                if await self.discovery.resolve(RAYJOBS_API_VERSION, "RayJob") is not None:
                    break
            except Exception as exc:
                log.warning("cannot tell whether RayJobs are served: %s", exc)
            await asyncio.sleep(DISCOVERY_RETRY_SECONDS)
            self.discovery = Discovery(self.api)  # forget the negative answer
        while True:
            try:
                page = await raw(self.api, "GET", RAYJOBS.path(), timeout=60)
                await self.check_rayjobs([slim_rayjob(o) for o in page.get("items") or []])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("cannot check RayJobs: %s", exc)
            await asyncio.sleep(RAYJOB_POLL_SECONDS)

    async def check_rayjobs(self, jobs: list[dict[str, Any]]) -> None:
        """A Warning event on each RayJob KubeRay evidently refused (once per RayJob)."""
        self._rayjob_done &= {job["metadata"]["uid"] for job in jobs}
        for job in jobs:
            meta = job["metadata"]
            if meta["uid"] in self._rayjob_done or not may_be_refused(job) or _age(job) < GRACE_SECONDS:
                continue
            cluster = job["status"]["rayClusterName"]
            try:
                await raw(self.api, "GET", f"{RAYCLUSTERS.path(meta['namespace'])}/{cluster}")
                exists = True
            except Exception as exc:
                if not is_not_found(exc):
                    raise
                exists = False
            self._rayjob_done.add(meta["uid"])  # checked once: KubeRay does not retry differently later
            message = refusal_message(job, exists, _age(job))
            if message is not None:
                log.warning("RayJob %s/%s: %s", meta["namespace"], meta["name"], message)
                await self.events.emit(ObjectRef.of(job), "Warning", REASON, message)

    @property
    def ready(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)


def _age(obj: dict[str, Any]) -> float:
    created = parse_rfc3339((obj.get("metadata") or {}).get("creationTimestamp"))
    return 0.0 if created is None else time.time() - created


async def build(args: argparse.Namespace, api: Any, _: component.Lifecycle) -> PodGrouper:
    return PodGrouper(api, args)


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("pod-grouper")
    p.add_argument("--queue-label-key", default=keys.QUEUE_LABEL)
    # KAI's default is 10; each reconcile here is a chain of API round trips, so more run at once (asyncio
    # tasks are cheap) to keep up with the API server rather than with one another. It sets the request budget
    # (two requests per reconcile); WAITING_FACTOR times as many reconciles run, most waiting for their gang.
    p.add_argument("--max-concurrent-reconciles", type=int, default=32)
    # KAI v0.18 (its Config field podGrouper.args.gangScheduleDeployment, default true): a new Deployment gets
    # one PodGroup; false keeps the older one PodGroup per pod.
    add_bool_flag(p, "--gang-schedule-deployment", default=True)
    return p


COMPONENT = component.Component(
    "pod-grouper", parser, build, caches=lambda g: [i.run() for i in g.informers],
    work=lambda g: [run_when_synced(g.informers, g.work.run()), g.resync(), g.watch_rayjobs(),
                    RayJobAdmission(g.api, g.events, g.args.queue_label_key).run()],
    ready=lambda g: g.ready)


def main(argv: list[str]) -> int:
    return COMPONENT.main(argv)
