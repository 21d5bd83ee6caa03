"""`seglog` topics / produce / consume through main(argv), and once through the installed command."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from logcore import __version__
from logcore.log.log_root import LogRoot
from logcore.tools.cli import main, parse_storage_options
from logcore.records.partitioner import murmur2, murmur2_partition


def seglog(capsys, *argv: str, stdin: bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "root")


def create(capsys, root: str, topic: str, partitions: int = 1, *configs: str) -> None:
    args = ["topics", "--root", root, "--create", topic, "--partitions", str(partitions)]
    for c in configs:
        args += ["--config", c]
    code, out, err = seglog(capsys, *args)
    assert code == 0, err
    assert out == f"Created topic {topic}.\n"


# ------------------------------------------------------------------------------------ basics

def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"seglog {__version__}"
    for command in ("topics", "produce", "consume", "dump"):
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "examples:" in text and f"seglog {command}" in text
    assert main([]) == 2
    assert main(["topics"]) == 2                       # --root is required: argparse usage error
    assert "--root" in capsys.readouterr().err


def test_murmur2_is_kafkas():
    # values from Kafka's UtilsTest (Java's signed ints)
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    for n in range(0, 40):
        key = bytes(range(n))
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF
        assert murmur2_partition(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


def test_storage_option_parsing():
    assert parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=true", "n=3",
                                  "client_kwargs.region_name=us-east-1", 'config_kwargs={"a": 1}']) == {
        "endpoint_url": "http://127.0.0.1:9000", "anon": True, "n": 3,
        "client_kwargs": {"region_name": "us-east-1"}, "config_kwargs": {"a": 1}}
    with pytest.raises(Exception, match="key=value"):
        parse_storage_options(["novalue"])


# ------------------------------------------------------------------------------------ topics

def test_topics_create_list_describe_alter_delete(capsys, root):
    create(capsys, root, "orders", 3, "cleanup.policy=compact", "segment.bytes=1048576")
    create(capsys, root, "clicks", 1)
    code, out, _ = seglog(capsys, "topics", "--root", root, "--list")
    assert code == 0 and out == "clicks\norders\n"

    code, out, _ = seglog(capsys, "topics", "--root", root, "--describe", "--topic", "orders")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: cleanup.policy=compact,segment.bytes=1048576" in lines[0]
    assert lines[1:] == [f"\tTopic: orders\tPartition: {p}\tLogStartOffset: 0\tHighWatermark: 0\tLogEndOffset: 0"
                         for p in range(3)]
    code, out, _ = seglog(capsys, "topics", "--root", root, "--describe", "--topic", "clicks", "--all-configs")
    assert "retention.ms=604800000" in out and "cleanup.policy=delete" in out

    code, out, err = seglog(capsys, "topics", "--root", root, "--alter", "--topic", "orders", "--partitions", "5")
    assert code == 0, err
    with LogRoot.open(root) as r:
        assert r.describe_topic("orders").partitions == 5

    code, out, err = seglog(capsys, "topics", "--root", root, "--delete", "--topic", "clicks")
    assert code == 0 and out == "Deleted topic clicks.\n"
    assert not (Path(root) / "clicks-0").exists()
    code, out, _ = seglog(capsys, "topics", "--root", root, "--list")
    assert out == "orders\n"

    code, out, err = seglog(capsys, "topics", "--root", root, "--create", "orders", "--partitions", "1",
                            "--if-not-exists")
    assert code == 0 and out == ""


@pytest.mark.parametrize("argv,fragment", [
    (["--create", "bad name", "--partitions", "1"], "contains a character other than ASCII alphanumerics"),
    (["--create", "..", "--partitions", "1"], 'Topic name cannot be "." or ".."'),
    (["--create", "x" * 250, "--partitions", "1"], "can't be longer than 249 characters"),
    (["--create", "t", "--partitions", "0"], "--partitions N with N >= 1"),
    (["--create", "t", "--partitions", "1", "--config", "retention.mss=1"],
     "Unknown topic config 'retention.mss'; did you mean 'retention.ms'?"),
    (["--create", "t", "--partitions", "1", "--config", "segment.bytes=10"],
     "Invalid value '10' for configuration segment.bytes: must be at least 14"),
    (["--create", "t", "--partitions", "1", "--config", "cleanup.policy=compact",
      "--config", "remote.storage.enable=true"], "Remote log storage only supports topics with cleanup.policy=delete"),
    (["--create", "t", "--partitions", "1", "--config", "noequals"], "--config must be key=value"),
])
def test_topics_bad_input_writes_nothing(capsys, root, argv, fragment):
    code, out, err = seglog(capsys, "topics", "--root", root, *argv)
    assert code == 1
    assert err.startswith("seglog: error: ") and fragment in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not Path(root).exists()                 # nothing was written, not even the root


def test_topics_errors_on_existing_root(capsys, root):
    create(capsys, root, "orders", 3)
    before = sorted(os.listdir(root))
    cases = [
        (["--alter", "--topic", "orders", "--partitions", "2"], "currently has 3 partition(s); 2 would not be an increase"),
        (["--alter", "--topic", "orders", "--partitions", "3"], "3 would not be an increase"),
        (["--alter", "--topic", "nope", "--partitions", "3"], "topic 'nope' does not exist"),
        (["--delete", "--topic", "nope"], "topic 'nope' does not exist"),
        (["--describe", "--topic", "nope"], "topic 'nope' does not exist"),
        (["--create", "orders", "--partitions", "1"], "already exists"),
        (["--delete"], "--delete needs --topic T"),
        (["--list", "--describe"], "exactly one of"),
        (["--list", "--config", "a=b"], "--config applies to --create and --alter only"),
    ]
    for argv, fragment in cases:
        code, _, err = seglog(capsys, "topics", "--root", root, *argv)
        assert code == 1, argv
        assert fragment in err and err.startswith("seglog: error: "), (argv, err)
    assert sorted(os.listdir(root)) == before
    with LogRoot.open(root) as r:
        assert r.describe_topic("orders").partitions == 3


def test_topic_name_collision(capsys, root):
    code, _, err = seglog(capsys, "topics", "--root", root, "--create", "a.b", "--partitions", "1")
    assert code == 0 and "could collide" in err
    code, _, err = seglog(capsys, "topics", "--root", root, "--create", "a_b", "--partitions", "1")
    assert code == 1 and "collides with existing topic 'a.b'" in err


def test_not_a_log_root(capsys, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"meow")
    for argv in (["--create", "t", "--partitions", "1"], ["--list"], ["--describe"]):
        code, _, err = seglog(capsys, "topics", "--root", str(folder), *argv)
        assert code == 1 and "is not a log root" in err and "Traceback" not in err
    assert os.listdir(folder) == ["cat.jpg"]
    code, _, err = seglog(capsys, "consume", "--root", str(tmp_path / "missing"), "--topic", "t")
    assert code == 1 and "is not a log root" in err
    assert not (tmp_path / "missing").exists()


def test_root_defaults_file(capsys, tmp_path):
    props = tmp_path / "defaults.properties"
    props.write_text("# test\nlog.retention.hours=2\nlog.segment.bytes=4096\n")
    root = str(tmp_path / "root")
    code, _, err = seglog(capsys, "topics", "--root", root, "--create", "t", "--partitions", "1",
                          "--defaults", str(props))
    assert code == 0, err
    with LogRoot.open(root) as r:
        cfg = r.topic_config("t")
        assert cfg.retention_ms == 7_200_000 and cfg.segment_bytes == 4096


# ------------------------------------------------------------------------------------ produce / consume

def test_produce_consume_round_trip_keys_headers_timestamps(capsys, monkeypatch, root):
    create(capsys, root, "events", 3)
    lines = [f"user{i}:click {i}" for i in range(30)]
    code, out, err = seglog(capsys, "produce", "--root", root, "--topic", "events", "--key-separator", ":",
                            "--header", "source=cli", "--header", "v=1", "--timestamp", "1700000000000",
                            stdin=("\n".join(lines) + "\n").encode(), monkeypatch=monkeypatch)
    assert code == 0, err
    assert "Produced 30 records to topic events" in err

    code, out, err = seglog(capsys, "consume", "--root", root, "--topic", "events", "--from-beginning",
                            "--print-key", "--print-headers", "--print-offset", "--print-partition",
                            "--print-timestamp")
    assert code == 0 and "Processed a total of 30 messages" in err
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 30
    seen = set()
    for ts, partition, offset, headers, key, value in rows:
        assert ts == "CreateTime:1700000000000"
        assert headers == "source:cli,v:1"
        assert value == f"click {key[4:]}"
        # Kafka's default partitioner put the key where a Java producer would
        assert int(partition.split(":")[1]) == murmur2_partition(key.encode(), 3)
        seen.add(key)
        assert offset.startswith("Offset:")
    assert seen == {f"user{i}" for i in range(30)}
    # per partition, offsets are 0..n-1 in produce order
    for p in range(3):
        offsets = [int(r[2].split(":")[1]) for r in rows if r[1] == f"Partition:{p}"]
        assert offsets == list(range(len(offsets)))

    code, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "events", "--from-beginning",
                          "--max-messages", "4", "--print-key", "--key-separator", "|")
    assert len(out.splitlines()) == 4 and all("|click " in line for line in out.splitlines())

    # without a start position, a consumer starts at the end and exits at once
    code, out, err = seglog(capsys, "consume", "--root", root, "--topic", "events")
    assert code == 0 and out == "" and "Processed a total of 0 messages" in err


def test_null_keys_round_robin_per_batch_and_fixed_partition(capsys, monkeypatch, root):
    create(capsys, root, "t", 3)
    data = "".join(f"v{i}\n" for i in range(12)).encode()
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "t", "--batch-records", "2",
                          stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err
    per_partition = {}
    for p in range(3):
        _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "t", "--partition", str(p),
                           "--from-beginning")
        per_partition[p] = out.split()
    # batches of two fill partitions 0, 1, 2, 0, 1, 2
    assert per_partition == {0: ["v0", "v1", "v6", "v7"], 1: ["v2", "v3", "v8", "v9"], 2: ["v4", "v5", "v10", "v11"]}

    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "t", "--partition", "2",
                          "--key-separator", ",", stdin=b"k,x\nk2,y\n", monkeypatch=monkeypatch)
    assert code == 0
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "t", "--partition", "2",
                       "--offset", "4", "--print-key", "--print-offset")
    assert out == "Offset:4\tk\tx\nOffset:5\tk2\ty\n"
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "t", "--partition", "2", "--offset", "latest")
    assert out == ""


def test_consume_by_timestamp(capsys, monkeypatch, root):
    create(capsys, root, "t", 1)
    for ts, text in ((1000, b"old\n"), (2000, b"mid\n"), (3000, b"new\n")):
        code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "t", "--timestamp", str(ts),
                              stdin=text, monkeypatch=monkeypatch)
        assert code == 0, err
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "t", "--timestamp", "1500")
    assert out == "mid\nnew\n"
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "t", "--timestamp", "9999")
    assert out == ""


def test_produce_into_a_root_compresses_at_the_topics_level(capsys, monkeypatch, root):
    """Without --compression-type the topic's compression.type is used, at its compression.zstd.level."""
    from logcore.records.batch import HEADER_SIZE, iter_batches
    from logcore.records.compression import Compression, compress, decompress

    data = "".join(f'{{"user":{i},"event":"click","page":"/item/{i % 97}"}}\n' for i in range(2000)).encode()
    sections = {}
    for level in ("1", "19"):
        create(capsys, root, f"z{level}", 1, "compression.type=zstd", f"compression.zstd.level={level}")
        code, _, err = seglog(capsys, "produce", "--root", root, "--topic", f"z{level}", "--batch-size", "1000000",
                              stdin=data, monkeypatch=monkeypatch)
        assert code == 0, err
        log = (Path(root) / f"z{level}-0" / "00000000000000000000.log").read_bytes()
        [(pos, header)] = list(iter_batches(log))
        assert header.compression == Compression.ZSTD
        section = log[pos + HEADER_SIZE:pos + header.size]
        assert section == compress(Compression.ZSTD, decompress(Compression.ZSTD, section), int(level))
        sections[level] = section
    assert len(sections["19"]) < len(sections["1"])
    # --compression-type other than the topic's: stored in the topic's, as Kafka's broker stores it
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "z19", "--batch-size", "1000000",
                          "--compression-type", "gzip", stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err
    log = (Path(root) / "z19-0" / "00000000000000000000.log").read_bytes()
    assert [h.compression for _, h in iter_batches(log)] == [Compression.ZSTD, Compression.ZSTD]


def test_produce_compressed_then_dump(capsys, monkeypatch, root):
    create(capsys, root, "z", 1)
    data = "".join(f"key{i % 3}:value {i}\n" for i in range(50)).encode()
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "z", "--key-separator", ":",
                          "--compression-type", "zstd", "--batch-records", "20", stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err
    seg = Path(root) / "z-0" / "00000000000000000000.log"
    code, out, err = seglog(capsys, "dump", "--files", str(seg), "--print-data-log")
    assert code == 0, err
    batches = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert batches and all("compresscodec: zstd" in b and "isvalid: true" in b for b in batches)
    payloads = [line.split(" payload: ")[1] for line in out.splitlines() if " payload: " in line]
    assert payloads == [f"value {i}" for i in range(50)]
    index = seg.with_suffix(".index")
    if index.exists():
        code, out, err = seglog(capsys, "dump", "--files", str(index), "--verify-index-only")
        assert code == 0 and "Mismatches" not in err
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "z", "--from-beginning")
    assert out.splitlines() == [f"value {i}" for i in range(50)]


def test_produce_and_consume_errors(capsys, monkeypatch, root):
    create(capsys, root, "t", 2)
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "t", "--key-separator", ":",
                          stdin=b"a:1\nno separator here\nb:2\n", monkeypatch=monkeypatch)
    assert code == 1 and "No key separator ':' found on line number 2" in err
    # the line before the bad one was produced (as Kafka's console producer would have sent it)
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "t", "--from-beginning")
    assert out == "1\n"
    cases = [
        (["produce", "--topic", "nope"], "topic 'nope' does not exist"),
        (["produce", "--topic", "t", "--partition", "5"], "topic t has partitions 0..1"),
        (["consume", "--topic", "t", "--offset", "3"], "--offset needs --partition"),
        (["consume", "--topic", "t", "--from-beginning", "--timestamp", "5"], "at most one of"),
        (["consume", "--topic", "t", "--partition", "0", "--offset", "x"], "--offset must be a number"),
        (["consume", "--topic", "t", "--partition", "0", "--offset", "99"], "out of range"),
    ]
    for argv, fragment in cases:
        code, _, err = seglog(capsys, argv[0], "--root", root, *argv[1:], stdin=b"", monkeypatch=monkeypatch)
        assert code == 1 and fragment in err and "Traceback" not in err, (argv, err)


def test_installed_console_script(tmp_path):
    exe = shutil.which("seglog")
    if exe is None:
        pytest.skip("the seglog console script is not installed (pip install -e .)")
    root = str(tmp_path / "root")
    env = dict(os.environ)

    def run(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
        return subprocess.run([exe, *argv], input=stdin, capture_output=True, env=env, timeout=120)

    assert run("--version").stdout.decode().strip() == f"seglog {__version__}"
    r = run("topics", "--root", root, "--create", "s", "--partitions", "2")
    assert r.returncode == 0, r.stderr
    r = run("produce", "--root", root, "--topic", "s", "--key-separator", "=", stdin=b"k1=a\nk2=b\nk3=c\n")
    assert r.returncode == 0, r.stderr
    r = run("consume", "--root", root, "--topic", "s", "--from-beginning", "--print-key")
    assert r.returncode == 0
    assert sorted(r.stdout.decode().splitlines()) == ["k1\ta", "k2\tb", "k3\tc"]
    r = run("topics", "--root", root, "--create", "bad/name", "--partitions", "1")
    assert r.returncode == 1
    assert r.stderr.decode().startswith("seglog: error: Topic name 'bad/name' is illegal")
    assert b"Traceback" not in r.stderr


# ------------------------------------------------------------------------------------ S3

@pytest.mark.s3
def test_s3_round_trip(capsys, monkeypatch, s3_bucket, s3_storage_options):
    root = f"s3://{s3_bucket}/logs"
    opts: list[str] = []
    for key, value in s3_storage_options.items():
        text = json.dumps(value) if not isinstance(value, str) else value
        opts += ["--storage-option", f"{key}={text}"]
    code, out, err = seglog(capsys, "topics", "--root", root, *opts, "--create", "remote", "--partitions", "2")
    assert code == 0, err
    code, _, err = seglog(capsys, "produce", "--root", root, *opts, "--topic", "remote", "--key-separator", ":",
                          "--compression-type", "lz4", stdin=b"a:1\nb:2\nc:3\n", monkeypatch=monkeypatch)
    assert code == 0, err
    code, out, err = seglog(capsys, "consume", "--root", root, *opts, "--topic", "remote", "--from-beginning",
                            "--print-key")
    assert code == 0, err
    assert sorted(out.splitlines()) == ["a\t1", "b\t2", "c\t3"]
    code, out, _ = seglog(capsys, "topics", "--root", root, *opts, "--describe")
    assert "PartitionCount: 2" in out
    secret = s3_storage_options.get("secret")
    if secret:
        assert secret not in out + err
    # a bucket prefix that holds something else is not a root, and stays untouched
    import fsspec
    fs = fsspec.filesystem("s3", **s3_storage_options)
    fs.pipe(f"s3://{s3_bucket}/other/readme.txt", b"hello")
    code, _, err = seglog(capsys, "topics", "--root", f"s3://{s3_bucket}/other", *opts, "--create", "t",
                          "--partitions", "1")
    assert code == 1 and "not a log root" in err
    assert fs.ls(f"{s3_bucket}/other", refresh=True) == [f"{s3_bucket}/other/readme.txt"]


# ------------------------------------------------------------------------------------ transactions, follow

def _write_transactions(root: str, *, leave_open: bool) -> None:
    from logcore.records import ControlType

    with LogRoot.open(root) as r:
        log = r.log("tx", 0, writer=True)
        log.append_records([(b"k", b"plain", (), 1)])
        log.append_records([(b"k", b"aborted-1", (), 2), (b"k", b"aborted-2", (), 2)], producer_id=5,
                           producer_epoch=0, base_sequence=0, is_transactional=True)
        log.append_control(ControlType.ABORT, producer_id=5, producer_epoch=0)
        log.append_records([(b"k", b"after", (), 3)])
        if leave_open:
            log.append_records([(b"k", b"open", (), 4)], producer_id=6, producer_epoch=0, base_sequence=0,
                               is_transactional=True)
        log.commit()
        log.close()


def test_isolation_levels_aborted_transaction(capsys, root):
    create(capsys, root, "tx", 1)
    _write_transactions(root, leave_open=False)
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "tx", "--from-beginning")
    assert out == "plain\nafter\n"                       # aborted data hidden
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "tx", "--from-beginning",
                       "--isolation-level", "read_uncommitted")
    assert out == "plain\naborted-1\naborted-2\nafter\n"
    # every file the engine wrote reads back cleanly with the dump tool
    files = sorted(str(f) for f in (Path(root) / "tx-0").iterdir()
                   if f.suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
                   or f.name in ("leader-epoch-checkpoint", "partition.metadata"))
    code, out, err = seglog(capsys, "dump", "--files", *files, "--deep-iteration")
    assert code == 0, err
    assert "Mismatches" not in err and "not found" not in err
    assert "endTxnMarker: ABORT coordinatorEpoch: 0" in out
    assert "producerId: 5 firstOffset: 1 lastOffset: 3" in out            # the .txnindex entry


def test_isolation_levels_open_transaction(capsys, root):
    create(capsys, root, "tx", 1)
    _write_transactions(root, leave_open=True)
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "tx", "--from-beginning")
    assert out == "plain\nafter\n"                       # the open transaction is not visible yet
    _, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "tx", "--from-beginning",
                       "--isolation-level", "read_uncommitted")
    assert out == "plain\naborted-1\naborted-2\nafter\nopen\n"


def test_follow_sees_new_records(tmp_path):
    exe = shutil.which("seglog")
    if exe is None:
        pytest.skip("the seglog console script is not installed (pip install -e .)")
    root = str(tmp_path / "root")
    assert main(["topics", "--root", root, "--create", "f", "--partitions", "1"]) == 0
    follower = subprocess.Popen([exe, "consume", "--root", root, "--topic", "f", "--follow", "--timeout-ms",
                                 "8000", "--max-messages", "2", "--poll-interval-ms", "100"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        import time
        time.sleep(1.5)                               # the follower has started at the (empty) end
        produced = subprocess.run([exe, "produce", "--root", root, "--topic", "f"], input=b"one\ntwo\n",
                                  capture_output=True, timeout=60)
        assert produced.returncode == 0, produced.stderr
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    assert out == b"one\ntwo\n"
