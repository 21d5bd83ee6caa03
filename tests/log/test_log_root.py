"""The log root through its public API (LogRoot): topic names, configs, topic lifecycle, a root
that describes itself after a reopen, and folders that are not log roots."""
from __future__ import annotations

import fsspec
import pytest

from logcore.errors import (InvalidConfigError, InvalidTopicError, NotALogRootError,
                            TopicExistsError, TopicNotFoundError)
from logcore.log.checkpoint import OffsetCheckpoint
from logcore.log.log_root import LogRoot
from logcore.log.partition_metadata import PartitionMetadataFile, parse_topic_id
from logcore.log.partition_state import HW_CHECKPOINT, RECOVERY_POINT_CHECKPOINT

# Most root rules do not depend on the storage: check them on local disk and fsspec memory, and
# keep the S3 servers for what talks to the store (reopen, delete, foreign folders).
cheap = pytest.mark.parametrize("root_target", ["local", "memory"], indirect=True)
local_only = pytest.mark.parametrize("root_target", ["local"], indirect=True)


def recs(n, start=0):
    return [(b"k%d" % i, b"v%d" % i, (), 1_700_000_000_000 + i) for i in range(start, start + n)]


def snapshot(target) -> dict[str, bytes]:
    """Every file under the target, with its content (a before/after picture of the root)."""
    fs, path = fsspec.core.url_to_fs(target.url, **target.storage_options)
    fs.invalidate_cache()
    if not fs.exists(path):
        return {}
    files = fs.find(path)
    prefix = path.rstrip("/") + "/"
    return {f[len(prefix):] if f.startswith(prefix) else f: fs.cat_file(f) for f in files}


def write_files(target, files: dict[str, bytes]) -> None:
    fs, path = fsspec.core.url_to_fs(target.url, **target.storage_options)
    for name, data in files.items():
        full = f"{path.rstrip('/')}/{name}"
        parent = full.rsplit("/", 1)[0]
        if target.kind == "local":
            fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(full, data)


def read_all(log):
    return [(r.offset, r.value) for r in log.read_records(0)]


# ---------------------------------------------------------------------------------------------
# topic names and configs

@cheap
@pytest.mark.parametrize("name, reason", [
    ("", "empty"),
    ("a" * 250, "longer than 249"),
    ("..", '"." or ".."'),
    (".", '"." or ".."'),
    ("a/b", "'/'"),
    ("a b", "' '"),
    ("../x", "'/'"),
])
def test_invalid_topic_names_are_refused_and_change_nothing(open_root, root_target, name, reason):
    root = open_root()
    root.create_topic("existing")
    before = snapshot(root_target)
    assert {"seglog-topics.json", "meta.properties", "existing-0/partition.metadata"} <= set(before)
    with pytest.raises(InvalidTopicError) as err:
        root.create_topic(name)
    assert reason in str(err.value)
    assert snapshot(root_target) == before
    assert root.list_topics() == ["existing"]


@cheap
def test_unknown_config_suggests_the_closest_name(open_root, root_target):
    root = open_root()
    before = snapshot(root_target)
    with pytest.raises(InvalidConfigError) as err:
        root.create_topic("t", config={"segment.byte": "1000"})
    message = str(err.value)
    assert "'segment.byte'" in message and "did you mean 'segment.bytes'" in message
    with pytest.raises(InvalidConfigError, match="did you mean 'retention.ms'"):
        root.create_topic("t", config={"retension.ms": "1000"})
    assert snapshot(root_target) == before
    assert root.list_topics() == []


@cheap
@pytest.mark.parametrize("name, value, allowed", [
    ("segment.bytes", "10", "at least 14"),
    ("cleanup.policy", "foo", "delete"),
    ("retention.ms", "abc", "whole number"),
])
def test_bad_config_values_name_option_and_value(open_root, root_target, name, value, allowed):
    root = open_root()
    before = snapshot(root_target)
    with pytest.raises(InvalidConfigError) as err:
        root.create_topic("t", config={name: value})
    message = str(err.value)
    assert name in message and repr(value) in message and allowed in message
    assert snapshot(root_target) == before
    assert root.list_topics() == []


@cheap
def test_cross_field_rule_names_both_settings(open_root, root_target):
    root = open_root()
    before = snapshot(root_target)
    with pytest.raises(InvalidConfigError) as err:
        root.create_topic("t", config={"remote.storage.enable": "true", "cleanup.policy": "compact"})
    message = str(err.value)
    assert "remote.storage.enable" in message and "cleanup.policy" in message
    assert snapshot(root_target) == before
    # Compaction alone is fine; tiering alone needs a root that enables tiered storage.
    with pytest.raises(InvalidConfigError) as err:
        root.create_topic("a", config={"remote.storage.enable": "true"})
    assert "remote.storage.enable" in str(err.value)
    assert "remote.log.storage.system.enable" in str(err.value)
    root.create_topic("b", config={"cleanup.policy": "compact"})
    assert root.list_topics() == ["b"]


@cheap
def test_creating_an_existing_topic_fails_and_keeps_the_first(open_root):
    root = open_root()
    first = root.create_topic("t", partitions=2, config={"retention.ms": "1000"})
    with pytest.raises(TopicExistsError, match="'t' already exists"):
        root.create_topic("t", partitions=5)
    info = root.describe_topic("t")
    assert (info.topic_id, info.partitions, info.config) == (first.topic_id, 2, {"retention.ms": "1000"})


# ---------------------------------------------------------------------------------------------
# topic lifecycle

@pytest.mark.parametrize("root_target", ["local", "memory", pytest.param("moto", marks=pytest.mark.s3)],
                         indirect=True)
def test_add_partitions_grows_and_never_shrinks(open_root):
    root = open_root()
    created = root.create_topic("t", partitions=2)
    for p in range(2):
        log = root.log("t", p, writer=True)
        log.append_records(recs(3, start=10 * p))
        log.commit()
        log.close()
    grown = root.add_partitions("t", 4)
    assert (grown.partitions, grown.topic_id) == (4, created.topic_id)
    for p in (2, 3):
        log = root.log("t", p, writer=True)
        assert log.log_end_offset == 0
        log.append_records(recs(2, start=100 * p))
        log.commit()
        log.close()
    reader = open_root(create=False)
    assert reader.describe_topic("t").partitions == 4
    assert read_all(reader.log("t", 0)) == [(i, b"v%d" % i) for i in range(3)]
    assert read_all(reader.log("t", 1)) == [(i, b"v%d" % (10 + i)) for i in range(3)]
    assert read_all(reader.log("t", 3)) == [(0, b"v300"), (1, b"v301")]
    for total in (4, 3, 1):
        with pytest.raises(InvalidConfigError, match="can only grow"):
            root.add_partitions("t", total)
    assert root.describe_topic("t").partitions == 4
    with pytest.raises(TopicNotFoundError):
        root.log("t", 4)
    with pytest.raises(TopicNotFoundError):
        root.add_partitions("missing", 3)


@local_only
def test_delete_topic_removes_folders_and_checkpoint_entries(open_root, root_target):
    root = open_root()
    root.create_topic("gone", partitions=2)
    root.create_topic("kept")
    for topic, p in (("gone", 0), ("gone", 1), ("kept", 0)):
        log = root.log(topic, p, writer=True)
        log.append_records(recs(4))
        log.commit()
        log.close()
    storage = root.storage
    hw = OffsetCheckpoint(storage, HW_CHECKPOINT)
    rp = OffsetCheckpoint(storage, RECOVERY_POINT_CHECKPOINT)
    assert hw.read() == {("gone", 0): 4, ("gone", 1): 4, ("kept", 0): 4}
    assert ("gone", 0) in rp.read()
    old_id = root.describe_topic("gone").topic_id

    root.delete_topic("gone")
    names = storage.list_dir("")
    assert "gone-0" not in names and "gone-1" not in names and "kept-0" in names
    assert hw.read() == {("kept", 0): 4}
    assert set(rp.read()) == {("kept", 0)}
    assert root.list_topics() == ["kept"]
    with pytest.raises(TopicNotFoundError):
        root.log("gone", 0)
    with pytest.raises(TopicNotFoundError):
        root.delete_topic("gone")

    # Re-created, the topic starts empty with a new id; the other topic is untouched.
    again = root.create_topic("gone")
    assert again.topic_id != old_id and again.partitions == 1
    log = root.log("gone", 0, writer=True)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert read_all(log) == []
    log.close()
    assert read_all(root.log("kept", 0)) == [(i, b"v%d" % i) for i in range(4)]


@pytest.mark.parametrize("root_target", ["memory", pytest.param("moto", marks=pytest.mark.s3)],
                         indirect=True)
def test_delete_topic_on_object_store(open_root, root_target):
    root = open_root()
    root.create_topic("gone")
    root.create_topic("kept")
    for topic in ("gone", "kept"):
        log = root.log(topic, 0, writer=True)
        log.append_records(recs(4))
        log.commit()
        log.close()
    root.delete_topic("gone")
    assert not any(name.startswith("gone-0/") for name in snapshot(root_target))
    root.create_topic("gone")
    assert read_all(root.log("gone", 0)) == []
    log = root.log("gone", 0, writer=True)
    assert log.log_end_offset == 0
    log.close()
    assert read_all(open_root(create=False).log("kept", 0)) == [(i, b"v%d" % i) for i in range(4)]


# ---------------------------------------------------------------------------------------------
# a root describes itself

def test_root_is_self_describing_after_reopen(open_root):
    root = open_root(defaults={"log.retention.hours": "1", "segment.bytes": "5000"})
    made = {
        "plain": root.create_topic("plain"),
        "wide": root.create_topic("wide", partitions=3, config={"cleanup.policy": "compact,delete",
                                                                 "retention.ms": "12345"}),
        "big": root.create_topic("big", config={"segment.bytes": "100000", "flush.messages": "7"}),
    }
    root.close()

    again = open_root(create=False)          # no defaults given: they come from the root
    assert again.list_topics() == ["big", "plain", "wide"]
    for name, info in made.items():
        assert again.describe_topic(name) == info
    plain = again.topic_config("plain")
    assert plain.retention_ms == 3_600_000 and plain.segment_bytes == 5000
    assert plain.cleanup_policy == ("delete",)
    wide = again.topic_config("wide")
    assert wide.cleanup_policy == ("compact", "delete") and wide.compact and wide.delete
    assert wide.retention_ms == 12345 and isinstance(wide.retention_ms, int)
    assert wide.segment_bytes == 5000
    big = again.topic_config("big")
    assert (big.segment_bytes, big.flush_messages, big.retention_ms) == (100000, 7, 3_600_000)
    # The logs get the same resolved config.
    assert again.log("wide", 2).config.retention_ms == 12345
    with pytest.raises(TopicNotFoundError):
        again.describe_topic("nope")


@cheap
def test_root_defaults_apply_to_topics_without_overrides(open_root):
    root = open_root(defaults={"log.segment.bytes": "2000", "log.cleanup.policy": "compact"})
    root.create_topic("default")
    root.create_topic("own", config={"segment.bytes": "3000", "cleanup.policy": "delete"})
    assert root.topic_config("default").segment_bytes == 2000
    assert root.topic_config("default").compact
    assert root.topic_config("own").segment_bytes == 3000
    assert not root.topic_config("own").compact
    # The defaults drive the log: 2000-byte segments roll.
    log = root.log("default", 0, writer=True)
    for i in range(30):
        log.append_records([(b"k%d" % i, b"x" * 100, (), 1_700_000_000_000)])
    assert len(log.segments) > 1
    assert all(seg.size() <= 2000 for seg in log.segments)
    log.close()
    reopened = open_root(create=False)
    assert reopened.topic_config("default").segment_bytes == 2000


@pytest.mark.parametrize("root_target", ["local", "memory", pytest.param("moto", marks=pytest.mark.s3)],
                         indirect=True)
def test_partition_metadata_and_meta_properties(open_root, root_target):
    root = open_root()
    info = root.create_topic("t", partitions=3)
    root.add_partitions("t", 4)
    storage = root.storage
    for p in range(4):
        meta = PartitionMetadataFile(storage, storage.join(f"t-{p}", "partition.metadata")).read()
        assert meta is not None and meta.topic_id == parse_topic_id(info.topic_id)
        text = storage.read(storage.join(f"t-{p}", "partition.metadata")).decode()
        assert text.splitlines() == ["version: 0", f"topic_id: {info.topic_id}"]
    props = storage.read("meta.properties").decode()
    assert "version=1" in props.splitlines() and any(
        line.startswith("cluster.id=") and len(line) > len("cluster.id=") for line in props.splitlines())


# ---------------------------------------------------------------------------------------------
# folders that are not log roots

FOREIGN = {"notes.txt": b"hello", "data/part-0000.parquet": b"PAR1....PAR1", "README": b"x" * 100}


@pytest.mark.parametrize("root_target", ["local", "memory", pytest.param("moto", marks=pytest.mark.s3)],
                         indirect=True)
def test_foreign_folder_is_not_a_log_root_and_is_never_written(root_target):
    write_files(root_target, FOREIGN)
    before = snapshot(root_target)
    assert set(before) == set(FOREIGN)
    with pytest.raises(NotALogRootError, match="not a log root"):
        LogRoot.open(root_target.url, storage_options=root_target.storage_options)
    assert snapshot(root_target) == before
    with pytest.raises(NotALogRootError, match="not empty"):
        LogRoot.open(root_target.url, storage_options=root_target.storage_options, create=True)
    assert snapshot(root_target) == before
    with pytest.raises(NotALogRootError):
        LogRoot.open(root_target.url, storage_options=root_target.storage_options, read_only=True)
    assert snapshot(root_target) == before


@cheap
def test_missing_path_without_create_is_not_a_log_root(root_target):
    missing = root_target.url.rstrip("/") + "/does/not/exist"
    with pytest.raises(NotALogRootError, match="not a log root"):
        LogRoot.open(missing, storage_options=root_target.storage_options)
    assert snapshot(root_target) == {}
    fs, path = fsspec.core.url_to_fs(missing, **root_target.storage_options)
    assert not fs.exists(path)
    # create=True makes it.
    root = LogRoot.open(missing, storage_options=root_target.storage_options, create=True)
    assert root.list_topics() == []
    assert {"seglog-topics.json", "meta.properties"} <= set(root.storage.list_dir(""))


# ------------------------------------------------------------------ a cluster member's log dir

def test_a_cluster_members_log_dir_records_the_replicas_it_holds(tmp_path, capsys):
    """Only hosted partitions get a folder; reading any other one (LogRoot.log, `seglog
    consume`, `seglog topics --describe`) names the partition, the log dir and its broker,
    with nothing else to ask. A root without the record (a single broker) holds everything."""
    from logcore.errors import ReplicaNotAvailableError
    from logcore.tools.cli import main
    path = tmp_path / "broker-2"
    root = LogRoot.open(str(path), create=True)
    root.record_broker(2, "10.0.0.2", 9092)
    info = root.create_topic("t", 3, topic_id=None, hosted=())
    assert info.hosted == ()
    assert not any((path / f"t-{p}").exists() for p in range(3))
    assert root.set_hosted("t", add=[1]) == (1,)
    assert (path / "t-1" / "partition.metadata").exists() and not (path / "t-0").exists()
    w = root.log("t", 1, writer=True)
    w.append_records(recs(5))
    w.commit()
    root.release_log(w)
    root.close()

    ro = LogRoot.open(str(path), read_only=True)
    assert ro.describe_topic("t").hosted == (1,)
    assert ro.broker_record() == {"node_id": 2, "host": "10.0.0.2", "port": 9092}
    assert ro.log("t", 1).high_watermark == 5
    with pytest.raises(ReplicaNotAvailableError,
                       match=r"t-0 has no replica in .*broker-2: that log dir is broker 2's, which holds"
                             r" replicas of partitions \[1\] of t \(seglog-topics.json\)"):
        ro.log("t", 0)
    ro.close()

    code = main(["consume", "--root", str(path), "--topic", "t", "--from-beginning"])
    err = capsys.readouterr().err
    assert code == 1 and "t-0 has no replica in" in err and "broker 2's" in err
    assert main(["consume", "--root", str(path), "--topic", "t", "--partition", "1",
                 "--from-beginning"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"v{i}" for i in range(5)]
    assert main(["topics", "--root", str(path), "--describe", "--topic", "t"]) == 0
    out = capsys.readouterr().out
    assert "Partition: 0\tReplica: none in this log dir" in out and "Partition: 1\tLogStartOffset: 0" in out

    # Dropping the replica keeps its files, but readers are told it is not held here.
    rw = LogRoot.open(str(path))
    assert rw.set_hosted("t", remove=[1]) == ()
    with pytest.raises(ReplicaNotAvailableError, match=r"t-1 has no replica .* partitions \[none\]"):
        rw.log("t", 1)
    assert (path / "t-1").exists()
    # A root without the record holds every partition, as before.
    rw.create_topic("plain", 2)
    assert rw.describe_topic("plain").hosted is None
    assert rw.log("plain", 1).high_watermark == 0
    rw.close()
