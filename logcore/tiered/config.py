"""Tiered-storage settings, declared once with the same machinery as the topic configs.

Root (broker-level) settings use Kafka's names: `remote.log.storage.system.enable`,
`remote.log.metadata.custom.metadata.max.bytes`, and the remote storage manager's settings under
the `rsm.config.` prefix (Kafka's `remote.log.storage.manager.impl.prefix`). The topic settings
(`remote.storage.enable`, `local.retention.ms/bytes`, `remote.log.copy.disable`) are declared with
the other topic configs in logcore/log/config.py, where compaction with tiering is refused.

`rsm.config.storage.url` names the remote root (any fsspec URL); every other
`rsm.config.storage.<name>` is an fsspec storage option (dotted names nest:
`rsm.config.storage.client_kwargs.region_name`). Key pairs for encryption are declared per id:
`rsm.config.encryption.key.pairs=k1,k2` with `rsm.config.encryption.key.pairs.k1.public.key.file`
and `...private.key.file` (PEM files).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logcore.errors import InvalidConfigError
from logcore.log.config import CONFIG_KEYS, ConfigKey, ConfigType, LogConfig, Validator, at_least, between, one_of
from logcore.storage.options import nested_storage_options
from logcore.tiered.plugin_names import AIVEN_RSM_CLASS, PluginSettings
from logcore.storage.write_stream import S3_MIN_PART_SIZE

RSM_PREFIX = "rsm.config."
STORAGE_PREFIX = "storage."
KEY_PAIRS_PREFIX = "encryption.key.pairs."
_MIB = 1024 * 1024
RLMM_PREFIX = "rlmm.config."
# The one remote storage manager, under its own name or the name of Aiven's plugin, which it
# implements (a Kafka broker.properties may name either; any other is refused).
FSSPEC_RSM_CLASS = "logcore.tiered.fsspec_rsm.FsspecRemoteStorageManager"
RSM_CLASSES = ("", FSSPEC_RSM_CLASS, AIVEN_RSM_CLASS)
# The remote log metadata managers: seglog's metadata store in the remote tier, and Kafka's
# topic-based manager, __remote_log_metadata on a cluster (tiered/metadata_policy.py).
STORE_RLMM_CLASS = "logcore.tiered.metadata_store.RemoteLogMetadataStore"
TOPIC_BASED_RLMM_CLASS = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
RLMM_CLASSES = ("", STORE_RLMM_CLASS, TOPIC_BASED_RLMM_CLASS)
UNLIMITED_RATE = 2**63 - 1          # Kafka's default quota (Long.MAX_VALUE): no limit

_KEY_ID = Validator(lambda v: v == "" or (v.replace("-", "").replace("_", "").isalnum()),
                    "empty or letters, digits, '-' and '_'")


class TieredConfig:
    """Root-level tiered-storage settings: Kafka's broker names and the `rsm.config.*` ones.

    Attributes are typed values; names of the rsm keys below are without the `rsm.config.` prefix.
    """

    system_enable: bool = ConfigKey(
        "remote.log.storage.system.enable", ConfigType.BOOLEAN, False,
        "Enable tiered storage for the root; topics opt in with remote.storage.enable.",
        category="tiered")
    manager_class_name: str = ConfigKey(
        "remote.log.storage.manager.class.name", ConfigType.STRING, "",
        f"The remote storage manager; seglog has one, named {FSSPEC_RSM_CLASS} or, as Aiven's"
        f" plugin whose settings it takes, {AIVEN_RSM_CLASS}.",
        validator=Validator(lambda v: v in RSM_CLASSES, "empty, " + " or ".join(RSM_CLASSES[1:])),
        category="tiered")
    metadata_manager_class_name: str = ConfigKey(
        "remote.log.metadata.manager.class.name", ConfigType.STRING, "",
        "The remote log metadata manager: seglog's metadata store in the remote tier, named empty,"
        f" {STORE_RLMM_CLASS} or {TOPIC_BASED_RLMM_CLASS} (whose rlmm.config.* it takes).",
        validator=Validator(lambda v: v in RLMM_CLASSES, "empty, " + " or ".join(RLMM_CLASSES[1:])),
        category="tiered")
    metadata_manager_listener_name: str = ConfigKey(
        "remote.log.metadata.manager.listener.name", ConfigType.STRING, "",
        "The listener the metadata manager's clients use; must be one of the broker's listeners.",
        validator=Validator(lambda v: v == "" or v.replace("_", "").replace("-", "").isalnum(),
                            "a listener name"), category="tiered")
    metadata_topic_replication_factor: int = ConfigKey(
        RLMM_PREFIX + "remote.log.metadata.topic.replication.factor", ConfigType.INT, 3,
        "Replication factor of __remote_log_metadata, created on first use by a cluster member;"
        " with TopicBasedRemoteLogMetadataManager only.",
        validator=between(1, 32767), category="tiered")
    metadata_topic_partitions: int = ConfigKey(
        RLMM_PREFIX + "remote.log.metadata.topic.num.partitions", ConfigType.INT, 50,
        "Partition count of __remote_log_metadata, created on first use by a cluster member;"
        " with TopicBasedRemoteLogMetadataManager only.",
        validator=at_least(1), category="tiered")
    metadata_topic_retention_ms: int = ConfigKey(
        RLMM_PREFIX + "remote.log.metadata.topic.retention.ms", ConfigType.LONG, -1,
        "retention.ms of __remote_log_metadata (-1: kept forever); with TopicBasedRemoteLogMetadataManager"
        " only.", validator=at_least(-1), category="tiered")
    copy_max_bytes_per_second: int = ConfigKey(
        "remote.log.manager.copy.max.bytes.per.second", ConfigType.LONG, UNLIMITED_RATE,
        "Most bytes per second the broker copies to the remote tier (all partitions together).",
        validator=at_least(1), category="tiered")
    fetch_max_bytes_per_second: int = ConfigKey(
        "remote.log.manager.fetch.max.bytes.per.second", ConfigType.LONG, UNLIMITED_RATE,
        "Most bytes per second the process reads from the remote tier (all partitions together).",
        validator=at_least(1), category="tiered")
    custom_metadata_max_bytes: int = ConfigKey(
        "remote.log.metadata.custom.metadata.max.bytes", ConfigType.INT, 128,
        "Largest custom metadata a remote storage manager may return for a segment.",
        validator=at_least(0), category="tiered")
    storage_url: str = ConfigKey(
        "storage.url", ConfigType.STRING, "",
        "Remote root: any fsspec URL (a folder, s3://bucket/prefix, ...). Required when enabled.",
        category="rsm")
    chunk_size: int = ConfigKey(
        "chunk.size", ConfigType.INT, 4 * _MIB,
        "Segments are cut into chunks of this many original bytes, each transformed and fetched alone.",
        validator=between(4096, 2**30 - 1), category="rsm")
    compression: str = ConfigKey(
        "compression", ConfigType.STRING, "off",
        "zstd per chunk: `off`, `on`, or `heuristic` (only when the first batch is uncompressed).",
        validator=one_of("off", "on", "heuristic"), category="rsm")
    compression_level: int = ConfigKey(
        "compression.zstd.level", ConfigType.INT, 3, "zstd level of chunk compression.",
        validator=between(-7, 22), category="rsm")
    encryption_enabled: bool = ConfigKey(
        "encryption.enabled", ConfigType.BOOLEAN, False,
        "Envelope encryption: AES-256-GCM data key per segment, wrapped with the active RSA key pair.",
        category="rsm")
    encryption_key_pair_id: str = ConfigKey(
        "encryption.key.pair.id", ConfigType.STRING, "",
        "Id of the key pair that wraps new segments' data keys (one of encryption.key.pairs).",
        validator=_KEY_ID, category="rsm")
    encryption_key_pairs: tuple[str, ...] = ConfigKey(
        "encryption.key.pairs", ConfigType.LIST, "",
        "Ids of every key pair (old ones keep old segments readable); each has "
        "encryption.key.pairs.<id>.public.key.file and .private.key.file.",
        category="rsm")
    upload_rate_limit: int = ConfigKey(
        "upload.rate.limit.bytes.per.second", ConfigType.LONG, 0,
        "Aiven's upload limit: most bytes per second uploaded (with the copy quota, the lower"
        " applies); 0: none.",
        validator=Validator(lambda v: v == 0 or v >= _MIB, "0 or at least 1048576"), category="rsm")
    upload_part_size: int = ConfigKey(
        "upload.part.size", ConfigType.INT, 8 * _MIB,
        "S3 multipart part size for a segment's data object (smaller objects: one PUT).",
        validator=at_least(S3_MIN_PART_SIZE), category="rsm")
    memory_cache_size: int = ConfigKey(
        "fetch.chunk.cache.memory.size", ConfigType.LONG, 64 * _MIB,
        "Bytes of fetched (de-transformed) chunks kept in memory, least recently used evicted; 0: none.",
        validator=at_least(0), category="rsm")
    disk_cache_size: int = ConfigKey(
        "fetch.chunk.cache.disk.size", ConfigType.LONG, 0,
        "Bytes of fetched chunks kept on local disk (in fetch.chunk.cache.path); 0: none.",
        validator=at_least(0), category="rsm")
    disk_cache_path: str = ConfigKey(
        "fetch.chunk.cache.path", ConfigType.STRING, "",
        "Folder of the disk chunk cache; required when fetch.chunk.cache.disk.size > 0.",
        category="rsm")
    prefetch_max_size: int = ConfigKey(
        "fetch.chunk.cache.prefetch.max.size", ConfigType.LONG, 16 * _MIB,
        "On a read, fetch the next chunks of the segment up to this many bytes ahead; 0: no prefetch.",
        validator=at_least(0), category="rsm")
    prefetch_threads: int = ConfigKey(
        "fetch.chunk.cache.prefetch.threads", ConfigType.INT, 4,
        "Threads that fetch chunks ahead of a sequential read.",
        validator=between(1, 64), category="rsm")
    index_cache_size: int = ConfigKey(
        "fetch.index.cache.size", ConfigType.LONG, 10 * _MIB,
        "Bytes of fetched segment indexes kept in memory.", validator=at_least(0), category="rsm")
    manifest_cache_entries: int = ConfigKey(
        "fetch.manifest.cache.entries", ConfigType.INT, 1000,
        "Segment manifests kept in memory.", validator=at_least(0), category="rsm")

    def __init__(self, values: dict[str, Any], storage_options: dict[str, Any],
                 key_files: dict[str, tuple[Path, Path]]):
        self._values = values
        self.storage_options = storage_options
        self.key_files = key_files        # id -> (public PEM, private PEM)

    def value(self, name: str) -> Any:
        """The typed value of a known name (ConfigKey's descriptor reads through it)."""
        return self._values[name]

    @property
    def enabled(self) -> bool:
        return self.system_enable

    @classmethod
    def from_props(cls, props: dict[str, Any] | None = None) -> "TieredConfig":
        """Parse root properties: Kafka's remote.* names and `rsm.config.*`; others are ignored
        (they belong to the topic and broker configs)."""
        values = {k.name: k.default for k in TIERED_KEYS.values()}
        rsm: dict[str, Any] = {}
        for name, raw in (props or {}).items():
            if name in _ROOT_KEYS:
                values[name] = _ROOT_KEYS[name].parse(raw)
            elif name.startswith(RSM_PREFIX):
                rsm[name[len(RSM_PREFIX):]] = raw
            elif name.startswith(RLMM_PREFIX):
                raise InvalidConfigError(_unknown(name, [n for n in _ROOT_KEYS if n.startswith(RLMM_PREFIX)])
                                         + "; seglog implements these rlmm.config settings only")
            elif (name.startswith("remote.log.") and name not in _KNOWN_KAFKA_REMOTE
                  and name not in CONFIG_KEYS):     # topic settings are LogConfig's
                raise InvalidConfigError(_unknown(name, list(_ROOT_KEYS)))
        plugin = PluginSettings.translate(rsm)     # Aiven's names -> seglog's
        storage_pairs: list[tuple[str, str]] = []
        key_paths: dict[str, dict[str, str]] = {}
        for short, raw in plugin.rsm.items():
            name = plugin.origin.get(short, RSM_PREFIX + short)
            if short in _RSM_KEYS:
                try:
                    values[short] = _RSM_KEYS[short].parse(raw)
                except InvalidConfigError as exc:
                    raise InvalidConfigError(str(exc).replace(
                        f"configuration {short}", f"configuration {name}")) from None
            elif short.startswith(STORAGE_PREFIX):
                storage_pairs.append((short[len(STORAGE_PREFIX):], str(raw)))
            elif short.startswith(KEY_PAIRS_PREFIX):
                key_id, _, which = short[len(KEY_PAIRS_PREFIX):].partition(".")
                if which not in ("public.key.file", "private.key.file"):
                    raise InvalidConfigError(
                        f"Unknown setting {name!r}: a key pair has public.key.file and private.key.file")
                key_paths.setdefault(key_id, {})[which] = str(raw).strip()
            else:
                raise InvalidConfigError(_unknown(name, [RSM_PREFIX + k for k in _RSM_KEYS]))
        if plugin.storage_url is not None:
            values["storage.url"] = plugin.storage_url
            config = cls(values, plugin.storage_options, {})
            config._check_rules()
            config.key_files = _key_files(values, key_paths)
            return config
        storage_options = nested_storage_options(storage_pairs, "rsm.config.storage option")
        config = cls(values, storage_options, {})
        config._check_rules()
        config.key_files = _key_files(values, key_paths)
        return config

    def _check_rules(self) -> None:
        if self.system_enable and not self.storage_url:
            raise InvalidConfigError("remote.log.storage.system.enable=true needs "
                                     "rsm.config.storage.url (the remote root)")
        if self.encryption_enabled:
            if not self.encryption_key_pair_id:
                raise InvalidConfigError("rsm.config.encryption.enabled=true needs "
                                         "rsm.config.encryption.key.pair.id")
            if self.encryption_key_pair_id not in self.encryption_key_pairs:
                raise InvalidConfigError(
                    f"rsm.config.encryption.key.pair.id={self.encryption_key_pair_id} is not one of "
                    f"rsm.config.encryption.key.pairs={','.join(self.encryption_key_pairs) or '(empty)'}")
        rlmm_set = [n for n in _ROOT_KEYS if n.startswith(RLMM_PREFIX) and self._values[n] != _ROOT_KEYS[n].default]
        if rlmm_set and self.metadata_manager_class_name != TOPIC_BASED_RLMM_CLASS:
            raise InvalidConfigError(
                f"{rlmm_set[0]} configures {TOPIC_BASED_RLMM_CLASS}; set "
                "remote.log.metadata.manager.class.name to it, or remove the setting")
        if self.disk_cache_size > 0 and not self.disk_cache_path:
            raise InvalidConfigError(f"rsm.config.fetch.chunk.cache.disk.size={self.disk_cache_size} "
                                     "needs rsm.config.fetch.chunk.cache.path")

    def get(self, name: str) -> Any:
        return self._values[name]


def _key_files(values: dict[str, Any], key_paths: dict[str, dict[str, str]]) -> dict[str, tuple[Path, Path]]:
    declared = values["encryption.key.pairs"]
    for key_id in key_paths:
        if key_id not in declared:
            raise InvalidConfigError(
                f"rsm.config.encryption.key.pairs.{key_id}.* is set but {key_id} is not listed in "
                f"rsm.config.encryption.key.pairs={','.join(declared) or '(empty)'}")
    files = {}
    for key_id in declared:
        _KEY_ID("rsm.config.encryption.key.pairs", key_id)
        paths = key_paths.get(key_id, {})
        for which in ("public.key.file", "private.key.file"):
            if not paths.get(which):
                raise InvalidConfigError(
                    f"rsm.config.encryption.key.pairs.{key_id}.{which} is required (key pair {key_id} "
                    "is listed in rsm.config.encryption.key.pairs)")
        files[key_id] = (Path(paths["public.key.file"]), Path(paths["private.key.file"]))
    return files


def _unknown(name: str, known: list[str]) -> str:
    message = f"Unknown tiered storage setting {name!r}"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return message + (f"; did you mean {close[0]!r}?" if close else "")


def check_topic_tiering(topic: str, topic_config: LogConfig, tiered: TieredConfig) -> None:
    """A topic may tier only if the root enables tiered storage (compaction is refused by the
    topic config rules already, naming both settings)."""
    if topic_config.remote_storage_enable and not tiered.system_enable:
        raise InvalidConfigError(
            f"topic {topic}: remote.storage.enable=true needs remote.log.storage.system.enable=true "
            "at the root")


TIERED_KEYS: dict[str, ConfigKey] = {
    v.name: v for v in vars(TieredConfig).values() if isinstance(v, ConfigKey)
}
_ROOT_KEYS = {n: k for n, k in TIERED_KEYS.items() if k.category == "tiered"}
_RSM_KEYS = {n: k for n, k in TIERED_KEYS.items() if k.category == "rsm"}
# Kafka broker settings of the remote log manager that other parts of seglog own or ignore.
_KNOWN_KAFKA_REMOTE = frozenset({
    "remote.log.manager.task.interval.ms", "remote.log.manager.thread.pool.size",
    "remote.log.reader.threads", "remote.log.index.file.cache.total.size.bytes",
})


@dataclass(frozen=True)
class _Doc:
    name: str
    type: str
    default: str
    doc: str


def config_rows() -> list[_Doc]:
    """(full name, type, default, doc) of every declared setting, for docs and conf files."""
    rows = []
    for key in TIERED_KEYS.values():
        name = key.name if key.category == "tiered" else RSM_PREFIX + key.name   # rlmm: full name
        rows.append(_Doc(name, key.type.value, key.format(key.default), key.doc))
    return rows
