"""Aiven's remote storage manager settings (`rsm.config.*` in Kafka's broker.properties), mapped
onto seglog's own.

A Kafka user's broker.properties names Aiven's plugin (`io.aiven.kafka.tieredstorage.
RemoteStorageManager`), a storage backend class with its `storage.*` settings, a chunk cache
class with its `fetch.chunk.cache.*` settings, and so on. `PluginSettings.translate` turns those
into seglog's names: the backend and its settings into a storage URL plus fsspec options, the
cache class into the memory or disk chunk cache, `compression.enabled` into `compression`. A
setting of Aiven's that seglog does not implement, or a class it does not know, is refused with
an error naming it. The table of every name and what seglog does with it is in
docs/tiered-storage.md ("Kafka's and Aiven's names").
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from logcore.errors import InvalidConfigError

RSM_PREFIX = "rsm.config."
AIVEN_RSM_CLASS = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
_AIVEN = "io.aiven.kafka.tieredstorage."
S3_BACKEND = _AIVEN + "storage.s3.S3Storage"
GCS_BACKEND = _AIVEN + "storage.gcs.GcsStorage"
AZURE_BACKEND = _AIVEN + "storage.azure.AzureBlobStorage"
FILESYSTEM_BACKEND = _AIVEN + "storage.filesystem.FileSystemStorage"
MEMORY_CACHE = _AIVEN + "fetch.cache.MemoryChunkCache"
DISK_CACHE = _AIVEN + "fetch.cache.DiskChunkCache"
# Aiven's `-1` (unbounded) cache sizes: as much as a process could ever hold.
_UNBOUNDED = 2**62
_MIB = 1024 * 1024

# Aiven settings seglog does not implement (refused by name; the reason says what to do instead).
_NOT_IMPLEMENTED = {
    "custom.metadata.fields.include": "seglog returns its own custom metadata for every segment",
    "key.prefix.mask": "seglog never logs object keys with credentials; remove it",
    "segment.format": "seglog stores segments in Kafka's format only",
    "structure.provider.class": "seglog stores segments in Kafka's format only",
    "metrics.num.samples": "seglog's remote storage metrics are totals (logcore/tiered/metrics.py)",
    "metrics.sample.window.ms": "seglog's remote storage metrics are totals (logcore/tiered/metrics.py)",
    "metrics.recording.level": "seglog's remote storage metrics are totals (logcore/tiered/metrics.py)",
}
_NOT_IMPLEMENTED_PREFIXES = {"iceberg.": "seglog stores segments in Kafka's format only"}
_CACHE_UNSUPPORTED = ("retention.ms", "get.timeout.ms")
# Aiven's manifest and index cache sizes -> seglog's setting and its largest value (Aiven's -1).
_CACHE_SIZES = {"fetch.manifest.cache.size": ("fetch.manifest.cache.entries", 2**31 - 1),
                "fetch.indexes.cache.size": ("fetch.index.cache.size", _UNBOUNDED)}


def _name(short: str) -> str:
    return RSM_PREFIX + short


def _boolean(short: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {_name(short)}: "
                                 "expected true or false")
    return text == "true"


def _integer(short: str, raw: str, low: int, high: int = 2**63 - 1) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {_name(short)}: "
                                 "expected an integer") from None
    if not low <= value <= high:
        raise InvalidConfigError(f"Invalid value {value} for configuration {_name(short)}: "
                                 f"must be in [{low}, {high}]")
    return value


def _text(short: str, raw: str) -> str:
    value = str(raw).strip()
    if not value:
        raise InvalidConfigError(f"Invalid value for configuration {_name(short)}: must not be empty")
    return value


@dataclass
class _Backend:
    """One of Aiven's storage backends: the fsspec protocol it maps onto, its settings (names
    under `storage.`) and how each becomes part of the URL or an fsspec option."""

    protocol: str
    package: str | None                  # the fsspec implementation it needs, if any
    container: str                       # the setting naming the bucket / container / folder
    options: dict[str, Callable[["_Translation", str, str], None]] = field(default_factory=dict)


class _Translation:
    """The seglog settings being built from one set of Aiven settings."""

    def __init__(self):
        self.rsm: dict[str, str] = {}
        self.options: dict[str, Any] = {}
        self.origin: dict[str, str] = {}      # seglog name -> the Aiven name it came from

    def set_rsm(self, name: str, value: Any, origin: str) -> None:
        self.rsm[name] = str(value).lower() if isinstance(value, bool) else str(value)
        self.origin[name] = origin

    def set_option(self, path: str, value: Any) -> None:
        target = self.options
        *parents, leaf = path.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value


def _option(path: str, parse: Callable[[str, str], Any] = _text):
    return lambda t, short, raw: t.set_option(path, parse(short, raw))


def _path_style(t: _Translation, short: str, raw: str) -> None:
    t.set_option("config_kwargs.s3.addressing_style", "path" if _boolean(short, raw) else "virtual")


def _certificate_check(t: _Translation, short: str, raw: str) -> None:
    if not _boolean(short, raw):
        t.set_option("client_kwargs.verify", False)


def _part_size(t: _Translation, short: str, raw: str) -> None:
    t.set_rsm("upload.part.size", _integer(short, raw, 5 * _MIB, 2**31 - 1), _name(short))


def _gcs_credentials_default(t: _Translation, short: str, raw: str) -> None:
    if _boolean(short, raw):
        t.set_option("token", "google_default")


def _gcs_credentials_json(t: _Translation, short: str, raw: str) -> None:
    try:
        t.set_option("token", json.loads(raw))
    except ValueError:
        raise InvalidConfigError(f"Invalid value for configuration {_name(short)}: not JSON") from None


_BACKENDS: dict[str, _Backend] = {
    S3_BACKEND: _Backend("s3", "s3fs", "s3.bucket.name", {
        "s3.region": _option("client_kwargs.region_name"),
        "s3.endpoint.url": _option("endpoint_url"),
        "s3.path.style.access.enabled": _path_style,
        "aws.access.key.id": _option("key"),
        "aws.secret.access.key": _option("secret"),
        "aws.certificate.check.enabled": _certificate_check,
        "s3.storage.class": _option("s3_additional_kwargs.StorageClass"),
        "s3.multipart.upload.part.size": _part_size,
    }),
    GCS_BACKEND: _Backend("gcs", "gcsfs", "gcs.bucket.name", {
        "gcs.credentials.default": _gcs_credentials_default,
        "gcs.credentials.path": _option("token"),
        "gcs.credentials.json": _gcs_credentials_json,
        "gcs.endpoint.url": _option("endpoint_url"),
    }),
    AZURE_BACKEND: _Backend("abfs", "adlfs", "azure.container.name", {
        "azure.account.name": _option("account_name"),
        "azure.account.key": _option("account_key"),
        "azure.sas.token": _option("sas_token"),
        "azure.connection.string": _option("connection_string"),
    }),
    FILESYSTEM_BACKEND: _Backend("", None, "root"),
}


@dataclass(frozen=True)
class PluginSettings:
    """seglog's rsm settings (short names, raw values) and storage options from Aiven's."""

    rsm: dict[str, str]
    storage_url: str | None              # None: no backend class was named
    storage_options: dict[str, Any]
    origin: dict[str, str]               # seglog name -> Aiven name, for messages

    @classmethod
    def translate(cls, rsm: dict[str, str]) -> "PluginSettings":
        """`rsm`: every `rsm.config.*` setting, prefix stripped. Aiven's names are replaced by
        seglog's; seglog's own names pass through (the same name given both ways is refused)."""
        t = _Translation()
        rest = dict(rsm)
        backend_class = rest.pop("storage.backend.class", None)
        prefix = _key_prefix(rest)
        url = None
        if backend_class is not None:
            url = _translate_backend(t, backend_class.strip(), rest, prefix)
        else:
            _refuse_backend_names(rest, prefix)
        _translate_compression(t, rest)
        _translate_cache(t, rest)
        for short, raw in list(rest.items()):
            if short in _CACHE_SIZES:
                size = _integer(short, raw, -1)
                target, unbounded = _CACHE_SIZES[short]
                t.set_rsm(target, unbounded if size == -1 else min(size, unbounded), _name(short))
                del rest[short]
            elif short.startswith(("fetch.manifest.cache.", "fetch.indexes.cache.")) and \
                    short.rsplit(".cache.", 1)[1] in ("retention.ms", "get.timeout.ms", "thread.pool.size"):
                raise InvalidConfigError(
                    f"{_name(short)} is not implemented by seglog: its manifest and index caches "
                    "are bounded by size only (fetch.manifest.cache.size, fetch.indexes.cache.size)")
            elif short in _NOT_IMPLEMENTED or short.startswith(tuple(_NOT_IMPLEMENTED_PREFIXES)):
                reason = _NOT_IMPLEMENTED.get(short) or next(
                    r for p, r in _NOT_IMPLEMENTED_PREFIXES.items() if short.startswith(p))
                raise InvalidConfigError(f"{_name(short)} (a setting of Aiven's remote storage "
                                         f"manager) is not implemented by seglog: {reason}")
        for name in t.rsm:
            if name in rest:
                raise InvalidConfigError(f"{_name(name)} and {t.origin[name]} both set it: give one")
        merged = {**rest, **t.rsm}
        return cls(merged, url, t.options, t.origin)


def _key_prefix(rest: dict[str, str]) -> str:
    """Aiven's `key.prefix`; the walkthrough of Kafka's tiered storage spells it
    `storage.key.prefix`: both are taken, and must agree when both are given."""
    given = {k: rest.pop(k).strip() for k in ("key.prefix", "storage.key.prefix") if k in rest}
    if len(set(given.values())) > 1:
        raise InvalidConfigError("rsm.config.key.prefix and rsm.config.storage.key.prefix differ: give one")
    prefix = next(iter(given.values()), "")
    if prefix.startswith("/") or ".." in prefix.split("/"):
        raise InvalidConfigError(f"Invalid value {prefix!r} for configuration rsm.config.key.prefix: "
                                 "a relative object key prefix")
    return prefix.strip("/")


def _refuse_backend_names(rest: dict[str, str], prefix: str) -> None:
    if prefix:
        raise InvalidConfigError("rsm.config.key.prefix needs rsm.config.storage.backend.class "
                                 "(with rsm.config.storage.url, put the prefix in the URL)")
    aiven = [s for s in rest for b in _BACKENDS.values()
             if s.startswith("storage.") and (s[8:] == b.container or s[8:] in b.options)]
    if aiven:
        raise InvalidConfigError(f"{_name(aiven[0])} is a setting of Aiven's storage backends: it "
                                 "needs rsm.config.storage.backend.class (or use seglog's "
                                 "rsm.config.storage.url with fsspec options)")


def _translate_backend(t: _Translation, backend_class: str, rest: dict[str, str], prefix: str) -> str:
    backend = _BACKENDS.get(backend_class)
    if backend is None:
        raise InvalidConfigError(
            f"rsm.config.storage.backend.class={backend_class}: seglog does not know this storage "
            f"backend; it implements {', '.join(sorted(_BACKENDS))}")
    if backend.package is not None and importlib.util.find_spec(backend.package) is None:
        raise InvalidConfigError(
            f"rsm.config.storage.backend.class={backend_class} needs the Python package "
            f"{backend.package} (pip install {backend.package}), which is not installed")
    if "storage.url" in rest:
        raise InvalidConfigError("rsm.config.storage.url and rsm.config.storage.backend.class both "
                                 "name the remote root: give one")
    container = None
    for short in [s for s in rest if s.startswith("storage.")]:
        raw = rest.pop(short)
        name = short[len("storage."):]
        if name == backend.container:
            container = _text(short, raw)
        elif name in backend.options:
            backend.options[name](t, short, raw)
        else:
            known = [backend.container, *backend.options, "key.prefix"]
            raise InvalidConfigError(
                f"{_name(short)}: not a setting seglog implements for {backend_class} "
                f"(it takes storage.{', storage.'.join(known)})")
    if container is None:
        raise InvalidConfigError(f"rsm.config.storage.backend.class={backend_class} needs "
                                 f"rsm.config.storage.{backend.container}")
    if not backend.protocol:                 # the filesystem backend: a folder
        root = os.path.abspath(container)
        return f"{root}/{prefix}" if prefix else root
    return f"{backend.protocol}://{container}" + (f"/{prefix}" if prefix else "")


def _translate_compression(t: _Translation, rest: dict[str, str]) -> None:
    enabled = rest.pop("compression.enabled", None)
    heuristic = rest.pop("compression.heuristic.enabled", None)
    if enabled is None and heuristic is None:
        return
    if "compression" in rest:
        raise InvalidConfigError("rsm.config.compression and rsm.config.compression.enabled both "
                                 "set compression: give one")
    on = enabled is not None and _boolean("compression.enabled", enabled)
    guess = heuristic is not None and _boolean("compression.heuristic.enabled", heuristic)
    # As Aiven's plugin: the heuristic applies only when compression is enabled.
    mode = ("heuristic" if guess else "on") if on else "off"
    t.set_rsm("compression", mode, "rsm.config.compression.enabled")


def _translate_cache(t: _Translation, rest: dict[str, str]) -> None:
    cache_class = rest.pop("fetch.chunk.cache.class", None)
    size = rest.pop("fetch.chunk.cache.size", None)
    threads = rest.pop("fetch.chunk.cache.thread.pool.size", None)
    for suffix in _CACHE_UNSUPPORTED:
        if f"fetch.chunk.cache.{suffix}" in rest:
            raise InvalidConfigError(
                f"rsm.config.fetch.chunk.cache.{suffix} is not implemented by seglog: its chunk "
                "cache evicts the least recently used chunks by size only (fetch.chunk.cache.size)")
    if cache_class is None:
        if size is not None or threads is not None:
            given = "rsm.config.fetch.chunk.cache.size" if size is not None else \
                "rsm.config.fetch.chunk.cache.thread.pool.size"
            raise InvalidConfigError(f"{given} needs rsm.config.fetch.chunk.cache.class "
                                     f"({MEMORY_CACHE} or {DISK_CACHE})")
        return
    cache_class = cache_class.strip()
    if cache_class not in (MEMORY_CACHE, DISK_CACHE):
        raise InvalidConfigError(f"rsm.config.fetch.chunk.cache.class={cache_class}: seglog "
                                 f"implements {MEMORY_CACHE} and {DISK_CACHE}")
    if size is None:
        raise InvalidConfigError(f"rsm.config.fetch.chunk.cache.class={cache_class} needs "
                                 "rsm.config.fetch.chunk.cache.size (bytes, -1 for unbounded)")
    for own in ("fetch.chunk.cache.memory.size", "fetch.chunk.cache.disk.size"):
        if own in rest:
            raise InvalidConfigError(f"rsm.config.{own} and rsm.config.fetch.chunk.cache.class both "
                                     "configure the chunk cache: give one")
    if "fetch.chunk.cache.prefetch.max.size" not in rest:
        # Aiven's default: no prefetch (seglog's own default prefetches 16 MiB).
        t.set_rsm("fetch.chunk.cache.prefetch.max.size", 0, "rsm.config.fetch.chunk.cache.class")
    bytes_ = _integer("fetch.chunk.cache.size", size, -1)
    bytes_ = _UNBOUNDED if bytes_ == -1 else bytes_
    origin = "rsm.config.fetch.chunk.cache.size"
    if cache_class == DISK_CACHE:
        if not rest.get("fetch.chunk.cache.path", "").strip():
            raise InvalidConfigError(f"rsm.config.fetch.chunk.cache.class={DISK_CACHE} needs "
                                     "rsm.config.fetch.chunk.cache.path")
        # Aiven's disk cache is the only cache: no memory layer above it.
        t.set_rsm("fetch.chunk.cache.memory.size", 0, origin)
        t.set_rsm("fetch.chunk.cache.disk.size", bytes_, origin)
    else:
        t.set_rsm("fetch.chunk.cache.memory.size", bytes_, origin)
        t.set_rsm("fetch.chunk.cache.disk.size", 0, origin)
    if threads is not None:
        count = _integer("fetch.chunk.cache.thread.pool.size", threads, 0, 1024)
        # Aiven's 0: as many threads as processors.
        t.set_rsm("fetch.chunk.cache.prefetch.threads", min(64, count or os.cpu_count() or 1),
                  "rsm.config.fetch.chunk.cache.thread.pool.size")
