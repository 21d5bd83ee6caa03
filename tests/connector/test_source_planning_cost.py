"""What the source's planning on the driver costs, found by bench_spark_s3.py's profile:

- a root that no broker serves is planned and read without importing the Kafka protocol client
  (it and the schema types it brings, which register with hypothesis when that is installed,
  took over a second in every streaming query's planning process). Checked in a fresh
  interpreter, since this test session imports it anyway;
- planning reads the log's tail, not every batch header: a plain open replays the producer
  state from the whole log (on S3, a ranged GET per 64 KiB: 1,800 of the 2,000 requests of a
  1M-record query).
"""
from __future__ import annotations

import subprocess
import sys

from logcore.log.log_root import LogRoot
from logcore.storage.objectstore import ObjectStorage
from pyspark_seglog.source import SeglogStreamReader

from broker_process import subprocess_env

SCRIPT = """
import sys
from logcore.log.log_root import LogRoot
from pyspark_seglog.partition_reader import read_partition
from pyspark_seglog.source import SeglogStreamReader

root = sys.argv[1]
r = LogRoot.open(root, create=True)
r.create_topic("t", 2)
log = r.log("t", 0, writer=True)
log.append_records([(b"k", b"v", (), None)] * 3)
log.commit()
log.close()
r.close()
reader = SeglogStreamReader({"path": root, "subscribe": "t", "startingoffsets": "earliest"}, None)
reader.prepareForTriggerAvailableNow()
start = reader.initialOffset()
end = reader.latestOffset(start, reader.getDefaultReadLimit())
rows = sum(b.num_rows for p in reader.partitions(start, end) for b in read_partition(p))
loaded = sorted(m for m in sys.modules if m == "kio" or m.startswith(("kio.", "logcore.wire.client")))
print(rows, ",".join(loaded))
"""


def test_a_root_no_broker_serves_is_planned_and_read_without_the_protocol_client(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "root")], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows, _, loaded = done.stdout.strip().partition(" ")
    assert rows == "3"
    assert loaded == "", f"imported while planning and reading: {loaded}"


def test_planning_an_object_store_root_reads_the_log_tail_only(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}/root"
    with LogRoot.open(url, create=True) as root:
        root.create_topic("t", 2)
        for p in range(2):
            log = root.log("t", p, writer=True)
            for i in range(200):                    # 200 batches of 10 records
                log.append_records([(b"k%d" % i, b"v" * 100, (), None)] * 10)
            log.commit()
            log.close()
        size = root.storage.size("t-0/00000000000000000000.log")
    read = []
    real_read = ObjectStorage.read

    def counting_read(self, path, start=0, end=None):
        data = real_read(self, path, start, end)
        if path.endswith(".log"):
            read.append(len(data))
        return data

    monkeypatch.setattr(ObjectStorage, "read", counting_read)
    reader = SeglogStreamReader({"path": url, "subscribe": "t", "startingoffsets": "earliest"}, None)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    parts = reader.partitions(start, end)
    assert end == {"t": {"0": 2000, "1": 2000}} and len(parts) == 2
    # the last batch of each partition (its LEO): a few KiB of the two logs
    assert sum(read) < size / 4, f"planning read {sum(read)} bytes of .log objects ({len(read)} reads)"
    reader.stop()


def _counting(monkeypatch):
    from collections import Counter
    from fsspec.implementations.memory import MemoryFileSystem
    counts: Counter = Counter()
    for name in ("ls", "info", "exists", "cat_file"):
        real = getattr(MemoryFileSystem, name)

        def counting(self, *args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(MemoryFileSystem, name, counting)
    return counts


def _stream_root(url: str, records: int, new: bool = False) -> None:
    with LogRoot.open(url, create=True) as root:
        if new:
            root.create_topic("t", 2)
        for p in range(2):
            log = root.log("t", p, writer=True)
            log.append_records([(b"k", b"v", (), None)] * records)
            log.commit()
            log.close()


def test_initial_offset_resolves_from_the_view_available_now_just_read(tmp_path, monkeypatch):
    """Spark calls prepareForTriggerAvailableNow and then initialOffset at a query's start: the
    partitions' views are read once for both, and latestOffset plans from them too (AvailableNow
    reads up to what was there then; offsets lost since are found by the task). Without
    AvailableNow initialOffset reads them, and latestOffset reads them again (data appended or
    lost since is found while planning)."""
    counts = _counting(monkeypatch)
    for available_now in (True, False):
        url = f"memory://{tmp_path.name}-{available_now}/root"
        _stream_root(url, 3, new=True)
        reader = SeglogStreamReader({"path": url, "subscribe": "t", "startingoffsets": "earliest"}, None)
        if available_now:
            reader.prepareForTriggerAvailableNow()
        counts.clear()
        start = reader.initialOffset()
        if available_now:
            assert sum(counts.values()) == 0, dict(counts)       # not even the topics file
        else:
            assert counts["ls"] >= 2, "initialOffset did not look at the partitions"
        _stream_root(url, 2)
        counts.clear()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if available_now:
            assert sum(counts.values()) == 0, f"latestOffset asked the store: {dict(counts)}"
        else:
            assert counts["ls"] >= 2, "latestOffset did not look at the partitions again"
        # AvailableNow reads up to what was there when the query started
        assert sum(end["t"].values()) == (6 if available_now else 10)
        reader.stop()


def test_initial_offset_is_resolved_once_per_query(tmp_path, monkeypatch):
    """pyspark calls initialOffset twice at a fresh query's start, the second time inside the
    first trigger: the starting offsets are resolved once (as Spark's Kafka source resolves
    them once per query), so the second call asks the store nothing and gives the same offsets
    even when the log moved in between (startingOffsets=latest)."""
    counts = _counting(monkeypatch)
    url = f"memory://{tmp_path.name}/root"
    _stream_root(url, 3, new=True)
    reader = SeglogStreamReader({"path": url, "subscribe": "t"}, None)     # latest by default
    first = reader.initialOffset()
    assert first == {"t": {"0": 3, "1": 3}}
    _stream_root(url, 2)
    counts.clear()
    second = reader.initialOffset()
    assert second == first and sum(counts.values()) == 0, dict(counts)
    second["t"]["0"] = 0                # the caller's copy: the reader's own stays as resolved
    assert reader.initialOffset() == first
    # the next trigger still sees what was appended since
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) == {"t": {"0": 5, "1": 5}}
    reader.stop()
