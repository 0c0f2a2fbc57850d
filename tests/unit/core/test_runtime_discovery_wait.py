"""Kopf resolves its resources once: a component starts it only once the API server's discovery serves the KAI
resources its handlers select (right after an API server restart, the CRD-backed groups answer 503 for a while,
and a resource missing from Kopf's one scan would never be watched). Against a scripted discovery endpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kopf
import yaml
from aiohttp import web

from operators.core import component, keys

PATH = f"/apis/{keys.GROUP}/v1alpha2"


def registry() -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()

    @kopf.on.event(keys.GROUP, "v1alpha2", "bindrequests", registry=reg)
    async def on_bindrequest(**_: Any) -> None:
        pass

    @kopf.on.event("ray.io", "v1", "rayjobs", registry=reg)  # optional: never waited for
    async def on_rayjob(**_: Any) -> None:
        pass

    return reg


async def test_kopf_waits_until_discovery_serves_the_kai_resources(tmp_path: Path) -> None:
    served = {"ready": False, "calls": 0}

    async def discovery(_: web.Request) -> web.Response:
        served["calls"] += 1
        if not served["ready"]:
            return web.json_response({"kind": "Status", "code": 503, "message": "service unavailable"}, status=503)
        return web.json_response({"kind": "APIResourceList", "groupVersion": f"{keys.GROUP}/v1alpha2",
                                  "resources": [{"name": "bindrequests", "singularName": "bindrequest",
                                                 "kind": "BindRequest", "namespaced": True}]})

    app = web.Application()
    app.router.add_get(PATH, discovery)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    try:
        assert component._custom_selectors(registry()) == [(keys.GROUP, "v1alpha2", "bindrequests")]
        waiting = asyncio.create_task(component.await_served(str(kubeconfig), registry(), interval=0.05))
        await asyncio.sleep(0.5)
        assert not waiting.done(), "returned while the resource was not served"
        assert served["calls"] >= 3
        served["ready"] = True
        await asyncio.wait_for(waiting, timeout=5)
    finally:
        await runner.cleanup()
