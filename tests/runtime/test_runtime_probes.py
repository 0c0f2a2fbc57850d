"""The probe server: /readyz is leadership plus the component's check; /readyz?standby=true the check alone."""

from __future__ import annotations

import aiohttp

from operators.core import metrics
from tests.runtime.test_runtime_webhook import free_port


async def test_a_warm_standby_is_ready_only_on_the_standby_path() -> None:
    port = free_port()
    state = {"leading": False, "synced": True}
    runner = await metrics.serve(f"127.0.0.1:{port}", ready=lambda: state["leading"] and state["synced"],
                                 warm=lambda: state["synced"])
    try:
        async with aiohttp.ClientSession() as http:
            async def status(path: str) -> int:
                async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
                    return resp.status

            assert (await status("/healthz"), await status("/readyz"), await status("/readyz?standby=true")) == (
                200, 503, 200)
            state["synced"] = False  # caches not warm: not ready on either path
            assert (await status("/readyz"), await status("/readyz?standby=true")) == (503, 503)
            state.update(leading=True, synced=True)
            assert (await status("/readyz"), await status("/readyz?standby=true")) == (200, 200)
            assert await status("/readyz?standby=false") == 200
    finally:
        await runner.cleanup()


async def test_without_a_standby_check_both_paths_answer_readiness() -> None:
    port = free_port()
    runner = await metrics.serve(f"127.0.0.1:{port}", ready=lambda: False)
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("/readyz", "/readyz?standby=true"):
                async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
                    assert resp.status == 503
    finally:
        await runner.cleanup()
