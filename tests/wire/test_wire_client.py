"""logcore.wire.client against a real `seglog broker` and a real Apache Kafka (KRaft) broker:
version negotiation (with Kafka's ApiVersions fallback), requests by dict, pipelining, Fetch v12
with records returned byte for byte as the log holds them and its tagged fields readable,
OffsetForLeaderEpoch v4, the asyncio connection with its per-request timeout, bootstrap and
connection_to, and the messages of every failure."""
from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("confluent_kafka")

from broker_helpers import create, produce  # noqa: E402
from zookeeper_reference import free_ports  # noqa: E402

from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.records.batch import decode_records, iter_batches  # noqa: E402
from logcore.wire.api_keys import (API_VERSIONS, CREATE_TOPICS, ELECT_LEADERS, FETCH, METADATA,  # noqa: E402
                                   OFFSET_FOR_LEADER_EPOCH)
from logcore.wire.client import (  # noqa: E402
    AsyncKafkaConnection,
    KafkaConnection,
    KafkaConnectionError,
    KafkaError,
    UnsupportedApiError,
    api_name,
    bootstrap,
    error_name,
)


def _free_port() -> int:
    # the suite's picker: this worker's own slice, below the ephemeral range an outgoing
    # connection could take the port from before the broker binds it
    return free_ports(1)[0]


def _fetch_v12(topic: str, offset: int, *, last_fetched_epoch: int = -1, max_wait_ms: int = 0,
               min_bytes: int = 1, replica_id: int = -1) -> dict:
    return {"replica_id": replica_id, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _records(data: bytes) -> list:
    """Every record of the batches in `data`, CRCs checked."""
    return [r for pos, _ in iter_batches(data, allow_partial_tail=False) for r in decode_records(data, pos)]


def _segment_bytes(partition_dir) -> bytes:
    return (partition_dir / "00000000000000000000.log").read_bytes()


def _wait_for_segment(partition_dir, size: int, timeout: float = 20) -> bytes:
    """The first segment's bytes once it holds at least `size` (Kafka writes it a moment after
    the produce is acknowledged only in page cache terms: the file is read back here)."""
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        data = _segment_bytes(partition_dir)
        if len(data) >= size:
            return data
        time.sleep(0.1)
    return data


# ------------------------------------------------------------------------------ seglog broker

def test_negotiates_and_falls_back_to_the_apiversions_the_broker_serves(seglog_broker):
    """seglog serves ApiVersions v0..v3: the client's v4 is refused with the v0 list, and it asks
    again at v3; every API then goes out at the highest version both sides know."""
    with KafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10, client_id="wire-test") as conn:
        assert conn.served[API_VERSIONS] == (0, 3)
        assert conn.served[FETCH] == (4, 16)
        assert conn.version_for(METADATA) == 12
        assert conn.version_for(METADATA, window=(1, 9)) == 9
        assert conn.version_for(FETCH, 12) == 12
        body = conn.request(METADATA, {"topics": None, "allow_auto_topic_creation": False})
        assert [b.node_id for b in body.brokers] == [0]
        assert body.brokers[0].port == seglog_broker.port


def test_requests_by_dict_and_pipelined_responses_in_order(seglog_broker):
    with KafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10) as conn:
        created = conn.request(CREATE_TOPICS, {
            "topics": [{"name": f"wire-pipe-{i}", "num_partitions": i + 1, "replication_factor": -1,
                        "configs": [{"name": "cleanup.policy", "value": "delete"}]} for i in range(3)],
            "timeout": 10_000})
        assert [(t.name, int(t.error_code)) for t in created.topics] == [(f"wire-pipe-{i}", 0) for i in range(3)]
        ids = [conn.send(METADATA, {"topics": [{"name": f"wire-pipe-{i}"}]}) for i in range(3)]
        assert conn.in_flight == 3 and ids == sorted(ids)
        with pytest.raises(KafkaError, match=r"3 request\(s\) sent to .* still wait.*Metadata"):
            conn.request(METADATA, {"topics": []})
        got = [conn.receive() for _ in range(3)]
        assert [(t.topics[0].name, len(t.topics[0].partitions)) for t in got] == \
            [(f"wire-pipe-{i}", i + 1) for i in range(3)]
        assert conn.in_flight == 0
        with pytest.raises(KafkaError, match="no request .* is waiting"):
            conn.receive()


def test_fetch_v12_returns_the_log_bytes_untouched(seglog_broker):
    create(seglog_broker, "wire-fetch", 1)
    values = [b"value-%d" % i * (i + 1) for i in range(50)]
    produce(seglog_broker, "wire-fetch", values, partition=0, **{"compression.type": "gzip"})
    on_disk = _wait_for_segment(seglog_broker.root / "wire-fetch-0", 61)
    with KafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10) as conn:
        body = conn.request(FETCH, _fetch_v12("wire-fetch", 0), version=12)
    part = body.responses[0].partitions[0]
    assert int(part.error_code) == 0 and part.high_watermark == 50
    assert isinstance(part.records, bytes)
    assert part.records == on_disk                     # the segment's bytes, compressed batches as written
    assert [r.value for r in _records(part.records)] == values
    # the tagged fields of v12 read as their defaults when the broker leaves them out
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (-1, -1)
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (-1, -1)


def test_offset_for_leader_epoch_v4(seglog_broker):
    create(seglog_broker, "wire-epoch", 1)
    produce(seglog_broker, "wire-epoch", [b"a", b"b", b"c"], partition=0)
    with KafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10) as conn:
        body = conn.request(OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": -1, "topics": [{"topic": "wire-epoch", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, version=4)
    p = body.topics[0].partitions[0]
    assert (int(p.error_code), p.leader_epoch, p.end_offset) == (0, 0, 3)


def test_errors_name_the_broker_and_the_api(seglog_broker):
    dead = _free_port()
    with pytest.raises(KafkaConnectionError, match=f"cannot connect to the broker at 127.0.0.1:{dead}"):
        KafkaConnection("127.0.0.1", dead, timeout_s=5).connect()
    with KafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10) as conn:
        with pytest.raises(UnsupportedApiError,
                           match=f"{seglog_broker.bootstrap} does not serve ElectLeaders .*not advertised"):
            conn.request(ELECT_LEADERS, {"election_type": 0, "topic_partitions": None, "timeout": 1000})
        with pytest.raises(UnsupportedApiError, match=r"serves Fetch versions 4\.\.16; v3 was asked"):
            conn.request(FETCH, _fetch_v12("x", 0), version=3)
        with pytest.raises(UnsupportedApiError, match=r"serves Fetch versions 4\.\.16, none of 0\.\.3"):
            conn.request(FETCH, _fetch_v12("x", 0), window=(0, 3))
        assert conn.connected                          # refused before sending: the connection stays
        assert conn.request(METADATA, {"topics": []}).brokers
    assert api_name(OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert error_name(84) == "ELECTION_NOT_NEEDED" and error_name(9999) == "error 9999"


def test_a_broker_that_goes_away_is_a_connection_error(seglog_broker_factory):
    b = seglog_broker_factory()
    conn = KafkaConnection(b.host, b.port, timeout_s=10).connect()
    b.stop()
    with pytest.raises(KafkaConnectionError, match=f"lost the connection to the broker at {b.bootstrap}.*Metadata"):
        conn.request(METADATA, {"topics": []})
    assert not conn.connected


def test_bootstrap_takes_the_first_reachable_and_connection_to_a_node(seglog_broker):
    dead = f"127.0.0.1:{_free_port()}"
    servers = f"{dead},{seglog_broker.bootstrap}"
    with bootstrap(servers, timeout_s=10) as conn:
        assert (conn.host, conn.port) == (seglog_broker.host, seglog_broker.port)
        assert f"bootstrap.servers={servers}" in conn.where()
        brokers, _ = conn.metadata_brokers()
        assert brokers[0].port == seglog_broker.port
        with conn.connection_to(0) as other:
            assert other.port == seglog_broker.port and other.served == conn.served
        with pytest.raises(KafkaError, match=r"lists no broker 7 in its Metadata \(brokers: \[0\]\)"):
            conn.connection_to(7)
    with pytest.raises(KafkaConnectionError, match=f"cannot reach any broker of bootstrap.servers={dead}: {dead}"):
        bootstrap(dead, timeout_s=5)
    with pytest.raises(InvalidConfigError, match="option bootstrap.servers='nohost': 'nohost' is not host:port"):
        bootstrap("nohost")


def test_bootstrap_starts_at_a_random_server_as_kafka_clients_do(seglog_broker):
    # the same broker under two names: which name a connection used shows where it started
    servers = f"127.0.0.1:{seglog_broker.port},localhost:{seglog_broker.port}"
    chosen = set()
    for _ in range(40):
        with bootstrap(servers, timeout_s=10) as conn:
            chosen.add(conn.host)
    assert chosen == {"127.0.0.1", "localhost"}


def test_async_connection_concurrent_requests_and_timeout(seglog_broker):
    create(seglog_broker, "wire-async", 1)
    produce(seglog_broker, "wire-async", [b"x%d" % i for i in range(5)], partition=0)

    async def scenario():
        conn = AsyncKafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10, client_id="follower")
        await conn.connect()
        assert conn.served[FETCH] == (4, 16) and conn.served[API_VERSIONS] == (0, 3)
        # concurrent requests on one connection, each matched to its own response
        meta, fetched, epochs = await asyncio.gather(
            conn.request(METADATA, {"topics": [{"name": "wire-async"}]}),
            conn.request(FETCH, _fetch_v12("wire-async", 2), version=12),
            conn.request(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": "wire-async", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, version=4))
        assert meta.topics[0].name == "wire-async"
        assert [r.value for r in _records(fetched.responses[0].partitions[0].records)
                if r.offset >= 2] == [b"x2", b"x3", b"x4"]
        assert epochs.topics[0].partitions[0].end_offset == 5
        # pipelined sends, responses in send order
        await conn.send(METADATA, {"topics": [{"name": "wire-async"}]})
        await conn.send(API_VERSIONS, {"client_software_name": "x", "client_software_version": "1"})
        assert (await conn.receive()).topics[0].name == "wire-async"
        assert (await conn.receive()).error_code == 0
        # a long poll that outlives its own timeout: the connection closes, as Kafka's clients do
        started = time.monotonic()
        with pytest.raises(KafkaConnectionError,
                           match=f"{seglog_broker.bootstrap} did not answer Fetch within 0.3 s"):
            await conn.request(FETCH, _fetch_v12("wire-async", 5, max_wait_ms=5000, min_bytes=1 << 20),
                               version=12, timeout_s=0.3)
        assert time.monotonic() - started < 3
        assert not conn.connected
        with pytest.raises(KafkaConnectionError, match="did not answer Fetch"):
            await conn.request(METADATA, {"topics": []})
        await conn.connect()                          # connects again
        assert (await conn.request(METADATA, {"topics": []})).brokers[0].node_id == 0
        conn.close()
        dead = AsyncKafkaConnection("127.0.0.1", _free_port(), timeout_s=5)
        with pytest.raises(KafkaConnectionError, match="cannot connect to the broker at 127.0.0.1:"):
            await dead.connect()

    asyncio.run(scenario())


def test_async_connection_large_and_small_responses_interleaved(seglog_broker):
    """Fetch responses far larger than the connection's 64 KiB receive buffer (received into a
    buffer of their own) between small ones cut from it, pipelined on one connection: each
    matched to its request, records byte for byte what a blocking connection reads."""
    create(seglog_broker, "wire-large", 1)
    values = [bytes([i % 251]) * 3000 for i in range(200)]          # ~600 KB
    produce(seglog_broker, "wire-large", values, partition=0)
    with KafkaConnection(seglog_broker.host, seglog_broker.port) as blocking:
        want = blocking.request(FETCH, _fetch_v12("wire-large", 0), version=12).responses[0].partitions[0].records
    assert len(want) > 4 * 65536

    async def scenario():
        conn = AsyncKafkaConnection(seglog_broker.host, seglog_broker.port, timeout_s=10)
        await conn.connect()
        got = await asyncio.gather(*[
            conn.request(FETCH, _fetch_v12("wire-large", 0), version=12) if i % 2 == 0
            else conn.request(METADATA, {"topics": [{"name": "wire-large"}]}) for i in range(8)])
        conn.close()
        return got

    got = asyncio.run(scenario())
    # checked after all arrived: the connection reuses its buffer for large frames, so what a
    # response holds must be its own copy
    for i, response in enumerate(got):
        if i % 2 == 0:
            assert isinstance(response.responses[0].partitions[0].records, bytes)
            assert response.responses[0].partitions[0].records == want
        else:
            assert response.topics[0].name == "wire-large"
    assert [r.value for r in _records(want)] == values


# ------------------------------------------------------------------------------ Apache Kafka

def test_against_kafka_apiversions_v4_fetch_bytes_and_diverging_epoch(kafka):
    """Kafka 4.1 serves ApiVersions v4 (no fallback). Fetch v12 returns the segment's bytes, and
    a fetch past the end of its last fetched epoch gets diverging_epoch (a tagged field) with the
    epoch and end offset Kafka computed."""
    with bootstrap(kafka.bootstrap, timeout_s=30) as conn:
        assert conn.served[API_VERSIONS][1] >= 4
        assert conn.served[ELECT_LEADERS] == (0, 2)
        created = conn.request(CREATE_TOPICS, {"topics": [{"name": "wire-k", "num_partitions": 1,
                                                            "replication_factor": 1}], "timeout": 30_000})
        assert int(created.topics[0].error_code) == 0, created
        produce(kafka, "wire-k", [b"k-%d" % i for i in range(20)], partition=0, acks="all")
        on_disk = _wait_for_segment(kafka.log_dirs / "wire-k-0", 61)
        body = conn.request(FETCH, _fetch_v12("wire-k", 0), version=12)
        part = body.responses[0].partitions[0]
        assert int(part.error_code) == 0 and part.high_watermark == 20
        assert part.records == on_disk[:len(part.records)] and len(part.records) == len(on_disk)
        assert [r.value for r in _records(part.records)] == [b"k-%d" % i for i in range(20)]

        # a follower that holds offsets 0..24 of epoch 0: the leader's epoch 0 ends at 20
        diverged = conn.request(FETCH, _fetch_v12("wire-k", 25, last_fetched_epoch=0), version=12)
        p = diverged.responses[0].partitions[0]
        assert int(p.error_code) == 0 and p.records == b""
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 20)
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)   # not set before v16

        epochs = conn.request(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": "wire-k", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, version=4)
        assert epochs.topics[0].partitions[0].end_offset == 20
        with conn.controller() as ctl:
            assert ctl.port == kafka.port                # single node: the broker itself
