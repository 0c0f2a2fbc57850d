"""GPU sharing, the chain's `gpusharing` slot: a fractional pod's GPU groups are reserved on its node (one
reservation pod per group, which reports the device), the pod is labelled with its groups, and its two ConfigMaps
(device list, environment) are written; a failed bind undoes the ConfigMaps and labels and lets the GC judge the
groups again. The ConfigMaps' and labels' contents are the pure rules of `binder.gpusharing`."""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio import client

from operators.binder import common
from operators.binder.common import error_message, meta
from operators.binder.gpusharing import (
    GpuSharingError,
    configmap_bodies,
    configmap_merge_patch,
    configmap_names,
    gpu_group_labels_removal_patch,
)
from operators.binder.plugins import BindingState, Node, Pod
from operators.binder.reservation_pods import ReservationPods
from operators.core.api.bindrequest import BindRequestRecord
from operators.core.cache import CONFIGMAPS, PODS
from operators.core.kube import JSON_PATCH, is_conflict, raw

log = logging.getLogger("binder")


class GpuSharing:
    name = "gpusharing"

    def __init__(self, api: client.ApiClient, reservations: ReservationPods, *, cdi: bool = False) -> None:
        self.api = api
        self.reservations = reservations
        self.cdi = cdi

    async def pre_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        if not request.fraction:
            return
        await self.reservations.sync_node(request.selected_node)
        for group in request.gpu_groups:
            state.reserved_gpu_ids.append(await self.reservations.reserve(group, node, pod))
        await self.write_configmaps(pod, state.reserved_gpu_ids, request.gpu_portion)

    async def post_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        return None

    async def rollback(self, pod: Pod | None, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        """ConfigMaps, group labels, then let GC judge the groups again."""
        if not request.fraction:
            return
        if pod is not None:
            m = meta(pod)
            try:
                names = configmap_names(pod)
                for cm in (names.capabilities, names.direct_env):
                    await common.delete(self.api, f"{CONFIGMAPS.path(m['namespace'])}/{cm}")
            except GpuSharingError:
                pass  # no ConfigMap names: none were written
            except Exception as exc:
                log.warning("rollback: deleting ConfigMaps of %s/%s failed: %s", m.get("namespace"),
                            m.get("name"), error_message(exc))
            ops = gpu_group_labels_removal_patch(pod)
            if ops:
                try:
                    await raw(self.api, "PATCH", f"{PODS.path(m['namespace'])}/{m['name']}", body=ops,
                              content_type=JSON_PATCH)
                except Exception as exc:
                    log.warning("rollback: removing GPU group labels of %s/%s failed: %s", m.get("namespace"),
                                m.get("name"), error_message(exc))
        groups = list(request.gpu_groups)
        try:
            await self.reservations.sync_node(request.selected_node, also=groups, fresh_within=0)
        except Exception as exc:
            log.warning("rollback: reservation sync on %s failed: %s", request.selected_node, error_message(exc))
            for group in groups:
                self.reservations.requeue(group)

    async def write_configmaps(self, pod: Pod, devices: list[str], portion: str) -> None:
        """Create or patch the pod's two GPU-sharing ConfigMaps (device list and environment), owned by the pod."""
        namespace = meta(pod)["namespace"]
        for body in configmap_bodies(pod, device_ids=devices, portion=portion, cdi=self.cdi):
            path = CONFIGMAPS.path(namespace)
            try:
                await raw(self.api, "POST", path, body=body)
                continue
            except Exception as exc:
                if not is_conflict(exc):
                    raise
            existing: Any = await raw(self.api, "GET", f"{path}/{body['metadata']['name']}")
            patch = configmap_merge_patch(existing, body)
            if patch is not None:
                await common.merge_patch(self.api, f"{path}/{body['metadata']['name']}", patch)
