"""A broker's Prometheus endpoint, scraped over HTTP while clients create topics, produce, consume
and commit: the counters move by what the clients did (records in, bytes in and out per topic
against the log's own size, requests per API, an error by its name) and the state gauges read
the broker (logcore/metrics/broker_metrics.py, broker_state.py, request_metrics.py).

The broker runs in this process (BrokerServer on an event loop in a thread) so that the test
reads the endpoint's bound port; the clients are librdkafka's (confluent-kafka)."""
from __future__ import annotations

import asyncio
import socket
import urllib.request
from pathlib import Path

import pytest

from logcore.broker.config import BrokerConfig
from logcore.broker.server import BrokerServer
from logcore.errors import InvalidConfigError
from logcore.metrics.endpoint import parse_listener
from in_process_broker import InProcessBroker

confluent_kafka = pytest.importorskip("confluent_kafka")
parser = pytest.importorskip("prometheus_client.parser")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("metrics")
    running = InProcessBroker({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(base / "logs"),
                               "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
                               "metrics.listener": "http://127.0.0.1:0"})
    try:
        yield running.server, running.bootstrap, base / "logs"
    finally:
        running.stop()


def scrape(server) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape over HTTP."""
    host, port = server.metrics.endpoint.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def log_bytes(root: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in root.glob(f"{topic}-*/*.log"))


def test_counters_follow_what_clients_did(served):
    server, bootstrap, root = served
    before = scrape(server)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("metered", 1, 1)]).values():
        f.result(30)
    # no loop variable: a local holding the failed future would tie this frame, and with it the
    # clients below, into a cycle with the error's traceback, alive (and reconnecting to the
    # module's stopped broker) until some later garbage collection
    with pytest.raises(confluent_kafka.KafkaException):
        admin.delete_topics(["never-created"], operation_timeout=10)["never-created"].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all"})
    for i in range(500):
        producer.produce("metered", value=b"v%05d" % i, key=b"k%d" % (i % 7))
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "metered-group",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["metered"])
    got = []
    while len(got) < 500:
        msg = consumer.poll(10)
        assert msg is not None, f"consumed {len(got)} of 500"
        assert msg.error() is None, msg.error()
        got.append(msg)
    consumer.commit(asynchronous=False)
    after = scrape(server)
    consumer.close()

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    # bytes in: exactly what the log grew by; records in: what was produced
    size = log_bytes(root, "metered")
    assert size > 500 * 6
    assert delta("kafka_server_brokertopicmetrics_bytesin_total", topic="metered") == size
    assert delta("kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == 500
    # bytes out: the consumer read every batch once
    assert delta("kafka_server_brokertopicmetrics_bytesout_total", topic="metered") == size
    # requests per API, and each one timed once
    assert delta("kafka_network_requestmetrics_requests_total", request="CreateTopics") == 1
    assert delta("kafka_network_requestmetrics_requests_total", request="DeleteTopics") == 1
    assert delta("kafka_network_requestmetrics_requests_total", request="OffsetCommit") == 1
    assert delta("kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert delta("kafka_network_requestmetrics_requests_total", request="Fetch") >= 1
    assert delta("kafka_network_requestmetrics_requests_total", request="JoinGroup") >= 1
    for api in ("Produce", "Fetch", "CreateTopics", "Metadata", "ApiVersions"):
        assert value(after, "kafka_network_requestmetrics_totaltimems_count", request=api) == \
            value(after, "kafka_network_requestmetrics_requests_total", request=api), api
        assert value(after, "kafka_network_requestmetrics_totaltimems_bucket", request=api, le="+Inf") == \
            value(after, "kafka_network_requestmetrics_requests_total", request=api), api
    assert delta("kafka_network_requestmetrics_errors_total", request="DeleteTopics",
                 error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert delta("kafka_network_requestmetrics_errors_total", request="Produce",
                 error="UNKNOWN_TOPIC_OR_PARTITION") == 0
    # the state read at scrape time: a broker alone is its own controller, nothing under-replicated,
    # the group caught up (lag 0 at offset 500)
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_consumergroup_current_offset", consumergroup="metered-group", topic="metered",
                 partition="0") == 500
    assert value(after, "kafka_consumergroup_lag", consumergroup="metered-group", topic="metered",
                 partition="0") == 0
    assert value(after, "kafka_topic_partition_current_offset", topic="metered", partition="0") == 500
    assert value(after, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") >= 1


def test_lag_is_the_records_not_yet_committed(served):
    server, bootstrap, _ = served
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        producer.produce("metered", value=b"more%d" % i)
    assert producer.flush(30) == 0
    samples = scrape(server)
    assert value(samples, "kafka_consumergroup_lag", consumergroup="metered-group", topic="metered",
                 partition="0") == 40
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_count") >= 0


def _fetch_v12(sock, topic: str, partitions: int, session_id: int, epoch: int):
    """A raw Fetch v12 of `partitions` partitions of `topic` at a session's id and epoch; the
    response's (error code, session id)."""
    import datetime
    import io
    import struct
    from kio.index import load_response_schema
    from kio.schema.fetch.v12 import request as r12
    from kio.serial import entity_reader, entity_writer
    body = r12.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
                            isolation_level=0, session_id=session_id, session_epoch=epoch,
                            topics=(r12.FetchTopic(topic=topic, partitions=tuple(
                                r12.FetchPartition(partition=i, current_leader_epoch=-1, fetch_offset=0,
                                                   last_fetched_epoch=-1, log_start_offset=-1,
                                                   partition_max_bytes=1 << 16) for i in range(partitions))),),
                            forgotten_topics_data=(), rack_id="")
    buf = io.BytesIO()
    header = r12.FetchRequest.__header_schema__
    entity_writer(header)(buf, header(request_api_key=1, request_api_version=12, correlation_id=7, client_id="m"))
    entity_writer(r12.FetchRequest)(buf, body)
    sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    frame = sock.recv(size, socket.MSG_WAITALL)
    schema = load_response_schema(1, 12)
    _, used = entity_reader(schema.__header_schema__)(frame, 0)
    response, _ = entity_reader(schema)(frame, used)
    return response.error_code, response.session_id


def test_fetch_sessions_are_counted(served):
    server, bootstrap, _ = served
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("sessioned", 3, 1)])["sessioned"].result(30)
    before = scrape(server)
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        error, session_id = _fetch_v12(sock, "sessioned", 3, 0, 0)       # epoch 0: opens a session
        assert error == 0 and session_id != 0
        opened = scrape(server)
        assert value(opened, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == \
            value(before, "kafka_server_fetchsessioncache_numincrementalfetchsessions") + 1
        assert value(opened, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == \
            value(before, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") + 3
        assert _fetch_v12(sock, "sessioned", 0, session_id, -1) == (0, 0)  # epoch -1: closes it
    closed = scrape(server)
    assert value(closed, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == \
        value(before, "kafka_server_fetchsessioncache_numincrementalfetchsessions")
    assert ("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", ()) in closed


def test_listener_setting_is_validated(tmp_path):
    assert parse_listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_listener("http://[::1]:0") == ("::1", 0)
    for bad in ("127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://h:99999", "tcp://x:1"):
        with pytest.raises(InvalidConfigError, match="metrics.listener"):
            BrokerConfig.from_props({"log.dirs": str(tmp_path), "metrics.listener": bad}, source="t")
    assert BrokerConfig.from_props({"log.dirs": str(tmp_path)}, source="t")["metrics.listener"] == ""


def test_a_port_in_use_fails_the_start(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    config = BrokerConfig.from_props({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "l"),
                                      "metrics.listener": f"http://127.0.0.1:{port}"}, source="t")
    server = BrokerServer(config)
    try:
        with pytest.raises(InvalidConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            asyncio.run(server.start())
    finally:
        taken.close()
