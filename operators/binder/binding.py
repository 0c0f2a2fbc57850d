"""The binder's I/O: one BindRequest reconcile, GPU reservations and their garbage collection.

Decisions are the pure helpers of `gpusharing` and `reservation`; this module reads and writes the API. Every
step is idempotent so a restarted binder can redo any request: a pod with `spec.nodeName` is never bound again,
ConfigMaps are created or patched, labels merge-patched, and a reservation found by label is reused.

Locking. One asyncio lock per GPU group serialises "find or create the reservation pod, label the workload pod"
against the group's garbage collection. A pod is labelled before the lock is released, so GC always sees the
user of a fresh reservation pod (a Pending labelled pod keeps its reservation alive).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Histogram

from operators.binder.gpusharing import (
    GpuSharingError,
    configmap_bodies,
    configmap_merge_patch,
    configmap_names,
    gpu_group_labels_patch,
    gpu_group_labels_removal_patch,
    is_fake_gpu_node,
    pod_gpu_groups,
)
from operators.binder.reservation import (
    FOUND_POD_WITHOUT_RESERVATION,
    make_random_suffix,
    reservation_pod_manifest,
    reserved_device_id,
    sync_decisions,
)
from operators.core import keys
from operators.core.api.bindrequest import BindRequestRecord, parse_bindrequest
from operators.core.cache import BINDREQUESTS, CONFIGMAPS, NODES, PODS, Informer
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import JSON_PATCH, MERGE_PATCH, is_conflict, is_not_found, raw
from operators.core.metrics import Counter
from operators.core.times import rfc3339
from operators.core.units import MS_PER_SECOND
from operators.core.workqueue import WorkQueue

log = logging.getLogger("binder")

STRATEGIC_MERGE: Final = "application/strategic-merge-patch+json"
COMPONENT: Final = "binder"

BIND_LATENCY = Histogram("kai_binder_bind_latency_milliseconds", "Time to bind one BindRequest's pod",
                         buckets=[5 * 2**k for k in range(10)])
BINDS = Counter("kai_binder_binds_total", "BindRequests handled, by result", ["result"])
RECONCILE_ERRORS = Counter("kai_binder_reconcile_errors_total", "BindRequest reconciles that failed")
# Binds to one node within this many seconds share one reservation sync of the node's GPU groups.
SYNC_FRESHNESS: Final = 2.0

RESERVATION_PODS_DELETED = Counter("kai_binder_reservation_pods_deleted_total", "Reservation pods garbage-collected")


class BindError(Exception):
    """A failed bind; the message becomes the BindRequest's `status.reason`."""


class InvalidBindRequest(BindError):
    """The request itself is wrong; it is deleted so that the scheduler writes a new one."""


@dataclass(frozen=True)
class BinderConfig:
    scheduler_name: str = keys.SCHEDULER_NAME
    reservation_namespace: str = keys.RESERVATION_NAMESPACE
    service_account: str = keys.RESERVATION_SERVICE_ACCOUNT
    app_label: str = keys.RESERVATION_APP_LABEL_VALUE
    image: str = "registry/local/kai-scheduler/resource-reservation"
    allocation_timeout: float = 40.0
    runtime_class_name: str | None = None
    reservation_resources: Mapping[str, Any] | None = None
    fake_gpu_nodes: bool = False
    cdi_enabled: bool = False
    workers: int = 10
    base_delay: float = 1.0
    max_delay: float = 60.0


class Member(NamedTuple):
    """What the binder keeps of a kai-scheduler pod: enough to bind a plain pod without reading it, and the GPU
    groups the GC triggers need (groups is empty for pods without GPU sharing)."""

    node: str
    phase: str
    groups: tuple[str, ...]
    uid: str = ""
    pod_bound: tuple[str, str, str] | None = None  # PodBound condition (status, reason, message)
    device: str = ""  # a reservation pod's reported GPU id (annotation), once it has one


def member_record(obj: dict[str, Any]) -> Member | None:
    groups = pod_gpu_groups(obj)
    condition = next((c for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == keys.CONDITION_POD_BOUND), None)
    bound = None if condition is None else (str(condition.get("status") or ""), str(condition.get("reason") or ""),
                                            str(condition.get("message") or ""))
    return Member(str((obj.get("spec") or {}).get("nodeName") or ""),
                  str((obj.get("status") or {}).get("phase") or "Pending"), tuple(groups),
                  str(_meta(obj).get("uid") or ""), bound)


def reservation_record(obj: dict[str, Any]) -> Member | None:
    member = member_record(obj) if pod_gpu_groups(obj) else None
    return member._replace(device=reserved_device_id(obj) or "") if member is not None else None


def pod_from_member(namespace: str, name: str, member: Member) -> dict[str, Any]:
    """The pod as far as a plain bind reads it, rebuilt from the informer's record."""
    conditions = [] if member.pod_bound is None else [
        {"type": keys.CONDITION_POD_BOUND, "status": member.pod_bound[0], "reason": member.pod_bound[1],
         "message": member.pod_bound[2]}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": member.uid},
            "spec": {"nodeName": member.node or None}, "status": {"phase": member.phase, "conditions": conditions}}


@dataclass
class _DeviceWait:
    future: asyncio.Future[str | None]
    seen: bool = False  # the informer has shown the pod (so its absence now means it was deleted)


class KeyedLocks:
    """One asyncio.Lock per key, dropped when nobody holds or waits for it (GPU groups come and go)."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def error_message(exc: BaseException) -> str:
    """The API server's own message for an API error (`nodes "n1" not found`), else the exception text."""
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "")
            if isinstance(body, dict) and body.get("message"):
                return str(body["message"])
        except (TypeError, ValueError):
            pass
        return f"{exc.status} {exc.reason}".strip()
    return str(exc) or type(exc).__name__


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


class Binder:
    def __init__(self, api: client.ApiClient, watch_api: client.ApiClient, config: BinderConfig) -> None:
        self.api = api
        self.config = config
        self.events = EventRecorder(api, COMPONENT, min_interval=5)
        self.locks = KeyedLocks()
        self._last_sync: dict[str, float] = {}  # group -> monotonic start of its last completed sync
        by_node: dict[str, Any] = {"node": lambda m: [m.node] if m.node and m.groups else []}
        # Every kai-scheduler pod (plain binds read the pod from here, not from the API server); fraction pods
        # are among them. Reservation pods live in their own namespace.
        self.members: Informer[Member] = Informer(
            watch_api, PODS, member_record, field_selector=f"spec.schedulerName={config.scheduler_name}",
            indexes=by_node)
        self.reservations: Informer[Member] = Informer(
            watch_api, PODS, reservation_record, namespace=config.reservation_namespace, indexes=by_node)
        self.nodes: Informer[bool] = Informer(watch_api, NODES, lambda _: True)
        self.bindrequests: Informer[BindRequestRecord] = Informer(watch_api, BINDREQUESTS, parse_bindrequest)
        # The process's only watches: one per resource (pods twice, on disjoint sets: kai-scheduler's pods
        # cluster-wide, and the reservation namespace, whose pods name no scheduler).
        self.informers = (self.members, self.reservations, self.nodes, self.bindrequests)
        # The latest copy of each open BindRequest as its watch delivered it: the reconcile reads it from here
        # and goes to the API server only when it is missing (start-up, retries after a failure).
        self.requests: dict[str, BindRequestRecord] = {}
        # Reservation pods waited for, by key: their device id once the informer shows it.
        self._devices: dict[str, _DeviceWait] = {}
        self.binds = WorkQueue(self.reconcile, workers=config.workers, base_delay=config.base_delay,
                               max_delay=config.max_delay, name="bindrequests", kind="BindRequest")
        self.group_syncs = WorkQueue(lambda group: self.sync_group(str(group)), workers=4,
                                     base_delay=config.base_delay, max_delay=config.max_delay, name="gpu-groups")
        # Successful binds whose event and status are still being written (see `_report_bound`).
        self._reporting: set[str] = set()
        self._reports: set[asyncio.Task[None]] = set()
        self._report_gate = asyncio.Semaphore(max(config.workers // 2, 1))
        self.members.add_listener(self._on_member)
        self.reservations.add_listener(self._on_member)
        self.reservations.add_listener(self._on_reservation)
        self.bindrequests.add_listener(self._on_bindrequest)

    # --- triggers ------------------------------------------------------------------------------------
    def _on_member(self, _: str, old: Member | None, new: Member | None) -> None:
        """A group member finished, went away or left the group: its groups may hold a GPU for nobody."""
        if old is None:
            return
        ended = new is None or (new.phase in ("Succeeded", "Failed") and old.phase not in ("Succeeded", "Failed"))
        for group in old.groups:
            if ended or new is None or group not in new.groups:
                self.group_syncs.add(group)

    def _on_reservation(self, _: str, old: Member | None, new: Member | None) -> None:
        for key, waiter in list(self._devices.items()):
            if waiter.future.done():
                continue
            record = self.reservations.get(key)
            if record is not None:
                waiter.seen = True
                if record.device:
                    waiter.future.set_result(record.device)
            elif waiter.seen:
                waiter.future.set_result(None)  # deleted

    def _on_bindrequest(self, _: str, old: BindRequestRecord | None, new: BindRequestRecord | None) -> None:
        if new is not None:
            self.on_bindrequest(new)
        elif old is not None:
            self.on_bindrequest_deleted(old)

    def on_bindrequest(self, br: BindRequestRecord) -> None:
        """A BindRequest was added or changed: keep the latest copy and queue it unless it is finished."""
        if not br.name:
            return
        # Finished requests need no event-driven work: failures are retried with backoff by the queue (and
        # our own status writes would otherwise requeue them at once).
        if br.finished or br.deleting:
            self.requests.pop(br.key, None)
            return
        self.requests[br.key] = br
        self.binds.add(br.key)

    def on_bindrequest_deleted(self, br: BindRequestRecord) -> None:
        self.requests.pop(br.key, None)
        if br.fraction:
            for group in br.gpu_groups:
                self.group_syncs.add(group)

    def known_groups(self) -> set[str]:
        return {g for informer in (self.members, self.reservations) for m in informer.values() for g in m.groups}

    def enqueue_pending_bindrequests(self) -> int:
        """Enqueue every BindRequest not Succeeded (start-up: a restarted binder loses no request, a Failed one
        with attempts left included)."""
        count = 0
        for br in self.bindrequests.values():
            if not br.succeeded:
                self.requests.setdefault(br.key, br)
                self.binds.add(br.key)
                count += 1
        return count

    @property
    def ready(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    async def work(self) -> None:
        """Once the caches are synced: GC of every group, every open BindRequest, then the work queues."""
        for informer in self.informers:
            await informer.wait_synced()
        groups = self.known_groups()
        for group in groups:
            self.group_syncs.add(group)
        pending = self.enqueue_pending_bindrequests()
        log.info("binder started: %d GPU group(s) to check, %d BindRequest(s) to handle", len(groups), pending)
        await asyncio.gather(self.binds.run(), self.group_syncs.run())

    # --- BindRequest reconcile -----------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> None:
        namespace, name = str(key).split("/", 1)
        br = self.requests.get(str(key)) or await self._get_bindrequest(namespace, name)
        if br is None or br.deleting:
            return
        if br.succeeded or str(key) in self._reporting:
            return  # done, or bound with its bookkeeping still going out
        node_name = br.selected_node
        started = time.monotonic()
        pod: dict[str, Any] | None = None
        try:
            pod = await self._pod(namespace, br.pod_name, fresh=br.fraction)
            if pod is None:
                raise BindError(f'pods "{br.pod_name}" not found')
            if br.pod_uid and br.pod_uid != _meta(pod).get("uid"):
                # The pod was recreated under the same name: this decision was for its predecessor.
                raise BindError(f'pods "{br.pod_name}" not found (uid {br.pod_uid})')
            bound_already = bool((pod.get("spec") or {}).get("nodeName"))
            if not bound_already:
                # The condition goes first: once the pod has a node, kwok (a kubelet) writes its status, and
                # a condition patch landing after the binding would race that write (the node agent sees the
                # pod change again before its own write is visible, and writes twice).
                if not br.fraction:
                    await self._condition(pod, node_name, None)
                await self.bind(br, pod)
        except InvalidBindRequest as exc:
            BINDS.labels("invalid").inc()
            await self._feedback(pod, node_name, str(exc))
            log.warning("deleting invalid BindRequest %s: %s", key, exc)
            await self._delete(f"{BINDREQUESTS.path(namespace)}/{name}")
            return
        except Exception as exc:
            RECONCILE_ERRORS.inc()
            BINDS.labels("failure").inc()
            BIND_LATENCY.observe((time.monotonic() - started) * MS_PER_SECOND)
            message = error_message(exc)
            log.debug("binding %s to %s failed: %s", key, node_name, message)
            await self._report(br, pod, node_name, message)
            raise BindError(message) from exc
        if bound_already:
            # By us before a restart, or a lost response: never bind twice, only finish the bookkeeping.
            BINDS.labels("already_bound").inc()
            await self._report(br, pod, node_name, None, announce=not _has_pod_bound(pod))
            if self.requests.get(str(key)) is br:
                del self.requests[str(key)]
        else:
            BINDS.labels("success").inc()
            BIND_LATENCY.observe((time.monotonic() - started) * MS_PER_SECOND)
            # The pod is bound: the `Bound` event and the BindRequest status go out in the background, so this
            # worker takes the next BindRequest at once (binds are paced by their own round trips only).
            self._reporting.add(str(key))
            task = asyncio.ensure_future(self._report_bound(str(key), br, pod, node_name))
            self._reports.add(task)
            task.add_done_callback(self._reports.discard)

    async def _report_bound(self, key: str, br: BindRequestRecord, pod: dict[str, Any], node_name: str) -> None:
        """The bookkeeping of a successful bind; a failed write redoes the request later (which, finding the
        pod bound, only finishes the bookkeeping)."""
        try:
            async with self._report_gate:
                await self._report(br, pod, node_name, None)
            if self.requests.get(key) is br:
                del self.requests[key]
        except Exception as exc:
            log.warning("reporting the bind of %s failed (%s); retrying", key, error_message(exc))
            self.binds.add_after(key, self.config.base_delay)
        finally:
            self._reporting.discard(key)

    async def _pod(self, namespace: str, name: str, *, fresh: bool) -> dict[str, Any] | None:
        """The pod to bind: from the informer for a plain bind, read from the API server for GPU sharing (its
        ConfigMaps and labels need the whole pod) or when the informer has not seen the pod yet."""
        member = None if fresh else self.members.get(f"{namespace}/{name}")
        if member is not None:
            return pod_from_member(namespace, name, member)
        return await self._get(f"{PODS.path(namespace)}/{name}")

    async def bind(self, br: BindRequestRecord, pod: dict[str, Any]) -> None:
        node_name, fraction = br.selected_node, br.fraction
        node: Mapping[str, Any] | None
        if not fraction and self.nodes.get(node_name):
            node = {"metadata": {"name": node_name}}
        else:
            node = await self._get(f"{NODES.path()}/{node_name}")
        if node is None:
            raise BindError(f'nodes "{node_name}" not found')
        groups = list(br.gpu_groups)
        if fraction and not groups:
            raise InvalidBindRequest("invalid binding request: a Fraction request without selectedGPUGroups")
        try:
            if fraction:
                # Reservation GC, GPU reservation and ConfigMaps exist for GPU sharing only: a plain bind is the
                # binding alone.
                await self.sync_node(node_name)
                devices = [await self.reserve_gpu(group, node, pod) for group in groups]
                await self.write_configmaps(pod, devices, br.gpu_portion)
            await self._post_binding(pod, node_name, {keys.RECEIVED_RESOURCE_TYPE: br.resource_type})
        except Exception:
            fresh = await self._get_pod(pod)
            if fresh is not None and (fresh.get("spec") or {}).get("nodeName") == node_name:
                log.info("pod %s/%s is on %s after all", _meta(pod).get("namespace"), _meta(pod).get("name"),
                         node_name)
                return
            if fraction:
                await self._rollback(fresh, node_name, groups)
            raise

    async def _post_binding(self, pod: Mapping[str, Any], node_name: str, annotations: dict[str, str]) -> None:
        """Bind, setting `annotations` on the pod in the same write (the API server copies a Binding's
        annotations onto the pod), so the annotation needs no patch of its own and lands with the node name."""
        # raw(): the typed create_namespaced_pod_binding raises on the Status the server answers with.
        meta = _meta(pod)
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid"),
                             "annotations": annotations},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
        await raw(self.api, "POST", f"{PODS.path(meta['namespace'])}/{meta['name']}/binding", body=body)

    async def _rollback(self, pod: Mapping[str, Any] | None, node_name: str, groups: list[str]) -> None:
        """Undo a failed fractional bind: ConfigMaps, group labels, then let GC judge the groups again."""
        if pod is not None:
            meta = _meta(pod)
            try:
                names = configmap_names(pod)
                for cm in (names.capabilities, names.direct_env):
                    await self._delete(f"{CONFIGMAPS.path(meta['namespace'])}/{cm}")
            except GpuSharingError:
                pass  # no ConfigMap names: none were written
            except Exception as exc:
                log.warning("rollback: deleting ConfigMaps of %s/%s failed: %s", meta.get("namespace"),
                            meta.get("name"), error_message(exc))
            ops = gpu_group_labels_removal_patch(pod)
            if ops:
                try:
                    await raw(self.api, "PATCH", f"{PODS.path(meta['namespace'])}/{meta['name']}", body=ops,
                              content_type=JSON_PATCH)
                except Exception as exc:
                    log.warning("rollback: removing GPU group labels of %s/%s failed: %s", meta.get("namespace"),
                                meta.get("name"), error_message(exc))
        try:
            await self.sync_node(node_name, also=groups, fresh_within=0)
        except Exception as exc:
            log.warning("rollback: reservation sync on %s failed: %s", node_name, error_message(exc))
            for group in groups:
                self.group_syncs.add(group)

    # --- GPU sharing ---------------------------------------------------------------------------------
    async def reserve_gpu(self, group: str, node: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
        """The device id of `group` on `node`, creating its reservation pod if needed; labels the pod."""
        node_name = str(_meta(node).get("name"))
        async with self.locks.hold(group):
            found = await self._list(PODS.path(self.config.reservation_namespace),
                                     f"{keys.GPU_GROUP_LABEL}={group}")
            live = [p for p in found if not _meta(p).get("deletionTimestamp")]
            if live:
                reservation = live[0]
                on = (reservation.get("spec") or {}).get("nodeName")
                if on and on != node_name:
                    raise BindError(f"GPU group {group} is reserved on node {on}, not on {node_name}")
                device = reserved_device_id(reservation)
                if device is None:
                    raise BindError(f"failed to find annotation on reservation pod {_meta(reservation)['name']}")
            else:
                device = await self._create_reservation(group, node)
            await self._patch_pod(pod, gpu_group_labels_patch(pod, [group]))
            return device

    async def _create_reservation(self, group: str, node: Mapping[str, Any]) -> str:
        node_name = str(_meta(node).get("name"))
        cfg = self.config
        manifest = reservation_pod_manifest(
            node_name, group, suffix=make_random_suffix(), image=cfg.image, namespace=cfg.reservation_namespace,
            service_account=cfg.service_account, app_label_value=cfg.app_label,
            runtime_class_name=cfg.runtime_class_name or None, extra_resources=cfg.reservation_resources,
            fake_gpu=is_fake_gpu_node(node, fake_gpu_nodes=cfg.fake_gpu_nodes))
        created = await raw(self.api, "POST", PODS.path(cfg.reservation_namespace), body=manifest)
        name = _meta(created)["name"]
        log.info("created reservation pod %s/%s for GPU group %s on %s", cfg.reservation_namespace, name, group,
                 node_name)
        device = reserved_device_id(created) or await self._wait_for_device(created)
        if device is None:
            await self._delete(f"{PODS.path(cfg.reservation_namespace)}/{name}", grace_period=0)
            raise BindError(f"failed waiting for GPU reservation pod to allocate: "
                            f"{cfg.reservation_namespace}/{name}")
        return device

    async def _wait_for_device(self, pod: Mapping[str, Any]) -> str | None:
        """Wait until the reservation pod reports its GPU (annotation), as the reservations informer sees it; None
        when the pod goes away or after the allocation timeout."""
        key = f"{_meta(pod)['namespace']}/{_meta(pod)['name']}"
        waiter = self._devices[key] = _DeviceWait(asyncio.get_running_loop().create_future())
        try:
            self._on_reservation("", None, None)  # the informer may have seen the pod already
            async with asyncio.timeout(self.config.allocation_timeout):
                return await waiter.future
        except TimeoutError:
            return None
        finally:
            self._devices.pop(key, None)

    async def write_configmaps(self, pod: Mapping[str, Any], devices: list[str], portion: str) -> None:
        """Create or patch the pod's two GPU-sharing ConfigMaps (device list and environment), owned by the pod."""
        namespace = _meta(pod)["namespace"]
        for body in configmap_bodies(pod, device_ids=devices, portion=portion, cdi=self.config.cdi_enabled):
            path = CONFIGMAPS.path(namespace)
            try:
                await raw(self.api, "POST", path, body=body)
                continue
            except Exception as exc:
                if not is_conflict(exc):
                    raise
            existing = await raw(self.api, "GET", f"{path}/{body['metadata']['name']}")
            patch = configmap_merge_patch(existing, body)
            if patch is not None:
                await raw(self.api, "PATCH", f"{path}/{body['metadata']['name']}", body=patch,
                          content_type=MERGE_PATCH)

    # --- reservation garbage collection --------------------------------------------------------------
    async def sync_node(self, node_name: str, also: Iterable[str] = (),
                        fresh_within: float = SYNC_FRESHNESS) -> None:
        """GC of every GPU group with a member on the node (the caches say which; fresh LISTs decide).

        A group whose sync started less than `fresh_within` seconds ago is not synced again: a burst of binds
        to one node would otherwise serialise on the node's group locks, each repeating the same LISTs. The
        event-driven syncs (a member finished or left) still run for every change.
        """
        groups = set(also)
        for informer in (self.members, self.reservations):
            for member in informer.by_index("node", node_name):
                groups.update(member.groups)
        horizon = time.monotonic() - fresh_within
        stale = [g for g in sorted(groups) if self._last_sync.get(g, -1.0) < horizon]
        await asyncio.gather(*(self.sync_group(group) for group in stale))

    async def sync_group(self, group: str) -> None:
        async with self.locks.hold(group):
            started = time.monotonic()
            await self._sync_group_locked(group)
            self._last_sync[group] = started
            if len(self._last_sync) > 10000:  # forget long-gone groups
                self._last_sync = {g: t for g, t in self._last_sync.items() if t > started - 60}

    async def _sync_group_locked(self, group: str) -> None:
        pods = await self._group_pods(group)
        decision = sync_decisions(pods, reservation_namespace=self.config.reservation_namespace)
        for pod in decision.reservation_pods_to_delete:
            meta = _meta(pod)
            log.info("deleting reservation pod %s/%s: GPU group %s has no running or pending pods",
                     meta.get("namespace"), meta.get("name"), group)
            await self._delete(f"{PODS.path(meta['namespace'])}/{meta['name']}", grace_period=0)
            RESERVATION_PODS_DELETED.inc()
        for pod in decision.fraction_pods_to_delete:
            meta = _meta(pod)
            log.warning("deleting pod %s/%s of GPU group %s: %s", meta.get("namespace"), meta.get("name"),
                        group, FOUND_POD_WITHOUT_RESERVATION)
            await self._delete(f"{PODS.path(meta['namespace'])}/{meta['name']}")

    async def _group_pods(self, group: str) -> list[dict[str, Any]]:
        """Every pod of the group, by either label form, read fresh (a cache may miss a just-created pod)."""
        single, multi = await asyncio.gather(
            self._list(PODS.path(), f"{keys.GPU_GROUP_LABEL}={group}"),
            self._list(PODS.path(), f"{keys.GPU_GROUP_LABEL}/{group}={group}"))
        unique = {_meta(p).get("uid"): p for p in [*single, *multi]}
        return list(unique.values())

    # --- status and feedback -------------------------------------------------------------------------
    async def _report(self, br: BindRequestRecord, pod: Mapping[str, Any] | None, node_name: str,
                      error: str | None, *, announce: bool = True) -> None:
        # Pod feedback first: a binder killed after it redoes the request, which writes the missing status
        # (and, seeing PodBound, no second event); a Succeeded status would never be looked at again.
        if announce:
            await self._feedback(pod, node_name, error)
        phase = keys.BIND_PHASE_FAILED if error else keys.BIND_PHASE_SUCCEEDED
        if br.phase != phase or (error and br.reason != error):
            try:
                await raw(self.api, "PATCH", f"{BINDREQUESTS.path(br.namespace)}/{br.name}/status",
                          body={"status": {"phase": phase, "reason": error}}, content_type=MERGE_PATCH)
            except Exception as exc:
                if not is_not_found(exc):
                    raise

    async def _feedback(self, pod: Mapping[str, Any] | None, node_name: str, error: str | None) -> None:
        """Pod condition PodBound and the Bound / BindingError event (the event is best effort)."""
        if pod is None:
            return
        await self._condition(pod, node_name, error)
        meta = _meta(pod)
        if error is None:
            event = ("Normal", keys.EVENT_BOUND, f"Pod bound successfully to node {node_name}")
        else:
            event = ("Warning", keys.EVENT_BINDING_ERROR,
                     f"Failed to bind pod {meta.get('namespace')}/{meta.get('name')} to node {node_name}: {error}")
        await self.events.emit(ObjectRef.of({"apiVersion": "v1", "kind": "Pod", **pod}), *event)

    async def _condition(self, pod: Mapping[str, Any], node_name: str, error: str | None) -> None:
        """Write the PodBound condition unless the pod has it already (the pod's copy is updated to match)."""
        meta = _meta(pod)
        if error is None:
            condition = {"status": "True", "reason": keys.EVENT_BOUND,
                         "message": f"Pod bound successfully to node {node_name}"}
        else:
            message = f"Failed to bind pod {meta.get('namespace')}/{meta.get('name')} to node {node_name}: {error}"
            condition = {"status": "False", "reason": keys.EVENT_BINDING_ERROR, "message": message}
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == keys.CONDITION_POD_BOUND), None)
        if current is not None and all(current.get(k) == v for k, v in condition.items()):
            return
        written = {"type": keys.CONDITION_POD_BOUND, **condition, "lastTransitionTime": rfc3339()}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(meta['namespace'])}/{meta['name']}/status",
                      body={"status": {"conditions": [written]}}, content_type=STRATEGIC_MERGE)
        except Exception as exc:
            if not is_not_found(exc):
                raise  # before the status is written, so the retry writes the condition
        status = pod.get("status")
        if isinstance(status, dict):
            status["conditions"] = [c for c in conditions if c.get("type") != keys.CONDITION_POD_BOUND] + [written]

    # --- small API helpers ---------------------------------------------------------------------------
    async def _get(self, path: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await raw(self.api, "GET", path)
            return obj
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise

    async def _get_bindrequest(self, namespace: str, name: str) -> BindRequestRecord | None:
        obj = await self._get(f"{BINDREQUESTS.path(namespace)}/{name}")
        return None if obj is None else parse_bindrequest(obj)

    async def _get_pod(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            return await self._get(f"{PODS.path(_meta(pod)['namespace'])}/{_meta(pod)['name']}")
        except Exception:
            return None

    async def _list(self, path: str, selector: str) -> list[dict[str, Any]]:
        page = await raw(self.api, "GET", path, query={"labelSelector": selector})
        return list(page.get("items") or [])

    async def _patch_pod(self, pod: Mapping[str, Any], patch: dict[str, Any]) -> None:
        meta = _meta(pod)
        await raw(self.api, "PATCH", f"{PODS.path(meta['namespace'])}/{meta['name']}", body=patch,
                  content_type=MERGE_PATCH)

    async def _delete(self, path: str, *, grace_period: int | None = None) -> None:
        body = None if grace_period is None else {"apiVersion": "v1", "kind": "DeleteOptions",
                                                  "gracePeriodSeconds": grace_period}
        try:
            await raw(self.api, "DELETE", path, body=body)
        except Exception as exc:
            if not is_not_found(exc):
                raise


def _has_pod_bound(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == keys.CONDITION_POD_BOUND and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])

