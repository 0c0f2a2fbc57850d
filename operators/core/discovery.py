"""Kind -> resource path resolution through API discovery, cached (owner references carry kinds, not plurals)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubernetes_asyncio import client

from operators.core.kube import raw


@dataclass(frozen=True)
class ApiResource:
    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class Discovery:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._by_group_version: dict[str, dict[str, ApiResource]] = {}
        self._lock = asyncio.Lock()

    async def resolve(self, api_version: str, kind: str) -> ApiResource | None:
        """The resource of `kind` in `api_version` ("v1", "apps/v1", "ray.io/v1"), None if unknown."""
        kinds = self._by_group_version.get(api_version)
        if kinds is None or kind not in kinds:
            async with self._lock:
                kinds = await self._load(api_version)
        return kinds.get(kind)

    async def _load(self, api_version: str) -> dict[str, ApiResource]:
        group, _, version = api_version.rpartition("/")
        path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        try:
            doc = await raw(self.api, "GET", path)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                doc = {"resources": []}
            else:
                raise
        kinds: dict[str, ApiResource] = {}
        for res in doc.get("resources") or []:
            if "/" in res["name"]:
                continue  # subresource
            kinds[res["kind"]] = ApiResource(group, version, res["name"], bool(res.get("namespaced")))
        self._by_group_version[api_version] = kinds
        return kinds
