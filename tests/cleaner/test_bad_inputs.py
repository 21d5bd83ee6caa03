"""Bad settings and misuse fail with errors that name the setting or the log."""
import math

import pytest

from tests.conftest import StorageTarget
from logcore.cleaner.cleaner import LogCleaner
from logcore.errors import CorruptRecordError, InvalidConfigError, ReadOnlyLogError
from tests.cleaner.helpers import open_root, reader_root, write


@pytest.mark.parametrize("kwargs, name", [
    ({"dedupe_buffer_size": 10}, "log.cleaner.dedupe.buffer.size"),
    ({"io_buffer_size": 0}, "log.cleaner.io.buffer.size"),
    ({"io_max_bytes_per_second": 0}, "log.cleaner.io.max.bytes.per.second"),
    ({"io_max_bytes_per_second": -math.inf}, "log.cleaner.io.max.bytes.per.second"),
    ({"load_factor": 1.5}, "load.factor"),
    ({"backoff_ms": -1}, "log.cleaner.backoff.ms"),
])
def test_bad_settings(kwargs, name):
    with pytest.raises(InvalidConfigError, match=name):
        LogCleaner(**kwargs)


def test_reader_and_non_compacted_logs_are_refused(tmp_path):
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target)
    root.create_topic("plain", 1, {"cleanup.policy": "delete"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy=delete"):
        LogCleaner(dedupe_buffer_size=4096).clean(root.log("plain", 0, writer=True))
    with pytest.raises(ReadOnlyLogError, match="writer"):
        LogCleaner(dedupe_buffer_size=4096).clean(reader_root(target).log("t", 0))
    root.close()


def test_corrupt_segment_is_reported_with_file_and_position(tmp_path):
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target, segment_bytes=600)
    log = root.log("t", 0, writer=True)
    write(log, [(b"k%d" % (i % 3), b"v" * 20) for i in range(60)])
    seg = log.segments[1]
    path = log.storage.local_path(seg.log_path)
    with open(path, "r+b") as f:        # flip a byte inside the first record of the segment
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecordError) as info:
        LogCleaner(dedupe_buffer_size=4096).clean(log, 2_000_000)
    assert seg.log_path.split("/")[-1] in str(info.value)
    assert not [n for n in log.storage.list_dir("t-0") if n.endswith((".cleaned", ".swap"))]
    root.close()


def test_throttle_limits_bytes_per_second(tmp_path):
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target, segment_bytes=2000)
    log = root.log("t", 0, writer=True)
    write(log, [(b"k%d" % (i % 5), b"x" * 100) for i in range(200)])
    stats = LogCleaner(dedupe_buffer_size=4096, io_max_bytes_per_second=100_000, io_buffer_size=1024).clean(
        log, 2_000_000)
    moved = stats.bytes_read + stats.bytes_written
    assert moved > 20_000
    assert stats.duration_s >= moved / 100_000 * 0.8
    root.close()
