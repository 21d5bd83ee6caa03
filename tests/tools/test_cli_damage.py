"""Damaged committed data through the command line (`seglog` as a user runs it).

The issue's trial: the length field of one batch in the middle of a committed segment broken.
`seglog consume` prints the records before it and exits 1 naming the segment file and the batch's
byte position; a writer (here `seglog produce` after an unclean shutdown) refuses instead of
cutting; `seglog maintain` skips the partition; `seglog repair` cuts and prints what it dropped.
"""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import broker_spawner
from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches
from broker_process import subprocess_env



def _seglog(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    # forked from an interpreter with the CLI imported (broker_spawner.py): the same command
    return broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", *args], input=stdin,
                              env=subprocess_env(), timeout=120)


def _build(root: Path) -> None:
    r = LogRoot.open(str(root), create=True)
    r.create_topic("t", 1, {"segment.bytes": "20000"})
    log = r.log("t", 0, writer=True)
    for b in range(100):
        log.append_records([(None, b"v%05d" % (b * 10 + i) + b"x" * 40, (), None) for i in range(10)])
    log.commit()
    log.close()
    r.close()
    (root / "t-0" / ".seglog-clean-shutdown").unlink()     # as after a crash


def test_broken_length_field_consume_produce_maintain_repair(tmp_path):
    root = tmp_path / "root"
    _build(root)
    segs = sorted((root / "t-0").glob("*.log"))
    last = segs[-1]
    data = bytearray(last.read_bytes())
    positions = [pos for pos, _ in iter_batches(bytes(data))]
    position = positions[len(positions) // 2]
    first = struct.unpack_from(">q", data, position)[0]
    struct.pack_into(">i", data, position + 8, 10_000_000)
    last.write_bytes(bytes(data))
    where = f"file t-0/{last.name}, position {position})"

    out = _seglog("consume", "--root", str(root), "--topic", "t", "--from-beginning")
    assert out.returncode == 1 and where in out.stderr, out.stderr
    assert out.stdout.splitlines() == ["v%05d" % i + "x" * 40 for i in range(first)]

    out = _seglog("produce", "--root", str(root), "--topic", "t", stdin="more\n")
    assert out.returncode == 1 and where in out.stderr and "seglog repair" in out.stderr, out.stderr
    out = _seglog("maintain", "--root", str(root), "--once")
    assert out.returncode == 0 and "seglog repair" in out.stdout + out.stderr
    assert last.read_bytes() == bytes(data)             # nothing was cut by any of them

    out = _seglog("repair", "--root", str(root), "--topic", "t", "--partition", "0")
    assert out.returncode == 0, out.stderr
    assert f"cut t-0/{last.name} at position {position}" in out.stdout
    assert f"dropped offsets {first}..999 ({1000 - first} offsets, {len(data) - position} bytes)" in out.stdout
    out = _seglog("consume", "--root", str(root), "--topic", "t", "--from-beginning")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == first
    out = _seglog("repair", "--root", str(root), "--topic", "t")
    assert out.returncode == 0 and "t-0: no damage found" in out.stdout


def test_wrong_log_start_checkpoint_deletes_nothing(tmp_path):
    root = tmp_path / "root"
    _build(root)
    before = sorted(p.name for p in (root / "t-0").glob("*.log"))
    assert len(before) > 3
    (root / "log-start-offset-checkpoint").write_text("0\n1\nt 0 700\n")
    out = _seglog("maintain", "--root", str(root), "--once")
    assert out.returncode == 0 and "log-start-offset-checkpoint entry 700" in out.stderr, out.stderr
    assert sorted(p.name for p in (root / "t-0").glob("*.log")) == before
    out = _seglog("consume", "--root", str(root), "--topic", "t", "--from-beginning")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1000


def test_repair_refuses_an_object_store_root(capsys):
    import uuid

    from logcore.tools.cli import main
    url = f"memory://repair-{uuid.uuid4().hex}"
    LogRoot.open(url, create=True).create_topic("t", 1)
    assert main(["repair", "--root", url, "--topic", "t"]) == 1
    assert "object store" in capsys.readouterr().err
