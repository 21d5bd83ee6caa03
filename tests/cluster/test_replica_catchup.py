"""A follower that was away while the leader's log start (retention) or local log start (tiering)
moved past its log end, and tiering on a cluster: three `seglog broker` processes on ZooKeeper
sharing one remote tier (a local folder as rsm.config.storage.url), driven by confluent-kafka.

One cluster runs both scenarios (the cluster start dominates the test time):
- "kept" (local retention only): the stopped follower comes back below the leader's log start,
  gets OFFSET_OUT_OF_RANGE, truncates fully and starts at the leader's log start, catches up,
  rejoins the ISR, and after a preferred election serves every record from the log start on;
- "cold" (tiered): only the leader uploads, the other follower deletes local copies only once
  the remote tier has them; the stopped follower gets OFFSET_MOVED_TO_TIERED_STORAGE and starts
  at the leader's local log start with the leader's epoch cache and producer state (from the
  remote segment's indexes), fetching nothing the remote tier holds; as the new leader it serves
  the remote offsets and continues tiering from the shared metadata (no gap, no second copy).
"""
from __future__ import annotations

import ast
import re
import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from logcore.log.checkpoint import LeaderEpochCheckpoint  # noqa: E402
from logcore.tiered.metadata import RemoteLogSegmentState  # noqa: E402
from logcore.tiered.metadata_store import RemoteLogMetadataStore  # noqa: E402

SEGMENT = 4096
KEPT = {"segment.bytes": str(SEGMENT), "retention.bytes": str(2 * SEGMENT)}
COLD = {"segment.bytes": str(SEGMENT), "remote.storage.enable": "true",
        "local.retention.bytes": str(SEGMENT)}


@pytest.fixture
def cluster(tmp_path, zk_hosts):
    props = {"min.insync.replicas": "2", "log.retention.check.interval.ms": "300",
             "remote.log.manager.task.interval.ms": "200", "log.segment.delete.delay.ms": "0",
             "remote.log.storage.system.enable": "true",
             "rsm.config.storage.url": str(tmp_path / "remote")}
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props=props) as c:
        yield c


def _create(cluster, name: str, config: dict) -> None:
    from confluent_kafka.admin import NewTopic
    # Broker 3 is the preferred leader: it leads first, is stopped, and leads again at the end.
    topic = NewTopic(name, num_partitions=1, replica_assignment=[[3, 1, 2]], config=config)
    fs = cluster.admin().create_topics([topic], request_timeout=30)
    fs[name].result(30)
    cluster.wait_for(lambda: cluster.metadata(name)[0][0] == 3 and len(cluster.metadata(name)[0][2]) == 3,
                     30, f"leader 3 and a full ISR of {name}")


def _produce(cluster, topic: str, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "batch.num.messages": 5, "message.timeout.ms": 60000,
                     "topic.metadata.refresh.interval.ms": 1000})
    failed = []
    for v in values:
        p.produce(topic, value=v, partition=0,
                  on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
        p.poll(0)
    assert p.flush(70) == 0 and not failed, failed


def _values(start: int, end: int) -> list[bytes]:
    return [b"%05d-" % i + b"x" * 194 for i in range(start, end)]


def _read(cluster, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record from the earliest offset to the high watermark."""
    return [(o, v) for o, _k, v in cluster.read_partition(topic)]


def _earliest(cluster, topic: str) -> int:
    """The partition's log start offset, asked of its leader. A broker's metadata can name a new
    leader a moment before that broker has taken the partition over; the leader then answers
    NOT_LEADER_OR_FOLLOWER, which a client retries (librdkafka's watermark query does not)."""
    deadline = time.monotonic() + 20
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "wm"})
    try:
        while True:
            try:
                return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)[0]
            except ck.KafkaException as exc:
                if exc.args[0].code() != ck.KafkaError.NOT_LEADER_FOR_PARTITION or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def _bases(broker, topic: str) -> list[int]:
    """Base offsets of the broker's local segments of partition 0."""
    found = []
    for path in (broker.log_dir / f"{topic}-0").glob("*.log"):
        found.append(int(path.stem))
    return sorted(found)


def _remote(cluster, topic: str, states=RemoteLogSegmentState.COPY_SEGMENT_FINISHED):
    """The remote segments' metadata (finished ones; None: every attempt in any state), read from
    the shared remote folder."""
    store = RemoteLogMetadataStore.open(cluster.props["rsm.config.storage.url"], topic, 0)
    return store.list_segments(states)


def _contiguous(segments) -> bool:
    return bool(segments) and segments[0].start_offset == 0 and all(
        b.start_offset == a.end_offset + 1 for a, b in zip(segments, segments[1:]))


def _show(segments) -> list:
    return [(m.start_offset, m.end_offset, m.state.name, m.broker_id) for m in segments]


def _epochs(broker, topic: str) -> list[tuple[int, int]]:
    path = broker.log_dir / f"{topic}-0" / "leader-epoch-checkpoint"
    return LeaderEpochCheckpoint.decode(path.read_bytes())


def test_follower_below_leader_log_start_and_tiering_on_a_cluster(cluster):
    from confluent_kafka import ElectionType
    _create(cluster, "kept", KEPT)
    _create(cluster, "cold", COLD)
    first = 100
    for topic in ("kept", "cold"):
        _produce(cluster, topic, _values(0, first))
    away = cluster.brokers[3]
    cluster.wait_for(lambda: all(len(cluster.metadata(t)[0][2]) == 3 for t in ("kept", "cold")), 20,
                     "full ISRs")
    away.kill()
    cluster.wait_for(lambda: all(cluster.metadata(t)[0][0] == 1 for t in ("kept", "cold")), 20,
                     "broker 1 leading")
    total = 500
    for topic in ("kept", "cold"):
        _produce(cluster, topic, _values(first, total))

    # The leader's retention moves its log start past the stopped follower's log end (100).
    cluster.wait_for(lambda: _earliest(cluster, "kept") > first, 20, "the leader's log start past 100")
    # Tiering: the leader copies, and deletes local copies past local.retention.bytes.
    leader, follower = cluster.brokers[1], cluster.brokers[2]
    cluster.wait_for(lambda: _bases(leader, "cold")[0] > first and _bases(follower, "cold")[0] > first,
                     30, "the local log start of brokers 1 and 2 past 100")
    remote = _remote(cluster, "cold")
    assert _contiguous(remote), _show(remote)
    # Only leaders upload: broker 3 while it led (below 100), then broker 1; never broker 2.
    assert 2 not in {m.broker_id for m in _remote(cluster, "cold", None)}
    assert {m.broker_id for m in remote if m.end_offset >= first} == {1}
    # The follower deleted only what the remote tier has: no offset is neither local nor remote.
    assert remote[-1].end_offset + 1 >= _bases(follower, "cold")[0]
    assert _earliest(cluster, "cold") == 0
    local_start = _bases(leader, "cold")[0]

    away.start()
    cluster.wait_for(lambda: all(3 in cluster.metadata(t)[0][2] for t in ("kept", "cold")), 30,
                     "broker 3 back in the ISRs")
    text = away.log_text()
    assert "below the leader's log start" in text and "truncated fully" in text
    assert "below the leader's local log start" in text
    # "kept": truncated fully, restarted at the leader's log start (nothing below it kept).
    assert _bases(away, "kept")[0] >= _earliest(cluster, "kept") > first
    # "cold": started right after the remote segment holding the offset before the leader's
    # local log start, with the leader's epochs and both producers' state from that segment's
    # indexes; the remote tier's offsets were not fetched.
    rebuilt = re.search(r"cold-0: this replica ends at (\d+), below the leader's local log start (\d+);"
                        r" rebuilt from .* \(epochs (.*), (\d+) producers\) and starting at (\d+),"
                        r" log start (\d+)", text)
    assert rebuilt, text
    ended, leader_local, epochs, producers, started, log_start = rebuilt.groups()
    assert int(ended) == first and int(leader_local) >= local_start and int(log_start) == 0
    assert int(started) - 1 in {m.end_offset for m in _remote(cluster, "cold")}
    assert ast.literal_eval(epochs) == _epochs(leader, "cold") == _epochs(away, "cold")
    assert int(producers) == 2
    assert _bases(away, "cold")[0] >= int(started) > first

    # Broker 3 leads again (preferred election) and serves every record from the log start on.
    result = cluster.admin().elect_leaders(
        ElectionType.PREFERRED, [ck.TopicPartition("kept", 0), ck.TopicPartition("cold", 0)]).result(30)
    assert all(err is None for err in result.values()), result
    cluster.wait_for(lambda: all(cluster.leader_of(t) == 3 for t in ("kept", "cold")), 20, "broker 3 leading")
    start = _earliest(cluster, "kept")
    assert start > first
    assert _read(cluster, "kept") == list(zip(range(start, total), _values(start, total)))
    assert _read(cluster, "cold") == list(enumerate(_values(0, total)))    # the old part from remote

    # The new leader continues tiering from the shared metadata: no gap, no second copy.
    highest = remote[-1].end_offset
    more = 700
    _produce(cluster, "cold", _values(total, more))
    cluster.wait_for(lambda: any(m.broker_id == 3 and m.start_offset > first for m in _remote(cluster, "cold")),
                     30, "broker 3 copying segments")
    after = _remote(cluster, "cold")
    assert _contiguous(after), _show(after)
    assert 2 not in {m.broker_id for m in _remote(cluster, "cold", None)}
    assert [m.broker_id for m in after if m.end_offset <= highest] == [m.broker_id for m in remote]
    tenures = [b for i, b in enumerate(m.broker_id for m in after) if i == 0 or b != after[i - 1].broker_id]
    assert tenures in ([3, 1, 3], [1, 3])              # in offset order: each leader in its turn
    assert after[-1].end_offset > highest
    assert _read(cluster, "cold") == list(enumerate(_values(0, more)))
