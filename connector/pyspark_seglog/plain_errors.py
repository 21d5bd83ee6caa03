"""seglog's own errors reach a Spark user as their message first, not after a Python traceback.

Spark reports a Python data source's exception with the text its Python worker formats
(`pyspark.util.handle_worker_exception`): a whole traceback, `Traceback (most recent call
last): ...`, with the exception's message at its end, inside PYTHON_DATA_SOURCE_ERROR (query
start) or PYTHON_EXCEPTION (tasks). The worker formats only `module.Type: message` when the
environment variable SPARK_HIDE_TRACEBACK is set in its process, which is what
`spark.sql.execution.pyspark.udf.hideTraceback.enabled` does for every worker.

The methods Spark calls on seglog's source and sink set that variable in their worker process
just before one of seglog's own errors (logcore.errors.SegLogError: bad options, corrupt data,
fencing...) leaves them. Spark's worker then reports the error and exits, so nothing else is
affected. Any other exception (a bug) keeps its traceback, and outside a Spark worker (a driver,
a test calling the classes directly) nothing is changed.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys

from logcore.errors import SegLogError

# The DataSource API methods Spark calls on readers and writers.
SPARK_ENTRY_POINTS = (
    "partitions", "read", "initialOffset", "latestOffset", "reportLatestOffset",
    "getDefaultReadLimit", "prepareForTriggerAvailableNow", "commit", "abort", "write", "stop",
)


def in_spark_worker() -> bool:
    """A process Spark started for Python code: its main module is one of pyspark's
    (pyspark.daemon and its forks, pyspark.worker, pyspark.sql.worker.*, the streaming runners)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return bool(spec is not None and (spec.name or "").startswith("pyspark."))


def show_message_only() -> None:
    if in_spark_worker():
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def _guard_iterator(iterator):
    try:
        yield from iterator
    except SegLogError:
        show_message_only()
        raise


def _wrap(func, name: str):
    @functools.wraps(func)
    def entry(*args, **kwargs):
        try:
            result = func(*args, **kwargs)
        except SegLogError:
            show_message_only()
            raise
        if name == "read":              # rows come from an iterator: its errors too
            return _guard_iterator(result)
        return result

    entry.seglog_plain_errors = True
    return entry


def plain_errors(cls):
    """Class decorator: seglog's own methods among SPARK_ENTRY_POINTS report SegLogError plainly."""
    for name in SPARK_ENTRY_POINTS:
        func = getattr(cls, name, None)
        if (inspect.isfunction(func) and func.__module__.startswith("pyspark_seglog")
                and not getattr(func, "seglog_plain_errors", False)):
            setattr(cls, name, _wrap(func, name))
    return cls


def plain_errors_call(func, *args, **kwargs):
    """Call func (a DataSource factory method) and report a SegLogError from it plainly."""
    try:
        return func(*args, **kwargs)
    except SegLogError:
        show_message_only()
        raise
