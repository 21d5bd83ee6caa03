"""The examples run as a user runs them: `python examples/<name>.py ...` in a fresh process.

Each example starts its own SparkSession (it is a script), so these tests do not use the shared
`spark` fixture; they check the printed results against what was written and look at the log
files themselves through logcore.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logcore.log.log_root import LogRoot
from stack_dump import dump_group

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _skip_without_java() -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME) for Spark")


class ExampleRun:
    """`python examples/<name>.py ...` started in a fresh process; its output goes to files (a
    pipe nobody reads while other examples run would stop it once full)."""

    def __init__(self, name: str, *args: str, cwd: Path, timeout: float, env: dict | None = None,
                 facts: dict | None = None):
        _skip_without_java()
        self.name, self.args, self.timeout = name, args, timeout
        self.facts = facts or {}            # what its starter saw before it ran
        self._out = open(cwd / f"{name}.stdout", "w+")
        self._err = open(cwd / f"{name}.stderr", "w+")
        self.began = time.monotonic()
        # a session of its own: a stop takes Spark's JVM with it
        self.proc = subprocess.Popen([sys.executable, str(EXAMPLES / name), *args], cwd=cwd,
                                     env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=self._err, text=True, start_new_session=True)

    def result(self) -> tuple[str, str, float]:
        """(stdout, stderr, seconds from its start to its exit seen here) once it has exited 0."""
        try:
            self.proc.wait(timeout=max(0.0, self.began + self.timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            stacks = dump_group(self.proc.pid)
            self.stop()
            pytest.fail(f"{self.name} did not finish within {self.timeout:.0f} s; its processes were at:\n{stacks}")
        elapsed = time.monotonic() - self.began
        self._out.seek(0)
        self._err.seek(0)
        out, err = self._out.read(), self._err.read()
        assert self.proc.returncode == 0, f"{self.name} exited with {self.proc.returncode}:\n{out[-3000:]}\n{err[-3000:]}"
        return out, err, elapsed

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._out.close()
        self._err.close()


def run_example(name: str, *args: str, cwd: Path, timeout: float, env: dict | None = None):
    run = ExampleRun(name, *args, cwd=cwd, timeout=timeout, env=env)
    try:
        return run.result()
    finally:
        run.stop()


# The examples started at once share two cores with each other and the other test worker: each
# is bounded well above its time alone, and its test's timeout above that bound, so that a hang
# is reported by ExampleRun with its processes' stacks rather than by pytest-timeout.
EXAMPLE_BOUND_S = 480

# Starters of the examples the tests below check, by test name: every one a test run selects is
# started at once when the first of them runs (the `started` fixture), and each test then reads
# its own. An example spends much of its time starting Spark and waiting on its scheduler, so on
# two cores the three side by side take little more than the longest alone.
STARTERS: dict[str, Callable[[pytest.FixtureRequest, Path], ExampleRun]] = {}


def started_at_once(starter: Callable[[pytest.FixtureRequest, Path], ExampleRun]):
    def register(test):
        STARTERS[test.__name__] = starter
        return test
    return register


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """{test name: its ExampleRun, or what its starter raised (a skip, an error), which that test
    alone raises} for the selected tests."""
    selected = {item.originalname for item in request.session.items if item.module is request.module}
    runs: dict[str, ExampleRun | BaseException] = {}
    try:
        for test, starter in STARTERS.items():
            if test in selected:
                try:
                    runs[test] = starter(request, tmp_path_factory.mktemp(test[:40]))
                except (pytest.skip.Exception, Exception) as raised:
                    runs[test] = raised
        yield runs
    finally:
        for run in runs.values():
            if isinstance(run, ExampleRun):
                run.stop()


def own_run(started: dict, request: pytest.FixtureRequest) -> ExampleRun:
    run = started[request.node.originalname]
    if isinstance(run, BaseException):
        raise run
    return run


def records_in(root: str, topic: str, storage_options: dict | None = None) -> int:
    """Records below the high watermark of every partition of `topic`, read by logcore alone."""
    with LogRoot.open(root, storage_options=storage_options, read_only=True) as r:
        total = 0
        for p in range(r.describe_topic(topic).partitions):
            total += sum(1 for _ in r.log(topic, p).read_records(0))
        return total


def _start_quickstart(request, folder: Path) -> ExampleRun:
    # A bound against a hang, not a speed check: the examples run side by side with the other
    # test worker (the quickstart's own time is in the README, measured alone; 35 s on a quiet
    # machine, 250 s seen beside the other examples and a busy test worker).
    return ExampleRun("quickstart.py", str(folder / "quickstart-root"), cwd=folder, timeout=EXAMPLE_BOUND_S)


@started_at_once(_start_quickstart)
@pytest.mark.timeout(EXAMPLE_BOUND_S + 120)
def test_quickstart_writes_reads_and_aggregates(started, request):
    run = own_run(started, request)
    root = run.args[0]
    out, _err, _elapsed = run.result()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["written_this_run"] == summary["events_in_log"] == 150_000
    # Aggregates: one line per event type, summing to every event written.
    section = out.split("events per type")[1].split("top users")[0]
    per_type = {m[1]: int(m[2].replace(",", "")) for m in re.finditer(r"^\s+(\w+)\s+([\d,]+)$", section, re.M)}
    assert set(per_type) == {"view", "click", "add_to_cart", "purchase"}
    assert sum(per_type.values()) == 150_000
    top = re.findall(r"^\s+user_\d{3}\s+events=([\d,]+)", out, re.M)
    assert len(top) == 5
    # Streaming progress was printed for the writer's three micro-batches and the reader's four.
    assert len(re.findall(r"\[write\] batch \d+: numInputRows=50,000", out)) == 3
    read_rows = [int(n.replace(",", "")) for n in re.findall(r"\[read\] batch \d+: numInputRows=([\d,]+)", out)]
    assert sum(read_rows) == 150_000 and len(read_rows) == 4
    assert "latestOffset={\"clicks\"" in out
    # The log itself, read without Spark, holds each event once.
    assert records_in(root, "clicks") == 150_000


@pytest.mark.soak          # ~25 s: -m soak
def test_compacted_changelog_keeps_the_latest_email_per_user(tmp_path):
    root = tmp_path / "changelog-root"
    out, _err, _ = run_example("compacted_changelog.py", str(root), cwd=tmp_path, timeout=240)
    expected = {"user-1": "user1@example.com", "user-2": "user.two@example.com",
                "user-4": "user4@example.com", "user-5": "five@example.net",
                "user-6": "user6@example.com", "user-7": "seven@example.org"}
    batch_part = out.split("latest email per user")[1].split("rebuilt by a streaming read")[0]
    shown = dict(re.findall(r"^\s+(user-\d+)\s+(\S+@\S+)", batch_part, re.M))
    assert shown == expected
    assert "6 users, identical to the batch result" in out
    assert "14 records in the log" in out
    with LogRoot.open(str(root), read_only=True) as r:
        assert r.describe_topic("user-emails").config.get("cleanup.policy") == "compact"
        # Tombstones are real records with a null value.
        values = [rec.value for p in range(r.describe_topic("user-emails").partitions)
                  for rec in r.log("user-emails", p).read_records(0)]
    assert len(values) == 14 and values.count(None) == 2


def _kafka_batch(base_offset: int, records: list[tuple[bytes, bytes, int]], epoch: int) -> bytes:
    """A RecordBatch v2 from kafka-python's own builder, offsets and epoch stamped as a broker does."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, epoch)
    return bytes(data)


def _make_kafka_logdir(folder: Path) -> None:
    """`payments` (2 partitions, 2 segments each, 30 records per partition) and `__consumer_offsets`."""
    folder.mkdir()
    (folder / "meta.properties").write_text("version=1\ncluster.id=test-cluster\nnode.id=3\n")
    for topic, partitions in (("payments", 2), ("__consumer_offsets", 1)):
        for p in range(partitions):
            part = folder / f"{topic}-{p}"
            part.mkdir()
            (part / "leader-epoch-checkpoint").write_text("0\n1\n4 0\n")
            (part / "partition.metadata").write_text("version: 0\ntopic_id: q9J5nY1PQW6M4o7lM5w6Yw\n")
            offset = 0
            for _segment in range(2):
                base, batches = offset, []
                for _ in range(3):
                    recs = [(b"acct-%d" % ((offset + i) % 4), b"%s-%d-%d" % (topic.encode(), p, offset + i),
                             1_700_000_000_000 + offset + i) for i in range(5)]
                    batches.append(_kafka_batch(offset, recs, epoch=4))
                    offset += 5
                (part / f"{base:020d}.log").write_bytes(b"".join(batches))
                (part / f"{base:020d}.index").write_bytes(b"")
                (part / f"{base:020d}.timeindex").write_bytes(b"")
    # The broker had replicated payments-1 only up to offset 25 (of 30).
    (folder / "replication-offset-checkpoint").write_text(
        "0\n3\npayments 0 30\npayments 1 25\n__consumer_offsets 0 30\n")
    (folder / "recovery-point-offset-checkpoint").write_text(
        "0\n3\npayments 0 30\npayments 1 30\n__consumer_offsets 0 30\n")
    (folder / "log-start-offset-checkpoint").write_text("0\n0\n")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _start_kafka_logdir_copy(request, folder: Path) -> ExampleRun:
    pytest.importorskip("kafka.record.default_records")
    copy = folder / "kafka-copy"
    _make_kafka_logdir(copy)
    return ExampleRun("kafka_logdir_copy.py", str(copy), cwd=folder, timeout=EXAMPLE_BOUND_S,
                      facts={"digest": _digest(copy)})


@started_at_once(_start_kafka_logdir_copy)
@pytest.mark.timeout(EXAMPLE_BOUND_S + 120)
def test_kafka_logdir_copy_is_read_up_to_the_brokers_high_watermark_and_left_untouched(started, request):
    run = own_run(started, request)
    copy, before = Path(run.args[0]), run.facts["digest"]
    out, _err, _ = run.result()
    assert "a copy of a Kafka log dir, read-only" in out
    assert "payments-0: 30 records, offsets 0..29" in out
    assert "payments-1: 25 records, offsets 0..24" in out      # bounded by the broker's checkpoint
    assert "__consumer_offsets" not in out.split("batch read")[1]   # internal topics skipped
    assert "records per partition: payments-0=30, payments-1=25" in out
    assert "55 records streamed" in out
    assert "payments-0@0 acct-0: payments-0-0" in out
    assert "the copy is unchanged" in out
    assert _digest(copy) == before


def _start_s3_root(request, folder: Path) -> ExampleRun:
    s3_endpoint = request.getfixturevalue("s3_endpoint")
    root = f"s3://{request.getfixturevalue('s3_module_bucket')}/example-root"
    return ExampleRun(
        "s3_root.py", root, "--endpoint-url", s3_endpoint.endpoint_url, "--region", s3_endpoint.region,
        cwd=folder, timeout=EXAMPLE_BOUND_S,
        env={"AWS_ACCESS_KEY_ID": s3_endpoint.key, "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret})


@pytest.mark.s3
@started_at_once(_start_s3_root)
@pytest.mark.timeout(EXAMPLE_BOUND_S + 120)
def test_s3_root_example_against_the_session_s3_server(started, request, s3_endpoint):
    run = own_run(started, request)
    root = run.args[0]
    out, err, _ = run.result()
    assert "batch read: 20,000 records in topic 'clicks'" in out
    counts = re.search(r"records per partition: (.*)", out).group(1)
    assert sum(int(n.replace(",", "")) for n in re.findall(r"=([\d,]+)", counts)) == 20_000
    assert records_in(root, "clicks", s3_endpoint.storage_options()) == 20_000
    if len(s3_endpoint.secret) >= 6:
        assert s3_endpoint.secret not in out + err


def test_an_unbuilt_logcore_says_what_is_missing_and_what_to_do(monkeypatch):
    import importlib

    import logcore.records
    assert logcore.records.__getattr__("_fastcodec").__name__ == "logcore.records._fastcodec"
    real_import = importlib.import_module

    def no_codec(name, *args):
        if name == "logcore.records._fastcodec":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_codec)
    with pytest.raises(ImportError, match=r"compiled codec \(_fastcodec\) is missing from .*pip install -e \."):
        logcore.records.__getattr__("_fastcodec")
