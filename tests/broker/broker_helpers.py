"""Client helpers shared by the broker tests (confluent-kafka)."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def wait_until(predicate, timeout: float = 30) -> bool:
    """Poll `predicate` every 0.2 s until it holds or `timeout` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def earliest(b, topic: str) -> int:
    """Partition 0's log start offset as the broker answers it (ListOffsets, earliest)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        c.close()


def _admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create(b, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = _admin(b)        # must outlive the future
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})])
    futures[name].result(15)


def produce(b, topic: str, values: list[bytes], *, partition: int | None = None,
            timestamps: list[int] | None = None, **conf) -> list[tuple]:
    settings = {"bootstrap.servers": b.bootstrap, "linger.ms": 2}
    settings.update(conf)
    p = Producer(settings)
    acked: list[tuple] = []

    def on_delivery(err, msg):
        acked.append((err, msg.partition(), msg.offset(), msg.value()))

    for i, v in enumerate(values):
        kwargs = {"partition": partition} if partition is not None else {}
        if timestamps is not None:
            kwargs["timestamp"] = timestamps[i]
        p.produce(topic, key=b"k%d" % i, value=v, on_delivery=on_delivery, **kwargs)
        p.poll(0)
    assert p.flush(20) == 0
    return acked


def consume_all(b, topic: str, partitions: int, expected: int, *, start: int = 0,
                timeout: float = 15, isolation: str = "read_committed") -> list:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "assign-only", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, start) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1]))
    c.close()
    return got


# ------------------------------------------------------------------ raw protocol client
import io  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

from kio.index import load_request_schema, load_response_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402


def request_frame(api_key: int, version: int, body, correlation_id: int = 1, client_id: str = "raw") -> bytes:
    """A whole request frame (size prefix included) for a kio request dataclass."""
    schema = load_request_schema(api_key, version)
    header_t = schema.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_t)(buf, header_t(request_api_key=api_key, request_api_version=version,
                                          correlation_id=correlation_id, client_id=client_id))
    entity_writer(schema)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def connect(b, timeout: float = 5) -> socket.socket:
    s = socket.create_connection((b.host, b.port), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_frame(sock: socket.socket) -> bytes | None:
    """One response frame without its size prefix; None if the broker closed the connection."""
    head = _recv_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        out += chunk
    return out


def parse_response(api_key: int, version: int, frame: bytes):
    schema = load_response_schema(api_key, version)
    header, size = entity_reader(schema.__header_schema__)(frame, 0)
    body, _ = entity_reader(schema)(frame, size)
    return header.correlation_id, body


def api_versions_frame(correlation_id: int = 1) -> bytes:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    return request_frame(18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
                         correlation_id)


def ping(b, timeout: float = 5) -> bool:
    """The broker answers ApiVersions on a fresh connection."""
    with connect(b, timeout) as s:
        s.sendall(api_versions_frame(7))
        frame = recv_frame(s)
    if frame is None:
        return False
    cid, body = parse_response(18, 3, frame)
    return cid == 7 and body.error_code == 0
