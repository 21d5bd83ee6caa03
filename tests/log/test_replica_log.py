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


def _follower_batch(base: int, epoch: int, producer_id: int = 9, sequence: int = 0) -> bytes:
    from logcore.records.batch import build_batch
    return build_batch([(b"k", b"v%d" % base, (), None)], base_offset=base, producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence, partition_leader_epoch=epoch)


def test_truncate_fully_and_start_at_the_leaders_log_start(tmp_path):
    # A follower that ended below the leader's log start (Kafka's truncateFullyAndStartAt).
    root = _root(tmp_path)
    log = root.log("t", 0, writer=True, replica=True)
    log.become_follower(1)
    log.append_as_follower(b"".join(_follower_batch(i, 0, sequence=i) for i in range(20)))
    log.update_high_watermark(20)
    assert not log.truncate_fully_and_start_at(50, expected_end=19)     # not the log it decided on
    assert log.truncate_fully_and_start_at(50, expected_end=20)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)
    assert log.epoch_cache.entries == [] and log.producer_state.producers == {}
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000000050.log"]
    assert not list((tmp_path / "t-0").glob("*.snapshot"))
    log.append_as_follower(_follower_batch(50, 1, sequence=50))        # the leader's next batch
    assert log.epoch_cache.entries == [(1, 50)] and log.log_end_offset == 51
    root.close()
    root = _root(tmp_path)
    again = root.log("t", 0, writer=True, replica=True)
    assert (again.log_start_offset, again.log_end_offset) == (50, 51)
    assert again.epoch_cache.entries == [(1, 50)]
    root.close()


def test_truncate_fully_with_the_remote_tiers_state(tmp_path):
    # KIP-405: start at the leader's local log start with the log start offset, epochs and
    # producer state of the remote segment before it; reopening keeps all of it.
    import pytest
    from logcore.log.producer_entry import ProducerStateEntry
    from logcore.log.producer_snapshot import CorruptSnapshotError, encode_snapshot
    from tests.tiered.tiered_root import tiering_defaults
    root = LogRoot.open(str(tmp_path / "root"), create=True,
                        defaults=tiering_defaults(str(tmp_path / "remote")))
    root.create_topic("t", config={"segment.bytes": "4000", "remote.storage.enable": "true"})
    log = root.log("t", 0, writer=True, replica=True)
    log.become_follower(3)
    log.append_as_follower(b"".join(_follower_batch(i, 0, sequence=i) for i in range(10)))
    snapshot = bytearray(encode_snapshot([ProducerStateEntry(9, 0, last_timestamp=5)]))
    snapshot[-1] ^= 1
    with pytest.raises(CorruptSnapshotError, match="producer snapshot of segment X"):
        log.truncate_fully_and_start_at(80, log_start_offset=20, epochs=[(0, 0), (2, 60)],
                                        producer_snapshot=bytes(snapshot),
                                        snapshot_source="producer snapshot of segment X")
    assert log.log_end_offset == 10 and log.epoch_cache.entries == [(0, 0)]    # unchanged
    snapshot[-1] ^= 1
    assert log.truncate_fully_and_start_at(80, log_start_offset=20, epochs=[(0, 0), (2, 60)],
                                           producer_snapshot=bytes(snapshot))
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (20, 80, 80)
    assert log.epoch_cache.entries == [(0, 20), (2, 60)]
    assert list(log.producer_state.producers) == [9]
    log.append_as_follower(_follower_batch(80, 3, producer_id=9, sequence=80))
    root.close()
    root = LogRoot.open(str(tmp_path / "root"), defaults=tiering_defaults(str(tmp_path / "remote")))
    again = root.log("t", 0, writer=True, replica=True)
    assert (again.log_start_offset, again.local_log_start_offset, again.log_end_offset) == (20, 80, 81)
    assert again.epoch_cache.entries == [(0, 20), (2, 60), (3, 80)]
    assert again.producer_state.producers[9].last_data_offset == 80
    root.close()
