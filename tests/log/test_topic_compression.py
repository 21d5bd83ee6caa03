"""A topic's compression.type and compression.<codec>.level (Kafka's topic configs of those
names): the library's appends compress with the topic's codec at its level (a caller's own codec
gives way to it), and a client's batch (the broker's append) in another codec is stored
recompressed into the topic's."""
from __future__ import annotations

import pytest

from logcore.errors import RecordTooLargeError
from logcore.log.log_root import LogRoot
from logcore.records.batch import HEADER_SIZE, build_batch, iter_batches, parse_header
from logcore.records.compression import DEFAULT_LEVELS, Compression, codec_of, compress, decompress

RECORDS = [(b"k%d" % i, b'{"user":%d,"event":"click","page":"/item/%d","n":"%s"}' % (i, i % 97, b"x" * (i % 13)),
            (), 1_700_000_000_000 + i) for i in range(3000)]


def stored_sections(log) -> list[tuple]:
    """(header, compressed records section) of each batch of the log."""
    data = bytes(log.read(0, 1 << 24).data)
    return [(h, data[pos + HEADER_SIZE:pos + h.size]) for pos, h in iter_batches(data)]


@pytest.fixture
def root(tmp_path):
    r = LogRoot.open(str(tmp_path / "root"), create=True)
    yield r
    r.close()


@pytest.mark.parametrize("codec, low, high", [("gzip", 1, 9), ("zstd", 1, 19), ("lz4", 9, 12)])
def test_appends_compress_at_the_topic_level(root, codec, low, high):
    sizes = {}
    for level in (low, high):
        topic = f"t{level}"
        root.create_topic(topic, config={"compression.type": codec, f"compression.{codec}.level": str(level)})
        log = root.log(topic, 0, writer=True)
        log.append_records(RECORDS)
        log.commit()
        [(header, section)] = stored_sections(log)
        assert header.compression == codec_of(codec)
        # exactly what the codec makes at that level (and, at another level, not its default)
        raw = decompress(header.compression, section)
        assert section == compress(header.compression, raw, level)
        if level != DEFAULT_LEVELS[header.compression]:
            assert section != compress(header.compression, raw)
        assert [r.value for r in log.read_records(0)] == [r[1] for r in RECORDS]
        sizes[level] = len(section)
    assert sizes[high] < sizes[low]


def test_an_altered_level_applies_to_the_next_append_and_a_callers_codec_gives_way(root):
    root.create_topic("t", config={"compression.type": "gzip", "compression.gzip.level": "1"})
    log = root.log("t", 0, writer=True)
    log.append_records(RECORDS)
    root.alter_topic_config("t", {"compression.gzip.level": "9"})
    log.reconfigure(root.topic_config("t"))         # as the broker does on AlterConfigs
    log.append_records(RECORDS)
    # the caller's own codec: stored in the topic's, as Kafka's broker stores a produced batch
    log.append_records(RECORDS, compression=Compression.ZSTD)
    log.commit()
    got = [(h.compression, s) for h, s in stored_sections(log)]
    assert [c for c, _ in got] == [Compression.GZIP] * 3
    raws = [decompress(c, s) for c, s in got]
    assert [s for _, s in got] == [compress(Compression.GZIP, raws[0], 1), compress(Compression.GZIP, raws[1], 9),
                                   compress(Compression.GZIP, raws[2], 9)]
    assert len(got[1][1]) < len(got[0][1])


def test_a_producer_topic_keeps_the_callers_codec_at_its_default_level(root):
    root.create_topic("t", config={"compression.type": "producer", "compression.zstd.level": "19"})
    log = root.log("t", 0, writer=True)
    log.append_records(RECORDS, compression=Compression.ZSTD)
    log.append_records(RECORDS)
    log.commit()
    got = [(h.compression, s) for h, s in stored_sections(log)]
    assert [c for c, _ in got] == [Compression.ZSTD, Compression.NONE]
    assert got[0][1] == compress(Compression.ZSTD, decompress(Compression.ZSTD, got[0][1]))


def test_a_client_batch_in_another_codec_is_stored_in_the_topics_codec_at_its_level(root):
    """Kafka's broker: a produced batch is recompressed into the topic's compression.type, every
    other field kept (a retried idempotent batch is still found a duplicate)."""
    root.create_topic("t", config={"compression.type": "zstd", "compression.zstd.level": "19"})
    log = root.log("t", 0, writer=True)
    batch = build_batch(RECORDS, compression=Compression.GZIP, producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append_batch(batch)
    again = log.append_batch(batch)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    log.commit()
    [(header, section)] = stored_sections(log)
    produced = parse_header(batch)
    assert header.compression == Compression.ZSTD
    assert section == compress(Compression.ZSTD, decompress(Compression.ZSTD, section), 19)
    assert ((header.producer_id, header.producer_epoch, header.base_sequence, header.records_count,
             header.base_timestamp, header.max_timestamp)
            == (7, 0, 0, len(RECORDS), produced.base_timestamp, produced.max_timestamp))
    assert [(r.key, r.value, r.timestamp) for r in log.read_records(0)] == [(k, v, t) for k, v, _, t in RECORDS]


def test_uncompressed_inflates_a_client_batch_within_max_message_bytes(root):
    root.create_topic("t", config={"compression.type": "uncompressed", "max.message.bytes": "20000"})
    log = root.log("t", 0, writer=True)
    small = build_batch(RECORDS[:50], compression=Compression.LZ4)
    log.append_batch(small)
    large = build_batch([(b"k", b"x" * 1000, (), 1_700_000_000_000)] * 100, compression=Compression.GZIP)
    assert len(large) < 20000
    with pytest.raises(RecordTooLargeError, match="compression.type=uncompressed exceeds max.message.bytes=20000"):
        log.append_batch(large)
    log.commit()
    assert [h.compression for h, _ in stored_sections(log)] == [Compression.NONE]
    assert log.log_end_offset == 50


def test_a_producer_topic_stores_client_batches_as_produced(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    batch = build_batch(RECORDS[:100], compression=Compression.SNAPPY)
    log.append_batch(batch)
    log.commit()
    assert bytes(log.read(0).data)[HEADER_SIZE:] == batch[HEADER_SIZE:]
