"""The root and backend settings shared by the source and the sink.

The root is `load(path)` / `save(path)` / `start(path)` or the `path` option. Backend settings are
options named `storage.<fsspec option>` (e.g. `storage.endpoint_url`, `storage.key`,
`storage.client_kwargs.region_name`); they go to fsspec and are never printed.
"""
from __future__ import annotations

from logcore.errors import InvalidConfigError
from logcore.storage.options import nested_storage_options

STORAGE_PREFIX = "storage."
# Tiered-storage settings of the root that a root never stores (credentials of the remote tier:
# rsm.config.storage.key / secret / token ...), given to the reader like a broker's config.
TIERED_PREFIX = "rsm.config."


def root_url(options) -> str:
    path = options.get("path")
    if not path:
        raise InvalidConfigError(
            "no log root: give it as load(path) / start(path) / save(path) or the `path` option,"
            " e.g. a local folder or s3://bucket/prefix")
    return str(path)


def storage_options(options) -> dict:
    pairs = [(k[len(STORAGE_PREFIX):], v) for k, v in options.items()
             if k.lower().startswith(STORAGE_PREFIX)]
    return nested_storage_options(pairs, "option storage.*")


def tiered_settings(options) -> dict | None:
    """`rsm.config.*` options: the root's tiered-storage settings over its stored ones (the
    remote tier's credentials, which the root does not store); None when there are none."""
    found = {k: str(v) for k, v in options.items() if k.lower().startswith(TIERED_PREFIX)}
    return found or None
