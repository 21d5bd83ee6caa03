"""Command-line edges a new user hits (issue 15, items 11, 12, 15): `seglog broker` and
`seglog maintain` set-up errors, produce batching by bytes, tombstones and files, and what
`maintain --help` and `dump` say. Through main() and, where the process matters, a subprocess."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from logcore.log.log_root import LogRoot
from logcore.tools.cli import main
from broker_process import subprocess_env
from test_cli import create, seglog

REPO = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    return {**subprocess_env(), **extra}


def run_seglog(*argv: str, stdin: bytes | None = None, env: dict | None = None, cwd=None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logcore.tools.cli", *argv], input=stdin,
                          capture_output=True, env=env or _env(), cwd=cwd, timeout=timeout)


# ------------------------------------------------------------------------------------ item 12

def test_broker_port_in_use_one_line_nothing_created(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    root = tmp_path / "logs"
    conf = tmp_path / "broker.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={root}\n")
    try:
        r = run_seglog("broker", "--config", str(conf), cwd=tmp_path)
    finally:
        holder.close()
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("seglog: error: ") and f"127.0.0.1:{port}" in err and "in use" in err
    assert not root.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["broker.properties"]


def test_missing_config_files_say_no_such_file(capsys, tmp_path):
    missing = str(tmp_path / "nope.properties")
    code, _, err = seglog(capsys, "broker", "--config", missing)
    assert code == 1 and err == f"seglog: error: --config {missing}: no such file\n"
    code, _, err = seglog(capsys, "maintain", "--root", str(tmp_path / "r"), "--once", "--config-file", missing)
    assert code == 1 and err == f"seglog: error: --config-file {missing}: no such file\n"
    assert not (tmp_path / "r").exists()
    code, _, err = seglog(capsys, "tiered", "--root", str(tmp_path / "r"), "--topic", "t", "--list",
                          "--config-file", missing)
    assert code == 1 and "no such file" in err
    code, _, err = seglog(capsys, "broker", "--config", str(tmp_path))
    assert code == 1 and err == f"seglog: error: --config {tmp_path}: not a file\n"
    code, _, err = seglog(capsys, "topics", "--root", str(tmp_path / "r"), "--create", "t", "--partitions", "1",
                          "--defaults", missing)
    assert code == 1 and err == f"seglog: error: --defaults {missing}: no such file\n"
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", [
    ("reassign-partitions", "--execute", "--reassignment-json-file"),
    ("leader-election", "--election-type", "preferred", "--path-to-json-file"),
    ("delete-records", "--offset-json-file"),
])
def test_json_files_missing_or_not_json_name_option_and_file(capsys, tmp_path, command):
    """Checked before any broker is asked (none listens at the bootstrap address)."""
    *args, option = command
    missing, garbled = tmp_path / "nope.json", tmp_path / "garbled.json"
    garbled.write_text("{partitions: ")
    code, _, err = seglog(capsys, *args, "--bootstrap-server", "127.0.0.1:1", option, str(missing))
    assert code == 1 and err == f"seglog: error: {option} {missing}: No such file or directory\n"
    code, _, err = seglog(capsys, *args, "--bootstrap-server", "127.0.0.1:1", option, str(garbled))
    assert code == 1 and err.startswith(f"seglog: error: {option} {garbled}: not JSON: ")


def test_override_without_equals_names_override(capsys, tmp_path):
    conf = tmp_path / "broker.properties"
    conf.write_text("listeners=PLAINTEXT://127.0.0.1:0\n")
    code, _, err = seglog(capsys, "broker", "--config", str(conf), "--override", "foo")
    assert code == 1 and err == "seglog: error: --override must be key=value, got 'foo'\n"


def test_unknown_broker_key_beside_tiered_keys_is_named(capsys, tmp_path):
    conf = tmp_path / "broker.properties"
    conf.write_text("listeners=PLAINTEXT://127.0.0.1:0\n"
                    f"log.dirs={tmp_path / 'logs'}\n"
                    "remote.log.storage.system.enable=true\n"
                    f"rsm.config.storage.root={tmp_path / 'remote'}\n"
                    "log.retention.check.interval.ms=1000\n"
                    "log.segmnt.bytes=1024\n")
    code, _, err = seglog(capsys, "broker", "--config", str(conf))
    assert code == 1
    assert "'log.segmnt.bytes'" in err and "did you mean 'log.segment.bytes'" in err
    assert "remote.log.storage.system.enable" not in err
    assert not (tmp_path / "logs").exists()


def test_missing_s3_credentials_are_not_transient(tmp_path):
    pytest.importorskip("s3fs")
    env = _env(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(name, None)
    r = run_seglog("topics", "--root", "s3://no-such-bucket/logs", "--storage-option",
                   "endpoint_url=http://127.0.0.1:9", "--list", env=env)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "no credentials" in err and "--storage-option key=" in err
    assert "transient" not in err and "retry" not in err and "Traceback" not in err


# ------------------------------------------------------------------------------------ item 11


def _batches(capsys, root: str, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(record count, bytes) of every batch of a partition, from `seglog dump`."""
    import re
    out = []
    for seg in sorted((Path(root) / f"{topic}-{partition}").glob("*.log")):
        code, text, err = seglog(capsys, "dump", "--files", str(seg))
        assert code == 0, err
        for line in text.splitlines():
            if line.startswith("baseOffset"):
                count = int(re.search(r"count: (\d+)", line)[1])
                size = int(re.search(r" size: (\d+)", line)[1])
                out.append((count, size))
    return out


def _records(root: str, topic: str, partition: int = 0) -> list:
    r = LogRoot.open(root, read_only=True)
    try:
        log = r.log(topic, partition)
        try:
            return [(rec.key, rec.value) for rec in log.read_records(0)]
        finally:
            log.close()
    finally:
        r.close()


def test_produce_batches_by_bytes_within_segment_bytes(capsys, monkeypatch, tmp_path):
    root = str(tmp_path / "root")
    create(capsys, root, "small", 1, "segment.bytes=65536")
    lines = b"".join(b"line %05d of a file bigger than one segment, a text long enough to fill it\n" % i
                     for i in range(2000))
    assert len(lines) * 1000 // 2000 > 65536        # 1000 records (the old batch) would not fit a segment
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "small", stdin=lines, monkeypatch=monkeypatch)
    assert code == 0, err
    batches = _batches(capsys, root, "small")
    assert sum(c for c, _ in batches) == 2000
    assert all(size <= 16384 for _, size in batches), batches
    assert max(size for _, size in batches) > 16384 * 0.9            # batches are filled, not tiny
    assert len(list((Path(root) / "small-0").glob("*.log"))) >= 2    # the data rolled segments
    assert [v for _, v in _records(root, "small")] == lines.splitlines()


def test_produce_batch_size_and_topic_caps(capsys, monkeypatch, tmp_path):
    root = str(tmp_path / "root")
    create(capsys, root, "t", 1)
    create(capsys, root, "capped", 1, "max.message.bytes=2000")
    data = b"".join(b"%04d some value text\n" % i for i in range(500))
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "t", "--producer-property", "batch.size=1024",
                          stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err
    sizes = [size for _, size in _batches(capsys, root, "t")]
    assert all(size <= 1024 for size in sizes) and max(sizes) > 1024 * 0.85
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "capped", "--batch-size", "1000000",
                          stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err
    sizes = [size for _, size in _batches(capsys, root, "capped")]
    assert all(size <= 2000 for size in sizes) and max(sizes) > 2000 * 0.85
    # one record bigger than the topic's limit is refused with that limit
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "capped", stdin=b"x" * 5000 + b"\n",
                          monkeypatch=monkeypatch)
    assert code == 1 and "max.message.bytes" in err
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "t", "--batch-size", "0", stdin=b"a\n",
                          monkeypatch=monkeypatch)
    assert code == 1 and "--batch-size must be at least 1 byte" in err


def test_produce_tombstones_with_null_marker(capsys, monkeypatch, tmp_path):
    root = str(tmp_path / "root")
    create(capsys, root, "compacted", 1, "cleanup.policy=compact")
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "compacted", "--key-separator", ":",
                          "--null-marker", "NULL", stdin=b"k1:v1\nk2:v2\nk1:NULL\nk3:NULLS\n", monkeypatch=monkeypatch)
    assert code == 0, err
    # Kafka's console producer form: parse.key, key.separator (tab by default), null.marker
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "compacted", "--property", "parse.key=true",
                          "--property", "null.marker=<null>", stdin=b"k2\t<null>\nk4\tv4\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert _records(root, "compacted") == [(b"k1", b"v1"), (b"k2", b"v2"), (b"k1", None), (b"k3", b"NULLS"),
                                           (b"k2", None), (b"k4", b"v4")]
    code, out, _ = seglog(capsys, "consume", "--root", root, "--topic", "compacted", "--from-beginning", "--print-key")
    assert out.splitlines()[2] == "k1\tnull"
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "compacted", "--property", "nul.marker=x",
                          stdin=b"a\n", monkeypatch=monkeypatch)
    assert code == 1 and "--property nul.marker: unknown" in err


def test_produce_values_and_keys_from_files(capsys, monkeypatch, tmp_path):
    root = str(tmp_path / "root")
    create(capsys, root, "docs", 2)
    a, b, ka = tmp_path / "a.json", tmp_path / "b.bin", tmp_path / "a.key"
    a.write_bytes(b'{\n  "multi": "line"\n}\n')
    b.write_bytes(bytes(range(256)) * 40)            # binary, newlines and all, 10 KB
    ka.write_bytes(b"doc-a")
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "docs", "--partition", "1",
                          "--value-file", str(a), "--value-file", str(b), stdin=b"ignored\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert _records(root, "docs", 1) == [(None, a.read_bytes()), (None, b.read_bytes())]
    kb = tmp_path / "b.key"
    kb.write_bytes(b"doc-b")
    code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "docs", "--value-file", str(a),
                          "--key-file", str(ka), "--value-file", str(b), "--key-file", str(kb),
                          stdin=b"", monkeypatch=monkeypatch)
    assert code == 0, err
    from logcore.records.partitioner import murmur2_partition
    for key, path in ((b"doc-a", a), (b"doc-b", b)):
        assert (key, path.read_bytes()) in _records(root, "docs", murmur2_partition(key, 2))
    before = _records(root, "docs", 0) + _records(root, "docs", 1)
    for argv, message in ((["--value-file", str(a), "--key-file", str(ka), "--key-file", str(kb)],
                           "--key-file given 2 times for 1 --value-file"),
                          (["--value-file", str(a), "--value-file", str(tmp_path / "missing")],
                           f"--value-file {tmp_path / 'missing'}: no such file"),
                          (["--key-file", str(ka)], "--key-file needs --value-file")):
        code, _, err = seglog(capsys, "produce", "--root", root, "--topic", "docs", *argv)
        assert code == 1 and message in err, err
    assert _records(root, "docs", 0) + _records(root, "docs", 1) == before      # nothing written


def test_produce_help_documents_batching_tombstones_and_files(capsys):
    assert main(["produce", "--help"]) == 0
    text = capsys.readouterr().out
    for word in ("--batch-size BYTES", "batch.size", "--null-marker", "null.marker", "tombstone",
                 "--value-file", "--key-file", "max.message.bytes", "segment.bytes"):
        assert word in text, word


# ------------------------------------------------------------------------------------ item 15

def _keyed_lines(n: int, keys: int, start: int = 0) -> bytes:
    return b"".join(b"k%d:value number %d\n" % (i % keys, i) for i in range(start, start + n))


def _produce_keyed(capsys, monkeypatch, root, topic, data: bytes, timestamp: int | None = None):
    argv = ["produce", "--root", root, "--topic", topic, "--key-separator", ":", "--batch-records", "5"]
    if timestamp is not None:
        argv += ["--timestamp", str(timestamp)]
    code, _, err = seglog(capsys, *argv, stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err


def _compacted(capsys, root, topic, *extra):
    create(capsys, root, topic, 1, "cleanup.policy=compact", "segment.bytes=1024",
            "min.cleanable.dirty.ratio=0.01", *extra)


def _maintain(capsys, root, *extra) -> str:
    code, _, err = seglog(capsys, "maintain", "--root", root, "--once", *extra)
    assert code == 0, err
    return err


def test_cleaner_cleans_the_filthiest_log_first(capsys, monkeypatch, tmp_path):
    root = str(tmp_path / "root")
    _compacted(capsys, root, "a-less")
    _compacted(capsys, root, "b-dirty")
    for topic in ("a-less", "b-dirty"):
        _produce_keyed(capsys, monkeypatch, root, topic, _keyed_lines(200, 10))
    first = _maintain(capsys, root)
    assert "a-less-0: cleaned" in first and "b-dirty-0: cleaned" in first
    _produce_keyed(capsys, monkeypatch, root, "a-less", _keyed_lines(60, 10, 200))
    _produce_keyed(capsys, monkeypatch, root, "b-dirty", _keyed_lines(400, 10, 200))
    second = [line for line in _maintain(capsys, root).splitlines() if ": cleaned" in line]
    # b-dirty holds far more dirty data: it is cleaned first although a-less comes first by name
    assert [line.split()[1] for line in second] == ["b-dirty-0:", "a-less-0:"], second


def test_cleaner_threads_clean_in_parallel(capsys, monkeypatch, tmp_path):
    import threading
    import time

    from logcore.cleaner.cleaner import LogCleaner

    root = str(tmp_path / "root")
    for i in range(4):
        _compacted(capsys, root, f"c{i}")
        _produce_keyed(capsys, monkeypatch, root, f"c{i}", _keyed_lines(100, 5))
    seen, running, peak = [], [0], [0]
    lock = threading.Lock()
    real_clean = LogCleaner.clean

    def slow_clean(self, log, now_ms=None):
        with lock:
            seen.append((threading.current_thread().name, id(self)))
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.3)
            return real_clean(self, log, now_ms)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(LogCleaner, "clean", slow_clean)
    conf = tmp_path / "maintenance.properties"
    conf.write_text("log.cleaner.threads=2\n")
    err = _maintain(capsys, root, "--config-file", str(conf))
    assert err.count(": cleaned") == 4
    assert peak[0] == 2 and len({name for name, _ in seen}) == 2 and len({c for _, c in seen}) == 2
    seen.clear()
    peak[0] = 0
    for i in range(4):
        _produce_keyed(capsys, monkeypatch, root, f"c{i}", _keyed_lines(100, 5, 100))
    conf.write_text("log.cleaner.threads=1\n")
    err = _maintain(capsys, root, "--config-file", str(conf))
    assert err.count(": cleaned") == 4 and peak[0] == 1
    conf.write_text("log.cleaner.threads=0\n")
    for i in range(4):
        _produce_keyed(capsys, monkeypatch, root, f"c{i}", _keyed_lines(100, 5, 200))
    assert ": cleaned" not in _maintain(capsys, root, "--config-file", str(conf))


def _values(root, topic) -> list[bytes]:
    return [v for _, v in _records(root, topic)]


def test_min_compaction_lag_keeps_young_records_uncompacted(capsys, monkeypatch, tmp_path):
    import time
    now = int(time.time() * 1000)
    root = str(tmp_path / "root")
    hour = 3_600_000
    _compacted(capsys, root, "young", f"min.compaction.lag.ms={hour}")
    _compacted(capsys, root, "mixed", f"min.compaction.lag.ms={hour}")
    _produce_keyed(capsys, monkeypatch, root, "young", _keyed_lines(200, 5), timestamp=now - 60_000)
    _produce_keyed(capsys, monkeypatch, root, "mixed", _keyed_lines(200, 5), timestamp=now - 2 * hour)
    _produce_keyed(capsys, monkeypatch, root, "mixed", _keyed_lines(200, 5, 200), timestamp=now - 60_000)
    err = _maintain(capsys, root)
    assert "young-0: cleaned" not in err
    assert len(_values(root, "young")) == 200                 # younger than the lag: untouched
    mixed = _values(root, "mixed")
    young_part = [v for v in mixed if int(v.rsplit(b" ", 1)[1]) >= 200]
    old_part = [v for v in mixed if int(v.rsplit(b" ", 1)[1]) < 200]
    assert len(young_part) == 200                             # every young record is still there
    assert len(old_part) < 200 // 2                           # the old ones were compacted
    assert "mixed-0: cleaned" in err


def test_max_compaction_lag_forces_cleaning_below_the_dirty_ratio(capsys, monkeypatch, tmp_path):
    import time
    now = int(time.time() * 1000)
    root = str(tmp_path / "root")
    for topic, extra in (("lazy", ()), ("overdue", ("max.compaction.lag.ms=60000",))):
        create(capsys, root, topic, 1, "cleanup.policy=compact", "segment.bytes=1024",
                "min.cleanable.dirty.ratio=1", *extra)
        _produce_keyed(capsys, monkeypatch, root, topic, _keyed_lines(200, 5), timestamp=now - 3_600_000)
    err = _maintain(capsys, root)
    assert "lazy-0: cleaned" not in err and len(_values(root, "lazy")) == 200
    assert "overdue-0: cleaned" in err and len(_values(root, "overdue")) < 200 // 2


def test_dump_knows_seglogs_own_files(capsys, monkeypatch, tmp_path):
    root = tmp_path / "root"
    _compacted(capsys, str(root), "t")
    _produce_keyed(capsys, monkeypatch, str(root), "t", _keyed_lines(20, 3))
    part = root / "t-0"
    names = [p for p in sorted(part.iterdir()) + sorted(root.iterdir()) if p.is_file()]
    seglog_files = {"high-watermark", "writer-epoch", ".seglog-clean-shutdown", ".writer.lock",
                    "seglog-topics.json", "meta.properties", ".seglog-root.lock"}
    assert seglog_files <= {p.name for p in names}
    code, out, err = seglog(capsys, "dump", "--files", *map(str, names))
    assert code == 0, err
    assert "Ignoring unknown file" not in err and "Ignoring unknown file" not in out
    r = LogRoot.open(str(root), read_only=True)
    try:
        log = r.log("t", 0)
        hw = log.high_watermark
        log.close()
    finally:
        r.close()
    assert f"highWatermark: {hw} crc: " in out and "isvalid: true" in out
    assert "writer epoch (seglog's writer fence)" in out and '"epoch": ' in out
    assert f"cleanShutdown: true logEndOffset: {hw}" in out
    assert '"topics": {' in out and "cluster.id: " in out and "lock file (" in out
    # a damaged high-watermark is reported with its file and position, exit 1
    data = bytearray((part / "high-watermark").read_bytes())
    data[13] ^= 0xFF
    (part / "high-watermark").write_bytes(bytes(data))
    code, out, err = seglog(capsys, "dump", "--files", str(part / "high-watermark"))
    assert code == 1 and "isvalid: false" in out
    assert "position 12" in err and str(part / "high-watermark") in err
    # a folder is named as one; Kafka's clean-shutdown marker is known too
    (part / ".kafka_cleanshutdown").write_bytes(b"")
    code, out, err = seglog(capsys, "dump", "--files", str(part), str(part / ".kafka_cleanshutdown"))
    assert code == 0 and f"Ignoring folder {part}" in err and "Kafka's clean-shutdown marker" in out
    # credentials in a JSON file of the root are never printed
    (root / "manifest.json").write_text('{"rsm.config.storage.secret": "s3cr3t-value", "n": 1}')
    code, out, _ = seglog(capsys, "dump", "--files", str(root / "manifest.json"))
    assert code == 0 and "s3cr3t-value" not in out and '"n": 1' in out


def test_maintain_help_says_it_compacts(capsys):
    assert main(["maintain", "--help"]) == 0
    text = capsys.readouterr().out
    assert "compact" in text and "cleanup.policy=compact" in text and "log.cleaner.threads" in text
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    maintain_line = next(line for line in top.splitlines() if line.strip().startswith("maintain"))
    assert "compaction" in maintain_line


def test_default_outputs_are_git_ignored():
    """The broker's default log root and the README's output folders never show up in git status."""
    import shutil as _shutil

    from logcore.broker.config import BROKER_KEYS
    from logcore.log.properties_file import load_properties

    if _shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (or no git): nothing to check")
    conf_dirs = load_properties(str(REPO / "conf" / "broker.properties"))["log.dirs"]
    paths = [BROKER_KEYS["log.dir"].default, conf_dirs.removeprefix("./"), "logs", "checkpoints",
             "spark-warehouse", "seglog-quickstart", "seglog-changelog"]
    r = subprocess.run(["git", "check-ignore", "--no-index", *[f"{p}/00000000000000000000.log" for p in paths]],
                       cwd=REPO, capture_output=True, text=True, timeout=30)
    ignored = {line.split("/", 1)[0] for line in r.stdout.splitlines()}
    assert ignored == set(paths), (paths, r.stdout, r.stderr)
