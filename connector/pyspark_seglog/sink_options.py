"""The sink's options, parsed and validated once when Spark plans the write.

Spark lower-cases option names before they reach a Python data source, so every name is matched
in lower case. Names mirror Spark's Kafka sink and Kafka's producer where one exists
(`topic`, `compression.type`, `batch.size`; `kafka.compression.<codec>.level`, else the topic's
compression.<codec>.level when its codec is used). `kafka.bootstrap.servers` sends the rows through
a `seglog broker` over the Kafka protocol instead of committing them into the root (the path may
then be omitted); `kafka.delivery.timeout.ms` bounds its retries; `deliveryGuarantee` says whether
it writes in Kafka transactions (exactly-once, the default; `kafka.transaction.timeout.ms`) or as
an idempotent producer (at-least-once). `kafka.security.protocol`, `kafka.ssl.*` and
`kafka.sasl.*` secure its connections (kafka_security.py: TLS, SASL PLAIN / SCRAM; settings it
cannot apply are refused by name). The Kafka producer's other settings are accepted as `kafka.*`
so that a pipeline moving from `format("kafka")` changes the format only, named in a warning
(kafka_settings.py); those whose meaning the sink cannot have (acks=1, a partitioner class,
serializers, a transactional.id) are refused, and a name no Kafka producer has is refused.
Anything else unknown fails with the closest known name.
"""
from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass, field

from logcore.errors import InvalidConfigError
from logcore.log.config import key_for, validate_topic_overrides
from logcore.records.compression import CODEC_BY_NAME, LEVEL_CONFIGS, Compression

from pyspark_seglog.bootstrap import parse_bootstrap
from pyspark_seglog.kafka_security import PLAINTEXT, KafkaSecurity, check_security_option
from pyspark_seglog.kafka_settings import PRODUCER_SETTINGS, check_known, setting_of, warn_inert
from pyspark_seglog.storage_options import STORAGE_PREFIX, root_url, storage_options

TOPIC_CONFIG_PREFIX = "topic.config."
DEFAULT_STAGING_ADOPT_BYTES = 4 << 20
# Into a root the sink writes segments, not requests: batches of up to librdkafka's batch.size
# (1,000,000 bytes) and at most half the topic's max.message.bytes. Large batches encode, patch
# (at commit) and decode for less per record than a network producer's 16 KiB.
DEFAULT_BATCH_SIZE = 1_000_000
# Through a broker each RecordBatch costs a request slot and a share of a commit: bigger
# batches by default (still well under the broker's default message.max.bytes, 1 MiB).
DEFAULT_BROKER_BATCH_SIZE = 256 << 10
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000      # Kafka producer's delivery.timeout.ms
BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
DELIVERY_TIMEOUT_OPTION = "kafka.delivery.timeout.ms"
DEFAULT_TOPIC_PARTITIONS = 1
TRANSACTION_TIMEOUT_OPTION = "kafka.transaction.timeout.ms"
GUARANTEE_OPTION = "deliveryguarantee"
# A task's transaction stays open from its first row until the driver commits the whole batch
# (or, for df.write, the whole job): Kafka's broker-side maximum (transaction.max.timeout.ms,
# 15 minutes), so that long batches commit on brokers with default settings.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000


class DeliveryGuarantee(enum.Enum):
    """How the broker path (kafka.bootstrap.servers) delivers a batch's rows."""
    EXACTLY_ONCE = "exactly-once"        # each task in a Kafka transaction the driver commits
    AT_LEAST_ONCE = "at-least-once"      # each task attempt an idempotent producer (Spark's Kafka sink)

# option (lower case) -> one-line doc, for errors and docs/spark-options.md
KNOWN_OPTIONS = {
    "path": "the log root (also given as save(path) / start(path))",
    "topic": "topic for every row; overrides the `topic` column",
    "compression.type": "none (or uncompressed), gzip, snappy, lz4, zstd; default: the topic's compression.type"
                        " (also kafka.compression.type)",
    "batch.size": "bytes of records per RecordBatch (Kafka producer's batch.size; also kafka.batch.size)",
    "maxrecordsperbatch": "at most this many records per RecordBatch",
    "autocreatetopics": "create a missing topic (true) or fail (false)",
    "topic.partitions": "partition count of a topic the sink creates",
    "takeover": "take a topic whose partitions were last written by another streaming query",
    "staging.part.bytes": "a task stages its encoded batches in parts of about this size",
    "staging.adopt.bytes": "local disk: a staged part of at least this size becomes a segment as it is (no copy)",
    "staging.publish": "a batch job with the topic option on S3: copy (the default: the commit copies each"
                       " staged part to its segment, or appends it after another writer's data) or multipart"
                       " (each task uploads its parts as their segments, the commit completes the uploads:"
                       " no copy; the job fails, publishing nothing, if another writer appends meanwhile)",
    "deliveryguarantee": "through kafka.bootstrap.servers: exactly-once (Kafka transactions, the default)"
                         " or at-least-once (idempotent producers, as Spark's Kafka sink)",
    "includeheaders": "accepted for Kafka compatibility: a `headers` column is always written",
    "checkpointlocation": "Spark's streaming checkpoint (read by Spark, not by the sink)",
    "queryname": "the streaming query's name, given with queryName() (Spark hands it to the sink)",
}
_PREFIXES = ("kafka.", STORAGE_PREFIX, TOPIC_CONFIG_PREFIX)


@dataclass(frozen=True)
class SinkOptions:
    root: str | None                         # None: writing through a broker, no path given
    storage_options: dict = field(repr=False)
    topic: str | None
    compression: Compression | None          # None: the topic's compression.type
    batch_size: int | None                   # None: default_batch_size() of the topic
    max_records: int | None
    auto_create: bool
    topic_partitions: int
    topic_config: dict
    takeover: bool
    staging_part_bytes: int | None        # None: the sink's default for the storage
    staging_adopt_bytes: int
    staging_publish: str = "copy"            # copy | multipart (segment_uploads.py)
    bootstrap_servers: str | None = None     # produce through this broker instead of the root
    delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    security: KafkaSecurity = PLAINTEXT      # kafka.security.protocol, kafka.ssl.*, kafka.sasl.*
    # codec -> kafka.compression.<codec>.level (Kafka's producer settings since 3.8, KIP-390)
    compression_levels: dict = field(default_factory=dict)

    def batch_codec(self, topic_compression: str, topic_level: int | None) -> tuple[Compression, int | None]:
        """The codec and level of the sink's batches into a topic of compression.type
        `topic_compression` and compression.<codec>.level `topic_level` for that codec: the
        compression.type option's codec, else the topic's; at kafka.compression.<codec>.level,
        else at the topic's level when the codec is the topic's, else at the codec's default."""
        topic_codec = CODEC_BY_NAME.get(topic_compression)       # None: producer
        codec = self.compression if self.compression is not None else topic_codec or Compression.NONE
        if codec in self.compression_levels:
            return codec, self.compression_levels[codec]
        return codec, topic_level if codec == topic_codec else None

    def stored_codec(self, topic_compression: str, topic_level: int | None) -> tuple[Compression, int | None]:
        """The codec and level of the sink's batches written straight into a root, where the
        sink stores what Kafka's broker would: a codec of its own other than the topic's
        compression.type (one naming a codec) gives way to the topic's, at the topic's level,
        as the broker recompresses such a batch; otherwise `batch_codec`."""
        topic_codec = CODEC_BY_NAME.get(topic_compression)
        if topic_codec is not None and self.compression is not None and self.compression != topic_codec:
            return topic_codec, topic_level
        return self.batch_codec(topic_compression, topic_level)


def default_batch_size(max_message_bytes: int) -> int:
    """The sink's batch.size for a topic when the option is not given (writing into a root)."""
    return max(1, min(DEFAULT_BATCH_SIZE, max_message_bytes // 2))


def _bool(options, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise InvalidConfigError(f"option {name}={raw!r} is not a boolean: use true or false")


def _int(options, name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise InvalidConfigError(f"option {name}={raw!r} must be an integer >= {minimum}")
    return value


# Kafka producer settings whose meaning the sink's writes cannot have: refused, with why.
# (value -> None when any value is refused; else the values that are.)
REFUSED_KAFKA_SETTINGS = {
    "acks": (("0", "1"), "the sink writes with acks=all always: its producers are idempotent or"
             " transactional, which need acks=all (Kafka's producer refuses the same); leave it out or set all"),
    "enable.idempotence": (("false",), "the sink's producers are always idempotent (deliveryGuarantee="
                           "at-least-once is Spark's Kafka sink without duplicates from retries)"),
    "key.serializer": (None, "keys are written as the binary or string `key` column; serialize them with"
                       " DataFrame operations"),
    "value.serializer": (None, "values are written as the binary or string `value` column; serialize them"
                         " with DataFrame operations, e.g. to_json"),
    "transactional.id": (None, "with deliveryGuarantee=exactly-once the sink names one transaction per task"
                         " from the query and the task (docs/sink-protocol.md); it takes no id"),
    "partitioner.class": (None, "rows go to the `partition` column's partition, else Kafka's default"
                          " partitioner (murmur2 of the key), as Spark's Kafka sink without a partitioner"),
    "partitioner.ignore.keys": (("true",), "keyed rows are placed by Kafka's default partitioner (murmur2 of"
                                " the key); give a `partition` column to place rows yourself"),
    "interceptor.classes": (None, "the sink runs no producer interceptors"),
    "transaction.two.phase.commit.enable": (("true",), "two-phase commit with an external coordinator"
                                            " (KIP-939) is not supported"),
}
# The Kafka producer settings the sink applies; the others tune a producer it does not run.
APPLIED_KAFKA_SETTINGS = frozenset((
    "bootstrap.servers", "delivery.timeout.ms", "transaction.timeout.ms", "compression.type", "batch.size",
    "acks", "enable.idempotence", "security.protocol", *LEVEL_CONFIGS.values()))


def _applied(setting: str) -> bool:
    return setting in APPLIED_KAFKA_SETTINGS or setting.startswith(("ssl.", "sasl."))


def check_kafka_setting(name: str, value) -> None:
    """A `kafka.*` option: a real producer setting, and one whose meaning the sink can have."""
    check_known(name, PRODUCER_SETTINGS, "producer", "the seglog sink")
    setting = setting_of(name)
    if setting in REFUSED_KAFKA_SETTINGS:
        refused, why = REFUSED_KAFKA_SETTINGS[setting]
        if refused is None or str(value).strip().lower() in refused:
            raise InvalidConfigError(f"option {name}={value!r} is not supported by the seglog sink: {why}")
    check_security_option(name, value)


def check_unknown(options) -> None:
    for name in options:
        low = name.lower()
        if low.startswith("kafka."):
            check_kafka_setting(name, options[name])
            continue
        if low in KNOWN_OPTIONS or low.startswith(_PREFIXES):
            continue
        close = difflib.get_close_matches(low, list(KNOWN_OPTIONS), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidConfigError(
            f"unknown seglog sink option {name!r}{hint} Known options: {', '.join(sorted(KNOWN_OPTIONS))},"
            " plus storage.*, topic.config.*, kafka.bootstrap.servers, kafka.delivery.timeout.ms,"
            " kafka.transaction.timeout.ms, kafka.compression.<codec>.level, kafka.security.protocol,"
            " kafka.ssl.*, kafka.sasl.* and the Kafka"
            " producer's other settings as kafka.* (accepted without effect, with a warning)")


def _alias(options: dict, name: str) -> None:
    """Spark's Kafka sink takes producer settings as `kafka.<name>`: honour them as `<name>`."""
    prefixed = options.pop(f"kafka.{name}", None)
    if prefixed is None:
        return
    given = options.get(name)
    if given is not None and str(given).strip().lower() != str(prefixed).strip().lower():
        raise InvalidConfigError(
            f"options {name}={given!r} and kafka.{name}={prefixed!r} disagree: give one of them")
    options[name] = prefixed


def _levels(options) -> dict[Compression, int]:
    """kafka.compression.<codec>.level, checked as the topic config of that name (same range)."""
    levels = {}
    for codec, name in LEVEL_CONFIGS.items():
        raw = options.get(f"kafka.{name}")
        if raw is None:
            continue
        key = key_for(name)
        try:
            levels[codec] = key.parse(str(raw).strip())
        except InvalidConfigError:
            raise InvalidConfigError(
                f"option kafka.{name}={raw!r} is not a {codec.name.lower()} level: it must be a whole"
                f" number, {key.validator.allowed}") from None
    return levels


def _guarantee(options, bootstrap) -> DeliveryGuarantee:
    raw = options.get(GUARANTEE_OPTION)
    if raw is None:
        return DeliveryGuarantee.EXACTLY_ONCE
    by_name = {g.value: g for g in DeliveryGuarantee}
    value = by_name.get(str(raw).strip().lower().replace("_", "-"))
    if value is None:
        raise InvalidConfigError(f"option deliveryGuarantee={raw!r} is not one of {', '.join(by_name)}")
    if bootstrap is None and value is not DeliveryGuarantee.EXACTLY_ONCE:
        raise InvalidConfigError(
            f"option deliveryGuarantee={raw!r} applies to writes through kafka.bootstrap.servers;"
            " the sink writing into a log root is always exactly-once")
    return value


def _publish_policy(options) -> str:
    raw = options.get("staging.publish", "copy")
    value = str(raw).strip().lower()
    if value not in ("copy", "multipart"):
        raise InvalidConfigError(f"option staging.publish={raw!r}: use copy (the default) or multipart")
    return value


def parse_sink_options(options) -> SinkOptions:
    """Validate every sink option; raises InvalidConfigError naming the option and what is allowed."""
    options = {str(k).lower(): v for k, v in options.items()}
    check_unknown(options)
    warn_inert(options, _applied, "producer", "the seglog sink")
    bootstrap = options.get(BOOTSTRAP_OPTION)
    if bootstrap is not None:
        parse_bootstrap(str(bootstrap))        # fails now, naming the option, if malformed
        bootstrap = str(bootstrap).strip()
    root = root_url(options) if bootstrap is None or options.get("path") else None
    topic = options.get("topic")
    if topic is not None and not str(topic).strip():
        raise InvalidConfigError("option topic='' is empty: give a topic name or drop the option")
    _alias(options, "compression.type")
    _alias(options, "batch.size")
    raw_codec = options.get("compression.type")
    compression = None
    if raw_codec is not None:
        name = str(raw_codec).strip().lower()
        if name == "producer":
            compression = None
        elif name in CODEC_BY_NAME:
            compression = CODEC_BY_NAME[name]
        else:
            raise InvalidConfigError(
                f"option compression.type={raw_codec!r} is not a codec: use none, gzip, snappy, lz4 or zstd"
                " (or producer / leave it out for the topic's compression.type)")
    topic_config = {k[len(TOPIC_CONFIG_PREFIX):]: str(v) for k, v in options.items()
                    if k.startswith(TOPIC_CONFIG_PREFIX)}
    if topic_config:
        try:
            validate_topic_overrides(topic_config)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"option topic.config.*: {exc}") from None
    return SinkOptions(
        root=root,
        storage_options=storage_options(options),
        topic=str(topic) if topic is not None else None,
        compression=compression,
        batch_size=_int(options, "batch.size", None if bootstrap is None else DEFAULT_BROKER_BATCH_SIZE, 1),
        max_records=_int(options, "maxrecordsperbatch", None, 1),
        auto_create=_bool(options, "autocreatetopics", True),
        topic_partitions=_int(options, "topic.partitions", DEFAULT_TOPIC_PARTITIONS, 1),
        topic_config=topic_config,
        takeover=_bool(options, "takeover", False),
        staging_part_bytes=_int(options, "staging.part.bytes", None, 1),
        staging_adopt_bytes=_int(options, "staging.adopt.bytes", DEFAULT_STAGING_ADOPT_BYTES, 1),
        staging_publish=_publish_policy(options),
        bootstrap_servers=bootstrap,
        delivery_timeout_ms=_int(options, DELIVERY_TIMEOUT_OPTION, DEFAULT_DELIVERY_TIMEOUT_MS, 1),
        delivery=_guarantee(options, bootstrap),
        security=KafkaSecurity.from_options(options, has_bootstrap=bootstrap is not None),
        transaction_timeout_ms=_int(options, TRANSACTION_TIMEOUT_OPTION, DEFAULT_TRANSACTION_TIMEOUT_MS, 1),
        compression_levels=_levels(options),
    )
