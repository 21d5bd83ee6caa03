"""The row schema of Spark's Kafka source, which the seglog source reproduces exactly."""
from __future__ import annotations

import pyarrow as pa

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
             "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

HEADER_ARROW_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
])
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADER_ARROW_TYPE))


def read_schema_ddl(include_headers: bool) -> str:
    return f"{KAFKA_DDL}, {HEADERS_DDL}" if include_headers else KAFKA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
