"""Freezing a Spark Python worker's import-time heap, so that Spark's gc.collect() after each
task does not walk it again."""
from __future__ import annotations

import gc

from pyspark_seglog.worker_heap import freeze_import_heap


def test_outside_a_spark_task_the_callers_heap_is_left_alone():
    before = gc.get_freeze_count()
    freeze_import_heap()
    assert gc.get_freeze_count() == before


def test_in_a_spark_task_the_workers_heap_is_frozen(spark, tmp_path):
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    result = str(tmp_path / "frozen")

    # Defined here, so that Spark pickles them by value for its workers.
    class Frozen(WriterCommitMessage):
        def __init__(self, before: int, after: int):
            self.before, self.after = before, after

    class FreezeReportingWriter(DataSourceArrowWriter):
        """Calls freeze_import_heap in its tasks, as the seglog reader and writer do, and
        reports the worker's frozen object count before and after."""

        def write(self, iterator):
            import gc as worker_gc
            from pyspark_seglog.worker_heap import freeze_import_heap as freeze
            before = worker_gc.get_freeze_count()
            freeze()
            for _ in iterator:
                pass
            return Frozen(before, worker_gc.get_freeze_count())

        def commit(self, messages):
            # runs in a Python process of its own: hand the counts over through a file
            with open(result, "w") as f:
                f.write(" ".join(f"{m.before},{m.after}" for m in messages))

    class FreezeReportingSource(DataSource):
        @classmethod
        def name(cls):
            return "test_freeze_reporting"

        def writer(self, schema, overwrite):
            return FreezeReportingWriter()

    spark.dataSource.register(FreezeReportingSource)
    driver_frozen = gc.get_freeze_count()
    spark.range(0, 100, numPartitions=2).write.format("test_freeze_reporting").mode("append").save()
    with open(result) as f:
        counts = [tuple(map(int, pair.split(","))) for pair in f.read().split()]
    assert len(counts) == 2
    # the imported modules of the worker: tens of thousands of objects
    assert all(after > 10_000 and after >= before for before, after in counts), counts
    assert gc.get_freeze_count() == driver_frozen
