"""Fetch of cold local data through `seglog broker` against a plain sendfile of the same segments.

A one-partition topic of `--mb` MB (1 KiB records, 512 per batch, 64 MiB segments) is written once
with logcore, fsynced, and its segment files are dropped from the page cache
(posix_fadvise DONTNEED) before each measurement, so both sides read from disk:

- broker: a raw-protocol Fetch loop (Fetch v11, one partition, max.partition.fetch.bytes and
  fetch.max.bytes both `--fetch-mb`; the next offset taken from the last batch header of each
  response; the records are not decoded) against `seglog broker` in its own process;
- anchor: os.sendfile of the same segment files, in `--fetch-mb` pieces, to a loopback socket
  drained by a reader thread (recv_into), in this process.

Each is run `--rounds` times alternately; the best round of each is printed, with CPU seconds of
the broker process beside the broker figure.

    python bench/bench_fetch_cold.py [--mb 400] [--fetch-mb 8] [--rounds 2]
"""
from __future__ import annotations

import argparse
import datetime
import io
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import _cpu_of, start_broker  # noqa: E402
from common import print_table  # noqa: E402

TOPIC = "cold"
RECORD = 1024
PER_BATCH = 512
SEGMENT_BYTES = 64 << 20
FETCH_VERSION = 11
_I32 = struct.Struct(">i")


def write_topic(log_dir: str, mb: int) -> list[str]:
    """The topic's segment files (written, committed, closed cleanly)."""
    from logcore.log.log_root import LogRoot
    from logcore.records.batch import build_batch
    root = LogRoot.open(log_dir, create=True)
    try:
        root.create_topic(TOPIC, 1, {"segment.bytes": str(SEGMENT_BYTES)})
        log = root.log(TOPIC, 0, writer=True)
        batch = build_batch([(None, os.urandom(RECORD), (), None) for _ in range(PER_BATCH)])
        for _ in range(max(1, mb * 1_000_000 // len(batch))):
            log.append_batch(batch)
        log.commit()
        files = [seg.log_path for seg in log.segments]
        paths = [root.storage.local_path(f) for f in files]
        log.close()
    finally:
        root.close()
    return paths


def drop_cache(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------------- raw Fetch client

def _fetch_request(correlation_id: int, offset: int, max_bytes: int) -> bytes:
    from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_writer
    req = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                       max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(
                           partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                           partition_max_bytes=max_bytes),)),),
                       forgotten_topics_data=(), rack_id="")
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=1, request_api_version=FETCH_VERSION,
                                                     correlation_id=correlation_id, client_id="bench"))
    entity_writer(FetchRequest)(buf, req)
    body = buf.getvalue()
    return _I32.pack(len(body)) + body


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("broker closed the connection")
        got += n


def _records_of(frame: memoryview) -> tuple[int, int, int]:
    """(error code, records start, records length) of a one-partition Fetch v11 response."""
    pos = 4 + 4 + 2 + 4                       # correlation id, throttle, error code, session id
    pos += 4                                  # topics count (1)
    (name_len,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + name_len + 4                   # name, partitions count (1)
    _, error, _hw, _lso, _lss = struct.unpack_from(">ihqqq", frame, pos)
    pos += 4 + 2 + 8 + 8 + 8
    (aborted,) = struct.unpack_from(">i", frame, pos)
    pos += 4 + max(aborted, 0) * 16 + 4       # aborted transactions, preferred read replica
    (length,) = struct.unpack_from(">i", frame, pos)
    return error, pos + 4, max(length, 0)


def _next_offset(frame: memoryview, start: int, length: int) -> int:
    """Offset after the last whole batch of the records section (walks batch headers)."""
    pos, end, next_offset = start, start + length, -1
    while pos + 61 <= end:
        base, size = struct.unpack_from(">qi", frame, pos)
        if pos + 12 + size > end:
            break
        (last_delta,) = struct.unpack_from(">i", frame, pos + 23)
        next_offset = base + last_delta + 1
        pos += 12 + size
    return next_offset


def fetch_all(bootstrap: str, end_offset: int, fetch_bytes: int) -> int:
    """Fetch the partition from 0 to `end_offset`; returns the records bytes received."""
    host, port = bootstrap.rsplit(":", 1)
    buf = bytearray(fetch_bytes + (1 << 20))
    view = memoryview(buf)
    head = bytearray(4)
    total = offset = 0
    with socket.create_connection((host, int(port))) as sock:
        correlation = 0
        while offset < end_offset:
            correlation += 1
            sock.sendall(_fetch_request(correlation, offset, fetch_bytes))
            _recv_exactly(sock, memoryview(head))
            (size,) = _I32.unpack(head)
            if size > len(buf):
                buf = bytearray(size)
                view = memoryview(buf)
            frame = view[:size]
            _recv_exactly(sock, frame)
            error, start, length = _records_of(frame)
            if error:
                raise SystemExit(f"fetch at offset {offset} failed with error code {error}")
            nxt = _next_offset(frame, start, length)
            if nxt <= offset:
                raise SystemExit(f"fetch at offset {offset} returned no whole batch")
            total += length
            offset = nxt
    return total


# ------------------------------------------------------------------------------- sendfile anchor

def sendfile_all(paths: list[str], chunk: int) -> int:
    """os.sendfile of every file to a loopback socket that a thread drains; returns bytes sent."""
    server = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def drain(conn: socket.socket) -> None:
        buf = memoryview(bytearray(1 << 20))
        with conn:
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    return
                received[0] += n

    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    reader = threading.Thread(target=drain, args=(conn,))
    reader.start()
    sent = 0
    try:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                pos = 0
                while pos < size:
                    n = os.sendfile(client.fileno(), fd, pos, min(chunk, size - pos))
                    if n == 0:
                        break
                    pos += n
                sent += pos
            finally:
                os.close(fd)
    finally:
        client.close()
        reader.join()
        server.close()
    if received[0] != sent:
        raise SystemExit(f"anchor reader got {received[0]} of {sent} bytes")
    return sent


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400, help="topic size in MB")
    parser.add_argument("--fetch-mb", type=int, default=8, help="fetch.max.bytes = max.partition.fetch.bytes")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    fetch_bytes = args.fetch_mb << 20
    with tempfile.TemporaryDirectory() as workdir:
        paths = write_topic(os.path.join(workdir, "logs"), args.mb)
        file_bytes = sum(os.path.getsize(p) for p in paths)
        proc, bootstrap = start_broker(workdir)
        try:
            from logcore.log.log_root import LogRoot
            root = LogRoot.open(os.path.join(workdir, "logs"), read_only=True)
            end_offset = root.log(TOPIC, 0).high_watermark
            root.close()
            best_broker, best_anchor, cpu = 0.0, 0.0, 0.0
            for _ in range(args.rounds):
                drop_cache(paths)
                c0, t0 = _cpu_of(proc.pid), time.perf_counter()
                got = fetch_all(bootstrap, end_offset, fetch_bytes)
                elapsed = time.perf_counter() - t0
                if got / elapsed > best_broker:
                    best_broker, cpu = got / elapsed, _cpu_of(proc.pid) - c0
                drop_cache(paths)
                t0 = time.perf_counter()
                sent = sendfile_all(paths, fetch_bytes)
                best_anchor = max(best_anchor, sent / (time.perf_counter() - t0))
        finally:
            proc.terminate()
            proc.wait(30)
    return print_table(
        f"Cold fetch: {file_bytes / 1e6:,.0f} MB in {len(paths)} segments, page cache dropped; broker: raw"
        f" Fetch v{FETCH_VERSION} loop, {args.fetch_mb} MiB per fetch (broker CPU {cpu:.2f} s);"
        f" anchor: os.sendfile of the segment files to a loopback socket",
        [("fetch through seglog broker vs plain sendfile", best_broker / 1e6, best_anchor / 1e6, "MB/s")])


if __name__ == "__main__":
    main()
