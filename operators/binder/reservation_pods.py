"""The GPU reservation pods' I/O: one pod per GPU group holds the group's device; it is created when a fractional
pod is bound to the group and garbage-collected once the group has no running or pending pod.

Decisions are the pure helpers of `reservation`; this module reads and writes the API. A group's reservation pod
found in the informer is reused, so a restarted binder redoes any step.

Locking. One asyncio lock per GPU group serialises "find or create the reservation pod, label the workload pod"
against the group's garbage collection. A pod is labelled before the lock is released, so GC always sees the
user of a fresh reservation pod (a Pending labelled pod keeps its reservation alive).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client

from operators.binder import common
from operators.binder.common import BinderConfig, BindError, Member, member_record, meta, reservation_record
from operators.binder.gpusharing import gpu_group_labels_patch, is_fake_gpu_node
from operators.binder.reservation import (
    FOUND_POD_WITHOUT_RESERVATION,
    make_random_suffix,
    reservation_pod_manifest,
    reserved_device_id,
    sync_decisions,
)
from operators.core import keys
from operators.core.cache import PODS, Informer
from operators.core.kube import MERGE_PATCH, raw
from operators.core.metrics import Counter

log = logging.getLogger("binder")

# Binds to one node within this many seconds share one reservation sync of the node's GPU groups.
SYNC_FRESHNESS: Final = 2.0

RESERVATION_PODS_DELETED = Counter("kai_binder_reservation_pods_deleted_total", "Reservation pods garbage-collected")


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


class ReservationPods:
    """Reserve a GPU group's device on a node, and garbage-collect the groups nobody uses any more.

    `members` and `reservations` are the binder's informers (kai-scheduler pods, the reservation namespace): they
    say which groups have a member on a node, find a group's reservation pod and report its device; the GC
    decides its deletes on fresh LISTs, made only when the informers' view calls for one. `requeue` hands a group
    to the binder's GC work queue when a sync here failed.
    """

    def __init__(self, api: client.ApiClient, config: BinderConfig, members: Informer[Member],
                 reservations: Informer[Member], requeue: Callable[[str], None]) -> None:
        self.api = api
        self.config = config
        self.members = members
        self.reservations = reservations
        self.requeue = requeue
        self.locks = KeyedLocks()
        self._last_sync: dict[str, float] = {}  # group -> monotonic start of its last completed sync
        # Reservation pods waited for, by key: their device id once the informer shows it.
        self._devices: dict[str, _DeviceWait] = {}
        # Uids of reservation pods this process deleted and the informer still shows.
        self._deleted: set[str] = set()
        reservations.add_listener(self.on_reservation)

    def on_reservation(self, _: str, old: Member | None, new: Member | None) -> None:
        if new is None and old is not None:
            self._deleted.discard(old.uid)
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

    # --- reserving ---------------------------------------------------------------------------------------
    async def reserve(self, group: str, node: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
        """The device id of `group` on `node`, creating its reservation pod if needed; labels the pod.

        The group's reservation pod is looked up in the reservations informer, as KAI's binder reads it from its
        cache: only this process creates them, under the group's lock, and waits for the informer to show the
        device before releasing it, so the informer has every reservation a later bind needs (a predecessor's
        from its start-up LIST). Those this process deleted count as gone at once."""
        node_name = str(meta(node).get("name"))
        async with self.locks.hold(group):
            reservation = self._cached_reservation(group)
            if reservation is not None:
                if reservation.node and reservation.node != node_name:
                    raise BindError(f"GPU group {group} is reserved on node {reservation.node}, not on {node_name}")
                if not reservation.device:
                    raise BindError(f"failed to find annotation on the reservation pod of GPU group {group}")
                device = reservation.device
            else:
                device = await self._create(group, node)
            key = f"{meta(pod)['namespace']}/{meta(pod)['name']}"
            labelled = await raw(self.api, "PATCH", PODS.path(meta(pod)["namespace"]) + f"/{meta(pod)['name']}",
                                 body=gpu_group_labels_patch(pod, [group]), content_type=MERGE_PATCH)
            # The members informer holds the labelled pod before the lock is released: a GC of the group right
            # after (the next bind to the node) sees its user without a LIST.
            if isinstance(labelled, dict) and labelled.get("metadata"):
                self.members.put(key, member_record(labelled), "MODIFIED")
            return device

    def _cached_reservation(self, group: str) -> Member | None:
        live = [m for m in self.reservations.by_index("group", group) if not m.deleting and m.uid not in self._deleted]
        return min(live, key=lambda m: m.uid) if live else None

    async def _create(self, group: str, node: Mapping[str, Any]) -> str:
        node_name = str(meta(node).get("name"))
        cfg = self.config
        manifest = reservation_pod_manifest(
            node_name, group, suffix=make_random_suffix(), image=cfg.image, namespace=cfg.reservation_namespace,
            service_account=cfg.service_account, app_label_value=cfg.app_label,
            runtime_class_name=cfg.runtime_class_name or None, extra_resources=cfg.reservation_resources,
            fake_gpu=is_fake_gpu_node(node, fake_gpu_nodes=cfg.fake_gpu_nodes))
        created = await raw(self.api, "POST", PODS.path(cfg.reservation_namespace), body=manifest)
        name = meta(created)["name"]
        # The reservations informer holds it before the group's lock is released (a fake GPU's pod is born with
        # its device and not waited for): the group's next bind finds it there instead of creating another.
        record = reservation_record(created)
        if record is not None:
            self.reservations.put(f"{cfg.reservation_namespace}/{name}", record, "ADDED")
        log.info("created reservation pod %s/%s for GPU group %s on %s", cfg.reservation_namespace, name, group,
                 node_name)
        device = reserved_device_id(created) or await self.wait_for_device(created)
        if device is None:
            await self._delete_reservation(created)
            raise BindError(f"failed waiting for GPU reservation pod to allocate: "
                            f"{cfg.reservation_namespace}/{name}")
        return device

    async def _delete_reservation(self, pod: Mapping[str, Any]) -> None:
        """Delete a reservation pod at once; it counts as gone for `reserve` even while the informer shows it."""
        m = meta(pod)
        await common.delete(self.api, f"{PODS.path(m['namespace'])}/{m['name']}", grace_period=0)
        if m.get("uid") and self.reservations.get(f"{m['namespace']}/{m['name']}") is not None:
            self._deleted.add(str(m["uid"]))

    async def wait_for_device(self, pod: Mapping[str, Any]) -> str | None:
        """Wait until the reservation pod reports its GPU (annotation), as the reservations informer sees it; None
        when the pod goes away or after the allocation timeout."""
        key = f"{meta(pod)['namespace']}/{meta(pod)['name']}"
        waiter = self._devices[key] = _DeviceWait(asyncio.get_running_loop().create_future())
        try:
            self.on_reservation("", None, None)  # the informer may have seen the pod already
            async with asyncio.timeout(self.config.allocation_timeout):
                return await waiter.future
        except TimeoutError:
            return None
        finally:
            self._devices.pop(key, None)

    # --- garbage collection ------------------------------------------------------------------------------
    async def sync_node(self, node_name: str, also: Iterable[str] = (),
                        fresh_within: float = SYNC_FRESHNESS) -> None:
        """GC of every GPU group with a member on the node (the caches say which and whether any needs a delete;
        fresh LISTs decide the deletes).

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

    def _cache_would_delete(self, group: str) -> bool:
        """Whether the informers' view of the group calls for a delete. Only then is the group LISTed fresh: a
        cluster-wide LIST of pods by label is served by etcd over every pod, so a sync per fraction bind (KAI's
        pre-bind) cost two such LISTs each; deletes are still decided on the fresh LISTs alone."""
        namespace = self.config.reservation_namespace
        pods = [_cached_pod("", m) for m in self.members.by_index("group", group)]
        pods += [_cached_pod(namespace, m) for m in self.reservations.by_index("group", group)]
        decision = sync_decisions(pods, reservation_namespace=namespace)
        return bool(decision.reservation_pods_to_delete or decision.fraction_pods_to_delete)

    async def _sync_group_locked(self, group: str) -> None:
        if not self._cache_would_delete(group):
            return
        pods = await self._group_pods(group)
        decision = sync_decisions(pods, reservation_namespace=self.config.reservation_namespace)
        for pod in decision.reservation_pods_to_delete:
            m = meta(pod)
            log.info("deleting reservation pod %s/%s: GPU group %s has no running or pending pods",
                     m.get("namespace"), m.get("name"), group)
            await self._delete_reservation(pod)
            RESERVATION_PODS_DELETED.inc()
        for pod in decision.fraction_pods_to_delete:
            m = meta(pod)
            log.warning("deleting pod %s/%s of GPU group %s: %s", m.get("namespace"), m.get("name"),
                        group, FOUND_POD_WITHOUT_RESERVATION)
            await common.delete(self.api, f"{PODS.path(m['namespace'])}/{m['name']}")

    async def _group_pods(self, group: str) -> list[dict[str, Any]]:
        """Every pod of the group, by either label form, read fresh (a cache may miss a just-created pod)."""
        single, multi = await asyncio.gather(
            common.list_labelled(self.api, PODS.path(), f"{keys.GPU_GROUP_LABEL}={group}"),
            common.list_labelled(self.api, PODS.path(), f"{keys.GPU_GROUP_LABEL}/{group}={group}"))
        unique = {meta(p).get("uid"): p for p in [*single, *multi]}
        return list(unique.values())


def _cached_pod(namespace: str, member: Member) -> dict[str, Any]:
    """As much of a pod as `sync_decisions` reads: the namespace (reservation or not) and the phase."""
    return {"metadata": {"namespace": namespace}, "status": {"phase": member.phase}}
