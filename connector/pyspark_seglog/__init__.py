"""Spark data source for seglog: `spark.readStream.format("seglog")`, `df.writeStream.format("seglog")`.

Spark finds this module by itself (it imports top-level `pyspark_*` modules and registers their
`DefaultSource`), so `format("seglog")` works right after `pip install`; `register(spark)` does the
same explicitly.
"""
from __future__ import annotations

from pyspark_seglog.datasource import SeglogDataSource

DefaultSource = SeglogDataSource

__all__ = ["DefaultSource", "SeglogDataSource", "register"]


def register(spark) -> None:
    """Register format("seglog") on this SparkSession explicitly."""
    spark.dataSource.register(SeglogDataSource)
