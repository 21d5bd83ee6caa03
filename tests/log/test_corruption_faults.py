"""Fault test: damage committed segments at random (length fields, CRCs, CRC-covered bytes,
magic, base offsets, truncation) and check the promise for every read and every open:

- a reader either returns exactly the committed records, or returns exactly the records before
  the damaged batch and then fails with CorruptRecordError naming the segment file and the
  batch's byte position in that file (or fails at open, naming them);
- no open (writer, clean or after an unclean shutdown) drops committed data: the `.log` files are
  left exactly as they were, and a writer that opens still has the committed high watermark.

Local disk and S3 (the s3 fixtures of tests/conftest.py). Each seed damages one batch of one
segment; the damaged bytes are put back (S3) or the root copied afresh (local) for the next.
"""
from __future__ import annotations

import random
import shutil
import struct

import pytest

from logcore.errors import CorruptRecordError
from logcore.log.log_loader import CLEAN_SHUTDOWN
from logcore.log.log_root import LogRoot
from logcore.log.file_slice import FileSlice
from logcore.records.batch import decode_records, iter_batches
from logcore.storage import open_storage
from logcore.tools.cli import main as seglog

PER_BATCH = 5
BATCHES = 120
DAMAGES = ("length", "length-bit", "crc", "covered", "magic", "offset", "truncate")


def _build(url: str, options: dict) -> int:
    root = LogRoot.open(url, storage_options=options, create=True)
    root.create_topic("t", 1, {"segment.bytes": "6000", "index.interval.bytes": "400"})
    log = root.log("t", 0, writer=True)
    for b in range(BATCHES):
        log.append_records([(b"k%d" % i, b"v-%06d" % (b * PER_BATCH + i), (), 1000 + b)
                            for i in range(PER_BATCH)], compression=1 if b % 7 == 3 else None)
        if b % 10 == 9:
            log.commit()
    log.commit()
    hw = log.high_watermark
    log.close()
    root.close()
    return hw


def _damage(rng: random.Random, data: bytes) -> tuple[bytes, int, int, str]:
    """(damaged bytes, position of the damaged batch, its first offset, what was done)."""
    batches = list(iter_batches(data))
    pos, header = batches[rng.randrange(len(batches))]
    out = bytearray(data)
    kind = rng.choice(DAMAGES)
    if kind == "length":
        new = header.batch_length
        while new == header.batch_length:
            new = rng.randrange(0, 2 * header.size)
        struct.pack_into(">i", out, pos + 8, new)
    elif kind == "length-bit":
        out[pos + 8 + rng.randrange(4)] ^= 1 << rng.randrange(8)
    elif kind == "crc":
        out[pos + 17 + rng.randrange(4)] ^= 1 << rng.randrange(8)
    elif kind == "covered":
        out[pos + 21 + rng.randrange(header.size - 21)] ^= 1 << rng.randrange(8)
    elif kind == "magic":
        out[pos + 16] = rng.choice([0, 1, 3, 7, 0x42])
    elif kind == "offset":
        struct.pack_into(">q", out, pos, header.base_offset + rng.choice([-1, 1]) * rng.randrange(1, 40))
    else:
        del out[pos + rng.randrange(1, header.size):]
    return bytes(out), pos, header.base_offset, kind


def _read_all(url: str, options: dict) -> tuple[list, CorruptRecordError | None]:
    got = []
    try:
        root = LogRoot.open(url, storage_options=options, read_only=True)
        try:
            log = root.log("t", 0)
            for record in log.read_records(0):
                got.append((record.offset, record.value))
        finally:
            root.close()
    except CorruptRecordError as exc:
        return got, exc
    return got, None


def _read_zero_copy(url: str, options: dict) -> tuple[list, CorruptRecordError | None]:
    """What the broker's Fetch reads: zero-copy ranges, verified before they are sent."""
    got = []
    try:
        root = LogRoot.open(url, storage_options=options, read_only=True)
        try:
            log = root.log("t", 0)
            offset = 0
            while offset < log.high_watermark:
                fetch = log.read(offset, 3000, isolation="read_uncommitted", zero_copy=True)
                data = fetch.data.read() if isinstance(fetch.data, FileSlice) else bytes(fetch.data)
                if isinstance(fetch.data, FileSlice):
                    fetch.data.close()
                if not data:
                    break
                for pos, header in iter_batches(data, verify_crc=False):
                    got.extend((r.offset, r.value) for r in decode_records(data, pos, header, verify_crc=False)
                               if r.offset >= offset)
                    offset = header.next_offset
        finally:
            root.close()
    except CorruptRecordError as exc:
        return got, exc
    return got, None


def _check_read(url, options, expected, path, pos, first_offset, what):
    if not url.startswith("s3:"):
        got, error = _read_zero_copy(url, options)
        _check_outcome(got, error, expected, path, pos, first_offset, what + " (zero-copy)")
    got, error = _read_all(url, options)
    _check_outcome(got, error, expected, path, pos, first_offset, what)


def _check_outcome(got, error, expected, path, pos, first_offset, what):
    if error is None:
        assert got == expected, f"{what}: no error but the records differ"
        return
    assert got == expected[:len(got)], f"{what}: wrong records before the error"
    assert error.file == path and error.position == pos, f"{what}: {error}"
    assert len(got) in (0, first_offset), f"{what}: {len(got)} records before the damage at {first_offset}"


def _logs_of(storage, part: str) -> dict:
    return {n: storage.read(f"{part}/{n}") for n in storage.list_dir(part) if n.endswith(".log")}


def _check_writer_open(url, options, storage, hw, what):
    """A writer open either refuses (with the file and position) or keeps everything committed;
    either way no `.log` byte changes."""
    before = _logs_of(storage, "t-0")
    try:
        root = LogRoot.open(url, storage_options=options)
        try:
            log = root.log("t", 0, writer=True)
            assert log.high_watermark == hw, f"{what}: the writer lowered the HW to {log.high_watermark}"
            log.close()
        finally:
            root.close()
    except CorruptRecordError as exc:
        assert exc.file and exc.position is not None, f"{what}: {exc}"
    assert _logs_of(storage, "t-0") == before, f"{what}: an open changed committed segments"


def test_random_damage_local(tmp_path):
    pristine = tmp_path / "pristine"
    hw = _build(str(pristine), {})
    expected = [(i, b"v-%06d" % i) for i in range(hw)]
    names = sorted(p.name for p in (pristine / "t-0").iterdir() if p.suffix == ".log")
    for seed in range(45):
        rng = random.Random(seed)
        root = tmp_path / f"seed-{seed}"
        shutil.copytree(pristine, root)
        name = rng.choice(names)
        target = root / "t-0" / name
        data, pos, first, kind = _damage(rng, target.read_bytes())
        target.write_bytes(data)
        what = f"seed {seed}: {kind} of the batch at {pos} (offset {first}) of {name}"
        storage = open_storage(str(root))
        _check_read(str(root), {}, expected, f"t-0/{name}", pos, first, what)
        _check_writer_open(str(root), {}, storage, hw, what + " (clean)")
        (root / "t-0" / CLEAN_SHUTDOWN).unlink(missing_ok=True)
        _check_writer_open(str(root), {}, storage, hw, what + " (unclean)")
        _check_read(str(root), {}, expected, f"t-0/{name}", pos, first, what + " after the opens")
        shutil.rmtree(root)


def test_random_damage_cli(tmp_path, capsys):
    """The same through `seglog consume`: exit 1 with the file and position, or exit 0 with
    every record; the records printed before the error are exactly the committed ones."""
    pristine = tmp_path / "pristine"
    hw = _build(str(pristine), {})
    names = sorted(p.name for p in (pristine / "t-0").iterdir() if p.suffix == ".log")
    for seed in range(12):
        rng = random.Random(1000 + seed)
        root = tmp_path / f"seed-{seed}"
        shutil.copytree(pristine, root)
        name = rng.choice(names)
        data, pos, first, kind = _damage(rng, (root / "t-0" / name).read_bytes())
        (root / "t-0" / name).write_bytes(data)
        capsys.readouterr()
        code = seglog(["consume", "--root", str(root), "--topic", "t", "--from-beginning", "--print-offset"])
        out, err = capsys.readouterr()
        offsets = [int(line.split("\t")[0].split(":")[1]) for line in out.splitlines()]
        values = [line.split("\t")[1] for line in out.splitlines()]
        assert offsets == list(range(len(offsets))) and values == ["v-%06d" % i for i in offsets]
        if code == 0:
            assert len(offsets) == hw
        else:
            assert code == 1 and f"file t-0/{name}, position {pos})" in err, (kind, err)
            assert len(offsets) in (0, first)


@pytest.mark.parametrize("kind, seeds", [("memory", 150), pytest.param("seaweedfs", 6, marks=pytest.mark.s3)])
def test_random_damage_object_store(storage_targets, kind, seeds):
    """Object stores (fsspec memory for many seeds, a real S3 server for a few: each seed there
    costs a few seconds of requests)."""
    target = storage_targets.make(kind)
    url, options = target.url, target.storage_options
    hw = _build(url, options)
    expected = [(i, b"v-%06d" % i) for i in range(hw)]
    storage = open_storage(url, options)
    names = sorted(n for n in storage.list_dir("t-0") if n.endswith(".log"))
    for seed in range(seeds):
        rng = random.Random(seed)
        name = rng.choice(names)
        path = f"t-0/{name}"
        original = storage.read(path)
        data, pos, first, kind = _damage(rng, original)
        storage.write_atomic(path, data)
        what = f"seed {seed}: {kind} of the batch at {pos} (offset {first}) of {name}"
        try:
            _check_read(url, options, expected, path, pos, first, what)
            _check_writer_open(url, options, storage, hw, what)
        finally:
            storage.write_atomic(path, original)
