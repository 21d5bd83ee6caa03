"""Client quotas on a broker alone: DescribeClientQuotas / AlterClientQuotas over the wire and
where the broker keeps them (seglog-client-quotas.json in its root), and Kafka's enforcement seen
by real clients: a librdkafka producer and consumer with client.id=slow held to their byte rates
(throttle_time in librdkafka's statistics), an unthrottled client id unaffected, and
request_percentage answered with throttle times and a muted connection.

The broker runs in this process with quota.window.num=2 (windows of 1 s) so that the first
burst a quota lets through is one window's worth and the runs stay short; over T seconds a
client at its quota moves quota x (T + samples - 1 windows) bytes, as in Kafka."""
from __future__ import annotations

import json
import time
import urllib.request

import pytest

from in_process_broker import InProcessBroker
from logcore.records.batch import iter_batches
from logcore.wire.client import KafkaConnection

confluent_kafka = pytest.importorskip("confluent_kafka")

RATE = 100_000           # bytes per second
RUN_S = 3.0
SAMPLES = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("quota")
    running = InProcessBroker({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(base / "logs"),
                               "num.partitions": "1", "quota.window.num": str(SAMPLES),
                               "quota.window.size.seconds": "1", "metrics.listener": "http://127.0.0.1:0"})
    try:
        yield running.host, running.port, base / "logs", running.server
    finally:
        running.stop()


def _alter(conn, entity, ops, validate_only=False):
    body = {"entries": [{"entity": [{"entity_type": k, "entity_name": n} for k, n in entity],
                         "ops": [{"key": k, "value": float(v or 0), "remove": v is None} for k, v in ops]}],
            "validate_only": validate_only}
    entry = conn.request(49, body).entries[0]
    return int(entry.error_code), entry.error_message


def _describe(conn, components, strict=False):
    r = conn.request(48, {"components": [{"entity_type": k, "match_type": t, "match": m} for k, t, m in components],
                          "strict": strict})
    if int(r.error_code):
        return int(r.error_code), r.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in r.entries}


def test_alter_and_describe_client_quotas(broker):
    host, port, root, _ = broker
    with KafkaConnection(host, port) as conn:
        assert _alter(conn, [("user", "alice"), ("client-id", None)], [("request_percentage", 50)]) == (0, None)
        assert _alter(conn, [("user", None)], [("producer_byte_rate", 4096)]) == (0, None)
        assert _alter(conn, [("client-id", "tmp")], [("producer_byte_rate", 10)]) == (0, None)
        assert _alter(conn, [("client-id", "tmp")], [("producer_byte_rate", None)]) == (0, None)
        # validate_only changes nothing
        assert _alter(conn, [("client-id", "dry")], [("producer_byte_rate", 10)], True) == (0, None)
        # refused as Kafka refuses them
        code, message = _alter(conn, [("client-id", "x")], [("producer_byte_rate", 10.5)])
        assert code == 42 and "cannot be a fractional value" in message
        code, message = _alter(conn, [("client-id", "x")], [("no_such_quota", 1)])
        assert code == 42 and "no_such_quota" in message
        assert _alter(conn, [("user", "a"), ("user", "b")], [("producer_byte_rate", 1)])[0] == 42

        everything = _describe(conn, [])
        assert everything[(("user", "alice"), ("client-id", None))] == {"request_percentage": 50.0}
        assert everything[(("user", None),)] == {"producer_byte_rate": 4096.0}
        assert (("client-id", "tmp"),) not in everything and (("client-id", "dry"),) not in everything
        # exact, default and any matches; strict leaves out entities naming other types
        assert set(_describe(conn, [("user", 0, "alice")])) == {(("user", "alice"), ("client-id", None))}
        assert set(_describe(conn, [("user", 1, None)])) == {(("user", None),)}
        assert set(_describe(conn, [("user", 2, None)], strict=True)) == {(("user", None),)}
        assert _describe(conn, [("user", 0, "alice"), ("user", 1, None)])[0] == 42
    stored = json.loads((root / "seglog-client-quotas.json").read_text())["entities"]
    assert stored["users/alice/clients/<default>"] == {"request_percentage": "50.0"}
    assert stored["users/<default>"] == {"producer_byte_rate": "4096"}
    with KafkaConnection(host, port) as conn:     # leave the broker without quotas for the others
        _alter(conn, [("user", "alice"), ("client-id", None)], [("request_percentage", None)])
        _alter(conn, [("user", None)], [("producer_byte_rate", None)])
        assert _describe(conn, []) == {}


def _stats_throttle(stats: list) -> int:
    return max((b.get("throttle", {}).get("max", 0) for s in stats for b in s["brokers"].values()), default=0)


def _produce_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> tuple[int, int]:
    """(bytes delivered in `seconds`, the largest throttle time librdkafka reported)."""
    stats, delivered = [], [0]
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "batch.size": 16384, "queue.buffering.max.kbytes": 256,
                                  "statistics.interval.ms": 200, "stats_cb": lambda s: stats.append(json.loads(s))})
    value = b"x" * 1000

    def on_delivery(err, msg):
        if err is None:
            delivered[0] += len(msg.value())
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    total = delivered[0]
    p.poll(0.3)                   # one more statistics interval
    p.purge()
    p.flush(5)
    return total, _stats_throttle(stats)


def _consume_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> tuple[int, int]:
    """(bytes read in `seconds` from the first record on, the largest throttle time reported)."""
    stats = []
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                                  "enable.auto.commit": False, "max.partition.fetch.bytes": 16384,
                                  "statistics.interval.ms": 200, "stats_cb": lambda s: stats.append(json.loads(s))})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got, first = 0, None
    try:
        while first is None or time.monotonic() - first < seconds:
            m = c.poll(0.05)
            if m is not None and not m.error():
                first = first or time.monotonic()       # measured from the first record
                got += len(m.value())
        c.poll(0.3)
    finally:
        c.close()
    return got, _stats_throttle(stats)


def test_producer_and_consumer_held_to_their_byte_rates(broker):
    host, port, *_ = broker
    bootstrap = f"{host}:{port}"
    with KafkaConnection(host, port) as conn:
        assert _alter(conn, [("client-id", "slow")], [("producer_byte_rate", RATE),
                                                      ("consumer_byte_rate", RATE)]) == (0, None)
    try:
        expected = RATE * (RUN_S + SAMPLES - 1)     # the first burst, then the rate
        sent, throttle = _produce_for(bootstrap, "quota-slow", "slow", RUN_S)
        assert throttle > 0
        assert abs(sent - expected) <= 0.2 * expected, (sent, expected)
        # another client id is not limited (the same loop moves well over ten times the quota)
        fast, fast_throttle = _produce_for(bootstrap, "quota-fast", "fast", 1.0)
        assert fast > 10 * RATE and fast_throttle == 0

        read, throttle = _consume_for(bootstrap, "quota-slow", "slow", RUN_S)
        assert throttle > 0
        assert abs(read - expected) <= 0.2 * expected, (read, expected)
        read_fast, fast_throttle = _consume_for(bootstrap, "quota-fast", "fast", 1.0)
        assert read_fast > 5 * RATE and fast_throttle == 0
    finally:
        with KafkaConnection(host, port) as conn:
            _alter(conn, [("client-id", "slow")], [("producer_byte_rate", None), ("consumer_byte_rate", None)])


def _throttle_time(server) -> tuple[float, float]:
    """(count, sum ms) of Metadata's kafka_network_requestmetrics_throttletimems, scraped over HTTP."""
    from prometheus_client import parser
    host, port = server.metrics.endpoint.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {s.name: s.value for family in parser.text_string_to_metric_families(text) for s in family.samples
             if s.name.startswith("kafka_network_requestmetrics_throttletimems") and s.labels == {"request": "Metadata"}}
    return (found.get("kafka_network_requestmetrics_throttletimems_count", 0.0),
            found.get("kafka_network_requestmetrics_throttletimems_sum", 0.0))


def test_request_percentage_throttles_and_mutes(broker):
    """... and the throttle times answered are Kafka's RequestMetrics ThrottleTimeMs on the
    broker's Prometheus endpoint."""
    host, port, _, server = broker
    count_before, sum_before = _throttle_time(server)
    with KafkaConnection(host, port, client_id="admin") as conn:
        assert _alter(conn, [("client-id", "busy")], [("request_percentage", 0.01)]) == (0, None)
    try:
        with KafkaConnection(host, port, client_id="busy") as conn:
            throttles = []
            start = time.monotonic()
            for _ in range(3):
                r = conn.request(3, {"topics": [], "allow_auto_topic_creation": False})
                throttles.append(r.throttle_time.total_seconds())
            elapsed = time.monotonic() - start
        assert max(throttles) > 0
        # the connection is muted for the throttle times answered: the requests took about as long
        assert elapsed >= 0.8 * sum(throttles[:-1])
        with KafkaConnection(host, port, client_id="other") as conn:
            assert conn.request(3, {"topics": []}).throttle_time.total_seconds() == 0
        count_after, sum_after = _throttle_time(server)
        assert count_after - count_before >= 4                # every Metadata answered counts, throttled or not
        assert abs((sum_after - sum_before) - 1000 * sum(throttles)) <= 3, (sum_after - sum_before, throttles)
    finally:
        with KafkaConnection(host, port, client_id="admin") as conn:
            _alter(conn, [("client-id", "busy")], [("request_percentage", None)])


def _session_fetch(conn, topic: str, offset: int | None, session_id: int, epoch: int):
    """A Fetch v12 in a session: the partition named at `offset` (None: not named)."""
    partitions = [] if offset is None else [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                             "last_fetched_epoch": -1, "log_start_offset": -1,
                                             "partition_max_bytes": 64 * 1024}]
    return conn.request(1, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                            "topics": [{"topic": topic, "partitions": partitions}] if partitions else [],
                            "forgotten_topics_data": [], "rack_id": ""}, version=12)


def test_a_throttled_fetch_session_loses_nothing(broker):
    """A consumer in a fetch session (KIP-227) held to its consumer_byte_rate: a throttled answer
    is empty and carries the throttle time; a throttled full fetch opens no session; after a
    throttled incremental one the session goes on and the records it withheld come next."""
    host, port, _, server = broker
    bootstrap = f"{host}:{port}"
    _produce_for(bootstrap, "quota-session", "fast", 1.0)           # unthrottled: many quotas' worth
    with KafkaConnection(host, port) as conn:
        assert _alter(conn, [("client-id", "sessioned")], [("consumer_byte_rate", RATE)]) == (0, None)
    cache = server.broker.fetching.sessions.cache
    try:
        with KafkaConnection(host, port, client_id="sessioned") as conn:
            # Full fetches until one is throttled: it opens no session.
            for _ in range(100):
                held = len(cache)
                r = _session_fetch(conn, "quota-session", 0, 0, 0)
                if r.throttle_time.total_seconds() > 0:
                    break
                assert r.session_id != 0
            else:
                pytest.fail("no full fetch was throttled")
            assert r.session_id == 0 and not r.responses and len(cache) == held
            time.sleep(r.throttle_time.total_seconds() + SAMPLES)
            # A session, then incremental fetches moving on until one is throttled.
            r = _session_fetch(conn, "quota-session", 0, 0, 0)
            assert r.throttle_time.total_seconds() == 0 and r.session_id != 0
            session_id, epoch = r.session_id, 1
            offset = _last_offset(r.responses[0].partitions[0].records) + 1
            for _ in range(100):
                r = _session_fetch(conn, "quota-session", offset, session_id, epoch)
                epoch += 1
                if r.throttle_time.total_seconds() > 0:
                    break
                assert r.session_id == session_id
                offset = _last_offset(r.responses[0].partitions[0].records) + 1
            else:
                pytest.fail("no incremental fetch was throttled")
            assert r.session_id == session_id and not r.responses
            # The session holds `offset`: the next answer (naming nothing) brings the records from it.
            time.sleep(r.throttle_time.total_seconds() + SAMPLES)
            r = _session_fetch(conn, "quota-session", None, session_id, epoch)
            assert r.error_code == 0 and r.session_id == session_id and r.throttle_time.total_seconds() == 0
            records = r.responses[0].partitions[0].records
            first = next(iter_batches(bytes(records), source="fetch", allow_partial_tail=True))[1]
            assert first.base_offset <= offset <= first.base_offset + first.last_offset_delta
    finally:
        with KafkaConnection(host, port) as conn:
            _alter(conn, [("client-id", "sessioned")], [("consumer_byte_rate", None)])


def _last_offset(records: bytes) -> int:
    last = -1
    for _, header in iter_batches(bytes(records), source="fetch", allow_partial_tail=True):
        last = header.base_offset + header.last_offset_delta
    return last
