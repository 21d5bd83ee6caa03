"""Compaction on a replicated cluster: three `seglog broker` processes on ZooKeeper, an RF=3
topic with cleanup.policy=compact and fast cleaning settings, driven by confluent-kafka.

One cluster, one story (the cluster start dominates the test time):
- broker 3 is stopped (SIGKILL) after the first values; brokers 1 (leader) and 2 take several
  values per key and tombstones with acks=all;
- the leader compacts: a consumer sees the last value of each key at the offset it was
  acknowledged at (gaps between them), tombstones still there; the follower (broker 2) compacts
  its own copy as Kafka's cleaner does on every replica, and stays in the ISR;
- broker 3 restarts below the compacted range, fetches across the leader's offset gaps, rejoins
  the ISR and holds the leader's records at the leader's offsets;
- after delete.retention.ms and more writes the tombstones are gone on the leader;
- the leader is killed: the new leader serves every key's latest acknowledged value, compacts
  the values written to it in turn, and the old leader comes back as a follower in the ISR;
- __consumer_offsets (RF 3) is compacted on every broker, leader or follower.
"""
from __future__ import annotations

import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from logcore.records.batch import decode_records, iter_batches  # noqa: E402

TOPIC = "table"
KEYS = [b"k%d" % i for i in range(10)]
DELETE_RETENTION_MS = 1500
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
          "delete.retention.ms": str(DELETE_RETENTION_MS), "file.delete.delay.ms": "0"}


@pytest.fixture
def cluster(tmp_path, zk_hosts):
    props = {"min.insync.replicas": "2", "log.retention.check.interval.ms": "200",
             "log.cleaner.backoff.ms": "200", "offsets.topic.segment.bytes": "1024"}
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props=props) as c:
        yield c


def _produce(cluster, records: list[tuple[bytes, bytes | None]], acked: dict) -> None:
    """Produce (key, value) with acks=all, idempotent; `acked[offset] = (key, value)` for each
    acknowledged record (every one must be)."""
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "batch.num.messages": 5, "message.timeout.ms": 60000,
                     "topic.metadata.refresh.interval.ms": 1000})
    failed = []

    def report(err, msg):
        if err is not None:
            failed.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())
    for key, value in records:
        p.produce(TOPIC, key=key, value=value, partition=0, on_delivery=report)
        p.poll(0)
    assert p.flush(70) == 0 and not failed, failed


def _fillers(tag: str, n: int = 10) -> list[tuple[bytes, bytes]]:
    """Unique keys, 1.7 kB in all (segment.bytes 1024; batches of at most 5): what was written
    before them lands in sealed segments, which the cleaner takes."""
    return [(b"f-%s-%d" % (tag.encode(), i), b"x" * 150) for i in range(n)]


def _read(cluster) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record a consumer reads from the leader, from the earliest
    offset to the high watermark."""
    return cluster.read_partition(TOPIC, **{"topic.metadata.refresh.interval.ms": 1000})


def _files(broker, partition: str = f"{TOPIC}-0") -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every data record in one broker's replica files."""
    out = []
    for seg in sorted((broker.log_dir / partition).glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data, source=str(seg)):
            if not h.is_control:
                out.extend((r.offset, r.key, r.value) for r in decode_records(data, pos, h, source=str(seg)))
    return out


def _latest(acked: dict) -> dict[bytes, tuple[int, bytes | None]]:
    """key -> (offset, value) of its last acknowledged record."""
    latest = {}
    for offset in sorted(acked):
        key, value = acked[offset]
        latest[key] = (offset, value)
    return latest


def _compacted(records, acked: dict, tombstones: bool = True) -> bool:
    """Exactly the last acknowledged record of each key, at its offset (tombstones too, or, with
    `tombstones` False, none of them)."""
    want = {(o, k, v) for k, (o, v) in _latest(acked).items() if tombstones or v is not None}
    return sorted(records) == sorted(want)


def _isr(cluster) -> list[int]:
    return sorted(cluster.metadata(TOPIC)[0][2])


def _gaps(records) -> bool:
    offsets = [o for o, _k, _v in records]
    return any(b != a + 1 for a, b in zip(offsets, offsets[1:]))


def test_compaction_on_leader_followers_restart_and_failover(cluster):
    from confluent_kafka.admin import NewTopic
    fs = cluster.admin().create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                                 config=CONFIG)], request_timeout=30)
    fs[TOPIC].result(30)
    cluster.wait_for(lambda: cluster.leader_of(TOPIC) == 1 and _isr(cluster) == [1, 2, 3], 30,
                     "leader 1 and a full ISR")
    acked: dict[int, tuple[bytes, bytes | None]] = {}
    _produce(cluster, [(k, b"v0-" + k) for k in KEYS], acked)
    cluster.wait_for(lambda: len(_files(cluster.brokers[3])) == len(KEYS), 20, "broker 3 holding the first values")
    away = cluster.brokers[3]
    away.kill()
    cluster.wait_for(lambda: _isr(cluster) == [1, 2], 20, "broker 3 out of the ISR")
    away_end = len(KEYS)

    # Several values per key with a key written once after each round of them (kept between
    # removed records: gaps), tombstones for k0 and k1, then unique keys (the dirty part seals).
    _produce(cluster, [r for v in range(1, 16) for r in [(k, b"v%d-" % v + k) for k in KEYS] + [(b"u%d" % v, b"once")]],
             acked)
    _produce(cluster, [(KEYS[0], None), (KEYS[1], None)], acked)
    _produce(cluster, _fillers("b"), acked)
    assert len(acked) == 10 + 165 + 2 + 10

    # The leader compacts: the last value of each key at its acknowledged offset, tombstones kept
    # (delete.retention.ms has not passed), offsets with gaps.
    cluster.wait_for(lambda: _compacted(_read(cluster), acked), 20, "the leader's compacted view")
    view = _read(cluster)
    assert _gaps(view) and view[-1][0] == max(acked)
    # Broker 2 compacts its own copy (below its high watermark) and stays in the ISR.
    cluster.wait_for(lambda: _compacted(_files(cluster.brokers[2]), acked), 20, "broker 2's copy compacted")
    assert "compacted" in cluster.brokers[2].log_text()
    assert _isr(cluster) == [1, 2]

    # Broker 3 comes back with its log ending at 10: it fetches across the leader's gaps and
    # rejoins the ISR; above 10 it holds exactly the leader's records, at the leader's offsets.
    # (Its own cleaner may already have dropped the tombstones: the leader's pass wrote their
    # delete horizon into the batch headers it copied, and that may have passed meanwhile.)
    away.start()
    cluster.wait_for(lambda: _isr(cluster) == [1, 2, 3], 30, "broker 3 back in the ISR")
    copied = [r for r in _files(away) if r[0] >= away_end]
    assert [r for r in copied if r[2] is not None] == [r for r in view if r[0] >= away_end and r[2] is not None]
    assert {r for r in copied if r[2] is None} <= {r for r in view if r[2] is None} and _gaps(copied)
    assert "replicating" not in away.log_text()         # no fetch was refused or failed

    # After delete.retention.ms a new pass (more writes) drops the tombstones.
    time.sleep(DELETE_RETENTION_MS / 1000)
    _produce(cluster, [(k, b"v16-" + k) for k in KEYS[2:]], acked)
    _produce(cluster, _fillers("c"), acked)
    cluster.wait_for(lambda: _compacted(_read(cluster), acked, tombstones=False), 20,
                     "the tombstones gone from the leader")
    cluster.wait_for(lambda: _compacted(_files(cluster.brokers[2]), acked, tombstones=False), 20,
                     "the tombstones gone from broker 2's copy")
    cluster.wait_for(lambda: _isr(cluster) == [1, 2, 3], 20, "a full ISR after the second pass")

    # The leader dies: the new one serves every key's latest acknowledged value ...
    leader = cluster.brokers[1]
    leader.kill()
    cluster.wait_for(lambda: cluster.leader_of(TOPIC) in (2, 3), 20, "a new leader")
    new_leader = cluster.brokers[cluster.leader_of(TOPIC)]
    served = {k: (o, v) for o, k, v in _read(cluster)}
    assert served == {k: ov for k, ov in _latest(acked).items() if ov[1] is not None}
    # ... and compacts what is written to it in turn.
    _produce(cluster, [(k, b"v%d-" % v + k) for v in range(17, 22) for k in KEYS[2:]], acked)
    _produce(cluster, _fillers("d"), acked)
    cluster.wait_for(lambda: _compacted(_read(cluster), acked, tombstones=False), 20,
                     "the new leader's compacted view")
    cluster.wait_for(lambda: _compacted([r for r in _files(new_leader) if r[1] not in KEYS[:2]], acked,
                                        tombstones=False), 20, "the new leader's files compacted")
    # The old leader returns as a follower of the compacted log and rejoins the ISR.
    leader.start()
    cluster.wait_for(lambda: _isr(cluster) == [1, 2, 3], 30, "broker 1 back in the ISR")
    assert cluster.leader_of(TOPIC) == new_leader.id
    final = {k: (o, v) for o, k, v in _read(cluster)}
    assert final == {k: ov for k, ov in _latest(acked).items() if ov[1] is not None}

    # __consumer_offsets (RF 3, compacted) is cleaned on every replica too: 40 commits of one
    # group's offset shrink to a few records on each broker.
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "committer", "enable.auto.commit": False})
    try:
        for i in range(40):
            c.commit(offsets=[ck.TopicPartition(TOPIC, 0, i + 1)], asynchronous=False)
    finally:
        c.close()

    def offsets_records(broker) -> int:
        return sum(len(_files(broker, f"__consumer_offsets-{p}")) for p in range(3))
    cluster.wait_for(lambda: all(offsets_records(b) < 20 for b in cluster.brokers.values()), 20,
                     "__consumer_offsets compacted on every broker")
