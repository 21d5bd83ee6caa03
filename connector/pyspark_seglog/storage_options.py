"""The root and backend settings shared by the source and the sink.

The root is `load(path)` / `save(path)` / `start(path)` or the `path` option. Backend settings are
options named `storage.<fsspec option>` (e.g. `storage.endpoint_url`, `storage.key`,
`storage.client_kwargs.region_name`); they go to fsspec and are never printed.
"""
from __future__ import annotations

from logcore.errors import InvalidConfigError
from logcore.storage.options import nested_storage_options

STORAGE_PREFIX = "storage."


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
