"""Tiering wired end to end: a local log root tiered to a folder and to a real S3 server.

Produce, run the maintenance pass (copy, local retention), then read everything back through
Log.read, `seglog consume` and `seglog tiered --list`; total retention expiring remote segments;
a bad combination of settings naming both."""
from __future__ import annotations

import pytest

from logcore.errors import InvalidConfigError, OffsetOutOfRangeError
from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from logcore.records.batch import iter_batches
from logcore.tiered.metadata import RemoteLogSegmentState
from logcore.tools import cli
from tests.tiered.tiered_root import all_batches, produce, tiering_defaults

TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "16384",
                "local.retention.bytes": "40000", "retention.bytes": "-1"}


def tiered_root(tmp_path, remote, topic_config=None, **rsm) -> tuple[str, LogRoot]:
    url = str(tmp_path / "root")
    root = LogRoot.open(url, create=True, defaults=tiering_defaults(*remote, **rsm))
    root.create_topic("t", config={**TOPIC_CONFIG, **(topic_config or {})})
    return url, root


def consume(capsys, url: str, *extra: str) -> str:
    assert cli.main(["consume", "--root", url, "--topic", "t", "--from-beginning", "--print-offset",
                     "--print-key", *extra]) == 0
    return capsys.readouterr().out


def test_tiered_root_reads_the_same_before_and_after_tiering(tmp_path, remote, capsys):
    url, root = tiered_root(tmp_path, remote, compression="heuristic")
    log = root.log("t", 0, writer=True)
    produce(log, 150, aborted_every=9)
    hw = log.high_watermark
    root.release_log(log)
    reader = LogRoot.open(url, read_only=True).log("t", 0)
    records_before = [(r.offset, r.key, r.value) for r in reader.read_records(0)]
    bytes_before = all_batches(reader, 0)
    consumed_before = consume(capsys, url)
    reader.close()

    summary = MaintenanceService(root).run_once()
    tiering = summary.outcomes[0].tiering
    assert tiering is not None and tiering.error is None and tiering.segments_copied >= 15
    assert summary.segments_deleted >= 12            # local copies past local.retention.bytes

    fresh_root = LogRoot.open(url, read_only=True)
    reader = fresh_root.log("t", 0)
    assert reader.log_start_offset == 0 and reader.high_watermark == hw
    assert reader.local_log_start_offset > hw // 2   # the older part is only remote now
    local_files = fresh_root.storage.list_dir("t-0")
    assert "00000000000000000000.log" not in local_files
    assert [(r.offset, r.key, r.value) for r in reader.read_records(0)] == records_before
    assert all_batches(reader, 0) == bytes_before
    # Reading from the middle of a remote segment, with small windows, crossing into local.
    middle = [(r.offset, r.value) for r in reader.read_records(333)]
    assert middle == [(o, v) for o, _k, v in records_before if o >= 333]
    assert all_batches(reader, 333, max_bytes=100) == all_batches(reader, 333)
    # A read is one remote segment's whole batches, at most max_bytes (the first always whole).
    fetch = reader.read(5, 3000, isolation="read_uncommitted")
    headers = [h for _p, h in iter_batches(fetch.data)]
    assert headers[0].base_offset <= 5 <= headers[0].last_offset and len(fetch.data) <= 3000
    one = reader.read(5, 10, isolation="read_uncommitted")
    assert len([h for _p, h in iter_batches(one.data)]) == 1
    assert consume(capsys, url) == consumed_before
    fresh_root.close()

    assert cli.main(["tiered", "--root", url, "--topic", "t", "--list"]) == 0
    listing = capsys.readouterr().out
    assert listing.count("COPY_SEGMENT_FINISHED") == tiering.segments_copied
    assert f"{tiering.segments_copied} remote segments, {tiering.bytes_copied} bytes" in listing
    assert cli.main(["dump", "--root", url, "--topic", "t", "--remote", "--offset", "5",
                     "--print-data-log"]) == 0
    dumped = capsys.readouterr().out
    assert "Log starting offset: 0" in dumped and "key: k5 " in dumped

    # A second pass copies nothing again.
    again = MaintenanceService(root).run_once().outcomes[0].tiering
    assert again.segments_copied == 0 and again.remote_segments_deleted == 0
    root.close()


def test_total_retention_expires_remote_segments(tmp_path, remote):
    url, root = tiered_root(tmp_path, remote, {"retention.bytes": "120000"})
    log = root.log("t", 0, writer=True)
    produce(log, 120)
    root.release_log(log)
    summary = MaintenanceService(root).run_once()
    tiering = summary.outcomes[0].tiering
    assert tiering.segments_copied > 0 and tiering.remote_segments_deleted > 0
    reader = LogRoot.open(url, read_only=True).log("t", 0)
    start = reader.log_start_offset
    assert 0 < start < reader.local_log_start_offset
    store = root.remote_tier().store("t", root.describe_topic("t").topic_id, 0)
    store.refresh()
    finished = store.list_segments()
    assert finished[0].start_offset == start             # the log start offset is the remote start
    deleted = store.list_segments(RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
    assert len(deleted) == tiering.remote_segments_deleted and deleted[-1].end_offset == start - 1
    total = sum(m.segment_size_in_bytes for m in finished)
    total += sum(s.size() for s in reader.segments if s.base_offset > finished[-1].end_offset)
    # Kafka's size rule: the oldest go while what stays is still at least retention.bytes.
    assert total - finished[0].segment_size_in_bytes < 120000 <= total
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(start - 1)
    assert [r.offset for r in reader.read_records(start)] == list(range(start, reader.high_watermark))
    root.close()


def test_replica_with_other_segment_boundaries_copies_from_the_remote_end(tmp_path):
    # Two replicas of one partition sharing a remote tier (a cluster's old and new leader) whose
    # segments roll at different offsets: the second copies its segment that straddles the
    # remote end from the first offset above it, and the remote segments stay contiguous.
    remote_url = str(tmp_path / "remote")
    first = LogRoot.open(str(tmp_path / "a"), create=True, defaults=tiering_defaults(remote_url))
    info = first.create_topic("t", config=TOPIC_CONFIG)
    second = LogRoot.open(str(tmp_path / "b"), create=True, defaults=tiering_defaults(remote_url))
    second.create_topic("t", config={**TOPIC_CONFIG, "segment.bytes": "11000"}, topic_id=info.topic_id)
    old = first.log("t", 0, writer=True)
    produce(old, 100)
    first.release_log(old)
    assert MaintenanceService(first).run_once().outcomes[0].tiering.segments_copied > 0
    store = first.remote_tier().store("t", info.topic_id, 0)
    highest = store.highest_offset()
    new = second.log("t", 0, writer=True)
    produce(new, 150)
    straddling = [s.base_offset for s in new.segments if s.base_offset <= highest < s.next_offset() - 1]
    assert straddling                                  # the boundaries differ
    hw = new.high_watermark
    second.release_log(new)
    tiering = MaintenanceService(second).run_once().outcomes[0].tiering
    assert tiering.error is None and tiering.segments_copied > 0
    store.refresh()
    finished = store.list_segments()
    assert finished[0].start_offset == 0
    assert all(b.start_offset == a.end_offset + 1 for a, b in zip(finished, finished[1:]))
    assert highest + 1 in {m.start_offset for m in finished}
    reader = LogRoot.open(str(tmp_path / "b"), read_only=True).log("t", 0)
    assert reader.local_log_start_offset > highest + 1      # the tail is read from the remote tier
    expected = [(b"k%d" % o, (b"v%d-" % o).ljust(200, b"x")) for o in range(hw)]
    assert [(r.key, r.value) for r in reader.read_records(0)] == expected
    assert [r.offset for r in reader.read_records(highest + 3)] == list(range(highest + 3, hw))
    reader.close()
    first.close()
    second.close()


def test_bad_combinations_name_both_settings(tmp_path):
    root = LogRoot.open(str(tmp_path / "plain"), create=True)
    with pytest.raises(InvalidConfigError, match="remote.storage.enable.*remote.log.storage.system.enable"):
        root.create_topic("t", config={"remote.storage.enable": "true"})
    tiered = LogRoot.open(str(tmp_path / "tiered"), create=True,
                          defaults=tiering_defaults(str(tmp_path / "remote")))
    with pytest.raises(InvalidConfigError) as err:
        tiered.create_topic("t", config={"remote.storage.enable": "true", "cleanup.policy": "compact"})
    assert str(err.value) == ("Remote log storage only supports topics with cleanup.policy=delete"
                              " (remote.storage.enable=true, cleanup.policy=compact)")
    with pytest.raises(InvalidConfigError, match="rsm.config.storage.url"):
        LogRoot.open(str(tmp_path / "nourl"), create=True,
                     defaults={"remote.log.storage.system.enable": "true"}).remote_tier()
