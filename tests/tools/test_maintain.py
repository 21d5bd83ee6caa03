"""`seglog maintain` end to end (subprocess), the maintenance service, and the settings' errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from logcore.errors import InvalidConfigError
from logcore.log.config import LogConfig, MaintenanceConfig
from logcore.log.properties_file import load_properties
from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from logcore.tools.cli import main
import broker_spawner
from broker_process import subprocess_env

OLD = 1_000_000_000_000          # 2001: far older than any retention.ms used here
CONFIG = {"segment.bytes": "600", "retention.ms": "3600000", "file.delete.delay.ms": "0"}


def fill(log, batches, ts=OLD):
    for _ in range(batches):
        start = log.log_end_offset
        log.append_records([(b"k", b"v%d" % i + b"." * 90, (), ts) for i in range(start, start + 5)])
        log.commit()


def seglog(*argv, timeout=60):
    # forked from an interpreter with the CLI imported (broker_spawner.py): the same command
    return broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", *argv], env=subprocess_env(),
                              timeout=timeout)


def make_root(url, storage_options=None):
    root = LogRoot.open(url, storage_options=storage_options, create=True)
    root.create_topic("old", partitions=2, config=CONFIG)
    root.create_topic("young", config=CONFIG)
    root.create_topic("kept", config={**CONFIG, "cleanup.policy": "compact"})
    for p in range(2):
        log = root.log("old", p, writer=True)
        fill(log, 3)
        log.close()
    for name in ("young", "kept"):
        log = root.log(name, 0, writer=True)
        fill(log, 3, ts=int(time.time() * 1000) if name == "young" else OLD)
        log.close()
    return root


def test_cli_maintain_once_end_to_end(tmp_path):
    make_root(str(tmp_path / "r")).close()
    done = seglog("maintain", "--root", str(tmp_path / "r"), "--once")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()}
    # topic, partitions, segments, bytes, files removed, log start offsets, bytes cleaned,
    # records compacted away, skipped
    assert lines["old"][1:3] == ["2", "6"] and lines["old"][5] == "0:15,1:15"
    assert lines["young"][2] == "0" and lines["kept"][2] == "0"
    # `kept` compacts: every record has key k, so the cleaner keeps only the newest one of
    # the cleanable part (the active segment stays as it is)
    assert "[4/4] kept-0: cleaned" in done.stderr      # cleaning comes after retention of every partition
    assert int(lines["kept"][7]) > 0 and lines["old"][6] == "0"
    with LogRoot.open(str(tmp_path / "r")) as root, root.log("kept", 0) as kept:
        offsets = [r.offset for r in kept.read_records(0)]
        assert len(offsets) < 15 and offsets[-1] == 14 and offsets == sorted(offsets)
    reader = LogRoot.open(str(tmp_path / "r")).log("old", 1)
    assert (reader.log_start_offset, reader.high_watermark) == (15, 15)
    assert not any(n.startswith("0000000000000000000") and n[19] in "05"
                   for n in os.listdir(tmp_path / "r" / "old-1"))
    again = seglog("maintain", "--root", str(tmp_path / "r"), "--once", "--topic", "old")
    assert again.returncode == 0 and "total: 0 segments" in again.stdout


def test_cli_maintain_on_s3(s3_backend_url):
    make_root(s3_backend_url.url, s3_backend_url.storage_options).close()
    options = [f"--storage-option={k}={v if isinstance(v, str) else json.dumps(v)}"
               for k, v in s3_backend_url.storage_options.items()]
    done = seglog("maintain", "--root", s3_backend_url.url, "--once", "--topic", "old", *options)
    assert done.returncode == 0, done.stderr
    assert "total: 6 segments" in done.stdout
    root = LogRoot.open(s3_backend_url.url, storage_options=s3_backend_url.storage_options)
    log = root.log("old", 0)
    assert log.log_start_offset == 15
    assert [n for n in root.storage.list_dir("old-0") if n.endswith(".log")] == []
    root.close()


def test_cli_errors_name_the_setting(tmp_path):
    make_root(str(tmp_path / "r")).close()
    bad = tmp_path / "m.properties"
    bad.write_text("log.cleaner.io.buffer.load.factor=1.5\n")
    done = seglog("maintain", "--root", str(tmp_path / "r"), "--once", "--config-file", str(bad))
    assert done.returncode == 1
    assert "log.cleaner.io.buffer.load.factor" in done.stderr and str(bad) in done.stderr
    assert main(["maintain", "--root", str(tmp_path / "r"), "--once", "--topic", "nope"]) == 1
    assert main(["maintain", "--help"]) == 0


def test_held_partition_is_skipped_not_fenced(tmp_path):
    root = make_root(str(tmp_path / "r"))
    producer = root.log("old", 0, writer=True)          # a live writer holds old-0
    epoch = producer.leader_epoch
    summary = MaintenanceService(LogRoot.open(str(tmp_path / "r"))).run_once(["old"])
    skipped = {o.partition: o.skipped for o in summary.outcomes}
    assert skipped[0] is not None and "held by another writer" in skipped[0]
    assert skipped[1] is None and summary.segments_deleted == 3
    fill(producer, 1, ts=int(time.time() * 1000))       # still the writer: not fenced
    assert producer.leader_epoch == epoch
    producer.close()
    root.close()


def test_run_forever_stops_on_event(tmp_path):
    root = make_root(str(tmp_path / "r"))
    settings = MaintenanceConfig.from_props({"log.retention.check.interval.ms": "50",
                                             "log.cleaner.dedupe.buffer.size": str(1 << 20)})
    service = MaintenanceService(root, settings)
    stop = threading.Event()
    passes = []
    thread = threading.Thread(target=service.run_forever, args=(stop,),
                              kwargs={"on_pass": passes.append})
    thread.start()
    deadline = time.monotonic() + 20
    while len(passes) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and len(passes) >= 2
    assert passes[0].segments_deleted == 6 and passes[-1].segments_deleted == 0
    root.close()


def test_service_ctrl_c_stops_cleanly(tmp_path):
    make_root(str(tmp_path / "r")).close()
    conf = tmp_path / "m.properties"
    conf.write_text("log.retention.check.interval.ms=100\n")
    proc = subprocess.Popen([sys.executable, "-m", "logcore.tools.cli", "maintain", "--root",
                             str(tmp_path / "r"), "--config-file", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    deadline = time.time() + 30
    out = ""
    while time.time() < deadline and "total:" not in out:
        out += proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "stopped after" in stderr and "Traceback" not in stderr


# ------------------------------------------------------------------ settings and their errors

def test_maintenance_defaults_are_kafkas():
    s = MaintenanceConfig.from_props()
    assert (s.retention_check_interval_ms, s.cleaner_enable, s.cleaner_threads) == (300000, True, 1)
    assert (s.cleaner_dedupe_buffer_size, s.cleaner_io_buffer_size) == (134217728, 524288)
    assert s.cleaner_io_max_bytes_per_second == sys.float_info.max
    assert (s.cleaner_backoff_ms, s.cleaner_io_buffer_load_factor) == (15000, 0.9)
    shipped = load_properties(os.path.join(os.path.dirname(__file__), "..", "..", "conf",
                                           "maintenance.properties"))
    assert shipped == {}                                 # every line is a commented default


@pytest.mark.parametrize("name,value,words", [
    ("log.retention.check.interval.ms", "0", "at least 1"),
    ("log.cleaner.threads", "-1", "at least 0"),
    ("log.cleaner.enable", "yes", "true or false"),
    ("log.cleaner.io.max.bytes.per.second", "0", "greater than 0"),
    ("log.cleaner.io.buffer.load.factor", "0", "greater than 0 and at most 1"),
    ("log.cleaner.dedupe.buffer.size", "lots", "whole number"),
])
def test_bad_maintenance_values(name, value, words):
    with pytest.raises(InvalidConfigError, match=name) as caught:
        MaintenanceConfig.from_props({name: value})
    assert words in str(caught.value)


def test_maintenance_and_topic_defaults_share_the_root(tmp_path):
    defaults = {"log.retention.hours": "2", "log.cleaner.threads": "3"}
    root = LogRoot.open(str(tmp_path / "r"), create=True, defaults=defaults)
    root.create_topic("t")
    assert root.topic_config("t").retention_ms == 2 * 3_600_000
    assert MaintenanceService(root).settings.cleaner_threads == 3
    with pytest.raises(InvalidConfigError, match="did you mean 'log.cleaner.threads'"):
        MaintenanceConfig.from_props({"log.cleaner.thread": "2"})
    root.close()


@pytest.mark.parametrize("config,words", [
    ({"retention.ms": "-2"}, "retention.ms"),
    ({"retention.bytes": "-5"}, "retention.bytes"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"cleanup.policy": "delete,delete"}, "cleanup.policy"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
    ({"min.cleanable.dirty.ratio": "-0.1"}, "min.cleanable.dirty.ratio"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "max.compaction.lag.ms"),
    ({"delete.retention.ms": "-1"}, "delete.retention.ms"),
    ({"file.delete.delay.ms": "-1"}, "file.delete.delay.ms"),
    ({"segment.ms": "0"}, "segment.ms"),
    ({"cleanup.policy": "compact", "remote.storage.enable": "true"}, "remote.storage.enable"),
])
def test_bad_topic_configs_name_the_setting(config, words):
    with pytest.raises(InvalidConfigError, match=words.replace(".", r"\.")):
        LogConfig.from_props(config)
