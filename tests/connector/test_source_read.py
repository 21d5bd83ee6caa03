"""The source's read path and driver-side offset logic on real logs, without Spark (fast).

`read_partition` is what a Spark task runs; the readers' driver methods (initialOffset,
latestOffset, partitions, ...) are called here the way Spark's source runner calls them. The Spark
tests in test_source.py check the same behaviour end to end.
"""
from __future__ import annotations

import os
import pickle

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from logcore.errors import InvalidConfigError, OffsetOutOfRangeError
from logcore.log.log_root import LogRoot
from logcore.log.segment import parse_segment_name
from logcore.records.control import ControlType
from pyspark_seglog.schema import arrow_schema
from pyspark_seglog.partition_reader import SeglogInputPartition, read_partition
from pyspark_seglog.source import SeglogBatchReader, SeglogStreamReader

T0 = 1_700_000_000_000


# ------------------------------------------------------------------------------- helpers
# (test_source.py imports these)

def make_root(path, topics: dict, config: dict | None = None) -> str:
    url = str(path)
    root = LogRoot.open(url, create=True)
    for name, count in topics.items():
        root.create_topic(name, count, config)
    root.close()
    return url


def value_of(topic: str, partition: int, i: int) -> bytes:
    return f"{topic}-{partition}-{i}".encode()


def append(url: str, topic: str, partition: int, start: int, count: int, *, per_batch: int = 10,
           headers=(), storage_options=None, ts0: int = T0) -> None:
    """Append records number start..start+count-1 (value 'topic-p-i', key 'k<i>', ts T0+i) and commit."""
    root = LogRoot.open(url, storage_options=storage_options)
    log = root.log(topic, partition, writer=True)
    for lo in range(start, start + count, per_batch):
        hi = min(lo + per_batch, start + count)
        log.append_records([(f"k{i}".encode() if i % 7 else None, value_of(topic, partition, i),
                             list(headers), ts0 + i) for i in range(lo, hi)])
    log.commit()
    log.close()
    root.close()


def retain_from(url: str, topic: str, partition: int, segment_number: int) -> int:
    """Retention, as Kafka's log cleaner does it: raise the log start offset to a segment base and
    delete the segments below it. Returns the new log start offset."""
    root = LogRoot.open(url)
    log = root.log(topic, partition, writer=True)
    new_start = log.segments[segment_number].base_offset
    doomed = {s.base_offset for s in log.segments[:segment_number]}
    log.log_start_offset = new_start
    log.commit()            # writes the log-start-offset-checkpoint entry
    log.close()
    root.close()
    folder = os.path.join(url, f"{topic}-{partition}")
    for name in os.listdir(folder):
        parsed = parse_segment_name(name)
        if parsed and parsed[0] in doomed:
            os.remove(os.path.join(folder, name))
    return new_start


def part(url, topic, partition, start, until, *, isolation="read_committed", headers=False, fail=True,
         fetch_bytes=8 << 20):
    return SeglogInputPartition(url, {}, topic, partition, start, until, isolation, headers, fail,
                                fetch_bytes)


def rows_of(batches) -> list[dict]:
    return [row for b in batches for row in b.to_pylist()]


def stream_reader(url, **options) -> SeglogStreamReader:
    opts = {"path": url}
    opts.update({k.lower(): str(v) for k, v in options.items()})
    return SeglogStreamReader(opts, None)


# ------------------------------------------------------------------------------- read_partition

def test_read_yields_the_exact_schema_and_values(tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 1, 0, 25, headers=[("h", b"1"), ("n", None)])
    batches = list(read_partition(part(url, "t", 1, 0, 25, headers=True)))
    assert all(b.schema == arrow_schema(True) for b in batches)
    rows = rows_of(batches)
    assert [r["offset"] for r in rows] == list(range(25))
    first, eighth = rows[0], rows[7]
    assert first["key"] is None and first["value"] == b"t-1-0" and first["topic"] == "t"
    assert first["partition"] == 1 and first["timestampType"] == 0
    assert first["timestamp"] == pa.scalar(T0 * 1000, pa.timestamp("us", tz="UTC")).as_py()
    assert eighth["key"] is None and rows[8]["key"] == b"k8"
    assert first["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    plain = list(read_partition(part(url, "t", 1, 0, 25)))
    assert plain[0].schema == arrow_schema(False)


def test_read_bounds_start_and_end_inside_batches_over_many_windows(tmp_path):
    url = make_root(tmp_path / "r", {"t": 1})
    append(url, "t", 0, 0, 500, per_batch=10)
    # kafka.max.partition.fetch.bytes=700: a couple of batches per fetch
    batches = list(read_partition(part(url, "t", 0, 13, 407, fetch_bytes=700)))
    assert len(batches) > 10
    assert [r["offset"] for r in rows_of(batches)] == list(range(13, 407))
    # every batch keeps its own bytes: the task reads each window into one reused buffer
    assert [r["value"] for r in rows_of(batches)] == [b"t-0-%d" % o for o in range(13, 407)]


def test_tasks_reading_at_the_same_time_never_share_a_window(tmp_path):
    """Window and column buffers are kept for the next task of a worker: two reads interleaved
    (and abandoned half-way) each keep their own bytes."""
    url = make_root(tmp_path / "r", {"t": 2})
    for p in (0, 1):
        append(url, "t", p, 0, 300, per_batch=10)
    abandoned = read_partition(part(url, "t", 0, 0, 300, fetch_bytes=2000))
    next(abandoned)
    a = read_partition(part(url, "t", 0, 0, 300, fetch_bytes=2000))
    b = read_partition(part(url, "t", 1, 5, 300, fetch_bytes=2000))
    got = {0: [], 1: []}
    for batch_a, batch_b in zip(a, b):
        got[0].append(batch_a)
        got[1].append(batch_b)
    got[0] += list(a)
    got[1] += list(b)
    abandoned.close()
    assert [r["value"] for r in rows_of(got[0])] == [b"t-0-%d" % o for o in range(300)]
    assert [r["value"] for r in rows_of(got[1])] == [b"t-1-%d" % o for o in range(5, 300)]


def test_read_continues_across_gaps(tmp_path):
    """Aborted and control batches leave gaps in the offsets: the read goes on after them."""
    url = make_root(tmp_path / "r", {"t": 1})
    root = LogRoot.open(url)
    log = root.log("t", 0, writer=True)
    log.append_records([(None, b"a", (), T0)] * 3)                                   # 0..2
    log.append_records([(None, b"x", (), T0)] * 4, producer_id=7, producer_epoch=0,
                       is_transactional=True)                                          # 3..6 aborted
    log.append_control(ControlType.ABORT, producer_id=7, producer_epoch=0)            # 7
    log.append_records([(None, b"b", (), T0)] * 2, producer_id=8, producer_epoch=0,
                       is_transactional=True)                                          # 8..9
    log.append_control(ControlType.COMMIT, producer_id=8, producer_epoch=0)           # 10
    log.append_records([(None, b"c", (), T0)])                                        # 11
    log.commit()
    log.close()
    root.close()
    committed = rows_of(read_partition(part(url, "t", 0, 0, 12)))
    assert [(r["offset"], r["value"]) for r in committed] == [
        (0, b"a"), (1, b"a"), (2, b"a"), (8, b"b"), (9, b"b"), (11, b"c")]
    # starting inside the aborted range still finds the rest
    assert [r["offset"] for r in rows_of(read_partition(part(url, "t", 0, 4, 12)))] == [8, 9, 11]
    everything = rows_of(read_partition(part(url, "t", 0, 0, 12, isolation="read_uncommitted")))
    assert [r["offset"] for r in everything] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 11]


def test_read_data_loss_fails_or_skips_forward(tmp_path):
    url = make_root(tmp_path / "r", {"t": 1}, {"segment.bytes": "1000"})
    append(url, "t", 0, 0, 200)
    start = retain_from(url, "t", 0, 2)
    assert start > 0
    with pytest.raises(OffsetOutOfRangeError) as info:
        list(read_partition(part(url, "t", 0, 5, 200)))
    message = str(info.value)
    assert "t-0" in message and "5" in message and str(start) in message and "failOnDataLoss" in message
    rows = rows_of(read_partition(part(url, "t", 0, 5, 200, fail=False)))
    assert [r["offset"] for r in rows] == list(range(start, 200))


# ------------------------------------------------------------------------------- stream driver

def test_stream_offsets_rate_limit_and_partitions(tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 0, 0, 30)
    append(url, "t", 1, 0, 10)
    reader = stream_reader(url, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger=20)
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"t": {"0": 15, "1": 5}}                 # 20 shared 3:1 by backlog
    assert reader.reportLatestOffset() == {"t": {"0": 30, "1": 10}}
    parts = reader.partitions(start, end)
    assert sorted((p.topic, p.partition, p.start, p.until) for p in parts) == [("t", 0, 0, 15), ("t", 1, 0, 5)]
    assert reader.partitions(end, end) == []
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert end2 == {"t": {"0": 30, "1": 10}}
    # the reader pickles without its open logs, and the copy still reads
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.__dict__["_logs"] is None
    assert sum(b.num_rows for p in parts for b in copy.read(p)) == 20


def test_stream_latest_start_new_partitions_and_topics(tmp_path):
    url = make_root(tmp_path / "r", {"a1": 1})
    append(url, "a1", 0, 0, 5)
    reader = stream_reader(url, subscribePattern="a.*")
    start = reader.initialOffset()
    assert start == {"a1": {"0": 5}}                       # latest by default
    root = LogRoot.open(url)
    root.add_partitions("a1", 2)
    root.create_topic("a2", 1)
    root.create_topic("b", 1)
    root.close()
    append(url, "a1", 1, 0, 3)
    append(url, "a2", 0, 0, 4)
    append(url, "b", 0, 0, 4)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"a1": {"0": 5, "1": 3}, "a2": {"0": 4}}
    ranges = sorted((p.topic, p.partition, p.start, p.until) for p in reader.partitions(start, end))
    assert ranges == [("a1", 1, 0, 3), ("a2", 0, 0, 4)]   # new partitions from earliest


def test_stream_available_now_caps_at_prepare_time(tmp_path):
    url = make_root(tmp_path / "r", {"t": 1})
    append(url, "t", 0, 0, 10)
    reader = stream_reader(url, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger=4)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    append(url, "t", 0, 10, 10)                            # arrives after the trigger started
    seen = []
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        seen.append(end["t"]["0"])
        start = end
    assert seen == [4, 8, 10]


def test_stream_min_offsets_per_trigger_waits_for_data_or_delay(tmp_path):
    url = make_root(tmp_path / "r", {"t": 1})
    append(url, "t", 0, 0, 5)
    reader = stream_reader(url, subscribe="t", startingOffsets="earliest", minOffsetsPerTrigger=8,
                           maxTriggerDelay="1h")
    assert reader.getDefaultReadLimit() == ReadMinRows(8)
    start = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start      # 5 < 8: wait
    append(url, "t", 0, 5, 5)
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == {"t": {"0": 10}}
    quick = stream_reader(url, subscribe="t", startingOffsets='{"t": {"0": 9}}', minOffsetsPerTrigger=8,
                          maxTriggerDelay="0s")
    s = quick.initialOffset()
    assert quick.latestOffset(s, quick.getDefaultReadLimit()) == {"t": {"0": 10}}  # delay passed


def test_stream_read_committed_stops_at_open_transaction(tmp_path):
    url = make_root(tmp_path / "r", {"t": 1})
    root = LogRoot.open(url)
    log = root.log("t", 0, writer=True)
    log.append_records([(None, b"a", (), T0)] * 3)                                   # 0..2
    log.append_records([(None, b"x", (), T0)] * 2, producer_id=5, producer_epoch=0,
                       is_transactional=True)                                          # 3..4 open
    log.append_records([(None, b"b", (), T0)] * 2)                                   # 5..6
    log.commit()
    committed = stream_reader(url, subscribe="t", startingOffsets="earliest")
    uncommitted = stream_reader(url, subscribe="t", startingOffsets="earliest",
                                **{"isolation.level": "read_uncommitted"})
    s1, s2 = committed.initialOffset(), uncommitted.initialOffset()
    assert committed.latestOffset(s1, ReadAllAvailable()) == {"t": {"0": 3}}      # the LSO
    assert uncommitted.latestOffset(s2, ReadAllAvailable()) == {"t": {"0": 7}}    # the HW
    log.append_control(ControlType.COMMIT, producer_id=5, producer_epoch=0)        # 7
    log.commit()
    log.close()
    root.close()
    assert committed.latestOffset(s1, ReadAllAvailable()) == {"t": {"0": 8}}


def test_stream_starting_offsets_json_must_cover_partitions_and_data_loss(tmp_path):
    url = make_root(tmp_path / "r", {"t": 2}, {"segment.bytes": "1000"})
    append(url, "t", 0, 0, 100)
    with pytest.raises(InvalidConfigError, match="startingOffsets gives no value for t-1"):
        stream_reader(url, subscribe="t", startingOffsets='{"t": {"0": 1}}').initialOffset()
    with pytest.raises(InvalidConfigError, match="names u-0"):
        stream_reader(url, subscribe="t", startingOffsets='{"t": {"0": 1, "1": 0}, "u": {"0": 1}}').initialOffset()
    start = retain_from(url, "t", 0, 1)
    with pytest.raises(OffsetOutOfRangeError, match=f"t-0: offsets 1 to {start - 1}"):
        stream_reader(url, subscribe="t", startingOffsets='{"t": {"0": 1, "1": -2}}').initialOffset()
    lenient = stream_reader(url, subscribe="t", startingOffsets='{"t": {"0": 1, "1": -2}}',
                            failOnDataLoss="false")
    assert lenient.initialOffset() == {"t": {"0": start, "1": 0}}


def test_stream_data_loss_between_triggers(tmp_path):
    url = make_root(tmp_path / "r", {"t": 1}, {"segment.bytes": "1000"})
    append(url, "t", 0, 0, 100)
    strict = stream_reader(url, subscribe="t", startingOffsets="earliest")
    lenient = stream_reader(url, subscribe="t", startingOffsets="earliest", failOnDataLoss="false")
    s1, s2 = strict.initialOffset(), lenient.initialOffset()
    new_start = retain_from(url, "t", 0, 2)
    e1 = strict.latestOffset(s1, ReadAllAvailable())
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        strict.partitions(s1, e1)
    e2 = lenient.latestOffset(s2, ReadAllAvailable())
    [p] = lenient.partitions(s2, e2)
    assert (p.start, p.until) == (new_start, 100)          # skipped forward, never rewound


def test_available_now_data_lost_after_its_start_is_found_by_the_task(tmp_path):
    """AvailableNow plans from the views prepareForTriggerAvailableNow read (latestOffset asks
    the store nothing): offsets lost after that are found when the task reads them."""
    url = make_root(tmp_path / "r", {"t": 1}, {"segment.bytes": "1000"})
    append(url, "t", 0, 0, 100)
    strict = stream_reader(url, subscribe="t", startingOffsets="earliest")
    lenient = stream_reader(url, subscribe="t", startingOffsets="earliest", failOnDataLoss="false")
    for reader in (strict, lenient):
        reader.prepareForTriggerAvailableNow()
    s1, s2 = strict.initialOffset(), lenient.initialOffset()
    new_start = retain_from(url, "t", 0, 2)
    append(url, "t", 0, 100, 10)                    # not read: after the query's start
    e1 = strict.latestOffset(s1, ReadAllAvailable())
    assert e1 == {"t": {"0": 100}}
    [p1] = strict.partitions(s1, e1)
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        list(read_partition(p1))
    e2 = lenient.latestOffset(s2, ReadAllAvailable())
    [p2] = lenient.partitions(s2, e2)
    assert [r["offset"] for r in rows_of(read_partition(p2))] == list(range(new_start, 100))


def test_stream_timestamps(tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 0, 0, 50)
    append(url, "t", 1, 0, 20)
    reader = stream_reader(url, subscribe="t", startingTimestamp=T0 + 30)
    with pytest.raises(InvalidConfigError, match="no record of t-1 has a timestamp"):
        reader.initialOffset()
    latest = stream_reader(url, subscribe="t", startingTimestamp=T0 + 30,
                           startingOffsetsByTimestampStrategy="latest")
    assert latest.initialOffset() == {"t": {"0": 30, "1": 20}}
    by = stream_reader(url, subscribe="t", startingOffsetsByTimestamp=f'{{"t": {{"0": {T0 + 7}, "1": {T0}}}}}')
    assert by.initialOffset() == {"t": {"0": 7, "1": 0}}


def test_assign_reads_only_the_assigned_partitions(tmp_path):
    url = make_root(tmp_path / "r", {"t": 3})
    for p in range(3):
        append(url, "t", p, 0, 5)
    reader = stream_reader(url, assign='{"t": [0, 2]}', startingOffsets="earliest")
    assert reader.initialOffset() == {"t": {"0": 0, "2": 0}}


# ------------------------------------------------------------------------------- batch driver

def test_batch_partitions_and_ending_offsets(tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 0, 0, 40)
    append(url, "t", 1, 0, 10)

    def ranges(**options):
        opts = {"path": url, "subscribe": "t"}
        opts.update({k.lower(): str(v) for k, v in options.items()})
        return sorted((p.partition, p.start, p.until) for p in SeglogBatchReader(opts, None).partitions())

    assert ranges() == [(0, 0, 40), (1, 0, 10)]
    assert ranges(endingOffsets='{"t": {"0": 12, "1": -1}}') == [(0, 0, 12), (1, 0, 10)]
    assert ranges(startingOffsets='{"t": {"0": 5, "1": -2}}', endingTimestamp=T0 + 8) == [(0, 5, 8), (1, 0, 8)]
    assert ranges(endingOffsets='{"t": {"0": 999, "1": -1}}') == [(0, 0, 40), (1, 0, 10)]  # capped at the HW
    assert len(ranges(minPartitions=5)) == 5
    assert ranges(maxRecordsPerPartition=15) == [(0, 0, 13), (0, 13, 26), (0, 26, 40), (1, 0, 10)]
    with pytest.raises(InvalidConfigError, match="after the ending offset"):
        ranges(startingOffsets='{"t": {"0": 30, "1": -2}}', endingOffsets='{"t": {"0": 20, "1": -1}}')
