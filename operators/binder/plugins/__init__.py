"""The binder's plugin chain, as KAI's binder runs it (`pkg/binder/plugins`).

A bind is: the chain's pre-bind hooks in order (the first error stops the chain and fails the bind), the binding
itself, then every post-bind hook. When the pre-bind hooks or the binding fail (and the pod did not land on its
node after all), every plugin's rollback runs, so each undoes what its own pre-bind may have done.

Plugins are ordered by their slot, KAI's registration order (`cmd/binder/main.go`: the Kubernetes plugins, then
GPU sharing):

1. `volumebinding` (KAI: k8s-plugins VolumeBinding, binds the pod's PVCs to the node's PVs): not implemented;
   a pod with unbound PVCs binds as a plain pod.
2. `dynamicresources` (KAI: k8s-plugins DynamicResources, allocates the pod's ResourceClaims as the BindRequest's
   `resourceClaimAllocations` say): `plugins.dynamicresources`.
3. `gpusharing` (KAI: plugins/gpusharing, a fractional pod's ConfigMaps and env): `plugins.gpusharing`, which also
   reserves the GPU groups. KAI's binder does that in its core; here the reservation exists for GPU sharing only,
   so it lives in its plugin and a plain bind stays the binding alone.

An implementation of a slot registers under its name; a plugin naming no slot is refused when the chain is built.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from operators.binder.common import error_message
from operators.core.api.bindrequest import BindRequestRecord

log = logging.getLogger("binder")

SLOTS: Final = ("volumebinding", "dynamicresources", "gpusharing")

Pod = Mapping[str, Any]
Node = Mapping[str, Any]


@dataclass
class BindingState:
    """What one bind's plugins hand on to one another (KAI's `state.BindingState`)."""

    reserved_gpu_ids: list[str] = field(default_factory=list)
    # DRA: the claims written by pre-bind (name, whether this bind allocated it), for the rollback.
    claims: list[tuple[str, bool]] = field(default_factory=list)


class BinderPlugin(Protocol):
    """One plugin of the chain; every hook is called for every bind and decides itself whether the pod is its
    business (e.g. gpusharing: a Fraction request)."""

    @property
    def name(self) -> str: ...

    async def pre_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        """Before the binding; an exception fails the bind with its message as the BindRequest's reason."""

    async def post_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        """After a successful binding; errors are logged, the bind stands."""

    async def rollback(self, pod: Pod | None, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        """After a failed bind: undo this plugin's pre-bind. `pod` is the pod re-read (None when it is gone)."""


class UnknownPlugin(ValueError):
    """A plugin whose name is no slot of the chain (a typo, or a plugin KAI's binder has no place for)."""


class PluginChain:
    def __init__(self, plugins: Iterable[BinderPlugin]) -> None:
        chosen = list(plugins)
        names = [p.name for p in chosen]
        unknown = sorted(set(names) - set(SLOTS))
        if unknown:
            raise UnknownPlugin(f"unknown binder plugin(s) {', '.join(unknown)}; the slots are {', '.join(SLOTS)}")
        if len(set(names)) != len(names):
            raise UnknownPlugin(f"a binder plugin registered twice: {', '.join(names)}")
        self.plugins: tuple[BinderPlugin, ...] = tuple(sorted(chosen, key=lambda p: SLOTS.index(p.name)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plugins)

    async def pre_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        # The first failure ends the chain; its message is the bind's (KAI wraps it with the plugin's name, but
        # the reason the BindRequest and the pod's event carry is the one the failing step gave).
        for plugin in self.plugins:
            await plugin.pre_bind(pod, node, request, state)

    async def post_bind(self, pod: Pod, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        for plugin in self.plugins:
            try:
                await plugin.post_bind(pod, node, request, state)
            except Exception as exc:
                log.warning("post-bind of plugin %s failed for %s: %s", plugin.name, request.key, error_message(exc))

    async def rollback(self, pod: Pod | None, node: Node, request: BindRequestRecord, state: BindingState) -> None:
        # Every plugin rolls back, whatever the others did: the bind's own error is what gets reported.
        for plugin in self.plugins:
            try:
                await plugin.rollback(pod, node, request, state)
            except Exception as exc:
                log.warning("rollback of plugin %s failed for %s: %s", plugin.name, request.key, error_message(exc))
