"""Backend settings given as flat key=value pairs (CLI flags, Spark options) -> fsspec options.

Values that read as JSON (true, 3, {"a": 1}) are typed, others stay strings; a dotted key
(`client_kwargs.region_name`) builds a nested dict, as s3fs expects.
"""
from __future__ import annotations

import json
from typing import Iterable

from logcore.errors import InvalidConfigError


def nested_storage_options(pairs: Iterable[tuple[str, str]], what: str = "storage option") -> dict:
    options: dict = {}
    for key, raw in pairs:
        try:
            value = json.loads(raw)
        except (TypeError, ValueError):
            value = raw
        target = options
        *parents, leaf = key.split(".")
        if not leaf or any(not p for p in parents):
            raise InvalidConfigError(f"{what} {key!r}: empty name part")
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise InvalidConfigError(f"{what} {key}: {part} is already set to a value")
        target[leaf] = value
    return options
