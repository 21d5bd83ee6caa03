"""The source over several log dirs, driver and task sides through the DataSourceReader calls
Spark makes (partitions() on the driver, read(partition) in the task), without a cluster:
plain roots hold every partition and name no host, so no replica is local to the task."""
from __future__ import annotations

import pytest

from logcore.errors import ReplicaNotAvailableError
from logcore.log.log_root import LogRoot
from pyspark_seglog.source import SeglogBatchReader


def _root(path, n: int) -> str:
    root = LogRoot.open(str(path), create=True)
    root.create_topic("t", 1)
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k%d" % i, b"v%d" % i, (), 1_700_000_000_000 + i) for i in range(n)])
    log.commit()
    root.close()
    return str(path)


def test_a_task_reads_a_replica_holding_its_range_else_names_what_each_holds(tmp_path):
    short, full = _root(tmp_path / "a", 5), _root(tmp_path / "b", 10)
    reader = SeglogBatchReader({"path": f"{short},{full}", "subscribe": "t"}, None)
    (part,) = reader.partitions()
    # Bounded by the replica that proves the most; the short one (listed first) cannot serve it.
    assert (part.start, part.until) == (0, 10)
    assert [r.url for r in part.replicas] == [short, full]
    rows = [v for batch in reader.read(part) for v in batch.column("value").to_pylist()]
    assert rows == [b"v%d" % i for i in range(10)]
    # The full replica is gone by the time the task runs: no replica holds [0, 10).
    LogRoot.open(full).delete_topic("t")
    with pytest.raises(ReplicaNotAvailableError,
                       match=r"t-0: no replica in the log dirs holds the planned offsets \[0, 10\)"
                             rf" committed: {short} \(unknown broker on an unknown host\) holds \[0, 5\);"
                             rf" {full} .*topic 't' does not exist"):
        list(reader.read(part))


def test_a_partition_in_none_of_the_log_dirs_fails_at_query_start(tmp_path):
    dirs = []
    for node, held in ((1, [0]), (2, [0, 2])):
        root = LogRoot.open(str(tmp_path / f"broker-{node}"), create=True)
        root.record_broker(node, f"10.0.0.{node}", 9092)
        root.create_topic("t", 3, topic_id="AQIDBAUGBwgJCgsMDQ4PEA", hosted=held)
        for p in held:
            log = root.log("t", p, writer=True)
            log.append_records([(b"k", b"v%d" % p, (), 1_700_000_000_000)])
            log.commit()
        root.close()
        dirs.append(str(tmp_path / f"broker-{node}"))
    reader = SeglogBatchReader({"path": ",".join(dirs), "subscribe": "t"}, None)
    with pytest.raises(ReplicaNotAvailableError,
                       match=rf"t-1 has no replica in any of the log dirs {dirs[0]} \(broker 1\),"
                             rf" {dirs[1]} \(broker 2\)"):
        reader.partitions()
    reader = SeglogBatchReader({"path": ",".join(dirs), "assign": '{"t": [0, 2]}'}, None)
    parts = reader.partitions()
    assert [(p.partition, [r.node for r in p.replicas]) for p in parts] == [(0, [1, 2]), (2, [2])]
