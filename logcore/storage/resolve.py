"""open_storage: a url or path to the right Storage implementation."""
from __future__ import annotations

from typing import Any

from logcore.errors import InvalidConfigError
from logcore.storage.base import Storage
from logcore.storage.local import LocalStorage
from logcore.storage.secrets import redact_url, secret_values

_LOCAL_PROTOCOLS = ("file", "local")


def open_storage(url: str, storage_options: dict[str, Any] | None = None, *,
                 read_only: bool = False) -> Storage:
    """Local paths and file:// -> LocalStorage; any other protocol -> ObjectStorage over fsspec.

    storage_options go to the fsspec filesystem (for s3: endpoint_url, key, secret, client_kwargs,
    ...); they are ignored for local paths and never printed.
    """
    if not isinstance(url, str) or not url:
        raise InvalidConfigError(f"storage url must be a non-empty string, got {url!r}")
    protocol, sep, rest = url.partition("://")
    if not sep:
        return LocalStorage(url, read_only=read_only)
    if protocol in _LOCAL_PROTOCOLS:
        if not rest.startswith("/"):
            raise InvalidConfigError(f"storage url {redact_url(url)!r} must be absolute (file:///path)")
        return LocalStorage(rest, read_only=read_only)

    # Imported here: local roots never load fsspec (a Spark task's worker stays lighter).
    import fsspec

    from logcore.storage.objectstore import S3_PROTOCOLS, ObjectStorage

    options = dict(storage_options or {})
    if protocol in S3_PROTOCOLS:
        # The log reads state other writers change: never answer from s3fs's listing cache.
        options.setdefault("use_listings_cache", False)
        if not rest.split("/", 1)[0]:
            raise InvalidConfigError(f"storage url {redact_url(url)!r} names no bucket (s3://bucket/prefix)")
    try:
        fs = fsspec.filesystem(protocol, **options)
    except (ValueError, ImportError) as exc:
        raise InvalidConfigError(
            f"cannot open storage url with protocol {protocol!r}: unknown protocol or bad storage "
            f"options (option names: {sorted(options)}): {type(exc).__name__}") from None
    except TypeError:
        raise InvalidConfigError(
            f"bad storage options for protocol {protocol!r}: option names {sorted(options)}") from None
    secrets = tuple(secret_values(options)) + tuple(secret_values({"url": url}))
    return ObjectStorage(url, fs, read_only=read_only, secrets=secrets)
