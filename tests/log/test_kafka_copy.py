"""Opening a copy of an Apache Kafka broker's log dir: read-only, bounded by Kafka's checkpoint.

The copy is laid out as a Kafka broker leaves it: `<topic>-<partition>` folders, segments whose
batches come from kafka-python's independent RecordBatch builder, the active segment's index
files preallocated with zeros (Kafka mmaps them at full size), root checkpoint files and
`meta.properties`, and no seglog files at all.
"""
from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest

from logcore.errors import ReadOnlyLogError
from logcore.log.log_root import LogRoot

kafka_records = pytest.importorskip("kafka.record.default_records")


def kafka_batch(base_offset: int, values: list[bytes], ts: int, epoch: int = 0) -> bytes:
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=ts + i, key=b"key", value=value, headers=[("h", b"1")])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)            # the broker assigns offsets
    struct.pack_into(">i", data, 12, epoch)                 # and stamps its leader epoch
    return bytes(data)


def write_segment(part: Path, base: int, batches: list[bytes], *, index_every=2, prealloc=False):
    name = f"{base:020d}"
    log = b"".join(batches)
    (part / f"{name}.log").write_bytes(log)
    index, timeindex = bytearray(), bytearray()
    pos = 0
    for i, batch in enumerate(batches):
        last = struct.unpack_from(">q", batch, 0)[0] + struct.unpack_from(">i", batch, 23)[0]
        max_ts = struct.unpack_from(">q", batch, 35)[0]
        if i % index_every == 1:
            index += struct.pack(">ii", last - base, pos)
            timeindex += struct.pack(">qi", max_ts, last - base)
        pos += len(batch)
    if prealloc:
        index += bytes(10 * 1024 * 1024 // 8 * 8 - len(index))
        timeindex += bytes(10 * 1024 * 1024 // 12 * 12 - len(timeindex))
    (part / f"{name}.index").write_bytes(bytes(index))
    (part / f"{name}.timeindex").write_bytes(bytes(timeindex))


def make_kafka_dir(root: Path) -> None:
    root.mkdir()
    (root / "meta.properties").write_text("version=1\ncluster.id=abc\nnode.id=1\ndirectory.id=xyz\n")
    for p in range(2):
        part = root / f"orders-{p}"
        part.mkdir()
        (part / "partition.metadata").write_text("version: 0\ntopic_id: 0J5SLIDPSwe1oTQoY_hKaQ")
        (part / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        offset = 0
        for seg in range(3):
            batches = []
            base = offset
            for b in range(4):
                batches.append(kafka_batch(offset, [b"p%d-%d" % (p, offset + i) for i in range(5)],
                                           1_000_000 + offset))
                offset += 5
            write_segment(part, base, batches, prealloc=(seg == 2))
    # Broker checkpoints: partition 0 fully replicated, partition 1 only up to offset 42.
    (root / "replication-offset-checkpoint").write_text("0\n2\norders 0 60\norders 1 42\n")
    (root / "recovery-point-offset-checkpoint").write_text("0\n2\norders 0 40\norders 1 40\n")
    (root / "log-start-offset-checkpoint").write_text("0\n0\n")


def fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = (hashlib.sha256(path.read_bytes()).hexdigest(),
                                                path.stat().st_mtime_ns)
    return out


def test_reads_a_kafka_log_dir_read_only(tmp_path):
    root_dir = tmp_path / "kafka-logs"
    make_kafka_dir(root_dir)
    # Damage it the way a copy of a live broker can be damaged: a torn tail, a missing index.
    with open(root_dir / "orders-0" / f"{40:020d}.log", "ab") as f:
        f.write(kafka_batch(60, [b"torn"], 9)[:30])
    os.remove(root_dir / "orders-1" / f"{20:020d}.index")
    before = fingerprint(root_dir)

    root = LogRoot.open(str(root_dir))
    assert root.read_only and root.kafka_copy
    assert root.list_topics() == ["orders"]
    assert root.describe_topic("orders").partitions == 2
    log0 = root.log("orders", 0)
    assert (log0.log_start_offset, log0.high_watermark, log0.log_end_offset) == (0, 60, 60)
    got = list(log0.read_records(0))
    assert [r.value for r in got] == [b"p0-%d" % i for i in range(60)]
    assert got[7].key == b"key" and got[7].headers == (("h", b"1"),) and got[7].timestamp == 1_000_007
    # Partition 1 is bounded by the broker's high watermark, not by what is in the files.
    log1 = root.log("orders", 1)
    assert log1.high_watermark == 42
    assert [r.offset for r in log1.read_records(0)] == list(range(40))   # batch 40-44 ends above the HW
    assert next(log1.read_records(23)).offset == 23                        # index rebuilt in memory
    assert log1.offset_for_timestamp(1_000_025) == (25, 1_000_025)
    with pytest.raises(ReadOnlyLogError):
        root.log("orders", 0, writer=True)
    with pytest.raises(ReadOnlyLogError):
        root.create_topic("new")
    root.close()
    assert fingerprint(root_dir) == before, "a Kafka copy must never be written"
