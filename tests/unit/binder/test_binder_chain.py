"""The binder's plugin chain: KAI's order, an unknown plugin refused when the chain is built, the first pre-bind
failure ends the chain, and every plugin rolls back whatever the others did."""

from __future__ import annotations

from typing import Any

import pytest

from operators.binder.plugins import BindingState, PluginChain, UnknownPlugin
from operators.core import keys
from operators.core.api.bindrequest import BindRequestRecord

REQUEST = BindRequestRecord.decided("ns", "p", "uid", "n1", keys.RESOURCE_TYPE_REGULAR)
POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns"}}
NODE: dict[str, Any] = {"metadata": {"name": "n1"}}


class Recorder:
    def __init__(self, name: str, calls: list[str], fail: set[str] | None = None) -> None:
        self.name, self.calls, self.fail = name, calls, fail or set()

    async def _hook(self, hook: str) -> None:
        self.calls.append(f"{self.name}.{hook}")
        if hook in self.fail:
            raise RuntimeError(f"{self.name} {hook} failed")

    async def pre_bind(self, pod: Any, node: Any, request: BindRequestRecord, state: BindingState) -> None:
        await self._hook("pre_bind")

    async def post_bind(self, pod: Any, node: Any, request: BindRequestRecord, state: BindingState) -> None:
        await self._hook("post_bind")

    async def rollback(self, pod: Any, node: Any, request: BindRequestRecord, state: BindingState) -> None:
        await self._hook("rollback")


def test_plugins_run_in_kais_order_whatever_the_registration_order() -> None:
    calls: list[str] = []
    chain = PluginChain([Recorder("gpusharing", calls), Recorder("volumebinding", calls)])
    assert chain.names == ("volumebinding", "gpusharing")


@pytest.mark.parametrize("names", [["gpusharing", "gpu-sharing"], ["gpusharing", "gpusharing"]])
def test_a_misspelt_or_doubled_plugin_is_refused_when_the_chain_is_built(names: list[str]) -> None:
    with pytest.raises(UnknownPlugin, match="gpu"):
        PluginChain([Recorder(name, []) for name in names])


async def test_the_first_pre_bind_failure_ends_the_chain() -> None:
    calls: list[str] = []
    chain = PluginChain([Recorder("volumebinding", calls, fail={"pre_bind"}), Recorder("gpusharing", calls)])
    with pytest.raises(RuntimeError, match="volumebinding pre_bind failed"):
        await chain.pre_bind(POD, NODE, REQUEST, BindingState())
    assert calls == ["volumebinding.pre_bind"]


async def test_every_plugin_rolls_back_and_post_binds_even_after_another_failed() -> None:
    calls: list[str] = []
    chain = PluginChain([Recorder("volumebinding", calls, fail={"rollback", "post_bind"}),
                         Recorder("gpusharing", calls)])
    await chain.rollback(None, NODE, REQUEST, BindingState())
    await chain.post_bind(POD, NODE, REQUEST, BindingState())
    assert calls == ["volumebinding.rollback", "gpusharing.rollback", "volumebinding.post_bind",
                     "gpusharing.post_bind"]


async def test_gpu_sharing_leaves_a_plain_bind_alone() -> None:
    from operators.binder.plugins.gpusharing import GpuSharing

    plugin = GpuSharing(None, None)  # type: ignore[arg-type]  # a plain bind must touch neither
    state = BindingState()
    await plugin.pre_bind(POD, NODE, REQUEST, state)
    await plugin.rollback(POD, NODE, REQUEST, state)
    assert state.reserved_gpu_ids == []
