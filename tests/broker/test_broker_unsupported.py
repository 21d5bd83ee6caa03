"""What the broker does not serve fails fast with Kafka's errors (issue 15, items 13 and 14):
ListGroups is served; unadvertised APIs and Produce v0..v2 are refused at once with
Kafka's error codes; old librdkafka (kcat from Debian, librdkafka 2.0.2) compresses its batches
because Produce is advertised from v0, as Apache Kafka 4.0 does (KAFKA-18659)."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

import broker_spawner  # noqa: E402
from broker_helpers import (api_versions_frame, connect, create, parse_response, produce,  # noqa: E402
                            recv_frame, request_frame, wait_until)
from logcore.log.log_root import LogRoot  # noqa: E402


def _produce_v0_frame(version: int, topic: str, partitions: list[int], acks: int = 1, cid: int = 9) -> bytes:
    """A Produce v0..v2 request (message format v1 sets are opaque bytes here)."""
    body = struct.pack(">hhih", 0, version, cid, 3) + b"old"
    body += struct.pack(">hi", acks, 5000) + struct.pack(">i", 1)
    body += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(partitions))
    for p in partitions:
        message_set = b"\0" * 34
        body += struct.pack(">ii", p, len(message_set)) + message_set
    return struct.pack(">i", len(body)) + body


def test_api_versions_advertise_produce_from_v0_and_refuse_v0_to_v2(broker):
    create(broker, "oldproduce", 2)
    with connect(broker) as s:
        s.sendall(api_versions_frame(3))
        _, body = parse_response(18, 3, recv_frame(s))
        keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert keys[0] == (0, 10)
        assert keys[29] == keys[30] == keys[31] == (1, 3)    # the ACL APIs, as Kafka 4.1 serves them
        for version in (0, 1, 2):
            s.sendall(_produce_v0_frame(version, "oldproduce", [0, 1], cid=40 + version))
            frame = recv_frame(s)
            assert frame is not None, f"connection closed on Produce v{version}"
            cid, n_topics = struct.unpack_from(">ii", frame, 0)
            assert (cid, n_topics) == (40 + version, 1)
            pos = 8 + 2 + len("oldproduce")
            (n_parts,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            entry = 14 + (8 if version >= 2 else 0)
            errors = [struct.unpack_from(">ihq", frame, pos + i * entry) for i in range(n_parts)]
            assert errors == [(0, 35, -1), (1, 35, -1)]       # UNSUPPORTED_VERSION per partition
            assert len(frame) == pos + n_parts * entry + (4 if version >= 1 else 0)
        # acks=0: no response, and the connection still serves the next request
        s.sendall(_produce_v0_frame(1, "oldproduce", [0], acks=0))
        s.sendall(api_versions_frame(77))
        assert parse_response(18, 3, recv_frame(s))[0] == 77
    assert "answered UNSUPPORTED_VERSION" in broker.log_text()
    root = LogRoot.open(str(broker.root), read_only=True)
    try:
        for p in (0, 1):
            log = root.log("oldproduce", p)
            try:
                assert log.log_end_offset == 0                # nothing was written
            finally:
                log.close()
    finally:
        root.close()


def test_unadvertised_api_called_anyway_gets_unsupported_version(broker):
    import datetime

    from kio.schema.update_features.v0.request import UpdateFeaturesRequest

    with connect(broker) as s:       # UpdateFeatures: a KRaft controller's API, never served here
        s.sendall(request_frame(57, 0, UpdateFeaturesRequest(timeout=datetime.timedelta(seconds=1),
                                                             feature_updates=()), 5))
        frame = recv_frame(s)
        assert frame is not None
        cid, body = parse_response(57, 0, frame)
        assert cid == 5 and body.error_code == 35
        s.sendall(api_versions_frame(6))                      # the connection stays usable
        assert parse_response(18, 3, recv_frame(s))[0] == 6


def test_list_consumer_groups(broker):
    create(broker, "listed", 1)
    produce(broker, "listed", [b"a"])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-listed", "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000})
    c.subscribe(["listed"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        assert wait_until(lambda: c.poll(0.2) is not None, 20)

        def listed():
            result = admin.list_consumer_groups(request_timeout=10).result(15)
            assert not result.errors, result.errors
            return {g.group_id: g for g in result.valid}

        groups = listed()
        assert "g-listed" in groups
        assert groups["g-listed"].state.name == "STABLE"
        assert groups["g-listed"].is_simple_consumer_group is False
        from confluent_kafka import ConsumerGroupState
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}, request_timeout=10).result(15)
        assert "g-listed" not in {g.group_id for g in empty.valid} and not empty.errors
        kafka = pytest.importorskip("kafka")
        kp_admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            listed_by_kafka_python = kp_admin.list_groups()
        finally:
            kp_admin.close()
        assert "g-listed" in repr(listed_by_kafka_python), listed_by_kafka_python
    finally:
        c.close()
    assert wait_until(lambda: listed()["g-listed"].state.name == "EMPTY", 20)


# ------------------------------------------------------------------ old librdkafka: kcat

def _kcat_librdkafka() -> str | None:
    kcat = shutil.which("kcat")
    if kcat is None:
        return None
    out = subprocess.run([kcat, "-V"], capture_output=True, text=True, timeout=10).stdout
    for line in out.splitlines():
        if "librdkafka" in line:
            return line.strip()
    return out.strip()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_kcat_compresses_its_batches(broker, codec, tmp_path):
    version = _kcat_librdkafka()
    if version is None:
        pytest.skip("kcat is not installed (Debian: apt-get install -y kcat, librdkafka 2.0.2)")
    topic = f"kcat-{codec}"
    create(broker, topic, 1)
    lines = b"".join(b"record number %d of a compressible batch\n" % i for i in range(200))
    run = subprocess.run(["kcat", "-b", broker.bootstrap, "-t", topic, "-P", "-p", "0", "-z", codec,
                          "-X", "linger.ms=50"], input=lines, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    assert b"does not support compression" not in run.stderr, (version, run.stderr.decode())
    segments = sorted((broker.root / f"{topic}-0").glob("*.log"))
    dump = broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", "dump", "--files", *map(str, segments)],
                              timeout=60)
    assert dump.returncode == 0, dump.stderr
    codecs = set(re.findall(r"compresscodec: (\w+)", dump.stdout))
    assert codecs == {codec}, (version, dump.stdout[:2000])
    got = subprocess.run(["kcat", "-b", broker.bootstrap, "-t", topic, "-C", "-e", "-o", "beginning"],
                         capture_output=True, timeout=60)
    assert got.stdout == lines
