"""The Kafka Streams word count (WordCountApp.java, next to this file) as the tests run it: its
input (deterministic lines, produced by librdkafka's idempotent producer), the application as a
process of its own (started, SIGKILLed, restarted on the same state folder, stopped by its pid),
and its output as an independent read_committed reader sees it.

Under exactly-once each word's committed output is exactly 1, 2, ..., n with n its count in the
input: a record processed twice would show a count twice or beyond n, a lost one a gap or a
final count short of n.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from java_program import JavaProgram

HERE = Path(__file__).resolve().parent
VOCABULARY = ("apache kafka streams exactly once word count seglog broker cluster replica leader "
              "partition offset commit abort marker fence epoch").split()


def input_lines(first: int, n: int) -> list[tuple[str, str]]:
    """Lines first..first+n-1 as (key, text): 1 to 6 words of the vocabulary each, deterministic."""
    lines = []
    for i in range(first, first + n):
        words = [VOCABULARY[(i * 7 + j * 3 + i // 5) % len(VOCABULARY)] for j in range(1 + i % 6)]
        lines.append((f"line-{i}", " ".join(words)))
    return lines


def expected_counts(lines: list[tuple[str, str]]) -> dict[str, int]:
    return dict(Counter(word for _key, text in lines for word in text.split()))


def produce_lines(bootstrap: str, topic: str, lines: list[tuple[str, str]], timeout: float = 120) -> None:
    """librdkafka's idempotent producer (acks=all): every line delivered exactly once, or an error."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": int(timeout * 1000)})
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)
    for key, text in lines:
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=text.encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(timeout)
    if failures or left:
        raise RuntimeError(f"input to {topic}: {len(failures)} lines failed ({failures[:2]}), {left} undelivered")


def counts_by_word(records: list[list]) -> dict[str, list[int]]:
    """Output records ([partition, offset, word, count]) as each word's counts in offset order."""
    by_word: dict[str, list[int]] = {}
    for _p, _o, word, count in sorted(records, key=lambda r: (r[0], r[1])):
        by_word.setdefault(word, []).append(int(count))
    return by_word


def compile_word_count(streams_jars: list[Path], classes: Path, log4j: Path) -> JavaProgram:
    return JavaProgram.compile([HERE / "WordCountApp.java"], streams_jars, classes, log4j)


class WordCountInstance:
    """One instance of the application, a process this test started (stopped by its pid)."""

    def __init__(self, program: JavaProgram, bootstrap: str, app_id: str, input_topic: str, output_topic: str,
                 workdir: Path, replication_factor: int = 1):
        self.program = program
        self.args = [bootstrap, app_id, input_topic, output_topic, str(workdir / "state"), str(replication_factor)]
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self._running = threading.Event()

    def start(self, timeout: float = 120) -> float:
        """Start and wait until Streams reports RUNNING; the seconds that took."""
        t0 = time.monotonic()
        self._running.clear()
        err = open(self.workdir / "streams.log", "ab")
        self.proc = self.program.popen(self.args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                       jvm=["-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
        err.close()
        threading.Thread(target=self._watch, args=(self.proc,), daemon=True).start()
        while not self._running.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                self.stop(signal.SIGKILL)
                raise RuntimeError(f"Kafka Streams did not reach RUNNING in {timeout:.0f} s:\n{self.log_tail()}")
        return time.monotonic() - t0

    def _watch(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            if line.strip() == "RUNNING":
                self._running.set()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)

    def log_tail(self, lines: int = 40) -> str:
        path = self.workdir / "streams.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def wait_for_counts(reader, output_topic: str, partitions: int, expected: dict[str, int],
                    timeout: float = 120) -> dict[str, list[int]]:
    """Read the output (read_committed) until every word's last count is at least its expected
    count, or the timeout; the counts as last read."""
    deadline = time.monotonic() + timeout
    while True:
        got = counts_by_word(reader.read(output_topic, partitions)["records"])
        if all(got.get(w, [0])[-1] >= n for w, n in expected.items()) or time.monotonic() > deadline:
            return got
        time.sleep(1)
