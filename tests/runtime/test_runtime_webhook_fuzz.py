"""The admission endpoints over HTTP with bodies of any shape: never a 5xx, never an internal-error answer.

A body that is not JSON, or JSON that is not an AdmissionReview request, gets HTTP 400; an AdmissionReview gets
HTTP 200 with an answer whose status code is 200 (allowed), 400 or 403 (refused).
"""

from __future__ import annotations

import json
import socket
from typing import Any

import aiohttp
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from operators.admission.main import MUTATE_PATH, VALIDATE_PATH, parser, routes
from operators.core.webhook import WebhookServer
from tests.fuzz.test_fuzz_pod_admission import JSON, REQUESTS


def bodies(count: int) -> list[bytes]:
    out: list[bytes] = []

    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(13)
    @given(st.one_of(REQUESTS.map(lambda request: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                                   "request": request}),
                     JSON, st.binary(max_size=20).map(lambda raw: {"raw": raw.hex()})))
    def collect(value: Any) -> None:
        out.append(json.dumps(value).encode())

    collect()
    return [b"", b"not json", b"[1, 2]", b'"review"', b"null", b'{"request": 5}', b'{"request": {"uid": ""}}',
            *out]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_any_body_gets_an_answer_or_a_400_never_a_5xx() -> None:
    port = free_port()
    args = parser().parse_args(["--gpu-sharing-enabled=true"])
    server = WebhookServer(routes(args), address=f"127.0.0.1:{port}", certfile=None, keyfile=None)
    await server.start()
    seen: dict[int, int] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for body in bodies(300):
                for path in (MUTATE_PATH, VALIDATE_PATH):
                    async with session.post(f"http://127.0.0.1:{port}{path}", data=body,
                                            headers={"Content-Type": "application/json"}) as resp:
                        seen[resp.status] = seen.get(resp.status, 0) + 1
                        assert resp.status in (200, 400), (body, resp.status, await resp.text())
                        if resp.status == 200:
                            answer = await resp.json()
                            code = answer["response"]["status"]["code"]
                            assert code in (200, 400, 403), (body, answer)
    finally:
        await server.stop()
    assert seen.get(200) and seen.get(400), seen  # both outcomes were reached
