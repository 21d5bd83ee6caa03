"""A topic's compression.type and compression.<codec>.level (Kafka's topic configs of those
names): the library's appends compress with the topic's codec at its level."""
from __future__ import annotations

import pytest

from logcore.log.log_root import LogRoot
from logcore.records.batch import HEADER_SIZE, iter_batches
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


def test_an_altered_level_applies_to_the_next_append_and_another_codec_gets_its_default(root):
    root.create_topic("t", config={"compression.type": "gzip", "compression.gzip.level": "1"})
    log = root.log("t", 0, writer=True)
    log.append_records(RECORDS)
    root.alter_topic_config("t", {"compression.gzip.level": "9"})
    log.reconfigure(root.topic_config("t"))         # as the broker does on AlterConfigs
    log.append_records(RECORDS)
    log.append_records(RECORDS, compression=Compression.ZSTD)     # the caller's codec: its default level
    log.commit()
    got = [(h.compression, s) for h, s in stored_sections(log)]
    assert [c for c, _ in got] == [Compression.GZIP, Compression.GZIP, Compression.ZSTD]
    raws = [decompress(c, s) for c, s in got]
    assert [s for _, s in got] == [compress(Compression.GZIP, raws[0], 1), compress(Compression.GZIP, raws[1], 9),
                                   compress(Compression.ZSTD, raws[2])]
    assert len(got[1][1]) < len(got[0][1])

