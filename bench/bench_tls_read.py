"""The broker's TLS receive path alone: server CPU to take N MiB over TLS into a buffered protocol.

    python bench/bench_tls_read.py [--mib 200] [--rounds 3]

A server process per measurement serves one TLS connection with one of the TLS listener
policies (logcore/security/tls_transport.py): `asyncio` (asyncio's SSLProtocol, one
SSLObject.read per TLS record), `batched` (asyncio's SSLProtocol, every complete record in one C
call) or `socket` (tls_socket.py: OpenSSL reads the socket itself, the same C call), into a
BufferedProtocol that takes 256 KiB at a time and counts the bytes. The client (this process)
encrypts with an SSLObject over memory BIOs and sends 256 KiB of ciphertext at a time, in one of
two record patterns: `librdkafka` (each 1 KiB record's ~10 B header and its value written as two
TLS records, as librdkafka's TLS produce writes them) and `full` (16 KiB TLS records). The server
reports its process CPU from the connection's start to its end of data. Policies alternate
within each round (the order flipping between rounds); medians and ranges over the rounds.
Certificates: tests/security/pki.py (`cryptography`).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 256 * 1024
PATTERNS = {"librdkafka": (b"\0" * 10, b"v" * 1024), "full": (b"f" * 16384,)}


class Sink(asyncio.BufferedProtocol):
    def __init__(self, done: asyncio.Future):
        self.buf = memoryview(bytearray(CHUNK))
        self.received = 0
        self.started = None
        self.done = done

    def connection_made(self, transport):
        self.started = time.process_time()

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.received += nbytes

    def eof_received(self):
        if not self.done.done():
            self.done.set_result((self.received, time.process_time() - self.started))

    def connection_lost(self, exc):
        self.eof_received()


async def _serve(policy: str, cert: str, key: str) -> None:
    sys.path.insert(0, str(ROOT))
    from logcore.security.tls_transport import OneRecordReads, choose_reads
    reads = OneRecordReads() if policy == "asyncio" else choose_reads(sockets=policy == "socket")
    if reads.name != policy:
        raise SystemExit(f"policy {policy} not available")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    factory, options = reads.serve(loop, lambda: Sink(done), context)
    server = await loop.create_server(factory, "127.0.0.1", 0, **options)
    print(server.sockets[0].getsockname()[1], flush=True)
    received, cpu = await done
    print(received, cpu, flush=True)
    server.close()


def _send(port: int, ca: str, pattern: str, total: int) -> None:
    context = ssl.create_default_context(cafile=ca)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    sock = socket.create_connection(("127.0.0.1", port))
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("closed during the handshake")
            incoming.write(data)
    sock.sendall(outgoing.read())
    pieces = PATTERNS[pattern]
    per = sum(len(p) for p in pieces)
    for _ in range(total // per):
        for piece in pieces:
            tls.write(piece)
        if outgoing.pending >= CHUNK:
            sock.sendall(outgoing.read())
    try:
        tls.unwrap()
    except ssl.SSLWantReadError:
        pass
    sock.sendall(outgoing.read())
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(60)
    while sock.recv(65536):
        pass
    sock.close()


def _measure(policy: str, pattern: str, mib: int, pki) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    server = subprocess.Popen([sys.executable, __file__, "--serve", policy, "--cert", str(pki.cert),
                               "--key", str(pki.key)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(server.stdout.readline())
        total = mib << 20
        _send(port, str(pki.ca), pattern, total)
        received, cpu = server.stdout.readline().split()
        if int(received) < total * 0.99:
            raise RuntimeError(f"server took {received} of {total} bytes")
        return float(cpu)
    finally:
        server.wait(timeout=60)


class _Certs:
    def __init__(self, folder: Path):
        sys.path.insert(0, str(ROOT / "tests" / "security"))
        from pki import issue, make_ca
        ca = make_ca()
        self.ca = folder / "ca.crt"
        self.ca.write_bytes(ca.cert_pem())
        self.cert, self.key = issue(ca, "broker").write_pem(folder, "broker")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--patterns", default="librdkafka,full")
    parser.add_argument("--policies", default="asyncio,batched,socket")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--cert", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.cert, args.key))
        return
    policies = args.policies.split(",")
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        pki = _Certs(Path(folder))
        print(f"load at start: {os.getloadavg()[0]:.1f}", flush=True)
        for r in range(args.rounds):
            for pattern in args.patterns.split(","):
                for policy in (policies if r % 2 == 0 else policies[::-1]):
                    cpu = _measure(policy, pattern, args.mib, pki)
                    results.setdefault((pattern, policy), []).append(cpu)
                    print(f"round {r + 1} {pattern:10} {policy:8} server CPU {cpu:.3f} s", flush=True)
        print(f"load at end: {os.getloadavg()[0]:.1f}\n")
    first = policies[0]
    print(f"| records | server CPU per {args.mib} MiB: " + " | ".join(policies)
          + "".join(f" | {p} / {first}" for p in policies[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(policies) - 1))
    for pattern in args.patterns.split(","):
        base = results[(pattern, first)]
        cells = []
        for policy in policies:
            cpu = results[(pattern, policy)]
            cells.append(f"{statistics.median(cpu):.2f} s ({min(cpu):.2f}-{max(cpu):.2f})")
        for policy in policies[1:]:
            ratios = [y / x for x, y in zip(base, results[(pattern, policy)])]
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {pattern} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
