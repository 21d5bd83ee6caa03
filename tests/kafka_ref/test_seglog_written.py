"""seglog writes, Apache Kafka reads (issue 16, tests 2 and 3).

Two log roots are written by seglog through the interfaces a user touches:
- `seglog produce` (the CLI, in a subprocess): every codec, keys and null keys, headers, a
  4 KiB segment.bytes (many segments) and a 256-byte index.interval.bytes (populated indexes);
- `seglog broker` (a subprocess) fed by an idempotent librdkafka producer: every codec, null
  keys and null values, headers; its producer-state snapshots hold producer entries.

Kafka's own DumpLogSegments (kafka-dump-log) must accept every .log, .index, .timeindex and
.snapshot of both roots with no error, and `seglog dump` must print the same output, line for
line, with the same options: `--deep-iteration --print-data-log`, `--index-sanity-check`,
`--verify-index-only`.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
import broker_spawner
from broker_process import subprocess_env

pytestmark = pytest.mark.timeout(600)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
DUMPED_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".txnindex")
DUMP_OPTION_SETS = (
    ("--deep-iteration", "--print-data-log"),
    ("--index-sanity-check",),
    ("--verify-index-only",),
)


def seglog(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    # forked from an interpreter with the CLI imported (broker_spawner.py): the same command
    return broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", *args], input=stdin,
                              env=subprocess_env(), timeout=timeout)


def _cli_root(root: Path) -> Path:
    created = seglog("topics", "--root", str(root), "--create", "cli", "--partitions", "2",
                     "--config", "segment.bytes=4096", "--config", "index.interval.bytes=256")
    assert created.returncode == 0, created.stderr
    for n, codec in enumerate(CODECS):
        lines = "".join(f"key-{i % 7}\t{codec} value {i} äö€\n" for i in range(160))
        produced = seglog("produce", "--root", str(root), "--topic", "cli", "--key-separator", "\t",
                          "--compression-type", codec, "--header", f"codec={codec}", "--header", "n=1",
                          "--batch-size", str(11 + n * 7), stdin=lines)
        assert produced.returncode == 0, produced.stderr
    unkeyed = seglog("produce", "--root", str(root), "--topic", "cli", "--partition", "1",
                     "--batch-size", "3", stdin="".join(f"no key {i}\n" for i in range(20)))
    assert unkeyed.returncode == 0, unkeyed.stderr
    return root


def _broker_root(root: Path, workdir: Path) -> Path:
    conf = workdir / "seglog-broker.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={root}\nnode.id=0\nnum.partitions=1\n"
                    "group.initial.rebalance.delay.ms=0\n")
    err_path = workdir / "seglog-broker.stderr"
    with open(err_path, "wb") as err:
        proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                                    stdout=subprocess.PIPE, stderr=err, env=subprocess_env(), cwd=workdir)
    try:
        line = proc.stdout.readline().decode().strip()
        if "listening on PLAINTEXT://" not in line:
            pytest.fail(f"seglog broker did not start: {line!r} {err_path.read_text(errors='replace')[-2000:]}")
        bootstrap = line.rsplit("//", 1)[1]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic("brk", num_partitions=2, replication_factor=1,
                         config={"segment.bytes": "2048", "index.interval.bytes": "256"})
        admin.create_topics([topic])["brk"].result(20)
        for codec in CODECS:
            producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                 "compression.type": codec, "linger.ms": 5, "batch.num.messages": 40})
            for i in range(150):
                key = None if i % 5 == 0 else f"k{i % 9}".encode()
                value = None if i % 11 == 0 else f"{codec} broker value {i}".encode()
                headers = [("codec", codec.encode()), ("i", str(i).encode())] if i % 3 else None
                producer.produce("brk", key=key, value=value, headers=headers, partition=i % 2,
                                 timestamp=1_700_000_000_000 + i)
                producer.poll(0)
            assert producer.flush(30) == 0
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return root


@pytest.fixture(scope="module")
def seglog_roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("seglog-written")
    return {"cli": _cli_root(base / "cli-root"), "broker": _broker_root(base / "broker-root", base)}


def _partition_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[-1].isdigit())


def _dumped_files(partition_dir: Path) -> list[str]:
    return sorted(str(p) for p in partition_dir.iterdir() if p.suffix in DUMPED_SUFFIXES)


def _kafka_problems(stderr: str, stdout: str) -> list[str]:
    """Lines where Kafka's tool reports a problem (it does not always exit non-zero for them)."""
    markers = ("Exception", "ERROR", "Mismatches in", "mismatch", "out of order", "not found in the log",
               "Non-consecutive", "invalid bytes", "isvalid: false", "Corrupt", "corrupt")
    return [line for line in (stderr + stdout).splitlines() if any(m in line for m in markers)]


def _root_files(root: Path) -> list[str]:
    return [f for d in _partition_dirs(root) for f in _dumped_files(d)]


@pytest.fixture(scope="module")
def kafka_dumps(kafka_jars, seglog_roots) -> dict:
    """kafka-dump-log on each root with each option set, all in one JVM: (kind, options) -> run."""
    keys = [(kind, options) for kind in ("cli", "broker") for options in DUMP_OPTION_SETS]
    runs = [(kafka_jars.dump_class, ["--files", ",".join(_root_files(seglog_roots[kind])), *options])
            for kind, options in keys]
    return dict(zip(keys, kafka_jars.run_tools(runs, timeout=180 * len(runs))))


@pytest.mark.parametrize("kind", ["cli", "broker"])
@pytest.mark.parametrize("options", DUMP_OPTION_SETS, ids=lambda o: "+".join(x.lstrip("-") for x in o))
def test_kafka_dump_accepts_seglog_files_and_seglog_dump_matches(kafka_dumps, seglog_roots, kind, options):
    root = seglog_roots[kind]
    dirs = _partition_dirs(root)
    assert len(dirs) == 2
    files = _root_files(root)
    suffixes = {Path(f).suffix for f in files}
    assert {".log", ".index", ".timeindex", ".snapshot"} <= suffixes
    assert sum(f.endswith(".log") for f in files) >= 6            # several segments per partition

    kafka = kafka_dumps[(kind, options)]
    assert kafka.returncode == 0, kafka.stderr[-3000:]
    assert _kafka_problems(kafka.stderr, kafka.stdout) == []
    ours = seglog("dump", "--files", *files, *options)
    assert ours.returncode == 0, ours.stderr
    assert ours.stderr == ""

    kafka_lines, our_lines = kafka.stdout.splitlines(), ours.stdout.splitlines()
    for n, (theirs, mine) in enumerate(zip(kafka_lines, our_lines)):
        assert mine == theirs, f"line {n + 1} differs"
    assert len(our_lines) == len(kafka_lines)

    if options[0] == "--deep-iteration":
        records = [line for line in kafka_lines if line.startswith("| offset: ")]
        batches = [line for line in kafka_lines if line.startswith("baseOffset: ")]
        expected = 5 * 160 + 20 if kind == "cli" else 5 * 150
        assert len(records) == expected
        assert {f"compresscodec: {c}" for c in CODECS} <= {b[b.index("compresscodec"):].split(" crc")[0]
                                                           for b in batches}
        assert all(" isvalid: true" in b for b in batches)
        snapshot_entries = [line for line in kafka_lines if line.startswith("producerId: ")]
        if kind == "broker":
            assert any("keySize: -1" in r for r in records) and any("valueSize: -1" in r for r in records)
            assert any("headerKeys: [codec,i]" in r for r in records)
            assert snapshot_entries and all(not e.startswith("producerId: -1") for e in snapshot_entries)
            assert all(not b.startswith("baseOffset") or "producerId: -1 " not in b for b in batches)
        else:
            assert any("keySize: -1" in r for r in records)
            assert any("headerKeys: [codec,n]" in r and "key: key-3" in r for r in records)
        index_entries = [line for line in kafka_lines if line.startswith("offset: ")]
        assert len(index_entries) >= 10                              # the indexes are not all empty


def _by_partition(output: str) -> dict[int, list[str]]:
    """Console-consumer lines per partition (the `Partition:N` column), in the order printed."""
    lines: dict[int, list[str]] = {}
    for line in output.splitlines():
        lines.setdefault(int(line.split("\t")[1].removeprefix("Partition:")), []).append(line)
    return lines


def test_kafka_broker_serves_a_copy_of_a_seglog_root(kafka_jars, kafka_broker_factory, seglog_roots,
                                                      tmp_path):
    """A real Kafka broker started on seglog's segment, index and snapshot files (clean-shutdown
    path: Kafka takes seglog's indexes and producer snapshots as they are) serves every record to
    Kafka's console consumer exactly as `seglog consume` prints it from the seglog root."""
    from kafka_reference import adopt_seglog_root, force_recovery, read_checkpoint

    broker = kafka_broker_factory()
    topics = {"cli": 2, "brk": 2}
    sources = {"cli": seglog_roots["cli"], "brk": seglog_roots["broker"]}
    # both seglog roots into one Kafka log dir (a root holds one topic each here)
    merged = tmp_path / "merged"
    for topic, src in sources.items():
        shutil.copytree(src, merged, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*checkpoint", "seglog-*", "meta.properties"))
    rows = {}
    for src in sources.values():
        rows.update(read_checkpoint(src / "replication-offset-checkpoint"))
    (merged / "replication-offset-checkpoint").write_text(
        f"0\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(rows.items())))
    # the topics' index interval as seglog's, so that indexes Kafka rebuilds are comparable
    adopt_seglog_root(broker, merged, topics, {t: {"index.interval.bytes": "256"} for t in topics})
    sizes = {f: f.stat().st_size for f in broker.log_dirs.glob("*-*/*.log")}

    props = [arg for option in ("print.timestamp", "print.partition", "print.offset", "print.headers",
                                "print.key") for arg in ("--property", f"{option}=true")]

    def served_as_seglog_prints() -> None:
        printed = {}
        for topic, partitions in topics.items():
            expected = seglog("consume", "--root", str(sources[topic]), "--topic", topic, "--from-beginning",
                              "--print-timestamp", "--print-partition", "--print-offset", "--print-headers",
                              "--print-key")
            assert expected.returncode == 0, expected.stderr
            count = len(expected.stdout.splitlines())
            assert count == sum(rows[(topic, p)] for p in range(partitions))    # no control records here
            printed[topic] = (expected, count)
        served_all = kafka_jars.run_tools([(kafka_jars.console_consumer, [       # one JVM for the topics
            "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
            "--max-messages", str(count), "--timeout-ms", "30000", "--isolation-level", "read_committed",
            *props]) for topic, (_, count) in printed.items()], timeout=300)
        for (topic, partitions), served in zip(topics.items(), served_all):
            expected = printed[topic][0]
            assert served.returncode == 0, served.stderr[-3000:]
            theirs, mine = _by_partition(served.stdout), _by_partition(expected.stdout)
            assert sorted(theirs) == list(range(partitions))
            for p in range(partitions):
                assert len(theirs[p]) > 100
                assert theirs[p] == mine[p], (topic, p)

    def recovery_lines() -> list[str]:
        return [line for line in broker.log_path.read_text().splitlines()
                if ("cli-" in line or "brk-" in line) and ("Recovering" in line or "runcat" in line)]

    # 1. clean-shutdown path: Kafka takes seglog's indexes and producer snapshots as they are
    broker.start()
    served_as_seglog_prints()
    assert {f: f.stat().st_size for f in broker.log_dirs.glob("*-*/*.log") if f in sizes} == sizes
    assert recovery_lines() == []                  # Kafka recovered nothing and truncated nothing
    broker.stop(signal.SIGTERM)

    # 2. recovery path: Kafka validates every seglog batch and rebuilds indexes and producer state
    force_recovery(broker, topics)
    broker.start()
    served_as_seglog_prints()
    assert any("Recovering unflushed segment" in line for line in recovery_lines())
    broker.stop(signal.SIGTERM)
    assert {f: f.stat().st_size for f in broker.log_dirs.glob("*-*/*.log") if f in sizes} == sizes
    # Indexes Kafka rebuilt equal seglog's byte for byte for the broker-written topic (one writer
    # session). The CLI topic was written by 6 `seglog produce` runs: a segment that spans two runs
    # counts index.interval.bytes from 0 again after the reopen (as Kafka's own active segment does
    # after a broker restart), while recovery counts from the segment's start; at most 5 such
    # segments per partition (one per run boundary).
    compared, differ = 0, []
    for topic, partitions in topics.items():
        for p in range(partitions):
            for ours in sorted((sources[topic] / f"{topic}-{p}").glob("*index")):
                if ours.suffix in (".index", ".timeindex"):
                    compared += 1
                    if (broker.log_dirs / f"{topic}-{p}" / ours.name).read_bytes() != ours.read_bytes():
                        differ.append(f"{topic}-{p}/{ours.stem}")
    assert compared >= 20
    assert [d for d in differ if d.startswith("brk-")] == []
    per_partition: dict[str, set[str]] = {}
    for d in differ:
        per_partition.setdefault(d.split("/")[0], set()).add(d)
    assert all(len(segments) <= 5 for segments in per_partition.values()), differ
