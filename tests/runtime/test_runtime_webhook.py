"""The webhook server's certificate hot reload: replaced files are served at the next TLS handshake."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from operators.core.webhook import WebhookServer, verdict


def write_cert(directory: Path, common_name: str, *, stamp: float) -> None:
    """A self-signed serving certificate for 127.0.0.1, written as a rotation does it (replace, not rewrite)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    files = {"tls.crt": cert.public_bytes(serialization.Encoding.PEM),
             "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())}
    for filename, data in files.items():
        tmp = directory / f".{filename}.tmp"
        tmp.write_bytes(data)
        os.utime(tmp, (stamp, stamp))  # distinct mtimes even on coarse-grained filesystems
        os.replace(tmp, directory / filename)


async def served_common_name(port: int) -> str:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


async def wait_for_name(port: int, expected: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (seen := await served_common_name(port)) != expected:
        assert time.monotonic() < deadline, f"still serving {seen!r}, expected {expected!r}"
        await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def allow_all(review: dict[str, Any]) -> dict[str, Any]:
    return verdict(review, None)


async def test_replaced_certificate_is_served_at_the_next_handshake(tmp_path: Path) -> None:
    write_cert(tmp_path, "first", stamp=1_000_000)
    port = free_port()
    server = WebhookServer({"/validate": allow_all}, address=f"127.0.0.1:{port}",
                           certfile=str(tmp_path / "tls.crt"), keyfile=str(tmp_path / "tls.key"),
                           reload_interval=0.05)
    await server.start()
    try:
        assert await served_common_name(port) == "first"

        write_cert(tmp_path, "second", stamp=2_000_000)
        await wait_for_name(port, "second")

        # A half-written rotation (a key that is not a key) keeps the last good certificate in service...
        (tmp_path / "tls.key").write_text("not a key")
        os.utime(tmp_path / "tls.key", (3_000_000, 3_000_000))
        await asyncio.sleep(0.3)
        assert await served_common_name(port) == "second"
        assert server.ready

        # ...and the completed rotation is picked up.
        write_cert(tmp_path, "third", stamp=4_000_000)
        await wait_for_name(port, "third")
    finally:
        await server.stop()


async def test_a_failing_handler_is_answered_as_a_denial_whatever_the_body() -> None:
    import aiohttp

    def broken(review: dict[str, Any]) -> dict[str, Any]:
        return verdict(review, review["request"]["object"]["spec"]["missing"])

    port = free_port()
    server = WebhookServer({"/validate": broken}, address=f"127.0.0.1:{port}", certfile=None, keyfile=None)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            for body, uid in ((b'{"request": {"uid": "u1"}}', "u1"), (b"[1, 2]", ""), (b'"x"', ""), (b"7", "")):
                async with session.post(f"http://127.0.0.1:{port}/validate", data=body) as resp:
                    assert resp.status == 200, (body, await resp.text())
                    answer = (await resp.json())["response"]
                    assert answer["uid"] == uid and answer["allowed"] is False
                    assert answer["status"]["message"].startswith("internal error")
            async with session.post(f"http://127.0.0.1:{port}/validate", data=b"{not json") as resp:
                assert resp.status == 400
    finally:
        await server.stop()
