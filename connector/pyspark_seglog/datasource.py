"""format("seglog"): the DataSource Spark instantiates for reads and writes of a log root."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from logcore.errors import SegLogError
from pyspark_seglog.plain_errors import plain_errors_call, show_message_only
from pyspark_seglog.schema import read_schema_ddl


class SeglogDataSource(DataSource):
    """Reads and writes a seglog / Kafka-format log root, with the Kafka source's schema and options.

    seglog's own errors (bad options at query start, corrupt data in tasks) reach the user as
    their message, without a Python traceback in front (pyspark_seglog.plain_errors)."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> str:
        from pyspark_seglog.source_options import parse_bool
        return plain_errors_call(read_schema_ddl, parse_bool(self.options, "includeheaders", False))

    def reader(self, schema):
        from pyspark_seglog.source import SeglogBatchReader
        return plain_errors_call(SeglogBatchReader, dict(self.options), schema)

    def streamReader(self, schema):
        from pyspark_seglog.source import SeglogStreamReader
        try:
            return SeglogStreamReader(dict(self.options), schema)
        except SegLogError as exc:
            # pyspark 4.3's streaming source runner calls `reader.stop()` in a `finally` that
            # also runs when creating the reader failed, so Spark would report an
            # UnboundLocalError about `reader` instead of this error: give it a reader that
            # raises this error at Spark's first call, still at query start.
            return _FailedStreamReader(exc)

    def writer(self, schema, overwrite: bool):
        from pyspark_seglog.sink import SeglogBatchWriter
        return plain_errors_call(SeglogBatchWriter, dict(self.options), schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from pyspark_seglog.sink import SeglogStreamWriter
        return plain_errors_call(SeglogStreamWriter, dict(self.options), schema, overwrite)


class _FailedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader whose options were refused: every call Spark makes raises that error."""

    def __init__(self, error: SegLogError):
        self.error = error

    def _fail(self):
        show_message_only()
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        self._fail()

    def getDefaultReadLimit(self):
        self._fail()

    def initialOffset(self) -> dict:
        self._fail()

    def latestOffset(self, start: dict, limit) -> dict:
        self._fail()

    def partitions(self, start: dict, end: dict):
        self._fail()

    def read(self, partition):
        self._fail()

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        pass
