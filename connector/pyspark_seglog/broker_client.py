"""A small Kafka protocol client for the connector's broker paths (`kafka.bootstrap.servers`).

It speaks to one broker that leads every partition (a `seglog broker`, or a single-node Apache
Kafka: tests/connector/test_connector_on_kafka.py) over one TCP connection, with the request and response schemas of the kio package: ApiVersions first, then
each API at the highest version both sides know. Requests can be pipelined (`send` several,
then `receive` their responses in order), which the idempotent producer of `broker_sink` uses.

Every failure is a SegLogError whose message names the bootstrap servers.
"""
from __future__ import annotations

import io
import socket
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from logcore.broker.protocol import build
from logcore.errors import SegLogError, TopicNotFoundError
from pyspark_seglog.bootstrap import parse_bootstrap

PRODUCE, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = \
    0, 2, 3, 18, 19, 22, 32
API_NAMES = {PRODUCE: "Produce", LIST_OFFSETS: "ListOffsets", METADATA: "Metadata",
             API_VERSIONS: "ApiVersions", CREATE_TOPICS: "CreateTopics",
             INIT_PRODUCER_ID: "InitProducerId", DESCRIBE_CONFIGS: "DescribeConfigs"}
# The versions this client can build and read (ListOffsets from v2: isolation_level; Produce
# from v3: RecordBatch v2 and up to v9, the last one that names topics).
CLIENT_WINDOWS = {PRODUCE: (3, 9), LIST_OFFSETS: (2, 7), METADATA: (1, 12), CREATE_TOPICS: (2, 5),
                  INIT_PRODUCER_ID: (0, 4), DESCRIBE_CONFIGS: (1, 4)}

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
ISOLATION_LEVEL = {"read_uncommitted": 0, "read_committed": 1}
TOPIC_RESOURCE = 2                    # DescribeConfigs resource type of a topic

# Kafka error codes the connector acts on.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
TOPIC_ALREADY_EXISTS = 36
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
KAFKA_STORAGE_ERROR = 56
# Errors after which the same request may succeed when sent again.
# (An unknown partition too, as Kafka's producer: it may be a broker still starting; the
# delivery timeout bounds the wait for one that is really gone.)
RETRIABLE = frozenset({UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
                       KAFKA_STORAGE_ERROR, 14, 15, 16, 19, 20})   # 14-16 coordinator, 19-20 replicas

_SIZE = struct.Struct(">i")
DEFAULT_TIMEOUT_S = 30.0


class BrokerError(SegLogError):
    """The broker answered with an error, or a response could not be understood."""

    def __init__(self, message: str, code: int = -1):
        super().__init__(message)
        self.code = code


class BrokerConnectionError(BrokerError):
    """No bootstrap server could be reached, or the connection broke (retriable)."""


def error_name(code: int) -> str:
    from kio.schema.errors import ErrorCode
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


@cache
def _request_writers(api_key: int, version: int):
    schema = load_request_schema(api_key, version)
    header = schema.__header_schema__
    return schema, header, entity_writer(header), entity_writer(schema)


@cache
def _response_readers(api_key: int, version: int):
    schema = load_response_schema(api_key, version)
    return entity_reader(schema.__header_schema__), entity_reader(schema)


@dataclass(frozen=True)
class PartitionOffset:
    offset: int
    error: int


class BrokerClient:
    """One connection to the first bootstrap server that answers; not thread-safe."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "seglog-spark",
                 timeout: float = DEFAULT_TIMEOUT_S):
        self.bootstrap = str(bootstrap_servers)
        self.addresses = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._versions: dict[int, int] = {}
        self._correlation = 0
        self._pending: list[tuple[int, int, int]] = []     # (correlation id, api key, version)

    # ---------------------------------------------------------------- connection
    def where(self) -> str:
        return f"the broker at kafka.bootstrap.servers={self.bootstrap}"

    def connect(self) -> None:
        if self._sock is not None:
            return
        failures = []
        for host, port in self.addresses:
            try:
                sock = socket.create_connection((host, port), timeout=self.timeout)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            sock.settimeout(self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
            try:
                self._negotiate()
            except BaseException:
                self.close()
                raise
            return
        raise BrokerConnectionError(
            f"cannot reach {self.where()}: {'; '.join(failures)}. Is a Kafka-protocol broker (`seglog broker` or Apache Kafka) running there?")

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._pending.clear()

    def __enter__(self) -> "BrokerClient":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _negotiate(self) -> None:
        self._versions = {API_VERSIONS: 0}
        body = self.request(API_VERSIONS, {})
        if body.error_code != NONE:
            raise BrokerError(f"{self.where()} refused ApiVersions: {error_name(body.error_code)}",
                              int(body.error_code))
        served = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        for key, (lo, hi) in CLIENT_WINDOWS.items():
            if key not in served:
                continue                    # checked when the API is first used
            s_lo, s_hi = served[key]
            if max(lo, s_lo) <= min(hi, s_hi):
                self._versions[key] = min(hi, s_hi)

    def version(self, api_key: int) -> int:
        self.connect()
        v = self._versions.get(api_key)
        if v is None:
            lo, hi = CLIENT_WINDOWS[api_key]
            raise BrokerError(
                f"{self.where()} does not serve {API_NAMES[api_key]} versions {lo}..{hi}, which"
                " this client needs")
        return v

    # ---------------------------------------------------------------- requests
    def send(self, api_key: int, values: dict) -> int:
        """Send one request (kio dataclass built from Kafka field names); returns its correlation id."""
        version = self.version(api_key)
        schema, header_t, write_header, write_body = _request_writers(api_key, version)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        write_header(buf, header_t(request_api_key=api_key, request_api_version=version,
                                   correlation_id=self._correlation, client_id=self.client_id))
        write_body(buf, build(schema, values))
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(
                f"lost the connection to {self.where()} sending {API_NAMES[api_key]}: {exc}") from None
        finally:
            del frame
        self._pending.append((self._correlation, api_key, version))
        return self._correlation

    def receive(self) -> Any:
        """The response (kio dataclass) to the oldest request still waiting for one."""
        correlation, api_key, version = self._pending.pop(0)
        what = API_NAMES[api_key]
        try:
            head = self._recv_exactly(4)
            (size,) = _SIZE.unpack(head)
            frame = self._recv_exactly(size)
        except (OSError, EOFError) as exc:
            self.close()
            raise BrokerConnectionError(
                f"lost the connection to {self.where()} waiting for the {what} response: {exc}") from None
        read_header, read_body = _response_readers(api_key, version)
        try:
            header, used = read_header(frame, 0)
            body, _ = read_body(frame, used)
        except Exception as exc:      # kio raises several types: all mean an unreadable response
            self.close()
            raise BrokerError(f"unreadable {what} v{version} response from {self.where()}:"
                              f" {type(exc).__name__}: {exc}") from None
        if header.correlation_id != correlation:
            self.close()
            raise BrokerError(f"{self.where()} answered correlation id {header.correlation_id}"
                              f" where {correlation} ({what}) was expected")
        return body

    def request(self, api_key: int, values: dict) -> Any:
        self.connect()
        self.send(api_key, values)
        return self.receive()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _recv_exactly(self, n: int) -> bytes:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise EOFError("the broker closed the connection")
            got += k
        return bytes(out)

    # ---------------------------------------------------------------- the APIs the connector uses
    def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Partitions of each topic (None: the broker does not have it); never creates topics."""
        body = self.request(METADATA, {"topics": [{"name": t} for t in topics],
                                       "allow_auto_topic_creation": False})
        out: dict[str, int | None] = {t: None for t in topics}
        for t in body.topics:
            if t.error_code == NONE:
                out[t.name] = len(t.partitions)
            elif t.error_code != UNKNOWN_TOPIC_OR_PARTITION:
                raise BrokerError(f"{self.where()}: Metadata for topic {t.name!r} failed:"
                                  f" {error_name(t.error_code)}", int(t.error_code))
        return out

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> bool:
        """Create a topic; False if it already existed."""
        body = self.request(CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": 30_000, "validate_only": False})
        result = body.topics[0]
        if result.error_code == TOPIC_ALREADY_EXISTS:
            return False
        if result.error_code != NONE:
            raise BrokerError(f"{self.where()} could not create topic {name!r}:"
                              f" {error_name(result.error_code)} {getattr(result, 'error_message', '') or ''}".rstrip(),
                              int(result.error_code))
        return True

    def topic_config(self, topic: str, names: list[str]) -> dict[str, str]:
        body = self.request(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": names}],
            "include_synonyms": False, "include_documentation": False})
        result = body.results[0]
        if result.error_code != NONE:
            raise BrokerError(f"{self.where()}: DescribeConfigs of topic {topic!r} failed:"
                              f" {error_name(result.error_code)} {result.error_message or ''}".rstrip(),
                              int(result.error_code))
        return {c.name: c.value for c in result.configs}

    def list_offsets(self, partitions: list[tuple[str, int]], *, timestamp: int = LATEST_TIMESTAMP,
                     isolation: str = "read_committed") -> dict[tuple[str, int], int]:
        """The offset of each partition for `timestamp` (-1 latest: the LSO with read_committed,
        the HW with read_uncommitted; -2 earliest). Unknown partitions raise TopicNotFoundError."""
        if not partitions:
            return {}
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        body = self.request(LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": ISOLATION_LEVEL[isolation],
            "topics": [{"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp,
                                                   "current_leader_epoch": -1, "max_num_offsets": 1}
                                                  for p in ps]}
                       for t, ps in by_topic.items()]})
        out = {}
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if p.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                    raise TopicNotFoundError(
                        f"{self.where()} has no partition {t.name}-{p.partition_index}: is it serving"
                        " the log root given as the path?")
                if p.error_code != NONE:
                    raise BrokerError(f"{self.where()}: ListOffsets of {t.name}-{p.partition_index}"
                                      f" failed: {error_name(p.error_code)}", int(p.error_code))
                out[tp] = int(p.offset)
        missing = [tp for tp in partitions if tp not in out]
        if missing:
            raise BrokerError(f"{self.where()} gave no offset for {missing[0][0]}-{missing[0][1]}")
        return out

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and its epoch."""
        body = self.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60_000,
                                               "producer_id": -1, "producer_epoch": -1})
        if body.error_code != NONE:
            raise BrokerError(f"{self.where()} refused InitProducerId: {error_name(body.error_code)}",
                              int(body.error_code))
        return int(body.producer_id), int(body.producer_epoch)
