"""A damaged batch below the HW (real Spark, local[2]): the query fails naming the segment file
and the batch's byte position in it (not a position in a read window), or with
failOnDataLoss=false skips exactly the damaged batch's offsets and logs the range."""
from __future__ import annotations

import logging
from pathlib import Path

from logcore.records.batch import iter_batches
from pyspark_seglog.partition_reader import SeglogInputPartition, read_partition
from test_source import read
from test_source_read import append, make_root, value_of


def _flip_batch_holding(part: Path, offset: int) -> tuple[str, int, int]:
    """Flip a CRC-covered byte of the batch holding `offset`: (segment file, position, base)."""
    for seg in sorted(part.glob("*.log"), reverse=True):
        if int(seg.name[:20]) <= offset:
            data = bytearray(seg.read_bytes())
            for pos, header in iter_batches(bytes(data)):
                if header.base_offset <= offset <= header.last_offset:
                    data[pos + header.size - 3] ^= 0x20
                    seg.write_bytes(bytes(data))
                    return f"{part.name}/{seg.name}", pos, header.base_offset
    raise AssertionError(f"no batch holds offset {offset}")


def test_damaged_batch_fails_the_query_or_is_skipped_exactly(spark, tmp_path, caplog):
    url = make_root(tmp_path / "r", {"t": 2}, {"segment.bytes": "4000"})
    for p in (0, 1):
        append(url, "t", p, 0, 400)
    path, position, base = _flip_batch_holding(tmp_path / "r" / "t-0", 250)
    assert position > 0 and base == 250

    try:
        read(spark, url, subscribe="t").collect()
        raise AssertionError("the query did not fail on a damaged batch")
    except AssertionError:
        raise
    except Exception as exc:                          # Py4JJavaError / PythonException from Spark
        message = str(exc)
    assert f"file {path}, position {position}" in message, message[-2000:]
    assert "CRC mismatch" in message and "failOnDataLoss" in message

    rows = read(spark, url, subscribe="t", failOnDataLoss="false").select("partition", "offset", "value").collect()
    got = {(r.partition, r.offset): bytes(r.value) for r in rows}
    expected = {(p, i): value_of("t", p, i) for p in (0, 1) for i in range(400) if p or not base <= i < base + 10}
    assert got == expected

    # the warning names the offsets skipped and the damaged bytes of the file
    caplog.set_level(logging.WARNING, logger="pyspark_seglog.source")
    part = SeglogInputPartition(url, {}, "t", 0, 0, 400, "read_committed", False, False)
    assert sum(b.num_rows for b in read_partition(part)) == 390
    assert f"offsets {base}..{base + 9} are unreadable: bytes {position}.." in caplog.text and path in caplog.text
