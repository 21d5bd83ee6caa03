"""The loader (Kafka's LogLoader): one immutable LoadedLog computed without changing the Log,
applied in one place; what a crash left is finished at a writer's open on every storage kind."""
from __future__ import annotations

import dataclasses

import pytest

from logcore.log.log_loader import LogLoader
from logcore.log.log_root import LogRoot

SEGMENT_BYTES = "2048"
CONFIG = {"segment.bytes": "600", "retention.ms": "-1"}


def recs(n, start=0, ts=1_700_000_000_000):
    return [(f"k{i}".encode(), f"v{i}".encode().ljust(40, b"."), (), ts + i) for i in range(start, start + n)]


def test_the_loader_returns_the_load_and_changes_no_log(tmp_path):
    """LogLoader.load() computes one immutable LoadedLog; the Log applies it, nothing else."""
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic("t", config={"segment.bytes": SEGMENT_BYTES})
    writer = root.log("t", 0, writer=True)
    writer.append_records(recs(30))
    writer.commit()
    reader = root.log("t", 0)
    before = (list(reader.segments), reader.high_watermark, reader.log_start_offset, reader.recovery_point)
    writer.append_records(recs(10, start=30))
    writer.commit()
    writer.append_records(recs(5, start=40))      # not committed: above the HW
    loaded = LogLoader(reader, kafka_clean=False).load()
    assert (loaded.high_watermark, loaded.log_end_offset, loaded.committed_hw) == (40, 45, 40)
    assert [s.base_offset for s in loaded.segments] == [s.base_offset for s in writer.segments]
    assert (list(reader.segments), reader.high_watermark, reader.log_start_offset,
            reader.recovery_point) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.high_watermark = 0
    reader._apply_loaded(loaded)
    assert reader.high_watermark == 40 and reader.segments == list(loaded.segments)
    reader.close()
    writer.close()
    root.close()


def test_deletion_markers_left_by_a_crash_are_finished_at_open(open_root):
    """Retention marked segments deleted (object store: `.log.deleted` markers; local disk:
    renamed files) and the writer went away before the delay passed: the next writer's load
    removes them."""
    root = open_root()
    root.create_topic("t", config={**CONFIG, "file.delete.delay.ms": "600000"})
    log = root.log("t", 0, writer=True)
    for _ in range(3):                  # one 5-record segment per commit
        log.append_records(recs(5, start=log.log_end_offset))
        log.commit()
    assert [s.base_offset for s in log.segments][:3] == [0, 5, 10]
    log.delete_records_before(10)
    files = lambda: root.storage.list_dir("t-0")    # noqa: E731
    assert any(n.endswith(".deleted") for n in files())
    log.close()
    writer = open_root(create=False).log("t", 0, writer=True)
    assert writer.log_start_offset == 10 and writer.segments[0].base_offset == 10
    remaining = files()
    assert not any(n.endswith(".deleted") for n in remaining)
    assert not any(n.startswith((f"{0:020d}", f"{5:020d}")) for n in remaining)
    writer.close()
