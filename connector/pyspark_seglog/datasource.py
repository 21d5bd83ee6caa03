"""format("seglog"): the DataSource Spark instantiates for reads and writes of a log root."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource

from pyspark_seglog.schema import read_schema_ddl


class SeglogDataSource(DataSource):
    """Reads and writes a seglog / Kafka-format log root, with the Kafka source's schema and options."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> str:
        from pyspark_seglog.source_options import parse_bool
        return read_schema_ddl(parse_bool(self.options, "includeheaders", False))

    def reader(self, schema):
        from pyspark_seglog.source import SeglogBatchReader
        return SeglogBatchReader(dict(self.options), schema)

    def streamReader(self, schema):
        from pyspark_seglog.source import SeglogStreamReader
        return SeglogStreamReader(dict(self.options), schema)

    def writer(self, schema, overwrite: bool):
        from pyspark_seglog.sink import SeglogBatchWriter
        return SeglogBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from pyspark_seglog.sink import SeglogStreamWriter
        return SeglogStreamWriter(dict(self.options), schema, overwrite)
