"""`seglog dump`: Kafka's DumpLogSegments output, field by field, on logs built with the codec."""
from __future__ import annotations

import re
import struct
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from logcore.records import (
    Compression,
    ControlType,
    build_batch,
    build_control_batch,
    crc32c,
)
from logcore.tools.cli import main

SEG = "00000000000000000000"


def fields(line: str) -> dict[str, str]:
    """'a: 1 b: x' -> {'a': '1', 'b': 'x'} (Kafka's dump lines are `name: value` pairs)."""
    return dict(re.findall(r"(\w+): (\S+)", line))


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = main(["dump", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def make_log(directory: Path, base: int = 0) -> tuple[Path, list[bytes]]:
    batches = [
        build_batch([(b"k1", b"v1", (("h1", b"x"), ("h2", None)), 1_000),
                     (None, b"v2", (), 1_005)], base_offset=base, partition_leader_epoch=3),
        build_batch([(b"k3", b"value-3", (), 2_000), (b"k4", None, (), 2_010), (b"k5", b"v5", (), 1_990)],
                    base_offset=base + 2, compression=Compression.ZSTD, producer_id=7, producer_epoch=1,
                    base_sequence=10, is_transactional=True, partition_leader_epoch=3),
        build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=1, coordinator_epoch=5,
                            base_offset=base + 5, timestamp_ms=3_000, partition_leader_epoch=3),
    ]
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(batches))
    return path, batches


def test_log_batches_field_by_field(tmp_path, capsys):
    path, batches = make_log(tmp_path)
    code, out, err = run(capsys, "--files", str(path))
    assert code == 0, err
    assert out[0] == f"Dumping {path}"
    assert out[1] == "Log starting offset: 0"
    lines = out[2:]
    assert len(lines) == 3
    position = 0
    for line, raw in zip(lines, batches):
        f = fields(line)
        kp = DefaultRecordBatch(bytearray(raw))      # independent reading of the same bytes
        assert int(f["baseOffset"]) == kp.base_offset
        assert int(f["lastOffset"]) == kp.base_offset + kp.last_offset_delta
        assert int(f["count"]) == len(list(DefaultRecordBatch(bytearray(raw))))
        assert int(f["producerId"]) == kp.producer_id
        assert int(f["producerEpoch"]) == kp.producer_epoch
        assert int(f["baseSequence"]) == kp.base_sequence
        assert int(f["crc"]) == kp.crc
        assert int(f["position"]) == position
        assert int(f["size"]) == len(raw)
        assert f["magic"] == "2" and f["isvalid"] == "true"
        assert f["partitionLeaderEpoch"] == "3"
        assert f["deleteHorizonMs"] == "OptionalLong.empty"
        assert f["isTransactional"] == ("true" if kp.is_transactional else "false")
        assert f["isControl"] == ("true" if kp.is_control_batch else "false")
        assert int(f["CreateTime"]) == kp.max_timestamp
        position += len(raw)
    first, second, control = map(fields, lines)
    assert first["compresscodec"] == "none" and second["compresscodec"] == "zstd"
    assert first["lastSequence"] == "-1" and second["lastSequence"] == "12"
    assert second["CreateTime"] == "2010"          # the batch's max timestamp
    assert control["isControl"] == "true" and control["count"] == "1"
    # exact layout of a batch line, as Kafka prints it
    assert lines[0].startswith("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 "
                               "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false "
                               "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1005 "
                               f"size: {len(batches[0])} magic: 2 compresscodec: none crc: ")
    assert lines[0].endswith(" isvalid: true")


def test_deep_iteration_and_print_data_log(tmp_path, capsys):
    path, _ = make_log(tmp_path)
    code, out, _ = run(capsys, "--files", str(path), "--deep-iteration")
    assert code == 0
    records = [line for line in out if line.startswith("| ")]
    assert records[0] == ("| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 "
                          "headerKeys: [h1,h2]")
    assert records[1] == "| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 2 sequence: -1 headerKeys: []"
    assert records[2] == "| offset: 2 CreateTime: 2000 keySize: 2 valueSize: 7 sequence: 10 headerKeys: []"
    assert records[3] == "| offset: 3 CreateTime: 2010 keySize: 2 valueSize: -1 sequence: 11 headerKeys: []"
    assert records[5] == ("| offset: 5 CreateTime: 3000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                          "endTxnMarker: COMMIT coordinatorEpoch: 5")
    assert "payload" not in "".join(records)

    code, out, _ = run(capsys, "--files", str(path), "--print-data-log")   # implies deep iteration
    records = [line for line in out if line.startswith("| ")]
    assert records[0].endswith("headerKeys: [h1,h2] key: k1 payload: v1")
    assert records[1].endswith("headerKeys: [] payload: v2")               # null key: no key field
    assert records[3].endswith("headerKeys: [] key: k4")                   # tombstone: no payload
    assert records[5].endswith("endTxnMarker: COMMIT coordinatorEpoch: 5")  # control: no payload

    code, out, _ = run(capsys, "--files", str(path), "--print-data-log", "--skip-record-metadata")
    records = [line for line in out if line.startswith("|")]
    assert records[0] == "| key: k1 payload: v1"


@pytest.mark.parametrize("codec", ["GZIP", "SNAPPY", "LZ4", "ZSTD"])
def test_every_codec(tmp_path, capsys, codec):
    raw = build_batch([(b"k", b"v" * 100, (), 5)] * 4, compression=Compression[codec])
    path = tmp_path / f"{SEG}.log"
    path.write_bytes(raw)
    code, out, _ = run(capsys, "--files", str(path), "--print-data-log")
    assert code == 0
    assert fields(out[2])["compresscodec"] == codec.lower()
    assert [line.split(" payload: ")[1] for line in out[3:]] == ["v" * 100] * 4


def test_log_append_time_and_gaps(tmp_path, capsys):
    a = build_batch([(b"a", b"1", (), 10)], base_offset=0, log_append_time=99,
                    timestamp_type=1)
    b = build_batch([(b"b", b"2", (), 20)], base_offset=5)
    path = tmp_path / f"{SEG}.log"
    path.write_bytes(a + b)
    code, out, err = run(capsys, "--files", str(path), "--deep-iteration")
    assert code == 0
    assert "LogAppendTime: 99" in out[2]
    assert out[3].startswith("| offset: 0 LogAppendTime: 99 ")
    assert f"Non-consecutive offsets in {path}\n  0 is followed by 5\n" in err


def test_corrupt_crc_reported_and_next_file_dumped(tmp_path, capsys):
    path, batches = make_log(tmp_path)
    data = bytearray(path.read_bytes())
    bad_position = len(batches[0])
    data[bad_position + 70] ^= 0xFF                  # inside the second batch's records
    path.write_bytes(bytes(data))
    other = tmp_path / "other"
    other.mkdir()
    good, _ = make_log(other, base=100)
    code, out, err = run(capsys, "--files", str(path), str(good), "--deep-iteration")
    assert code == 1
    batch_lines = [fields(line) for line in out if line.startswith("baseOffset")]
    assert [b["isvalid"] for b in batch_lines[:3]] == ["true", "false", "true"]
    assert "seglog: error: CRC mismatch" in err
    assert f"(file {path}, position {bad_position})" in err
    assert f"Dumping {good}" in out                                   # went on with the next file
    assert "Log starting offset: 100" in out


def test_unframeable_batch_and_partial_tail(tmp_path, capsys):
    path, batches = make_log(tmp_path)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, len(batches[0]) + 8, 3)              # batchLength 3 < 14
    path.write_bytes(bytes(data))
    code, out, err = run(capsys, "--files", str(path))
    assert code == 1
    assert f"batch length 3 is smaller than the minimum 14 (file {path}, position {len(batches[0])})" in err

    path.write_bytes(b"".join(batches) + batches[0][:30])
    code, out, err = run(capsys, "--files", str(path))
    assert code == 1
    assert out[-1] == f"Found 30 invalid bytes at the end of {path.name}"

    legacy = bytearray(batches[0])
    legacy[16] = 1
    path.write_bytes(bytes(legacy))
    code, out, err = run(capsys, "--files", str(path))
    assert code == 1 and "magic 1" in err and "position 0" in err


def test_offset_index_entries_and_mismatches(tmp_path, capsys):
    path, batches = make_log(tmp_path)
    p1, p2 = len(batches[0]), len(batches[0]) + len(batches[1])
    index = tmp_path / f"{SEG}.index"
    # entry = (last offset of the batch, position where it starts); the second one is wrong
    index.write_bytes(struct.pack(">ii", 4, p1) + struct.pack(">ii", 4 + 1, p1) + struct.pack(">ii", 5, p2))
    code, out, err = run(capsys, "--files", str(index))
    assert out[1:] == [f"offset: 4 position: {p1}", f"offset: 5 position: {p1}", f"offset: 5 position: {p2}"]
    assert f"Mismatches in :{index}\n  Index offset: 5, log offset: 4\n" in err
    assert code == 1

    index.write_bytes(struct.pack(">ii", 4, p1) + struct.pack(">ii", 5, p2) + bytes(16))  # zero padding
    code, out, err = run(capsys, "--files", str(index), "--verify-index-only")
    assert code == 0 and out == [f"Dumping {index}"] and err == ""
    code, out, _ = run(capsys, "--files", str(index))
    assert out[1:] == [f"offset: 4 position: {p1}", f"offset: 5 position: {p2}"]

    code, out, _ = run(capsys, "--files", str(index), "--index-sanity-check")
    assert out[1] == f"{index} passed sanity check."
    index.write_bytes(struct.pack(">ii", 4, p1) + b"\0\0\0")
    code, _, err = run(capsys, "--files", str(index), "--index-sanity-check")
    assert code == 1 and "not a multiple of the 8-byte entry size" in err and str(index) in err

    index.write_bytes(b"")
    code, out, _ = run(capsys, "--files", str(index))
    assert out[1] == f"{index} is empty."


def test_time_index_entries_and_mismatches(tmp_path, capsys):
    path, batches = make_log(tmp_path)
    timeindex = tmp_path / f"{SEG}.timeindex"
    timeindex.write_bytes(struct.pack(">qi", 1005, 1) + struct.pack(">qi", 2010, 4) + struct.pack(">qi", 2500, 5))
    code, out, err = run(capsys, "--files", str(timeindex))
    assert out[1:] == ["timestamp: 1005 offset: 1", "timestamp: 2010 offset: 4", "timestamp: 2500 offset: 5"]
    assert f"Found timestamp mismatch in :{timeindex}\n  Index timestamp: 2500, log timestamp: 3000\n" in err
    assert code == 1

    timeindex.write_bytes(struct.pack(">qi", 1005, 1) + struct.pack(">qi", 2010, 3))
    code, out, err = run(capsys, "--files", str(timeindex), "--verify-index-only")
    assert out == [f"Dumping {timeindex}"]
    assert "The following indexed offsets are not found in the log.\nIndexed offset: 3, found log offset: 4" in err

    timeindex.write_bytes(struct.pack(">qi", 2010, 4) + struct.pack(">qi", 1005, 1))
    code, out, err = run(capsys, "--files", str(timeindex), "--index-sanity-check")
    assert code == 1 and "last timestamp is 1005 which is less than the first timestamp 2010" in err


def test_txn_index_snapshot_and_checkpoints(tmp_path, capsys):
    txn = tmp_path / f"{SEG}.txnindex"
    txn.write_bytes(struct.pack(">hqqqq", 0, 7, 2, 5, 2) + struct.pack(">hqqqq", 0, 8, 6, 9, 6))
    snapshot = tmp_path / f"{6:020d}.snapshot"
    entries = struct.pack(">qhiqiqiq", 7, 1, 12, 4, 2, 2010, 5, -1)
    body = struct.pack(">i", 1) + entries
    snapshot.write_bytes(struct.pack(">hI", 1, crc32c(body)) + body)
    hw = tmp_path / "replication-offset-checkpoint"
    hw.write_text("0\n2\norders 0 6\norders 1 0\n")
    epochs = tmp_path / "leader-epoch-checkpoint"
    epochs.write_text("0\n1\n3 0\n")
    meta = tmp_path / "partition.metadata"
    meta.write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    code, out, err = run(capsys, "--files", str(txn), str(snapshot), str(hw), str(epochs), str(meta))
    assert code == 0, err
    assert "version: 0 producerId: 7 firstOffset: 2 lastOffset: 5 lastStableOffset: 2" in out
    assert "version: 0 producerId: 8 firstOffset: 6 lastOffset: 9 lastStableOffset: 6" in out
    assert ("producerId: 7 producerEpoch: 1 coordinatorEpoch: 5 currentTxnFirstOffset: OptionalLong.empty "
            "lastTimestamp: 2010 firstSequence: 10 lastSequence: 12 lastOffset: 4 offsetDelta: 2 timestamp: 2010") in out
    assert "topic: orders partition: 0 offset: 6" in out
    assert "epoch: 3 startOffset: 0" in out
    assert "topic_id: AAAAAAAAAAAAAAAAAAAAAQ" in out

    snapshot.write_bytes(struct.pack(">hI", 1, crc32c(body) ^ 1) + body)
    hw.write_text("0\n3\norders 0 6\n")
    txn.write_bytes(txn.read_bytes() + b"\0" * 5)
    code, out, err = run(capsys, "--files", str(snapshot), str(hw), str(txn))
    assert code == 1
    assert "Snapshot is corrupt (CRC is no longer valid)" in err and str(snapshot) in err
    assert "count line says '3' but 1 entries follow" in err
    assert "5 trailing bytes" in err


def test_unknown_and_missing_files(tmp_path, capsys):
    odd = tmp_path / "notes.txt"
    odd.write_text("x")
    missing = tmp_path / f"{SEG}.log"
    code, out, err = run(capsys, "--files", f"{odd},{missing}")
    assert f"Ignoring unknown file {odd}" in err
    assert code == 1 and "seglog: error: file not found" in err and str(missing) in err


def test_memory_url(capsys):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://dump-{uuid.uuid4().hex}/t-0"
    raw = build_batch([(b"k", b"v", (), 1)])
    fs.pipe(f"{root}/{SEG}.log", raw)
    try:
        code, out, err = run(capsys, "--files", f"{root}/{SEG}.log", "--print-data-log")
        assert code == 0, err
        assert out[0] == f"Dumping {root}/{SEG}.log"
        assert out[-1].endswith("key: k payload: v")
    finally:
        fs.rm(root.rsplit("/", 1)[0], recursive=True)


@pytest.mark.s3
def test_s3_url(tmp_path, capsys, s3_bucket, s3_storage_options):
    import fsspec

    fs = fsspec.filesystem("s3", **s3_storage_options)
    path, batches = make_log(tmp_path)
    url = f"s3://{s3_bucket}/logs/t-0/{SEG}.log"
    fs.pipe(url, path.read_bytes())
    argv = ["--files", url, "--deep-iteration"]
    for key, value in s3_storage_options.items():
        if isinstance(value, (str, bool, int)):
            argv += ["--storage-option", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
        else:
            import json
            argv += ["--storage-option", f"{key}={json.dumps(value)}"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert len([line for line in out if line.startswith("baseOffset")]) == 3
    assert "endTxnMarker: COMMIT coordinatorEpoch: 5" in out[-1]
    secret = s3_storage_options.get("secret")
    if secret:
        assert secret not in "\n".join(out) + err
