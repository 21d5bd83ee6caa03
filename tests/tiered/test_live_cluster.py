"""Tiering changes on a 3-broker cluster with TopicBasedRemoteLogMetadataManager: what
test_live_config.py checks on one broker, through ZooKeeper's topic configs and
`__remote_log_metadata`.

- `remote.storage.enable=true` set by IncrementalAlterConfigs on an RF=3 topic created without
  it takes effect on every replica without a restart: the leader copies (every finished segment
  names it), and every replica applies local retention (its first local segment moves up).
- Deleting the topic deletes its remote segments, and its metadata partition of
  `__remote_log_metadata` carries RemotePartitionDeleteMetadataRecords MARKED, STARTED and
  FINISHED, in that order, FINISHED after every segment's DELETE_SEGMENT_FINISHED, each written
  once by the partition's leader (the other replicas leave the remote data to it, as in Kafka).

ZooKeeper from the reference jars, three `seglog broker` processes, a local folder as the bucket.
About 30 s with the cluster's start on a quiet 2-core machine, 100 s loaded: `-m soak` (the
one-broker form runs in the suite).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))

from seglog_cluster import SeglogCluster  # noqa: E402
from zookeeper_reference import running_zookeeper  # noqa: E402

from tests.tiered.helpers import metadata_topic_props  # noqa: E402
from logcore.tiered.metadata import (RemoteLogSegmentState as S,  # noqa: E402
                                     RemotePartitionDeleteState as P, TopicIdPartition)
from logcore.tiered.metadata_records import (TOPIC as RLMM_TOPIC, PartitionDelete,  # noqa: E402
                                             SegmentUpdate, decode, metadata_partition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore  # noqa: E402

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

RLMM_PARTITIONS = 2
SEGMENT = 8192


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("kazoo", reason="kazoo is not installed")
    base = tmp_path_factory.mktemp("live-cluster")
    remote = base / "bucket"
    props = metadata_topic_props(remote, RLMM_PARTITIONS)
    with running_zookeeper(base / "zk") as zk, \
            SeglogCluster.running(base, zk.connect_string, size=3, props=props) as running:
        yield running, remote


def _values(count: int) -> list[bytes]:
    return [b"%06d-" % i + b"v" * 500 for i in range(count)]


def _produce(cluster, topic: str, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                     "batch.num.messages": 8, "message.timeout.ms": 60000})
    failed = []
    for v in values:
        p.produce(topic, value=v, partition=0,
                  on_delivery=lambda err, _m: failed.append(err) if err is not None else None)
        p.poll(0)
    assert p.flush(60) == 0 and not failed, failed


def _mirror(remote: Path, topic: str, states=S.COPY_SEGMENT_FINISHED):
    try:
        return RemoteLogMetadataStore.open(str(remote), topic, 0).list_segments(states)
    except Exception:           # noqa: BLE001 - nothing copied yet
        return []


def _first_local(broker, topic: str) -> int:
    bases = sorted(int(p.stem) for p in (broker.log_dir / f"{topic}-0").glob("*.log"))
    return bases[0] if bases else -1


def _segment_folders(remote: Path, topic: str) -> list[Path]:
    return [p for p in remote.glob(f"{topic}-*/0/*") if p.is_dir() and p.name != "metadata"]


@pytest.mark.soak
def test_remote_storage_enabled_live_on_every_replica_then_topic_deleted(cluster):
    cluster, remote = cluster
    topic = "late"
    admin = cluster.admin()
    fs = admin.create_topics([ck.admin.NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                                config={"segment.bytes": str(SEGMENT)})], request_timeout=30)
    fs[topic].result(30)
    cluster.wait_for(lambda: cluster.leader_of(topic) == 1 and len(cluster.metadata(topic)[0][2]) == 3,
                     30, "leader 1 and a full ISR")
    values = _values(200)
    _produce(cluster, topic, values)
    assert not _mirror(remote, topic)

    ops = [ck.admin.ConfigEntry("remote.storage.enable", "true",
                                incremental_operation=ck.admin.AlterConfigOpType.SET),
           ck.admin.ConfigEntry("local.retention.bytes", str(SEGMENT),
                                incremental_operation=ck.admin.AlterConfigOpType.SET)]
    resource = ck.admin.ConfigResource("topic", topic, incremental_configs=ops)
    next(iter(admin.incremental_alter_configs([resource]).values())).result(30)
    # No restart: the leader copies, and every replica drops its local copies past 8 KiB.
    cluster.wait_for(lambda: len(_mirror(remote, topic)) >= 8, 60, "the leader copying segments")
    finished = _mirror(remote, topic)
    assert finished[0].start_offset == 0 and {m.broker_id for m in finished} == {1}
    cluster.wait_for(lambda: all(_first_local(b, topic) > 0 for b in cluster.brokers.values()), 60,
                     "local retention on every replica")
    assert [(o, v) for o, _k, v in cluster.read_partition(topic)] == list(enumerate(values))
    topic_id = RemoteLogMetadataStore.open(str(remote), topic, 0).topic_id_partition.topic_id

    # Deleting the topic deletes its remote segments and records the partition's deletion.
    admin.delete_topics([topic])[topic].result(30)
    cluster.wait_for(lambda: not _segment_folders(remote, topic), 60, "the remote segments deleted")
    tip = TopicIdPartition(topic_id, topic, 0)
    events = [decode(value) for _o, _k, value in
              cluster.read_partition(RLMM_TOPIC, metadata_partition(tip, RLMM_PARTITIONS))]
    # Only the leader at deletion time (broker 1) deletes, as in Kafka: each step once, its id.
    steps = [(e.state, e.broker_id) for e in events
             if isinstance(e, PartitionDelete) and e.topic_id_partition == tip]
    assert steps == [(P.DELETE_PARTITION_MARKED, 1), (P.DELETE_PARTITION_STARTED, 1),
                     (P.DELETE_PARTITION_FINISHED, 1)], steps
    mine = [i for i, e in enumerate(events) if getattr(e, "topic_id_partition", None) == tip
            or (isinstance(e, SegmentUpdate) and e.segment_id.topic_id_partition == tip)]
    finished_at = next(i for i in mine if isinstance(events[i], PartitionDelete)
                       and events[i].state is P.DELETE_PARTITION_FINISHED)
    deletes = [i for i in mine if isinstance(events[i], SegmentUpdate)
               and events[i].state is S.DELETE_SEGMENT_FINISHED]
    assert len(deletes) >= len(finished) and max(deletes) < finished_at
    assert len({events[i].segment_id for i in deletes}) == len(deletes)        # each segment once
    assert {events[i].broker_id for i in deletes} == {1}
