"""The sink's input columns: which of the input's columns are `value`, `key`, `topic`,
`partition`, `headers`, `timestamp`, checked by name and type when the write is planned."""
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from logcore.errors import InvalidConfigError

_BIN_OR_STR = "string or binary"
_ALLOWED = {
    "value": _BIN_OR_STR,
    "key": _BIN_OR_STR,
    "topic": "string",
    "partition": "int",
    "headers": "array<struct<key: string, value: binary>>",
    "timestamp": "timestamp",
}


def _headers_ok(dt) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = dt.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
            and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType))


def _type_ok(name: str, dt) -> bool:
    if name in ("value", "key"):
        return isinstance(dt, (StringType, BinaryType))
    if name == "topic":
        return isinstance(dt, StringType)
    if name == "partition":
        return isinstance(dt, IntegerType)
    if name == "timestamp":
        return isinstance(dt, TimestampType)
    return _headers_ok(dt)


def input_columns(schema, has_topic_option: bool) -> dict[str, str]:
    """Map of sink column (value, key, ...) -> the input's column name; checks names and types.

    Column names match case-insensitively, as in Spark's Kafka sink; other columns are ignored.
    """
    if isinstance(schema, str):
        raise InvalidConfigError(f"the seglog sink needs a resolved input schema, got {schema!r}")
    found: dict[str, str] = {}
    for f in schema.fields:
        name = f.name.lower()
        if name not in _ALLOWED:
            continue
        if name in found:
            raise InvalidConfigError(f"input has two `{name}` columns ({found[name]!r}, {f.name!r})")
        if not _type_ok(name, f.dataType):
            raise InvalidConfigError(
                f"input column `{f.name}` has type {f.dataType.simpleString()}; the seglog sink needs"
                f" {_ALLOWED[name]} there")
        found[name] = f.name
    if "value" not in found:
        raise InvalidConfigError(
            "input has no `value` column: the seglog sink needs `value` (string or binary), optionally"
            f" key, topic, partition, headers, timestamp (got: {', '.join(schema.fieldNames()) or 'no columns'})")
    if "topic" not in found and not has_topic_option:
        raise InvalidConfigError(
            "no topic: set the `topic` option or give the input a `topic` column (string)")
    return found
