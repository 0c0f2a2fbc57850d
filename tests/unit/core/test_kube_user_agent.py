"""Every client of a component names it in its User-Agent, so the API server's logs and audit events tell the
components' requests apart."""

from __future__ import annotations

from pathlib import Path

import yaml

from operators.core import kube


async def test_clients_name_their_component(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    before = kube._user_agent
    kube.set_user_agent("binder")  # process-wide: the next tests' clients must not carry it
    try:
        api = await kube.api_client(str(kubeconfig))
        async with api:
            assert api.default_headers["User-Agent"] == "kai-binder"
    finally:
        kube._user_agent = before
