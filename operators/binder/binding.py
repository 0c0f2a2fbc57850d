"""The binder's I/O: its informers and triggers, and one BindRequest reconcile.

A bind runs the plugin chain (`binder.plugins`: pre-bind, the binding, post-bind; rollback on failure), as KAI's
binder does; GPU sharing is the chain's `gpusharing` plugin and its reservation pods live in `reservation_pods`.
Every step is idempotent so a restarted binder can redo any request: a pod with `spec.nodeName` is never bound
again, ConfigMaps are created or patched, labels merge-patched, and a reservation found by label is reused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable, Mapping
from typing import Any, Final

from kubernetes_asyncio import client
from prometheus_client import Histogram

from operators.binder import common
from operators.binder.common import (
    BinderConfig,
    BindError,
    InvalidBindRequest,
    Member,
    error_message,
    member_record,
    meta,
    reservation_record,
)
from operators.binder.plugins import BindingState, PluginChain
from operators.binder.plugins.dynamicresources import DynamicResources
from operators.binder.plugins.gpusharing import GpuSharing
from operators.binder.reservation_pods import ReservationPods
from operators.core import keys
from operators.core.api.bindrequest import BindRequestRecord, parse_bindrequest
from operators.core.cache import BINDREQUESTS, NODES, PODS, Informer
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import MERGE_PATCH, is_not_found, raw
from operators.core.metrics import Counter
from operators.core.times import rfc3339
from operators.core.units import MS_PER_SECOND
from operators.core.workqueue import WorkQueue

log = logging.getLogger("binder")

STRATEGIC_MERGE: Final = "application/strategic-merge-patch+json"
COMPONENT: Final = "binder"
GROUP_SYNC_WORKERS: Final = 4


def requests_in_flight(workers: int) -> int:
    """The API requests the binder has in flight at once with `workers` per bind queue: one per plain and
    fraction bind worker, per background report (`workers // 2`) and per GPU-group sync (two, rarely: a group with
    something to delete is LISTed by both label forms at once). Its client has that many connections, so a bind
    does not wait for another's (client-go multiplexes requests over HTTP/2: no such wait)."""
    return 2 * workers + max(workers // 2, 1) + GROUP_SYNC_WORKERS

BIND_LATENCY = Histogram("kai_binder_bind_latency_milliseconds", "Time to bind one BindRequest's pod",
                         buckets=[5 * 2**k for k in range(10)])
BINDS = Counter("kai_binder_binds_total", "BindRequests handled, by result", ["result"])
RECONCILE_ERRORS = Counter("kai_binder_reconcile_errors_total", "BindRequest reconciles that failed")


def pod_from_member(namespace: str, name: str, member: Member) -> dict[str, Any]:
    """The pod as far as a plain bind reads it, rebuilt from the informer's record."""
    conditions = [] if member.pod_bound is None else [
        {"type": keys.CONDITION_POD_BOUND, "status": member.pod_bound[0], "reason": member.pod_bound[1],
         "message": member.pod_bound[2]}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": member.uid},
            "spec": {"nodeName": member.node or None}, "status": {"phase": member.phase, "conditions": conditions}}


class Binder:
    def __init__(self, api: client.ApiClient, watch_api: client.ApiClient, config: BinderConfig) -> None:
        self.api = api
        self.config = config
        self.events = EventRecorder(api, COMPONENT, min_interval=5)
        indexes: dict[str, Any] = {"node": lambda m: [m.node] if m.node and m.groups else [],
                                   "group": lambda m: m.groups}
        # Every kai-scheduler pod (plain binds read the pod from here, not from the API server); fraction pods
        # are among them. Reservation pods live in their own namespace.
        self.members: Informer[Member] = Informer(
            watch_api, PODS, member_record, field_selector=f"spec.schedulerName={config.scheduler_name}",
            indexes=indexes, freeze_records=True)
        self.reservations: Informer[Member] = Informer(
            watch_api, PODS, reservation_record, namespace=config.reservation_namespace, indexes=indexes)
        self.nodes: Informer[bool] = Informer(watch_api, NODES, lambda _: True)
        self.bindrequests: Informer[BindRequestRecord] = Informer(watch_api, BINDREQUESTS, parse_bindrequest)
        # The process's only watches: one per resource (pods twice, on disjoint sets: kai-scheduler's pods
        # cluster-wide, and the reservation namespace, whose pods name no scheduler).
        self.informers = (self.members, self.reservations, self.nodes, self.bindrequests)
        # The latest copy of each open BindRequest as its watch delivered it: the reconcile reads it from here
        # and goes to the API server only when it is missing (start-up, retries after a failure).
        self.requests: dict[str, BindRequestRecord] = {}
        self.binds = WorkQueue(self.reconcile, workers=config.workers, base_delay=config.base_delay,
                               max_delay=config.max_delay, name="bindrequests", kind="BindRequest")
        # Fraction binds have their own workers: each holds one for seconds to a minute (its reservation pod is
        # created and must report its GPU, its group's lock is held meanwhile), and sharing the plain binds'
        # workers queued every plain bind behind them (at 1,000 nodes, 2 s plain binds waited 2 minutes).
        self.fraction_binds = WorkQueue(self.reconcile, workers=config.workers, base_delay=config.base_delay,
                                        max_delay=config.max_delay, name="bindrequests-fraction", kind="BindRequest")
        self.group_syncs = WorkQueue(lambda group: self.gpu_reservations.sync_group(str(group)),
                                     workers=GROUP_SYNC_WORKERS,
                                     base_delay=config.base_delay, max_delay=config.max_delay, name="gpu-groups")
        # Successful binds whose event and status are still being written (see `_report_bound`).
        self._reporting: set[str] = set()
        self._reports: set[asyncio.Task[None]] = set()
        self._report_gate = asyncio.Semaphore(max(config.workers // 2, 1))
        self.members.add_listener(self._on_member)
        self.reservations.add_listener(self._on_member)
        self.gpu_reservations = ReservationPods(api, config, self.members, self.reservations,
                                                requeue=self.group_syncs.add)
        self.bindrequests.add_listener(self._on_bindrequest)
        # KAI's binder plugins, in their slots' order (see `binder.plugins`).
        self.plugins = PluginChain([DynamicResources(api),
                                    GpuSharing(api, self.gpu_reservations, cdi=config.cdi_enabled)])

    # --- triggers ------------------------------------------------------------------------------------
    def _on_member(self, _: str, old: Member | None, new: Member | None) -> None:
        """A group member finished, went away or left the group: its groups may hold a GPU for nobody."""
        if old is None:
            return
        ended = new is None or (new.phase in ("Succeeded", "Failed") and old.phase not in ("Succeeded", "Failed"))
        for group in old.groups:
            if ended or new is None or group not in new.groups:
                self.group_syncs.add(group)

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
        self.queue_of(br).add(br.key)

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
                self.queue_of(br).add(br.key)
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
        await asyncio.gather(self.binds.run(), self.fraction_binds.run(), self.group_syncs.run())

    def queue_of(self, br: BindRequestRecord) -> WorkQueue:
        """A request's work queue (fixed by its spec, so its retries and backoff stay in one queue)."""
        return self.fraction_binds if br.fraction else self.binds

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
            pod = await self._pod(namespace, br.pod_name, fresh=br.fraction or bool(br.claim_allocations))
            if pod is None:
                raise BindError(f'pods "{br.pod_name}" not found')
            if br.pod_uid and br.pod_uid != meta(pod).get("uid"):
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
            await common.delete(self.api, f"{BINDREQUESTS.path(namespace)}/{name}")
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
            self.queue_of(br).add_after(key, self.config.base_delay)
        finally:
            self._reporting.discard(key)

    async def _pod(self, namespace: str, name: str, *, fresh: bool) -> dict[str, Any] | None:
        """The pod to bind: from the informer for a plain bind, read from the API server for GPU sharing (its
        ConfigMaps and labels need the whole pod) or when the informer has not seen the pod yet."""
        member = None if fresh else self.members.get(f"{namespace}/{name}")
        if member is not None:
            return pod_from_member(namespace, name, member)
        return await common.get(self.api, f"{PODS.path(namespace)}/{name}")

    async def bind(self, br: BindRequestRecord, pod: dict[str, Any]) -> None:
        """The plugins' pre-bind hooks, the binding (with the received-resource-type annotation), their post-bind
        hooks; on failure, unless the pod is on its node after all, their rollbacks."""
        node_name = br.selected_node
        node: Mapping[str, Any] | None
        if not br.fraction and self.nodes.get(node_name):
            node = {"metadata": {"name": node_name}}
        else:
            node = await common.get(self.api, f"{NODES.path()}/{node_name}")
        if node is None:
            raise BindError(f'nodes "{node_name}" not found')
        if br.fraction and not br.gpu_groups:
            raise InvalidBindRequest("invalid binding request: a Fraction request without selectedGPUGroups")
        state = BindingState()
        try:
            await self.plugins.pre_bind(pod, node, br, state)
            await self._post_binding(pod, node_name, {keys.RECEIVED_RESOURCE_TYPE: br.resource_type})
        except Exception:
            fresh = await self._get_pod(pod)
            if fresh is not None and (fresh.get("spec") or {}).get("nodeName") == node_name:
                log.info("pod %s/%s is on %s after all", meta(pod).get("namespace"), meta(pod).get("name"),
                         node_name)
                return
            await self.plugins.rollback(fresh, node, br, state)
            raise
        await self.plugins.post_bind(pod, node, br, state)

    async def _post_binding(self, pod: Mapping[str, Any], node_name: str, annotations: dict[str, str]) -> None:
        """Bind, setting `annotations` on the pod in the same write (the API server copies a Binding's
        annotations onto the pod), so the annotation needs no patch of its own and lands with the node name."""
        # raw(): the typed create_namespaced_pod_binding raises on the Status the server answers with.
        m = meta(pod)
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m.get("uid"),
                             "annotations": annotations},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
        await raw(self.api, "POST", f"{PODS.path(m['namespace'])}/{m['name']}/binding", body=body)

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
        m = meta(pod)
        if error is None:
            event = ("Normal", keys.EVENT_BOUND, f"Pod bound successfully to node {node_name}")
        else:
            event = ("Warning", keys.EVENT_BINDING_ERROR,
                     f"Failed to bind pod {m.get('namespace')}/{m.get('name')} to node {node_name}: {error}")
        await self.events.emit(ObjectRef.of({"apiVersion": "v1", "kind": "Pod", **pod}), *event)

    async def _condition(self, pod: Mapping[str, Any], node_name: str, error: str | None) -> None:
        """Write the PodBound condition unless the pod has it already (the pod's copy is updated to match)."""
        m = meta(pod)
        if error is None:
            condition = {"status": "True", "reason": keys.EVENT_BOUND,
                         "message": f"Pod bound successfully to node {node_name}"}
        else:
            message = f"Failed to bind pod {m.get('namespace')}/{m.get('name')} to node {node_name}: {error}"
            condition = {"status": "False", "reason": keys.EVENT_BINDING_ERROR, "message": message}
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == keys.CONDITION_POD_BOUND), None)
        if current is not None and all(current.get(k) == v for k, v in condition.items()):
            return
        written = {"type": keys.CONDITION_POD_BOUND, **condition, "lastTransitionTime": rfc3339()}
        try:
            await raw(self.api, "PATCH", f"{PODS.path(m['namespace'])}/{m['name']}/status",
                      body={"status": {"conditions": [written]}}, content_type=STRATEGIC_MERGE)
        except Exception as exc:
            if not is_not_found(exc):
                raise  # before the status is written, so the retry writes the condition
        status = pod.get("status")
        if isinstance(status, dict):
            status["conditions"] = [c for c in conditions if c.get("type") != keys.CONDITION_POD_BOUND] + [written]

    # --- small API helpers ---------------------------------------------------------------------------
    async def _get_bindrequest(self, namespace: str, name: str) -> BindRequestRecord | None:
        obj = await common.get(self.api, f"{BINDREQUESTS.path(namespace)}/{name}")
        return None if obj is None else parse_bindrequest(obj)

    async def _get_pod(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            return await common.get(self.api, f"{PODS.path(meta(pod)['namespace'])}/{meta(pod)['name']}")
        except Exception:
            return None


def _has_pod_bound(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == keys.CONDITION_POD_BOUND and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])

