"""What one Java-client Produce request costs the broker, deterministically: Python calls per
request (cProfile of the broker's event-loop thread) and broker CPU seconds per 100k records.

The workload is the one the Java client's defaults send to one broker (issue 31 item 2):
each request carries one idempotent 16 KiB batch (15 records of 1 KiB, uncompressed) for each
of 4 partitions, acks=all, and up to 5 requests are in flight on the connection. A replay client
(this process) sends them over one connection with the wire client; the broker runs in a child
process, in-process Python (`--serve`), with a profiler it switches on and off on SIGUSR1 and
SIGUSR2, so the count covers only the replayed requests (no start-up, no warm-up).

Phases: a warm-up of `--warmup` requests, a timed replay of `--requests` requests with the
profiler off (broker CPU from /proc), then a profiled replay of `--requests` more. Every answer
is checked (no partition error, the expected base offset).

    python bench/bench_produce_calls.py [--requests 4000] [--warmup 500] [--top 25]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
from bench_broker import _cpu_of  # noqa: E402
from common import stop_process  # noqa: E402

PARTITIONS = 4
RECORDS_PER_BATCH = 15          # 1 KiB records in the Java client's 16 KiB batch.size
RECORD_BYTES = 1024
IN_FLIGHT = 5                   # max.in.flight.requests.per.connection
TOPIC = "calls"
_SEQUENCE = struct.Struct(">i")
_CRC = struct.Struct(">I")
_TIMESTAMPS = struct.Struct(">qq")     # baseTimestamp, maxTimestamp


# ------------------------------------------------------------------------------ the broker side

def serve(workdir: str) -> None:
    """Run a broker on WORKDIR in this process; SIGUSR1 starts profiling its event-loop thread,
    SIGUSR2 stops it and writes the stats to WORKDIR/profile.pstats, then prints 'dumped'."""
    from logcore.broker.config import BrokerConfig
    from logcore.broker.server import run_broker

    config = BrokerConfig.from_props({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": f"{workdir}/logs",
                                      "node.id": "0"}, source="bench_produce_calls")
    profiler = cProfile.Profile()

    def start() -> None:
        profiler.enable()

    def stop() -> None:
        profiler.disable()
        profiler.dump_stats(f"{workdir}/profile.pstats")
        sys.stdout.write("dumped\n")
        sys.stdout.flush()

    def ready(endpoints: list[str]) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, start)
        loop.add_signal_handler(signal.SIGUSR2, stop)
        sys.stdout.write(f"listening on {endpoints[0]}\n")
        sys.stdout.flush()

    asyncio.run(run_broker(config, ready=ready))


# ------------------------------------------------------------------------------ the replay client

class Replay:
    """One connection sending the Java producer's requests: each partition's batch a template
    whose base sequence (and CRC) is rewritten per request."""

    def __init__(self, port: int):
        from logcore.records.batch import build_batch
        from logcore.records.crc import crc32c
        from logcore.wire.client import KafkaConnection
        self._crc32c = crc32c
        self.conn = KafkaConnection("127.0.0.1", port, timeout_s=60).connect()
        self.conn.request(19, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 1,
                                           "assignments": [], "configs": []}],
                               "timeout": 30000, "validate_only": False})
        init = self.conn.request(22, {"transactional_id": None, "transaction_timeout": -1,
                                      "producer_id": -1, "producer_epoch": -1})
        if init.error_code != 0:
            raise SystemExit(f"InitProducerId failed: error {init.error_code}")
        pid, epoch = init.producer_id, init.producer_epoch
        value = os.urandom(RECORD_BYTES)
        now = int(time.time() * 1000)
        self.templates = [bytearray(build_batch([(None, value, (), now)] * RECORDS_PER_BATCH, producer_id=pid,
                                                producer_epoch=epoch, base_sequence=0))
                          for _ in range(PARTITIONS)]
        self.sent = 0            # requests sent so far (each partition's next sequence follows)
        self.answered = 0

    def _batch(self, partition: int, n: int) -> bytes:
        data = self.templates[partition]
        _SEQUENCE.pack_into(data, 53, n * RECORDS_PER_BATCH)
        # Timestamps move on as the Java client's do (each record's delta is 0): the time index
        # takes an entry when its maximum moves, as it does under a real producer.
        now = int(time.time() * 1000)
        _TIMESTAMPS.pack_into(data, 27, now, now)
        _CRC.pack_into(data, 17, self._crc32c(bytes(data[21:])))
        return bytes(data)

    def _send(self) -> None:
        n = self.sent
        self.conn.send(0, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": p, "records": self._batch(p, n)}
                                               for p in range(PARTITIONS)]}]})
        self.sent += 1

    def _receive(self) -> None:
        answer = self.conn.receive()
        n = self.answered
        for t in answer.responses:
            for p in t.partition_responses:
                if p.error_code != 0 or p.base_offset != n * RECORDS_PER_BATCH:
                    raise SystemExit(f"request {n}: partition {p.index} answered error {p.error_code}"
                                     f" at base offset {p.base_offset}")
        self.answered += 1

    def run(self, requests: int) -> float:
        """Send `requests` more requests, IN_FLIGHT at a time; the seconds it took."""
        started = time.perf_counter()
        end = self.sent + requests
        while self.sent < end:
            while self.sent < end and self.sent - self.answered < IN_FLIGHT:
                self._send()
            self._receive()
        while self.answered < self.sent:
            self._receive()
        return time.perf_counter() - started


def _read_line(proc: subprocess.Popen, want: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if not line:
            raise SystemExit(f"the broker exited (status {proc.wait()}); see its log")
        if want in line:
            return line.strip()
    raise SystemExit(f"the broker did not print {want!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--top", type=int, default=25, help="functions listed by calls per request")
    parser.add_argument("--stats", metavar="FILE", help="keep the profile (pstats) in FILE")
    parser.add_argument("--serve", metavar="WORKDIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as workdir:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", workdir],
                                stdout=subprocess.PIPE, stderr=open(Path(workdir) / "broker.log", "wb"),
                                env=env, cwd=workdir)
        try:
            port = int(_read_line(proc, "listening on").rsplit(":", 1)[1])
            replay = Replay(port)
            replay.run(args.warmup)
            cpu0 = _cpu_of(proc.pid)
            seconds = replay.run(args.requests)
            cpu = _cpu_of(proc.pid) - cpu0
            records = args.requests * PARTITIONS * RECORDS_PER_BATCH
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            replay.run(args.requests)
            proc.send_signal(signal.SIGUSR2)
            _read_line(proc, "dumped")
            stats = pstats.Stats(f"{workdir}/profile.pstats")
            if args.stats:
                stats.dump_stats(args.stats)
            replay.conn.close()
        finally:
            stop_process(proc)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.requests} requests of {PARTITIONS} x {RECORDS_PER_BATCH}"
          f" x {RECORD_BYTES} B idempotent batches, acks=all, {IN_FLIGHT} in flight")
    print(f"broker CPU {cpu:.2f} s for {records:,} records: {cpu * 100_000 / records:.2f} s per 100k records;"
          f" {args.requests / seconds:,.0f} requests/s unprofiled")
    print(f"Python calls per request (event-loop thread, cProfile): {stats.total_calls / args.requests:,.0f}")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][1])[:args.top]
    print(f"\n{'calls/request':>14}  {'tottime us/req':>14}  function")
    for (path, line, name), (_cc, ncalls, tottime, _ct, _callers) in rows:
        where = f"{Path(path).name}:{line}" if line else path
        print(f"{ncalls / args.requests:14.2f}  {tottime * 1e6 / args.requests:14.1f}  {name} ({where})")


if __name__ == "__main__":
    main()
