"""The tiered-storage walkthrough on a 3-broker cluster with TopicBasedRemoteLogMetadataManager
(issue #29): a topic at RF=3 with remote storage, `__remote_log_metadata` created by the brokers at
RF=3, the leader killed while it tiers. The new leader continues from the metadata the topic
holds: nothing copied twice (the bucket's segment folders are the finished segments the metadata
lists, contiguous and never overlapping), nothing lost (every record read back from offset 0);
Kafka's own RemoteLogMetadataFormatter reads the topic's records, and the object-store copy the
Spark source reads lists the same finished segments.

ZooKeeper from the reference jars, three `seglog broker` processes, a local folder as the bucket.
About 70 s on a loaded 2-core machine: `-m soak` (skipped otherwise).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))

from kafka_reference import KafkaUnavailable, resolve_jars  # noqa: E402
from seglog_cluster import SeglogCluster  # noqa: E402
from zookeeper_reference import running_zookeeper  # noqa: E402

from tests.tiered.helpers import metadata_topic_props  # noqa: E402
from logcore.tiered.metadata import RemoteLogSegmentState as S, TopicIdPartition  # noqa: E402
from logcore.tiered.metadata_records import (TOPIC as RLMM_TOPIC, SegmentUpdate, decode,  # noqa: E402
                                             metadata_partition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore  # noqa: E402
from logcore.tiered.segment_states import RemoteSegmentStates  # noqa: E402

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

TOPIC = "tieredTopic"
RLMM_PARTITIONS = 5
SEGMENT = 8192


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    pytest.importorskip("kazoo", reason="kazoo is not installed")
    with running_zookeeper(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


def _values(start: int, end: int) -> list[bytes]:
    return [b"%06d-" % i + b"v" * 500 for i in range(start, end)]


def _produce(cluster, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "batch.num.messages": 8, "message.timeout.ms": 60000,
                     "topic.metadata.refresh.interval.ms": 1000})
    failed = []
    for v in values:
        p.produce(TOPIC, value=v, partition=0,
                  on_delivery=lambda err, _m: failed.append(err) if err is not None else None)
        p.poll(0)
    assert p.flush(70) == 0 and not failed, failed


def _mirror(remote: Path, states=S.COPY_SEGMENT_FINISHED):
    """The object-store copy of the metadata (what the Spark source reads without brokers)."""
    return RemoteLogMetadataStore.open(str(remote), TOPIC, 0).list_segments(states)


def _topic_states(cluster, topic_id) -> RemoteSegmentStates:
    """The partition's remote segments replayed from __remote_log_metadata as a consumer reads it."""
    tip = TopicIdPartition(topic_id, TOPIC, 0)
    records = cluster.read_partition(RLMM_TOPIC, metadata_partition(tip, RLMM_PARTITIONS))
    states = RemoteSegmentStates(tip)
    for _offset, _key, value in records:
        event = decode(value)
        if isinstance(event, SegmentUpdate):
            if event.segment_id.topic_id_partition != tip:
                continue
            new = states.get(event.segment_id).with_update(
                event.state, event_timestamp_ms=event.event_timestamp_ms,
                custom_metadata=event.custom_metadata, broker_id=event.broker_id)
            states.apply(new, is_add=False)
        elif getattr(event, "topic_id_partition", None) == tip and hasattr(event, "start_offset"):
            states.apply(event, is_add=True)
    return states


def _contiguous(segments) -> bool:
    return bool(segments) and segments[0].start_offset == 0 and all(
        b.start_offset == a.end_offset + 1 for a, b in zip(segments, segments[1:]))


def _show(segments) -> list:
    return [(m.start_offset, m.end_offset, m.state.name, m.broker_id) for m in segments]


@pytest.mark.soak
def test_leader_killed_while_tiering_with_the_metadata_topic(tmp_path, zookeeper):
    remote = tmp_path / "bucket"
    props = metadata_topic_props(remote, RLMM_PARTITIONS)
    with SeglogCluster.running(tmp_path, zookeeper.connect_string, size=3, props=props) as cluster:
        from confluent_kafka.admin import NewTopic
        config = {"segment.bytes": str(SEGMENT), "remote.storage.enable": "true",
                  "local.retention.bytes": str(SEGMENT)}
        fs = cluster.admin().create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                                     config=config)], request_timeout=30)
        fs[TOPIC].result(30)
        cluster.wait_for(lambda: cluster.leader_of(TOPIC) == 1 and len(cluster.metadata(TOPIC)[0][2]) == 3,
                         30, "leader 1 and a full ISR")
        first = 400
        _produce(cluster, _values(0, first))
        cluster.wait_for(lambda: len(_mirror(remote)) >= 3, 30, "broker 1 copying segments")
        # The metadata topic: created by the brokers with the rlmm.config settings.
        meta = cluster.metadata(RLMM_TOPIC)
        assert len(meta) == RLMM_PARTITIONS and all(len(replicas) == 3 for _l, replicas, _isr in meta.values())

        # Kill the leader while it tiers: more segments wait to be copied.
        total = 800
        _produce(cluster, _values(first, total))
        cluster.brokers[1].kill()
        cluster.wait_for(lambda: cluster.leader_of(TOPIC) in (2, 3), 30, "a new leader")
        new_leader = cluster.leader_of(TOPIC)
        more = 1100
        _produce(cluster, _values(total, more))
        cluster.wait_for(lambda: any(m.broker_id == new_leader for m in _mirror(remote))
                         and _mirror(remote)[-1].end_offset >= total, 60, f"broker {new_leader} copying")

        # Nothing lost: every record from offset 0 (the old part from the remote tier).
        assert [(o, v) for o, _k, v in cluster.read_partition(TOPIC)] == list(enumerate(_values(0, more)))

        # The topic and its copy agree, and the new leader continued where broker 1 stopped.
        topic_id = RemoteLogMetadataStore.open(str(remote), TOPIC, 0).topic_id_partition.topic_id
        finished = _topic_states(cluster, topic_id).list_segments()
        assert [m.segment_id for m in finished] == [m.segment_id for m in _mirror(remote)]
        assert _contiguous(finished), _show(finished)
        tenures = [b for i, b in enumerate(m.broker_id for m in finished) if i == 0 or b != finished[i - 1].broker_id]
        assert tenures == [1, new_leader], _show(finished)

        # Nothing copied twice: the bucket holds the finished segments' folders, and (once the new
        # leader has collected what broker 1 left half-done) nothing else.
        folder = next(remote.glob(f"{TOPIC}-*")) / "0"

        def folders():
            return sorted(p.name[21:] for p in folder.iterdir() if p.is_dir() and p.name != "metadata")
        cluster.wait_for(lambda: folders() == sorted(m.segment_id.text for m in _mirror(remote)), 30,
                         "the bucket's segment folders to be the finished segments")
        assert not _mirror(remote, [S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED])
        tip = TopicIdPartition(topic_id, TOPIC, 0)
        _kafka_formatter_reads(cluster, metadata_partition(tip, RLMM_PARTITIONS))


def _kafka_formatter_reads(cluster, partition: int) -> None:
    """Kafka's console consumer with Kafka's RemoteLogMetadataFormatter prints the topic's records."""
    try:
        jars = resolve_jars()
    except KafkaUnavailable as exc:
        pytest.skip(f"Kafka's jars (the rest passed): {exc}")
    formatter = ("org.apache.kafka.server.log.remote.metadata.storage.serialization."
                 "RemoteLogMetadataSerde$RemoteLogMetadataFormatter")
    live = ",".join(b.address for b in cluster.brokers.values() if b.alive())
    proc = jars.run_tool(jars.console_consumer, [
        "--bootstrap-server", live, "--topic", RLMM_TOPIC, "--partition", str(partition), "--offset",
        "earliest", "--formatter", formatter, "--timeout-ms", "5000"], timeout=120)
    assert "COPY_SEGMENT_FINISHED" in proc.stdout and "startOffset=0" in proc.stdout, \
        proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("RemoteLogSegmentMetadata{") >= 1
