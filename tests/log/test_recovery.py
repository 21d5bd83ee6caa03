"""Crash recovery on local disk: torn tails, garbage, bit flips, broken indexes, kill -9.

Each test writes a log, damages it the way a crash or a bad disk would, reopens it as a writer
(which recovers, since there is no clean-shutdown marker) and checks that the log ends at the last
valid batch, that nothing committed is lost, and that nothing corrupt is served. Damage to
committed (synced) data is never cut on open: the writer refuses with DamagedLogError naming the
file and position, and only `seglog repair` cuts it.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from logcore.errors import DamagedLogError
from logcore.log.log_loader import CLEAN_SHUTDOWN
from logcore.log.log_root import LogRoot
from logcore.tools.cli import main as seglog
from logcore.records.batch import iter_batches
import broker_spawner

SEG0 = "00000000000000000000"


def build(tmp_path: Path, n_batches=30, per_batch=5, commit_every=1, config=None, close=True):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic("t", config=config or {"index.interval.bytes": "200"})
    log = root.log("t", 0, writer=True)
    for b in range(n_batches):
        log.append_records([(b"k%d" % (b * per_batch + i), b"value-%d" % (b * per_batch + i), (), 1000 + b)
                            for i in range(per_batch)])
        if (b + 1) % commit_every == 0:
            log.commit()
    if close:
        log.close()
        # Simulate an unclean shutdown: the writer died before it could mark a clean close.
        os.remove(tmp_path / "root" / "t-0" / CLEAN_SHUTDOWN)
    return tmp_path / "root" / "t-0", log


def reopen(tmp_path: Path, writer=True):
    root = LogRoot.open(str(tmp_path / "root"))
    return root.log("t", 0, writer=writer, truncate_uncommitted=False)


def batch_bounds(log_file: Path) -> list[int]:
    data = log_file.read_bytes()
    return [pos for pos, _ in iter_batches(data)] + [len(data)]


def assert_serves_prefix(log, n_records):
    got = [(r.offset, r.value) for r in log.read_records(0, isolation="log_end")]
    assert got == [(i, b"value-%d" % i) for i in range(n_records)]


def repair(tmp_path, capsys) -> str:
    capsys.readouterr()
    assert seglog(["repair", "--root", str(tmp_path / "root"), "--topic", "t", "--partition", "0"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("seed", range(6))
def test_truncated_at_random_byte(tmp_path, seed, capsys):
    part, _ = build(tmp_path)
    log_file = part / f"{SEG0}.log"
    bounds = batch_bounds(log_file)
    cut = random.Random(seed).randrange(1, bounds[-1])
    with open(log_file, "r+b") as f:
        f.truncate(cut)
    whole = sum(1 for b in bounds[1:] if b <= cut)
    # Committed and synced data is gone: the writer refuses, names the file, nothing is cut.
    with pytest.raises(DamagedLogError) as info:
        reopen(tmp_path)
    assert info.value.file.endswith(f"{SEG0}.log") and "seglog repair" in str(info.value)
    assert info.value.position in (cut, bounds[whole])
    assert log_file.stat().st_size == cut
    out = repair(tmp_path, capsys)
    if cut != bounds[whole]:
        assert f"dropped offsets {whole * 5}..149" in out
    log = reopen(tmp_path)
    assert log.log_end_offset == whole * 5
    assert log_file.stat().st_size == bounds[whole]
    assert_serves_prefix(log, whole * 5)
    # The log keeps working after recovery.
    log.append_records([(b"k", b"value-%d" % (whole * 5), (), 1)])
    log.commit()
    assert_serves_prefix(log, whole * 5 + 1)


def test_garbage_appended(tmp_path):
    part, _ = build(tmp_path)
    log_file = part / f"{SEG0}.log"
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:
        f.write(os.urandom(333))
    log = reopen(tmp_path)
    assert log_file.stat().st_size == size
    assert log.log_end_offset == 150
    assert log.recovery.truncated[0][2] == 333
    assert_serves_prefix(log, 150)


@pytest.mark.parametrize("seed", range(3))
def test_torn_tail_above_the_recovery_point_is_cut(tmp_path, seed):
    """Commits without fsync (the broker's): a crash may leave the last batches half written
    above the recovery point; they are cut, as Kafka does, and the HW comes down."""
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic("t", config={"index.interval.bytes": "200"})
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k", b"value-%d" % i, (), 1) for i in range(5)])
    log.commit()
    for b in range(1, 30):
        log.append_records([(b"k", b"value-%d" % (b * 5 + i), (), 1) for i in range(5)])
        log.commit(durable=False)
    assert log.recovery_point < 150
    rp = log.recovery_point
    log_file = tmp_path / "root" / "t-0" / f"{SEG0}.log"
    bounds = batch_bounds(log_file)
    cut = random.Random(seed).randrange(bounds[rp // 5] + 1, bounds[-1])
    with open(log_file, "r+b") as f:
        f.truncate(cut)
    whole = sum(1 for b in bounds[1:] if b <= cut)
    log = reopen(tmp_path)
    assert log.log_end_offset == whole * 5 == log.high_watermark
    assert_serves_prefix(log, whole * 5)


@pytest.mark.parametrize("seed", range(6))
def test_bit_flip_inside_a_batch(tmp_path, seed, capsys):
    part, _ = build(tmp_path)
    log_file = part / f"{SEG0}.log"
    bounds = batch_bounds(log_file)
    rng = random.Random(seed)
    victim = rng.randrange(len(bounds) - 1)
    # Flip a bit inside the CRC-covered part of the batch (from the attributes on).
    pos = rng.randrange(bounds[victim] + 21, bounds[victim + 1])
    data = bytearray(log_file.read_bytes())
    data[pos] ^= 1 << rng.randrange(8)
    log_file.write_bytes(bytes(data))
    with pytest.raises(DamagedLogError) as info:
        reopen(tmp_path)
    assert info.value.position == bounds[victim] and "CRC" in str(info.value)
    # A reader reads up to the damage, then fails there with the file and position.
    reader = reopen(tmp_path, writer=False)
    got = []
    with pytest.raises(Exception) as failed:
        for r in reader.read_records(0):
            got.append(r.offset)
    assert got == list(range(victim * 5))
    assert failed.value.file.endswith(f"{SEG0}.log") and failed.value.position == bounds[victim]
    out = repair(tmp_path, capsys)
    assert f"dropped offsets {victim * 5}..149" in out and f"position {bounds[victim]}" in out
    log = reopen(tmp_path)
    assert log.log_end_offset == victim * 5
    assert_serves_prefix(log, victim * 5)


@pytest.mark.parametrize("damage", ["delete", "zero-pad", "garbage", "short"])
def test_damaged_index_is_rebuilt(tmp_path, damage):
    part, _ = build(tmp_path, config={"index.interval.bytes": "100"})
    for suffix in (".index", ".timeindex"):
        path = part / f"{SEG0}{suffix}"
        original = path.read_bytes()
        assert original, "the test needs index entries"
        if damage == "delete":
            path.unlink()
        elif damage == "zero-pad":
            path.write_bytes(original + bytes(8 * 12 * 10))
        elif damage == "garbage":
            path.write_bytes(os.urandom(len(original)))
        else:
            path.write_bytes(original[:-3])
    log = reopen(tmp_path)
    assert log.log_end_offset == 150
    assert_serves_prefix(log, 150)
    for offset in (0, 37, 149):
        assert next(log.read_records(offset, isolation="log_end")).offset == offset
    assert log.offset_for_timestamp(1010) == (50, 1010)


def test_clean_shutdown_does_not_scan(tmp_path, monkeypatch):
    build(tmp_path, close=False)[1].close()
    from logcore.log import segment as segment_module
    calls = []
    monkeypatch.setattr(segment_module.LogSegment, "recover",
                        lambda self, *a, **k: calls.append(self) or (_ for _ in ()).throw(AssertionError))
    log = reopen(tmp_path)
    assert log.log_end_offset == 150 and calls == []


def test_read_only_reader_ignores_torn_tail_without_writing(tmp_path):
    part, _ = build(tmp_path)
    log_file = part / f"{SEG0}.log"
    with open(log_file, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x96\x00\x00\x10")   # a torn batch header
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    log = reopen(tmp_path, writer=False)
    assert log.high_watermark == 150
    assert_serves_prefix(log, 150)
    assert {p.name: p.read_bytes() for p in part.iterdir()} == before


WRITER = textwrap.dedent("""
    import sys
    from logcore.log.log_root import LogRoot
    root = LogRoot.open(sys.argv[1])
    log = root.log("t", 0, writer=True, truncate_uncommitted=False)
    n = log.log_end_offset
    while True:
        log.append_records([(b"k", b"value-%d" % (n + i), (), 1) for i in range(7)])
        n += 7
        log.commit()
        sys.stdout.write(f"{n}\\n")
        sys.stdout.flush()
""")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_kill_minus_nine_while_writing(tmp_path, seed):
    root_dir = tmp_path / "root"
    LogRoot.open(str(root_dir), create=True).create_topic(
        "t", config={"segment.bytes": "20000", "index.interval.bytes": "300"})
    committed = 0
    rng = random.Random(seed)
    for _round in range(3):
        proc = broker_spawner.popen([sys.executable, "-c", WRITER, str(root_dir)], stdout=subprocess.PIPE,
                                    text=True)
        deadline = time.time() + rng.uniform(0.3, 1.2)
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            committed = max(committed, int(line))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:          # commits acknowledged before the kill
            committed = max(committed, int(line))
        log = LogRoot.open(str(root_dir)).log("t", 0)
        got = [r.value for r in log.read_records(0)]
        # Everything acknowledged is there, in order, exactly once; nothing corrupt is served.
        assert len(got) >= committed
        assert got == [b"value-%d" % i for i in range(len(got))]
        log.close()
