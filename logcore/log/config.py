"""Topic configs, declared once: Kafka's name, type, default, validator and a one-line doc.

Every topic config is a `ConfigKey` (config_key.py: parsing and validators) class attribute of
`LogConfig`; the attribute's Python name is the typed accessor (`cfg.segment_bytes`), the key's
`name` is Kafka's property name. Root-level (broker) defaults use Kafka's broker names
(`log.segment.bytes`, `log.retention.hours`, ...) and map onto the topic configs they default;
resolving a topic's values (Kafka defaults < root defaults < topic overrides) reads these tables,
so it is here with them; the rules between settings are in config_rules.py.
`docs/configuration.md` is generated from these declarations:

    python -m logcore.log.config --markdown > docs/configuration.md

Kafka's topic-name rules (topic_name.py) and the `.properties` reader (properties_file.py) are
imported here too, for the callers that take every user-given configuration from this module.
"""
from __future__ import annotations

import sys
from typing import Any

from logcore.errors import InvalidConfigError
from logcore.log.config_key import (INT64_MAX, ConfigKey, ConfigType, Validator, at_least, between,
                                    level_or, list_of, one_of, replica_list, parse_value, unknown_message)
from logcore.log.config_rules import (CROSS_FIELD_RULES, check_cross_field_rules,
                                      check_turning_off_remote_storage)
from logcore.log.topic_name import MAX_TOPIC_NAME_LENGTH
from logcore.records.compression import CODEC_BY_NAME, LEVEL_CONFIGS

_MS_PER_HOUR = 3_600_000
_MS_PER_MINUTE = 60_000


_DAY_MS = 86_400_000
_WEEK_MS = 7 * _DAY_MS


class LogConfig:
    """A topic's resolved config: Kafka defaults < root defaults < topic overrides.

    Attributes are typed (`segment_bytes: int`, `cleanup_policy: tuple[str, ...]`, ...);
    `overrides` holds the topic-level settings as given (canonical string form).
    """

    cleanup_policy: tuple[str, ...] = ConfigKey(
        "cleanup.policy", ConfigType.LIST, "delete",
        "What happens to old segments: `delete` (retention by time/size), `compact` (keep the "
        "latest record per key), or both. With `compact` (alone or with `delete`) every record needs a key,"
        " as on Kafka: the broker, `seglog produce`, the Spark sink and the library refuse records"
        " without one.",
        validator=list_of("delete", "compact"), broker_names=("log.cleanup.policy",),
        category="retention")
    segment_bytes: int = ConfigKey(
        "segment.bytes", ConfigType.INT, 1073741824,
        "Size of a segment's .log file at which a new segment is rolled.",
        validator=at_least(14), broker_names=("log.segment.bytes",), category="segment")
    segment_ms: int = ConfigKey(
        "segment.ms", ConfigType.LONG, _WEEK_MS,
        "Roll a new segment when the active one's first record is this old, even if not full.",
        validator=at_least(1),
        broker_names=("log.roll.ms", f"log.roll.hours*{_MS_PER_HOUR}"), category="segment")
    segment_jitter_ms: int = ConfigKey(
        "segment.jitter.ms", ConfigType.LONG, 0,
        "Maximum random jitter subtracted from segment.ms, so that segments do not all roll at once.",
        validator=at_least(0),
        broker_names=("log.roll.jitter.ms", f"log.roll.jitter.hours*{_MS_PER_HOUR}"),
        category="segment")
    segment_index_bytes: int = ConfigKey(
        "segment.index.bytes", ConfigType.INT, 10485760,
        "Maximum size of a segment's offset and time index files; a full index rolls the segment.",
        validator=at_least(4), broker_names=("log.index.size.max.bytes",), category="segment")
    index_interval_bytes: int = ConfigKey(
        "index.interval.bytes", ConfigType.INT, 4096,
        "Bytes of batches appended between two offset-index entries (index density).",
        validator=at_least(0), broker_names=("log.index.interval.bytes",), category="segment")
    preallocate: bool = ConfigKey(
        "preallocate", ConfigType.BOOLEAN, False,
        "Create new segment files at full segment.bytes length (local disk only).",
        broker_names=("log.preallocate",), category="segment")
    retention_ms: int = ConfigKey(
        "retention.ms", ConfigType.LONG, _WEEK_MS,
        "Delete segments whose newest record is older than this (`delete` policy); -1 keeps them forever.",
        validator=at_least(-1),
        broker_names=("log.retention.ms", f"log.retention.minutes*{_MS_PER_MINUTE}",
                      f"log.retention.hours*{_MS_PER_HOUR}"),
        category="retention")
    retention_bytes: int = ConfigKey(
        "retention.bytes", ConfigType.LONG, -1,
        "Delete the oldest segments while the partition is larger than this (`delete` policy); -1: no limit.",
        validator=at_least(-1), broker_names=("log.retention.bytes",), category="retention")
    file_delete_delay_ms: int = ConfigKey(
        "file.delete.delay.ms", ConfigType.LONG, 60000,
        "Time a deleted segment's files are kept (renamed `.deleted`) before they are removed.",
        validator=at_least(0), broker_names=("log.segment.delete.delay.ms",), category="retention")
    delete_retention_ms: int = ConfigKey(
        "delete.retention.ms", ConfigType.LONG, _DAY_MS,
        "How long compaction keeps tombstones (and empty transaction markers) after it first sees them.",
        validator=at_least(0), broker_names=("log.cleaner.delete.retention.ms",),
        category="compaction")
    min_compaction_lag_ms: int = ConfigKey(
        "min.compaction.lag.ms", ConfigType.LONG, 0,
        "Minimum age of a record before compaction may remove it.",
        validator=at_least(0), broker_names=("log.cleaner.min.compaction.lag.ms",),
        category="compaction")
    max_compaction_lag_ms: int = ConfigKey(
        "max.compaction.lag.ms", ConfigType.LONG, INT64_MAX,
        "Maximum age of an uncompacted record before the log is compacted regardless of the dirty ratio.",
        validator=at_least(1), broker_names=("log.cleaner.max.compaction.lag.ms",),
        category="compaction")
    min_cleanable_dirty_ratio: float = ConfigKey(
        "min.cleanable.dirty.ratio", ConfigType.DOUBLE, 0.5,
        "Compact a log when its uncompacted bytes exceed this fraction of the log.",
        validator=between(0, 1), broker_names=("log.cleaner.min.cleanable.ratio",),
        category="compaction")
    flush_messages: int = ConfigKey(
        "flush.messages", ConfigType.LONG, INT64_MAX,
        "fsync the log after this many appended records (the default leaves it to commit/the OS).",
        validator=at_least(1), broker_names=("log.flush.interval.messages",), category="durability")
    flush_ms: int = ConfigKey(
        "flush.ms", ConfigType.LONG, INT64_MAX,
        "fsync the log when the last flush is older than this (the default leaves it to commit/the OS).",
        validator=at_least(0), broker_names=("log.flush.interval.ms",), category="durability")
    max_message_bytes: int = ConfigKey(
        "max.message.bytes", ConfigType.INT, 1048588,
        "Largest record batch the log accepts, in bytes (after compression).",
        validator=at_least(0), broker_names=("message.max.bytes",), category="records")
    message_timestamp_type: str = ConfigKey(
        "message.timestamp.type", ConfigType.STRING, "CreateTime",
        "Record timestamps: the producer's `CreateTime` or the log's `LogAppendTime`.",
        validator=one_of("CreateTime", "LogAppendTime"),
        broker_names=("log.message.timestamp.type",), category="records")
    message_timestamp_before_max_ms: int = ConfigKey(
        "message.timestamp.before.max.ms", ConfigType.LONG, INT64_MAX,
        "Reject CreateTime records whose timestamp is more than this far in the past.",
        validator=at_least(0), broker_names=("log.message.timestamp.before.max.ms",),
        category="records")
    message_timestamp_after_max_ms: int = ConfigKey(
        "message.timestamp.after.max.ms", ConfigType.LONG, INT64_MAX,
        "Reject CreateTime records whose timestamp is more than this far in the future.",
        validator=at_least(0), broker_names=("log.message.timestamp.after.max.ms",),
        category="records")
    compression_type: str = ConfigKey(
        "compression.type", ConfigType.STRING, "producer",
        "Codec of stored batches: `producer` keeps the producer's. Another: the broker stores a"
        " produced batch of another codec recompressed into it at the topic's"
        " compression.<codec>.level (`uncompressed` inflates it), as Kafka's does; the library's"
        " appends, `seglog produce` into a root and the Spark sink writing into a root store"
        " their batches in it too, also when given a codec of their own (at the topic's level,"
        " or the sink's `kafka.compression.<codec>.level` for that codec).",
        validator=one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        broker_names=("compression.type",), category="records")
    compression_gzip_level: int = ConfigKey(
        "compression.gzip.level", ConfigType.INT, -1,
        "gzip level of batches compressed with the topic's gzip codec (compression.type=gzip):"
        " the library's appends, `seglog produce` into a root and the Spark sink (-1: zlib's default, 6).",
        validator=level_or(-1, 1, 9), broker_names=("compression.gzip.level",),
        category="records")
    compression_lz4_level: int = ConfigKey(
        "compression.lz4.level", ConfigType.INT, 9,
        "lz4 level of batches compressed with the topic's lz4 codec (compression.type=lz4): the"
        " library's appends, `seglog produce` into a root and the Spark sink (9: LZ4's fast compressor,"
        " as Kafka's default; others its high-compression one).",
        validator=between(1, 17), broker_names=("compression.lz4.level",), category="records")
    compression_zstd_level: int = ConfigKey(
        "compression.zstd.level", ConfigType.INT, 3,
        "zstd level of batches compressed with the topic's zstd codec (compression.type=zstd): the"
        " library's appends, `seglog produce` into a root and the Spark sink.",
        validator=between(-131072, 22), broker_names=("compression.zstd.level",),
        category="records")
    min_insync_replicas: int = ConfigKey(
        "min.insync.replicas", ConfigType.INT, 1,
        "Replicas that must be in sync for an acks=all produce to succeed, and for the high"
        " watermark to advance (at most the replica count counts). Below it, acks=all fails with"
        " NOT_ENOUGH_REPLICAS; acks=1 and acks=0 are not affected. A single broker holds one"
        " replica, so there a value above 1 makes every acks=all produce fail.",
        validator=at_least(1), broker_names=("min.insync.replicas",), category="replication")
    leader_replication_throttled_replicas: tuple[str, ...] = ConfigKey(
        "leader.replication.throttled.replicas", ConfigType.LIST, "",
        "Replicas whose fetches from this topic's leaders are held to the leader broker's"
        " `leader.replication.throttled.rate` while they are not in sync: `partition:brokerId`"
        " entries naming the leader's broker, or `*` for every replica (set by"
        " `kafka-reassign-partitions --throttle`).",
        validator=replica_list(), category="replication")
    follower_replication_throttled_replicas: tuple[str, ...] = ConfigKey(
        "follower.replication.throttled.replicas", ConfigType.LIST, "",
        "Replicas that fetch this topic at most at their broker's"
        " `follower.replication.throttled.rate` while they are not in sync: `partition:brokerId`"
        " entries naming the follower's broker, or `*` for every replica.",
        validator=replica_list(), category="replication")
    unclean_leader_election_enable: bool = ConfigKey(
        "unclean.leader.election.enable", ConfigType.BOOLEAN, False,
        "In a cluster, when no in-sync replica is alive, elect the first live replica anyway"
        " (the partition is available again but may lose acknowledged data). A single broker"
        " holds one replica, always its leader, so there it changes nothing.",
        broker_names=("unclean.leader.election.enable",), category="replication")
    remote_storage_enable: bool = ConfigKey(
        "remote.storage.enable", ConfigType.BOOLEAN, False,
        "Tier closed segments to remote storage (KIP-405); not allowed with `compact`.",
        category="tiered")
    local_retention_ms: int = ConfigKey(
        "local.retention.ms", ConfigType.LONG, -2,
        "With remote storage: how long segments stay on local storage; -2 uses retention.ms.",
        validator=at_least(-2), broker_names=("log.local.retention.ms",), category="tiered")
    local_retention_bytes: int = ConfigKey(
        "local.retention.bytes", ConfigType.LONG, -2,
        "With remote storage: local size limit per partition; -2 uses retention.bytes.",
        validator=at_least(-2), broker_names=("log.local.retention.bytes",), category="tiered")
    remote_log_copy_disable: bool = ConfigKey(
        "remote.log.copy.disable", ConfigType.BOOLEAN, False,
        "With remote storage: stop copying new segments (tiered data stays readable and"
        " remote retention still runs).",
        category="tiered")
    remote_log_delete_on_disable: bool = ConfigKey(
        "remote.log.delete.on.disable", ConfigType.BOOLEAN, False,
        "Needed to turn remote.storage.enable from true to false: the topic's remote segments"
        " are then deleted and its partitions keep only their local data.",
        category="tiered")

    def __init__(self, values: dict[str, Any], overrides: dict[str, str] | None = None):
        self._values = values
        self.overrides: dict[str, str] = dict(overrides or {})

    def value(self, name: str) -> Any:
        """The typed value of a known name (ConfigKey's descriptor reads through it)."""
        return self._values[name]

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_props(cls, overrides: dict[str, str] | None = None,
                   defaults: dict[str, str] | None = None) -> "LogConfig":
        """Resolve Kafka defaults < `defaults` (root-level, broker or topic names) < `overrides`.

        Every value is parsed and validated, and the cross-field rules are checked on the result.
        """
        values = {key.name: key.default for key in CONFIG_KEYS.values()}
        values.update(resolve_root_defaults(defaults or {}))
        parsed_overrides = _parse_topic_props(overrides or {})
        values.update(parsed_overrides)
        check_cross_field_rules(values)
        canonical = {name: CONFIG_KEYS[name].format(v) for name, v in parsed_overrides.items()}
        return cls(values, canonical)

    # --- derived views -------------------------------------------------------------------------

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compression_level(self) -> int | None:
        """The level for the codec compression.type names (its compression.<codec>.level), which
        every batch compressed with the topic's codec gets; None for producer, uncompressed and
        snappy (no levels)."""
        name = LEVEL_CONFIGS.get(CODEC_BY_NAME.get(self.compression_type))
        return None if name is None else self._values[name]

    @property
    def effective_local_retention_ms(self) -> int:
        """local.retention.ms with -2 resolved to retention.ms."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    def get(self, name: str) -> Any:
        """Typed value by Kafka name."""
        key_for(name)
        return self._values[name]

    def check_change_from(self, old: "LogConfig") -> None:
        """The rules on changing a topic's config from `old` to this one (AlterConfigs): turning
        remote storage off needs remote.log.delete.on.disable=true (config_rules)."""
        check_turning_off_remote_storage(old._values, self._values)

    def to_properties(self) -> dict[str, str]:
        """Every topic config, by Kafka name, in canonical string form (for describe)."""
        return {name: key.format(self._values[name]) for name, key in CONFIG_KEYS.items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values

    def __repr__(self) -> str:
        return f"LogConfig(overrides={self.overrides!r})"


CONFIG_KEYS: dict[str, ConfigKey] = {
    v.name: v for v in vars(LogConfig).values() if isinstance(v, ConfigKey)
}

# broker-level name -> (topic config key, multiplier to ms or 1), precedence within a topic key
BROKER_NAMES: dict[str, tuple[ConfigKey, int, int]] = {}
for _key in CONFIG_KEYS.values():
    for _rank, _entry in enumerate(_key.broker_names):
        _bname, _, _factor = _entry.partition("*")
        BROKER_NAMES[_bname] = (_key, int(_factor or 1), _rank)


DOUBLE_MAX = sys.float_info.max        # Java's Double.MAX_VALUE: "unlimited"


class MaintenanceConfig:
    """Root-level settings of the maintenance services (retention checks and the log cleaner),
    with Kafka's broker names and defaults. They are not topic configs: they say how often and
    with what resources the services run, for every topic of a root."""

    retention_check_interval_ms: int = ConfigKey(
        "log.retention.check.interval.ms", ConfigType.LONG, 300000,
        "How often the maintenance service checks every partition for segments to delete.",
        validator=at_least(1), category="maintenance")
    cleaner_enable: bool = ConfigKey(
        "log.cleaner.enable", ConfigType.BOOLEAN, True,
        "Run the log cleaner (compaction) for topics whose cleanup.policy contains `compact`.",
        category="maintenance")
    cleaner_threads: int = ConfigKey(
        "log.cleaner.threads", ConfigType.INT, 1,
        "Number of log cleaner threads.", validator=at_least(0), category="maintenance")
    cleaner_dedupe_buffer_size: int = ConfigKey(
        "log.cleaner.dedupe.buffer.size", ConfigType.LONG, 134217728,
        "Memory of the cleaner's offset map (24 bytes per key), shared by all cleaner threads.",
        validator=at_least(24), category="maintenance")
    cleaner_io_buffer_size: int = ConfigKey(
        "log.cleaner.io.buffer.size", ConfigType.INT, 524288,
        "I/O buffer memory of the cleaner, shared by all threads (half for reading, half for writing).",
        validator=at_least(0), category="maintenance")
    cleaner_io_max_bytes_per_second: float = ConfigKey(
        "log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, DOUBLE_MAX,
        "Throttle of the cleaner's reads plus writes, in bytes per second (default: unlimited).",
        validator=Validator(lambda v: v > 0, "greater than 0"), category="maintenance")
    cleaner_backoff_ms: int = ConfigKey(
        "log.cleaner.backoff.ms", ConfigType.LONG, 15000,
        "How long a cleaner thread sleeps when there is no log to clean.",
        validator=at_least(0), category="maintenance")
    cleaner_io_buffer_load_factor: float = ConfigKey(
        "log.cleaner.io.buffer.load.factor", ConfigType.DOUBLE, 0.9,
        "Fill factor of the cleaner's offset map (entries = buffer / 24 x this factor).",
        validator=Validator(lambda v: 0 < v <= 1, "greater than 0 and at most 1"),
        category="maintenance")

    def __init__(self, values: dict[str, Any]):
        self._values = values

    def value(self, name: str) -> Any:
        """The typed value of a known name (ConfigKey's descriptor reads through it)."""
        return self._values[name]

    @classmethod
    def from_props(cls, props: dict[str, Any] | None = None) -> "MaintenanceConfig":
        """Kafka defaults < `props`. Topic configs and their broker-level names in `props` (a
        root's defaults, or a broker-style properties file) are skipped: they belong to
        LogConfig. Any other unknown name fails, naming the closest known one."""
        values = {key.name: key.default for key in MAINTENANCE_KEYS.values()}
        for name, raw in (props or {}).items():
            key = MAINTENANCE_KEYS.get(name)
            if key is not None:
                values[name] = key.parse(raw)
            elif name not in CONFIG_KEYS and name not in BROKER_NAMES and not is_tiered_root_name(name):
                known = list(MAINTENANCE_KEYS) + list(CONFIG_KEYS) + list(BROKER_NAMES)
                raise InvalidConfigError(unknown_message(name, known, "root config"))
        return cls(values)

    def to_properties(self) -> dict[str, str]:
        return {name: key.format(self._values[name]) for name, key in MAINTENANCE_KEYS.items()}

    def __repr__(self) -> str:
        return f"MaintenanceConfig({self.to_properties()!r})"


MAINTENANCE_KEYS: dict[str, ConfigKey] = {
    v.name: v for v in vars(MaintenanceConfig).values() if isinstance(v, ConfigKey)
}


def key_for(name: str) -> ConfigKey:
    """The declaration of topic config `name`; unknown names fail with the closest known one."""
    key = CONFIG_KEYS.get(name)
    if key is None:
        raise InvalidConfigError(unknown_message(name, CONFIG_KEYS))
    return key


# --- root-level tiered storage names (declared and checked by logcore.tiered.config) -----------

ROOT_TIERING_ENABLE = "remote.log.storage.system.enable"
RSM_CONFIG_PREFIX = "rsm.config."
RLMM_CONFIG_PREFIX = "rlmm.config."


def is_tiered_root_name(name: str) -> bool:
    """Root settings of tiered storage: Kafka's `remote.log.*` broker names, the remote
    storage manager's `rsm.config.*` and the metadata manager's `rlmm.config.*` (TieredConfig
    parses and checks them)."""
    return name.startswith(("remote.log.", RSM_CONFIG_PREFIX, RLMM_CONFIG_PREFIX)) and name not in CONFIG_KEYS


def root_tiering_enabled(defaults: dict[str, Any]) -> bool:
    raw = defaults.get(ROOT_TIERING_ENABLE, False)
    return raw if isinstance(raw, bool) else str(raw).strip().lower() == "true"


def check_topic_against_root(topic: str, config: "LogConfig", defaults: dict[str, Any]) -> None:
    """A topic may set remote.storage.enable=true only on a root that enables tiered storage."""
    if config.remote_storage_enable and not root_tiering_enabled(defaults):
        raise InvalidConfigError(
            f"topic {topic}: remote.storage.enable=true needs {ROOT_TIERING_ENABLE}=true at the "
            "root (with rsm.config.storage.url naming the remote root)")


def _parse_topic_props(props: dict[str, Any]) -> dict[str, Any]:
    return {name: key_for(name).parse(raw) for name, raw in props.items()}


def resolve_root_defaults(defaults: dict[str, Any]) -> dict[str, Any]:
    """Root-level defaults (Kafka broker names like log.retention.hours, or topic names) -> typed
    topic config values. Within one topic config the most precise broker name wins, as in Kafka
    (log.retention.ms > log.retention.minutes > log.retention.hours); a topic name given directly
    wins over its broker names."""
    chosen: dict[str, tuple[int, Any]] = {}
    for name, raw in defaults.items():
        if name in MAINTENANCE_KEYS or is_tiered_root_name(name):
            continue        # a service setting kept beside the defaults (MaintenanceConfig, TieredConfig)
        if name in CONFIG_KEYS:
            key, factor, rank = CONFIG_KEYS[name], 1, -1
        elif name in BROKER_NAMES:
            key, factor, rank = BROKER_NAMES[name]
        else:
            known = list(CONFIG_KEYS) + list(BROKER_NAMES) + list(MAINTENANCE_KEYS)
            raise InvalidConfigError(unknown_message(name, known, "root config"))
        if factor != 1:
            value = parse_value(name, ConfigType.LONG, raw)
            value = value * factor if value >= 0 else value   # -1 (forever) stays -1
            try:
                value = key.parse(value)
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{exc} (from {name}={raw})") from None
        else:
            try:
                value = key.parse(raw)
            except InvalidConfigError as exc:
                if name != key.name:
                    raise InvalidConfigError(f"{exc} (from {name}={raw})") from None
                raise
        if key.name not in chosen or rank < chosen[key.name][0]:
            chosen[key.name] = (rank, value)
    return {name: value for name, (_, value) in chosen.items()}


def validate_topic_overrides(overrides: dict[str, str],
                             defaults: dict[str, str] | None = None) -> dict[str, str]:
    """Check a topic's overrides (names, values, cross-field rules against the resolved config);
    returns them in canonical string form."""
    return LogConfig.from_props(overrides, defaults).overrides


# --- generated documentation -----------------------------------------------------------------

_CATEGORY_TITLES = {
    "segment": "Segments and indexes",
    "retention": "Retention and cleanup",
    "compaction": "Compaction",
    "durability": "Flushing",
    "records": "Records, timestamps and compression",
    "replication": "Replication",
    "tiered": "Tiered storage",
}


def _doc_default(key: ConfigKey) -> str:
    text = key.format(key.default)
    if key.type is ConfigType.DOUBLE and key.default == DOUBLE_MAX:
        return "Double.MAX_VALUE (unlimited)"
    if key.default == INT64_MAX and key.type is ConfigType.LONG:
        return f"{text} (Long.MAX_VALUE)"
    if key.type is ConfigType.LONG and isinstance(key.default, int) and key.default > 0 \
            and key.name.endswith(".ms") and key.default % _MS_PER_HOUR == 0:
        return f"{text} ({key.default // _MS_PER_HOUR} h)"
    if key.type is ConfigType.INT and key.name.endswith(".bytes") and key.default >= 1 << 20:
        if key.default % (1 << 30) == 0:
            return f"{text} ({key.default >> 30} GiB)"
        if key.default % (1 << 20) == 0:
            return f"{text} ({key.default >> 20} MiB)"
    return text


def _doc_broker_name(entry: str) -> str:
    name, _, factor = entry.partition("*")
    unit = {str(_MS_PER_HOUR): " (hours)", str(_MS_PER_MINUTE): " (minutes)"}.get(factor, "")
    return f"`{name}`{unit}"


def config_markdown() -> str:
    """docs/configuration.md, generated from the declarations above."""
    out = [
        "# Topic configuration",
        "",
        "<!-- Generated by `python -m logcore.log.config --markdown > docs/configuration.md`;",
        "     edit the declarations in logcore/log/config.py, not this file. -->",
        "",
        "Topic configs use Apache Kafka's names, types and defaults. A topic's effective config is",
        "Kafka's default, overridden by the log root's defaults (Kafka's broker-level names, e.g.",
        "`log.retention.hours`, or the topic names themselves; see `conf/topic-defaults.properties`),",
        "overridden by the topic's own settings (`seglog topics --create T --config k=v`).",
        "Root defaults and topic overrides are stored in `<root>/seglog-topics.json`.",
        "",
        "Where several broker names default one topic config, the more precise one wins",
        "(`log.retention.ms` over `log.retention.minutes` over `log.retention.hours`).",
        "",
    ]
    for category, title in _CATEGORY_TITLES.items():
        keys = [k for k in CONFIG_KEYS.values() if k.category == category]
        if not keys:
            continue
        out += [f"## {title}", "",
                "| name | type | default | allowed | root-level name | description |",
                "|---|---|---|---|---|---|"]
        for k in keys:
            allowed = k.validator.allowed if k.validator else (
                "true or false" if k.type is ConfigType.BOOLEAN else "any")
            broker = ", ".join(_doc_broker_name(n) for n in k.broker_names) or "-"
            out.append(f"| `{k.name}` | {k.type.value} | `{_doc_default(k)}` | {allowed} | "
                       f"{broker} | {k.doc} |")
        out.append("")
    out += ["## Root-level maintenance settings", "",
            "How `seglog maintain` (and later the broker) runs retention and the log cleaner,",
            "for every topic of a root. Kafka's broker names and defaults; stored with the root's",
            "defaults in `seglog-topics.json` or given with `seglog maintain --config-file",
            "conf/maintenance.properties`.", "",
            "| name | type | default | allowed | description |",
            "|---|---|---|---|---|"]
    for k in MAINTENANCE_KEYS.values():
        allowed = k.validator.allowed if k.validator else (
            "true or false" if k.type is ConfigType.BOOLEAN else "any")
        out.append(f"| `{k.name}` | {k.type.value} | `{_doc_default(k)}` | {allowed} | {k.doc} |")
    out += ["", "## Rules between settings", ""]
    for rule in CROSS_FIELD_RULES:
        out.append(f"- {_RULE_TEXT[rule.__name__]}")
    out += ["", "## Topic names", "",
            f"Kafka's rules: not empty, at most {MAX_TOPIC_NAME_LENGTH} characters, only ASCII letters,",
            "digits, `.`, `_` and `-`, and not `.` or `..`. Names that differ only by `.` versus `_`",
            "collide (Kafka's metric names), so creating one next to the other is refused.", ""]
    return "\n".join(out)


_RULE_TEXT = {
    "check_compaction_lags": "`min.compaction.lag.ms` must not exceed `max.compaction.lag.ms`.",
    "check_remote_storage_not_compacted":
        "`remote.storage.enable=true` is refused when `cleanup.policy` contains `compact`.",
    "check_local_retention_ms":
        "with `remote.storage.enable=true`, `local.retention.ms` must not exceed a finite "
        "`retention.ms` (nor be -1 then).",
    "check_local_retention_bytes":
        "with `remote.storage.enable=true`, `local.retention.bytes` must not exceed a finite "
        "`retention.bytes` (nor be -1 then).",
    "check_retention_when_copy_disabled":
        "with `remote.storage.enable=true` and `remote.log.copy.disable=true`, local and total "
        "retention must be equal.",
}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m logcore.log.config",
                                     description="Print the topic config reference.")
    parser.add_argument("--markdown", action="store_true", help="docs/configuration.md content")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(config_markdown())
    else:
        for name, value in LogConfig.from_props().to_properties().items():
            print(f"{name}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
