"""What a TLS listener negotiates: the broker's own context (tls_context.server_context) served as
the broker serves it (tls_transport.server_reads()), with Kafka's defaults for the settings
(ssl.enabled.protocols TLSv1.2,TLSv1.3; no ssl.cipher.suites). The server's order decides, as on
Kafka's JSSE listeners (JDK 17: server preference on, AES-256-GCM first): TLS 1.3 with
TLS_AES_256_GCM_SHA384, and TLS 1.2 with ECDHE-ECDSA-AES256-GCM-SHA384, even for a client that
lists AES-128 or ChaCha20 first. Kafka 4.1.1 on JDK 17 answered the same offers with the same
suites (docs/benchmarks.md, TLS and SASL cost); a cheaper suite for the clients would be a
setting of the operator's, as on Kafka, not a default of seglog's."""
from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess

import pytest

from pki import issue, make_ca

from logcore.security import tls_context, tls_transport

AES128_FIRST_12 = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305"
CHACHA_FIRST_12 = "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384"
AES128_FIRST_13 = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-ciphers")
    ca = make_ca()
    ca_pem = folder / "ca.crt"
    ca_pem.write_bytes(ca.cert_pem())
    broker = issue(ca, "broker")
    settings = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": broker.cert_pem().decode(),
                "ssl.keystore.key": broker.key_pem().decode()}
    return ca_pem, settings


class Listener:
    """A TLS listener with the broker's context and transport; `negotiated` gets the
    (protocol, suite) each connection's server side agreed on."""

    def __init__(self, settings: dict[str, str]):
        self.settings = settings
        self.negotiated: list[tuple[str, str]] = []

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        negotiated = self.negotiated

        class App(asyncio.Protocol):
            def connection_made(self, transport):
                name, protocol, _bits = transport.get_extra_info("cipher")
                negotiated.append((protocol, name))

        context = tls_context.server_context(self.settings, "listener SSL")
        factory, options = tls_transport.server_reads().serve(loop, App, context)
        self.server = await loop.create_server(factory, "127.0.0.1", 0, **options)
        return self.server.sockets[0].getsockname()[1]

    async def settled(self, connections: int) -> list[tuple[str, str]]:
        """What was negotiated, once `connections` handshakes have reached the application (the
        client's side of a handshake can end before the server's)."""
        for _ in range(500):
            if len(self.negotiated) >= connections:
                break
            await asyncio.sleep(0.01)
        return self.negotiated


def _client(ca_pem, version: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_pem))
    context.minimum_version = context.maximum_version = version
    if ciphers:
        context.set_ciphers(ciphers)
    return context


def test_the_servers_order_decides_as_on_kafka(pki):
    """Python's client (OpenSSL's default order, then TLS 1.2 offers with AES-128 or ChaCha20
    first): the listener picks AES-256-GCM each time, and the client sees what the server agreed."""
    ca_pem, settings = pki
    offers = [(ssl.TLSVersion.TLSv1_3, None, ("TLSv1.3", "TLS_AES_256_GCM_SHA384")),
              (ssl.TLSVersion.TLSv1_2, None, ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")),
              (ssl.TLSVersion.TLSv1_2, AES128_FIRST_12, ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")),
              (ssl.TLSVersion.TLSv1_2, CHACHA_FIRST_12, ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384"))]

    async def run():
        listener = Listener(settings)
        port = await listener.start()
        for version, ciphers, expected in offers:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client(ca_pem, version, ciphers),
                                                      server_hostname="localhost")
            name, protocol, _ = writer.get_extra_info("cipher")
            assert (protocol, name) == expected, (version, ciphers)
            writer.close()
        assert await listener.settled(len(offers)) == [expected for _, _, expected in offers]
        listener.server.close()
    asyncio.run(run())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command to offer TLS 1.3 suites in order")
def test_tls13_client_preferring_aes128_gets_aes256(pki):
    """TLS 1.3's suites cannot be ordered from Python's ssl; `openssl s_client -ciphersuites`
    offers AES-128 first: the listener still picks TLS_AES_256_GCM_SHA384 (Kafka's answer), and
    the client is served once it is restricted to AES-128 (the suite is a preference, not a rule)."""
    ca_pem, settings = pki

    async def run():
        listener = Listener(settings)
        port = await listener.start()
        found = []
        for suites in (AES128_FIRST_13, "TLS_AES_128_GCM_SHA256"):
            proc = await asyncio.create_subprocess_exec(
                "openssl", "s_client", "-tls1_3", "-ciphersuites", suites, "-connect", f"127.0.0.1:{port}",
                "-CAfile", str(ca_pem), "-brief", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
            found.append([line.split(":", 1)[1].strip() for line in out.decode().splitlines()
                          if line.startswith("Ciphersuite")])
        assert found == [["TLS_AES_256_GCM_SHA384"], ["TLS_AES_128_GCM_SHA256"]]
        assert await listener.settled(2) == [("TLSv1.3", "TLS_AES_256_GCM_SHA384"), ("TLSv1.3", "TLS_AES_128_GCM_SHA256")]
        listener.server.close()
    asyncio.run(run())
