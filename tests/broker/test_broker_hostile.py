"""Hostile input against the real broker: decompression bombs, frames that claim more than they
send or trickle, connection floods, a listener on every interface. Every client here connects
to 127.0.0.1 only, and every loop is bounded."""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402

from broker_helpers import (api_versions_frame, connect, consume_all, create,  # noqa: E402
                            ping, produce, recv_frame, wait_until)
from hostile_input import (batch, gzip_bomb, lz4_bomb, produce_error, produce_frame,  # noqa: E402
                           proc_status, zstd_rle_bomb)

from logcore.broker.config import BrokerConfig  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402

MESSAGE_TOO_LARGE = 10


def _closed(sock: socket.socket, wait: float = 5) -> bool:
    sock.settimeout(wait)
    try:
        return recv_frame(sock) is None
    except TimeoutError:
        return False
    except OSError:
        return True


def _send_and_answer(b, frame: bytes, timeout: float = 30) -> tuple[int, float]:
    with connect(b, timeout) as s:
        t0 = time.monotonic()
        s.sendall(frame)
        answer = recv_frame(s)
        took = time.monotonic() - t0
    assert answer is not None, "the broker closed the connection instead of answering"
    return produce_error(answer), took


# ------------------------------------------------------------------ item 17: decompression bombs
def test_decompression_bombs_are_refused_early_with_message_too_large(broker):
    create(broker, "bombed", 1)
    bombs = {
        "zstd 1 MB -> 32 GiB": zstd_rle_bomb(1_000_000),
        "gzip -> 64 MiB": gzip_bomb(64 << 20),
        "lz4 -> 64 MiB": lz4_bomb(64 << 20),
    }
    before = proc_status(broker.proc.pid)
    results: dict = {}

    def send_bombs():
        for name, section in bombs.items():
            codec = {"zstd": 4, "gzip": 1, "lz4": 3}[name.split()[0]]
            for _ in range(3):
                results.setdefault(name, []).append(
                    _send_and_answer(broker, produce_frame("bombed", 0, batch(section, codec))))

    # Another client's round trips while the bombs are inflated (off the event loop).
    bomber = threading.Thread(target=send_bombs)
    rtts = []
    with connect(broker) as s:
        bomber.start()
        while bomber.is_alive() and len(rtts) < 3000:
            t0 = time.monotonic()
            s.sendall(api_versions_frame(len(rtts)))
            assert recv_frame(s) is not None
            rtts.append(time.monotonic() - t0)
            time.sleep(0.005)
    bomber.join()
    for name, answers in results.items():
        assert [error for error, _ in answers] == [MESSAGE_TOO_LARGE] * 3, name
        assert max(took for _, took in answers) < 10, (name, answers)
    assert len(rtts) > 10 and max(rtts) < 0.3, (len(rtts), max(rtts))
    after = proc_status(broker.proc.pid)
    # Inflation stops at 32 x max.message.bytes (32 MiB here) instead of 32 GiB.
    assert after["VmHWM"] - before["VmHWM"] < 400 << 20, (before, after)
    log = broker.log_text()
    assert "zstd records inflate to more than 33554816 bytes" in log
    assert "32 x max.message.bytes=1048588" in log
    # Nothing was appended; well-formed compressed batches of every codec still go in.
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        acked = produce(broker, "bombed", [b"v-" + codec.encode() * 50] * 20, acks="all",
                        **{"compression.type": codec})
        assert all(err is None for err, *_ in acked)
    got = consume_all(broker, "bombed", 1, 80)
    assert len(got) == 80 and got[0][1] == 0


def test_inflation_limit_follows_the_topics_max_message_bytes(broker):
    """Batches as a client builds them (librdkafka caps its batches at its own message.max.bytes
    before compressing, so the raw protocol sends the larger ones a Java producer may send)."""
    from logcore.records import build_batch
    # 32 x 10000 = 320000 bytes of records once inflated.
    create(broker, "small-inflation", 1, {"max.message.bytes": "10000"})
    now = int(time.time() * 1000)
    accepted = 0
    # snappy inflates at most ~21:1, so a snappy batch within max.message.bytes stays within 32 x
    for codec, cases in ((1, ((250, 0), (400, MESSAGE_TOO_LARGE))), (3, ((250, 0), (400, MESSAGE_TOO_LARGE))),
                         (4, ((250, 0), (400, MESSAGE_TOO_LARGE))), (2, ((150, 0),))):
        for count, expected in cases:              # 250: ~260 KB inflated, 400: ~415 KB
            records = [(b"k%d" % i, b"x" * 1000, (), now) for i in range(count)]
            data = build_batch(records, compression=codec)
            assert len(data) < 10000
            error, _ = _send_and_answer(broker, produce_frame("small-inflation", 0, data))
            assert error == expected, (codec, count)
            accepted += count if error == 0 else 0
    got = consume_all(broker, "small-inflation", 1, accepted)
    assert len(got) == accepted == 900
    assert "(the limit is 32 x max.message.bytes=10000)" in broker.log_text()


# ------------------------------------------------------------------ item 18: frames and connections
def test_frames_claiming_100_mb_cost_what_arrives_and_a_trickle_is_cut(broker_factory):
    b = broker_factory(socket_request_read_timeout_ms=2000)
    assert ping(b)
    base = proc_status(b.proc.pid)["VmRSS"]
    claims = []
    for _ in range(10):
        s = connect(b)
        s.sendall(struct.pack(">i", 100 << 20) + b"\0" * 68)
        claims.append(s)
    trickler = connect(b)
    trickler.sendall(struct.pack(">i", 1 << 20))
    trickle_closed = None
    t0 = time.monotonic()
    for _ in range(40):                        # one byte every 0.2 s, at most 8 s
        try:
            trickler.sendall(b"\0")
        except OSError:
            trickle_closed = time.monotonic() - t0
            break
        time.sleep(0.2)
    held = proc_status(b.proc.pid)["VmRSS"] - base
    assert held < 16 << 20, f"10 claimed 100 MB frames hold {held} bytes"
    assert trickle_closed is not None and trickle_closed < 5, trickle_closed
    assert ping(b)
    for s in claims:                           # the same deadline closes the claims
        assert _closed(s, 5)
    log = b.log_text()
    assert "a frame of 1048576 bytes (" in log and "not completed within socket.request.read.timeout.ms=2000" in log
    assert "a frame of 104857600 bytes (68 received) not completed" in log


def test_connection_limits_close_at_accept_and_log_once(broker_factory):
    b = broker_factory(max_connections_per_ip=3)
    kept = [connect(b) for _ in range(3)]
    for s in kept:
        s.sendall(api_versions_frame(5))
        assert recv_frame(s) is not None
    for _ in range(20):
        with connect(b) as extra:
            assert _closed(extra, 5)
    kept.pop().close()
    assert wait_until(lambda: ping(b), 10)
    for s in kept:
        s.close()
    log = b.log_text()
    assert log.count("connection limit:") == 1 and "max.connections.per.ip=3 reached" in log

    c = broker_factory(b.root.parent / "logs-2", max_connections=2)   # one broker per root
    kept = [connect(c), connect(c)]
    for s in kept:
        s.sendall(api_versions_frame(5))
        assert recv_frame(s) is not None
    with connect(c) as extra:
        assert _closed(extra, 5)
    assert "max.connections=2 reached" in c.log_text()
    for s in kept:
        s.close()
    assert wait_until(lambda: ping(c), 10)


def test_queued_max_request_bytes_is_checked_against_the_frame_size():
    with pytest.raises(InvalidConfigError, match="queued.max.request.bytes=1000 is below socket.request.max.bytes"):
        BrokerConfig.from_props({"queued.max.request.bytes": "1000"})
    assert BrokerConfig.from_props({"queued.max.request.bytes": "-1"})["queued.max.request.bytes"] == -1


# ------------------------------------------------------------------ item 21: listeners on every interface
def test_a_listener_on_every_interface_is_warned_about(broker_factory):
    for listener in ("PLAINTEXT://:9092", "PLAINTEXT://0.0.0.0:9092", "PLAINTEXT://[::]:9092"):
        warning = BrokerConfig.from_props({"listeners": listener}).listener_warning()
        assert warning and "binds every network interface" in warning and "no authentication" in warning
    for listener in ("PLAINTEXT://127.0.0.1:9092", "PLAINTEXT://localhost:0", "PLAINTEXT://10.1.2.3:9092"):
        assert BrokerConfig.from_props({"listeners": listener}).listener_warning() is None
    b = broker_factory(listeners="PLAINTEXT://:0")
    b.host = "127.0.0.1"                       # the test itself only connects over loopback
    assert ping(b)
    log = b.log_text()
    assert "WARNING" in log and "listeners=PLAINTEXT://:0 binds every network interface" in log


# ------------------------------------------------------------------ the bounded hostile run
# The default run attacks for 10 s (~170 round trips, p99 taken as the 2nd worst); the 20 s form
# docs/broker.md reports (~400 round trips, p99 the 4th worst) is a soak run: the same bounds.
@pytest.mark.parametrize("attack_s", [10, pytest.param(20, marks=pytest.mark.soak)], ids=lambda s: f"{s}s")
def test_hostile_run_bounds_memory_and_latency(broker_factory, tmp_path, attack_s):
    """Bombs up to 32,768:1, claimed-but-unsent and trickled frames, 2000 idle connections, all
    at once for `attack_s` seconds; a well-behaved client's produce round trips and the broker's
    peak RSS are measured, then the broker restarts cleanly."""
    b = broker_factory(socket_request_read_timeout_ms=3000)
    create(b, "attacked", 1)
    create(b, "steady", 1)
    produce(b, "steady", [b"warm-up"], acks="all")
    base = proc_status(b.proc.pid)
    stop = threading.Event()
    errors: list = []
    counts = {"bombs": 0, "claims": 0, "trickles": 0}

    def guarded(fn):
        def run():
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(repr(exc))
        return run

    zstd = batch(zstd_rle_bomb(1_000_000), 4)
    gz = batch(gzip_bomb(64 << 20), 1)
    lz = batch(lz4_bomb(64 << 20), 3)

    def bomber():
        with connect(b, 30) as s:
            for i in range(30):
                if stop.is_set():
                    break
                s.sendall(produce_frame("attacked", 0, (zstd, gz, lz)[i % 3], correlation_id=i))
                answer = recv_frame(s)
                assert answer is not None and produce_error(answer) == MESSAGE_TOO_LARGE
                counts["bombs"] += 1

    def claimer():
        for _ in range(30):
            if stop.is_set():
                break
            socks = []
            for _ in range(10):
                s = connect(b)
                s.sendall(struct.pack(">i", 100 << 20) + b"\0" * 68)
                socks.append(s)
                counts["claims"] += 1
            stop.wait(1)
            for s in socks:
                s.close()

    def trickler():
        for _ in range(6):
            if stop.is_set():
                break
            with connect(b) as s:
                s.sendall(struct.pack(">i", 4 << 20))
                for _ in range(40):
                    if stop.is_set():
                        break
                    try:
                        s.sendall(b"\1")
                    except OSError:
                        counts["trickles"] += 1
                        break
                    stop.wait(0.25)

    threads = [threading.Thread(target=guarded(f), daemon=True)
               for f in (bomber, bomber, claimer, trickler, trickler)]
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all"})
    done: list = []

    def round_trips(seconds: float, limit: int) -> list[float]:
        took = []
        deadline = time.monotonic() + seconds
        for _ in range(limit):
            if time.monotonic() > deadline:
                break
            t0 = time.monotonic()
            p.produce("steady", value=b"steady-%d" % len(done), on_delivery=lambda err, msg: done.append(err))
            p.flush(10)
            took.append(time.monotonic() - t0)
            time.sleep(0.04)
        return took

    quiet = sorted(round_trips(3, 60))         # the same client on the same machine, no attack
    idle: list = []

    def open_idle(count: int) -> None:       # 8 openers: the broker's accepts, not one client, set the pace
        mine = [socket.create_connection((b.host, b.port), timeout=10) for _ in range(count)]
        idle.extend(mine)

    openers = [threading.Thread(target=open_idle, args=(250,)) for _ in range(8)]
    for t in openers:
        t.start()
    for t in openers:
        t.join()
    assert len(idle) == 2000
    for t in threads:
        t.start()
    latencies = round_trips(attack_s, 20 * attack_s)
    stop.set()
    for t in threads:
        t.join(30)
    status = proc_status(b.proc.pid)
    for s in idle:
        s.close()
    time.sleep(1)
    after = proc_status(b.proc.pid)
    assert not errors, errors
    assert all(err is None for err in done) and len(done) == len(latencies) + len(quiet)
    latencies.sort()
    p50, p99, worst = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)], latencies[-1]
    report = (f"baseline RSS {base['VmRSS'] >> 20} MiB, peak RSS (VmHWM) {status['VmHWM'] >> 20} MiB; "
              f"well-behaved produce round trip p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
              f"max {worst * 1000:.0f} ms over {len(latencies)} (before the attack: p50 "
              f"{quiet[len(quiet) // 2] * 1000:.0f} ms, max {quiet[-1] * 1000:.0f} ms); RSS after the attack "
              f"{after['VmRSS'] >> 20} MiB; {counts}")
    logging.getLogger(__name__).warning("hostile run: %s", report)
    print("hostile run:", report)
    assert counts["bombs"] >= 6 and counts["trickles"] >= 2, report
    # The stated bounds (docs/broker.md, "Hostile input"): the attack adds at most 200 MiB to the
    # broker's peak, and a well-behaved round trip stays under 0.5 s at p99 and 1.5 s at worst
    # (a shared two-core machine; typical figures are far lower).
    assert status["VmHWM"] < base["VmHWM"] + (200 << 20), report
    assert after["VmRSS"] < base["VmRSS"] + (100 << 20), report      # and it is given back
    assert p99 < 0.5 and worst < 1.5, report
    # A clean stop and restart afterwards, every well-behaved record still there.
    assert b.stop() == 0
    assert "every log closed cleanly" in b.log_text()
    again = broker_factory(root=b.root)
    got = consume_all(again, "steady", 1, len(done) + 1)
    assert len(got) == len(done) + 1
