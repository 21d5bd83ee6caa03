"""The source's options: the Kafka source's names and meanings, parsed and validated once.

Spark lower-cases option names; every function here takes the lower-cased mapping. Parsing
happens in the reader constructors, so a bad option fails the query at its start with one error
that names the option, the value and what is allowed.
"""
from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field

from logcore.errors import InvalidConfigError
from logcore.wire.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pyspark_seglog.bootstrap import parse_bootstrap
from pyspark_seglog.kafka_security import PLAINTEXT, KafkaSecurity, check_security_option
from pyspark_seglog.kafka_settings import CONSUMER_SETTINGS, check_known, warn_inert
from pyspark_seglog.offsets import parse_assign, parse_partition_map
from pyspark_seglog.read_path import READ_PATH_OPTION, parse_read_path
from pyspark_seglog.storage_options import (STORAGE_PREFIX, TIERED_PREFIX, root_url, storage_options,
                                           tiered_settings)


ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
TIMESTAMP_STRATEGIES = ("error", "latest")
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
log = logging.getLogger("pyspark_seglog")

# Canonical spelling of every option the source knows, keyed by the lower-cased name Spark passes.
SOURCE_OPTIONS = {name.lower(): name for name in (
    "path", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition",
    "failOnDataLoss", "includeHeaders", "isolation.level", "readFrom",
)}
# Kafka source options that only tune its Kafka consumer: accepted (so that moving a pipeline from
# format("kafka") changes the format and the path only), named in a warning, without effect.
IGNORED_OPTIONS = {name.lower(): name for name in (
    "groupIdPrefix", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
)}
KAFKA_PREFIX = "kafka."
BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
# The Kafka consumer's per-partition fetch size: here the most bytes of whole batches a task
# reads and decodes at a time (so also about the size of each Arrow batch it yields).
FETCH_BYTES_OPTION = "kafka.max.partition.fetch.bytes"
DEFAULT_FETCH_BYTES = 8 << 20
# KIP-392: the rack a task fetching through the brokers is in (a replica there serves it).
CLIENT_RACK_OPTION = "kafka.client.rack"
# How long a task fetching through the brokers retries without progress (leader changes,
# brokers down) before it fails: the Kafka consumer's default.api.timeout.ms.
RETRY_TIMEOUT_OPTION = "kafka.default.api.timeout.ms"
DEFAULT_RETRY_TIMEOUT_MS = 60_000
# Kafka consumer settings Spark's Kafka source refuses, with why.
REJECTED_KAFKA_OPTIONS = {
    "auto.offset.reset": (
        "the query decides where it starts: set the source option 'startingOffsets' to 'earliest' or"
        " 'latest' (or a JSON map of offsets); a restarted query always resumes from its checkpoint"),
    "key.deserializer": (
        "keys are always returned as binary; deserialize them with DataFrame operations,"
        " e.g. CAST(key AS STRING)"),
    "value.deserializer": (
        "values are always returned as binary; deserialize them with DataFrame operations,"
        " e.g. CAST(value AS STRING) or from_json"),
    "enable.auto.commit": (
        "the query tracks its offsets in its checkpoint and never commits them anywhere else"),
    "interceptor.classes": (
        "the source does not run consumer interceptors"),
}
STRATEGY_OPTIONS = ("subscribe", "subscribepattern", "assign")
ENDING_OPTIONS = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")


def _display(name: str) -> str:
    return SOURCE_OPTIONS.get(name, IGNORED_OPTIONS.get(name, name))


def parse_bool(options, name: str, default: bool) -> bool:
    """A boolean option (`true`/`false`, any case); `name` is the lower-cased option name."""
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(f"option {_display(name)}={raw!r}: must be true or false")


def _parse_int(options, name: str, *, minimum: int = 1) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(
            f"option {_display(name)}={raw!r}: must be an integer >= {minimum}") from None
    if value < minimum:
        raise InvalidConfigError(f"option {_display(name)}={raw!r}: must be an integer >= {minimum}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1, "us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
            "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(raw: str, name: str = "maxtriggerdelay") -> int:
    """Spark's duration strings: `15m`, `30s`, `500ms`, `1h`, `2d`; a bare number is milliseconds."""
    m = _DURATION.match(str(raw))
    if not m:
        raise InvalidConfigError(
            f"option {_display(name)}={raw!r}: must be a duration such as 500ms, 30s, 15m, 1h or 2d")
    return int(int(m.group(1)) * _UNIT_MS[m.group(2).lower() if m.group(2) else None])


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends.

    kind: "earliest" | "latest" | "offsets" (offsets: {(topic, partition): offset, -2 earliest,
    -1 latest}) | "timestamp" (timestamp: ms for every partition) | "timestamps" (timestamps:
    {(topic, partition): ms}).
    """
    kind: str
    offsets: dict = field(default_factory=dict)
    timestamp: int | None = None
    option: str = ""            # the option it came from, for error messages


@dataclass(frozen=True)
class SourceOptions:
    root: str
    storage_options: dict
    strategy: str                              # subscribe | subscribepattern | assign
    topics: tuple = ()                         # subscribe
    pattern: str | None = None                 # subscribePattern
    assigned: tuple = ()                       # assign: ((topic, partition), ...)
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    isolation: str = "read_committed"
    # kafka.bootstrap.servers: ask this broker for each partition's latest offset (its HW, or
    # LSO with read_committed) instead of reading the root's checkpoint; records still come
    # from the root, which must be the broker's log dir.
    bootstrap_servers: str | None = None
    fetch_bytes: int = DEFAULT_FETCH_BYTES         # kafka.max.partition.fetch.bytes
    read_path: str = "auto"                        # readFrom: auto | files | brokers (read_path.py)
    client_rack: str = ""                          # kafka.client.rack
    retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS   # kafka.default.api.timeout.ms
    tiered: dict | None = None                     # rsm.config.* (remote-tier credentials)
    security: KafkaSecurity = PLAINTEXT            # kafka.security.protocol, kafka.ssl.*, kafka.sasl.*

    @property
    def roots(self) -> tuple[str, ...]:
        """`path` as given: one root, or a comma-separated list of log dirs (several brokers'
        log.dirs, the replicas of a cluster's partitions: pyspark_seglog.replicas)."""
        return tuple(r.strip() for r in self.root.split(",") if r.strip())

    def matches(self, topic: str) -> bool:
        """Whether a topic belongs to the subscription (subscribe / subscribePattern)."""
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribepattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _p in self.assigned)


# The Kafka consumer settings the source applies; the others tune a consumer it does not run.
APPLIED_KAFKA_SETTINGS = frozenset(k[len(KAFKA_PREFIX):] for k in (
    BOOTSTRAP_OPTION, FETCH_BYTES_OPTION, CLIENT_RACK_OPTION, RETRY_TIMEOUT_OPTION, "kafka.isolation.level",
    "kafka.security.protocol"))


def _applied(setting: str) -> bool:
    return setting in APPLIED_KAFKA_SETTINGS or setting.startswith(("ssl.", "sasl."))


def check_option_names(options) -> None:
    """Unknown and refused options: one error naming the option (and the closest known one)."""
    for name in options:
        key = name.lower()
        if (key in SOURCE_OPTIONS or key in IGNORED_OPTIONS or key.startswith(STORAGE_PREFIX)
                or key.startswith(TIERED_PREFIX)):
            continue
        if key.startswith(KAFKA_PREFIX):
            setting = key[len(KAFKA_PREFIX):]
            if setting in REJECTED_KAFKA_OPTIONS:
                raise InvalidConfigError(
                    f"option {name}: the Kafka setting '{setting}' is not supported:"
                    f" {REJECTED_KAFKA_OPTIONS[setting]}")
            check_known(name, CONSUMER_SETTINGS, "consumer", "the seglog source")
            check_security_option(name, options[name])
            continue
        known = list(SOURCE_OPTIONS) + list(IGNORED_OPTIONS)
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean {_display(close[0])}?" if close else ""
        raise InvalidConfigError(
            f"unknown option {name!r} for the seglog source{hint} (known options:"
            f" {', '.join(SOURCE_OPTIONS.values())}, storage.*, and the Kafka consumer's settings as kafka.*)")


def _strategy(options) -> tuple[str, tuple, str | None, tuple]:
    given = [k for k in STRATEGY_OPTIONS if options.get(k) is not None]
    if len(given) != 1:
        names = ", ".join(_display(k) for k in given) if given else "none"
        raise InvalidConfigError(
            "exactly one of the options subscribe, subscribePattern, assign must be given"
            f" (given: {names})")
    kind = given[0]
    raw = str(options[kind])
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise InvalidConfigError(
                f"option subscribe={raw!r}: no topics; give a comma-separated list of topic names")
        return kind, topics, None, ()
    if kind == "subscribepattern":
        if not raw.strip():
            raise InvalidConfigError("option subscribePattern='': give a regular expression of topic names")
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidConfigError(
                f"option subscribePattern={raw!r}: not a valid regular expression ({exc})") from None
        return kind, (), raw, ()
    assigned = parse_assign(raw, "assign")
    return kind, (), None, tuple(assigned)


def _offset_spec(options, *, prefix: str, default: str) -> OffsetSpec:
    """starting* / ending* options; precedence as in Spark: timestamp, by-timestamp, offsets."""
    ts_name, by_ts_name, off_name = (f"{prefix}timestamp", f"{prefix}offsetsbytimestamp",
                                     f"{prefix}offsets")
    if options.get(ts_name) is not None:
        raw = options[ts_name]
        try:
            ts = int(str(raw).strip())
        except ValueError:
            ts = -1
        if ts < 0:
            raise InvalidConfigError(
                f"option {_display(ts_name)}={raw!r}: must be a timestamp in milliseconds since the epoch (>= 0)")
        return OffsetSpec("timestamp", timestamp=ts, option=_display(ts_name))
    if options.get(by_ts_name) is not None:
        raw = str(options[by_ts_name])
        stamps = parse_partition_map(raw, _display(by_ts_name), minimum=0,
                                     what="timestamps in milliseconds (>= 0)")
        return OffsetSpec("timestamps", offsets=stamps, option=_display(by_ts_name))
    raw = options.get(off_name)
    if raw is None:
        return OffsetSpec(default, option=_display(off_name))
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
    else:
        offsets = parse_partition_map(text, _display(off_name), minimum=-2,
                                      what="offsets (>= 0, or -2 for earliest, -1 for latest)")
        return OffsetSpec("offsets", offsets=offsets, option=_display(off_name))
    return OffsetSpec(kind, option=_display(off_name))


def parse_source_options(options, *, streaming: bool) -> SourceOptions:
    """Validate every source option; `options` has Spark's lower-cased keys."""
    options = {str(k).lower(): v for k, v in options.items()}
    check_option_names(options)
    warn_inert(options, _applied, "consumer", "the seglog source")
    tuning = [IGNORED_OPTIONS[k] for k in options if k in IGNORED_OPTIONS]
    if tuning:
        log.warning("the seglog source: option(s) %s tune the Kafka source's consumer, which it does not"
                    " run: accepted so that a format(\"kafka\") pipeline runs unchanged, and without effect"
                    " here", ", ".join(sorted(tuning)))
    bootstrap = options.get(BOOTSTRAP_OPTION)
    has_path = bool(options.get("path"))
    read_path = parse_read_path(options.get(READ_PATH_OPTION.lower()), has_root=has_path,
                                has_bootstrap=bootstrap is not None)
    root = root_url(options) if has_path else ""
    storage = storage_options(options)
    strategy, topics, pattern, assigned = _strategy(options)

    starting = _offset_spec(options, prefix="starting", default="latest" if streaming else "earliest")
    if streaming:
        given = [k for k in ENDING_OPTIONS if options.get(k) is not None]
        if given:
            raise InvalidConfigError(
                f"option {_display(given[0])} is for batch queries only (spark.read);"
                " a streaming query reads on as the log grows")
        ending = OffsetSpec("latest")
    else:
        ending = _offset_spec(options, prefix="ending", default="latest")
        if starting.kind == "latest" or (starting.kind == "offsets" and LATEST_TIMESTAMP in starting.offsets.values()):
            raise InvalidConfigError(
                f"option {starting.option}={options.get('startingoffsets')!r}: a batch query cannot"
                " start at latest (-1); use earliest (-2), offsets or a timestamp")
        if ending.kind == "earliest" or (ending.kind == "offsets" and EARLIEST_TIMESTAMP in ending.offsets.values()):
            raise InvalidConfigError(
                f"option {ending.option}={options.get('endingoffsets')!r}: a batch query cannot end at"
                " earliest (-2); use latest (-1), offsets or a timestamp")
    if strategy == "assign":
        wanted = set(assigned)
        for spec in (starting, ending):
            extra = sorted(set(spec.offsets) - wanted)
            if extra:
                t, p = extra[0]
                raise InvalidConfigError(
                    f"option {spec.option} names {t}-{p}, which the option assign does not assign")

    strategy_raw = options.get("startingoffsetsbytimestampstrategy")
    ts_strategy = "error"
    if strategy_raw is not None:
        ts_strategy = str(strategy_raw).strip().lower()
        if ts_strategy not in TIMESTAMP_STRATEGIES:
            raise InvalidConfigError(
                f"option startingOffsetsByTimestampStrategy={strategy_raw!r}: must be error or latest")

    max_per_trigger = _parse_int(options, "maxoffsetspertrigger")
    min_per_trigger = _parse_int(options, "minoffsetspertrigger")
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise InvalidConfigError(
            f"option minOffsetsPerTrigger={min_per_trigger} is greater than maxOffsetsPerTrigger="
            f"{max_per_trigger}; the minimum must not exceed the maximum")
    delay_raw = options.get("maxtriggerdelay")
    delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS if delay_raw is None else parse_duration_ms(delay_raw)

    isolation = _isolation(options)
    dirs = [r.strip() for r in root.split(",")] if root else []
    if len(dirs) > 1 and (not all(dirs) or len(set(dirs)) < len(dirs)):
        raise InvalidConfigError(
            f"option path={root!r}: a comma-separated list of log dirs must name each one once,"
            " with no empty entry")
    if bootstrap is not None:
        parse_bootstrap(str(bootstrap))        # fails now, naming the option, if malformed
    return SourceOptions(
        tiered=tiered_settings(options),
        root=root, storage_options=storage, strategy=strategy, topics=topics, pattern=pattern,
        assigned=assigned, starting=starting, ending=ending, timestamp_strategy=ts_strategy,
        max_offsets_per_trigger=max_per_trigger, min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay_ms,
        min_partitions=_parse_int(options, "minpartitions"),
        max_records_per_partition=_parse_int(options, "maxrecordsperpartition"),
        fail_on_data_loss=parse_bool(options, "failondataloss", True),
        include_headers=parse_bool(options, "includeheaders", False),
        isolation=isolation,
        bootstrap_servers=None if bootstrap is None else str(bootstrap).strip(),
        fetch_bytes=_parse_int(options, FETCH_BYTES_OPTION) or DEFAULT_FETCH_BYTES,
        read_path=read_path,
        client_rack=str(options.get(CLIENT_RACK_OPTION) or "").strip(),
        retry_timeout_ms=_parse_int(options, RETRY_TIMEOUT_OPTION) or DEFAULT_RETRY_TIMEOUT_MS,
        security=KafkaSecurity.from_options(options, has_bootstrap=bootstrap is not None))


def _isolation(options) -> str:
    values = {}
    for name in ("isolation.level", "kafka.isolation.level"):
        raw = options.get(name)
        if raw is None:
            continue
        level = str(raw).strip().lower()
        if level not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"option {name}={raw!r}: must be read_committed or read_uncommitted")
        values[name] = level
    if len(set(values.values())) > 1:
        raise InvalidConfigError(
            f"options isolation.level={values['isolation.level']!r} and kafka.isolation.level="
            f"{values['kafka.isolation.level']!r} disagree; give one of them")
    return next(iter(values.values()), "read_committed")

