"""A cluster member's log (`LogRoot.log(..., replica=True)`): the epoch comes from outside, a
commit never moves the HW, and reopening never truncates what the replica holds."""
from __future__ import annotations

from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches


def _root(path):
    root = LogRoot.open(str(path), create=True)
    if "t" not in root.list_topics():
        root.create_topic("t", config={"segment.bytes": "4000"})
    return root


def test_replica_commit_keeps_the_high_watermark_and_reopen_keeps_the_tail(tmp_path):
    root = _root(tmp_path)
    log = root.log("t", 0, writer=True, replica=True)
    assert log.leader_epoch == -1 and log.epoch_cache.latest_epoch is None
    log.become_leader(3)
    for i in range(20):
        log.append_records([(b"k", b"v%d" % i, (), None)])
    log.commit(durable=False)
    assert log.high_watermark == 0 and log.log_end_offset == 20
    assert log.maybe_increment_high_watermark(12)
    log.checkpoint_high_watermark()
    root.close()

    root = _root(tmp_path)
    again = root.log("t", 0, writer=True, replica=True)
    # Nothing above the HW was cut; the epoch is the latest one the log holds.
    assert again.log_end_offset == 20 and again.high_watermark == 12
    assert again.leader_epoch == 3
    data = again.read(0, 1 << 20, isolation="log_end").data
    data = data.read() if hasattr(data, "read") else bytes(data)
    assert [h.partition_leader_epoch for _p, h in iter_batches(data)] == [3] * 20
    again.become_follower(4)
    assert again.leader_epoch == 4 and again.epoch_cache.latest_epoch == 3
    root.close()


def test_single_node_open_still_truncates_to_the_high_watermark(tmp_path):
    root = _root(tmp_path)
    log = root.log("t", 0, writer=True, replica=True)
    log.become_leader(0)
    for i in range(5):
        log.append_records([(None, b"x", (), None)])
    log.maybe_increment_high_watermark(2)
    log.checkpoint_high_watermark()
    root.close()
    # The path-mode writer policy: an uncommitted tail is cut when a writer takes over.
    root = _root(tmp_path)
    writer = root.log("t", 0, writer=True)
    assert writer.log_end_offset == 2 and writer.high_watermark == 2
    root.close()
