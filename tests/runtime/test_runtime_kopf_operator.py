"""A component process is a Kopf operator that opens no watch: its start-up handler runs the component's runtime,
the runtime ending ends the operator (its error is raised to the caller), and the only requests Kopf makes are
the login check and API discovery. Against a scripted API server on 127.0.0.1."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from operators.core import component

DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
         "verbs": ["get", "list", "watch"]}]},
    "/apis": {"kind": "APIGroupList", "groups": [
        {"name": "apiextensions.k8s.io", "versions": [{"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}}]},
    "/apis/apiextensions.k8s.io/v1": {"kind": "APIResourceList", "groupVersion": "apiextensions.k8s.io/v1",
                                      "resources": [{"name": "customresourcedefinitions", "namespaced": False,
                                                     "singularName": "customresourcedefinition",
                                                     "kind": "CustomResourceDefinition",
                                                     "verbs": ["get", "list", "watch"]}]},
}


class ApiServer:
    """Answers discovery; records every request; `discovered` is set once Kopf has read /apis."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.discovered = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path, dict(request.query)))
        if request.path == "/apis":
            self.discovered.set()
        if request.path in DISCOVERY:
            return web.json_response(DISCOVERY[request.path])
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def kubeconfig(tmp_path: Path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "fake", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
    return str(path)


class Broken(Exception):
    pass


async def run(tmp_path: Path, runtime: Any) -> ApiServer:
    server = ApiServer()
    await server.start()
    args = argparse.Namespace(kubeconfig=kubeconfig(tmp_path, server.port))
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(component.run_operator("test", args, lambda: runtime(server)), timeout=30)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # Kopf's handlers must not outlive its operator
            loop.remove_signal_handler(sig)
        await server.stop()
    return server


async def test_the_runtime_error_ends_the_operator_and_is_raised(tmp_path: Path) -> None:
    async def runtime(server: ApiServer) -> None:
        await server.discovered.wait()
        raise Broken("the runtime failed")

    with pytest.raises(Broken, match="the runtime failed"):
        await run(tmp_path, runtime)


async def test_kopf_only_checks_the_login_and_discovers_the_api(tmp_path: Path) -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []

    async def runtime(server: ApiServer) -> None:
        await server.discovered.wait()
        await asyncio.sleep(0.2)  # let Kopf's observers go as far as they would
        seen.extend(server.requests)

    await run(tmp_path, runtime)
    assert seen, "the login check and the discovery reached the server"
    assert ("GET", "/api", {}) in seen
    assert not [r for r in seen if r[2].get("watch") or r[1] not in DISCOVERY], seen
