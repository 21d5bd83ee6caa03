"""Keeping Spark's per-task garbage collection off the import-time heap of a Python worker.

A reused Spark Python worker runs a full `gc.collect()` after every task. That walks every
object the collector tracks, most of them the modules, classes and functions imported once
(pyspark, pyarrow, numpy, pandas, logcore: 60,000-100,000 objects in a sink task's worker).
After a task has streamed hundreds of megabytes through the CPU caches each of those objects is
a cache miss: measured at 35-70 ms a task, on the critical path when the next task or the
write's commit waits for that worker.

`freeze_import_heap()` runs at the start of each seglog task. When modules were imported since
it last ran (the worker's first task, and once more when Spark's own worker code imports
pandas after it), it collects once and calls `gc.freeze()`, which moves every object alive into
a permanent generation that later collections skip. Objects are still freed by reference
counting as before; only a reference cycle among the objects alive at that moment would never
be reclaimed, and those are, almost all, the imported code, which lives as long as the process.
It freezes only when the module count grew, so that is a bounded few times per process.
"""
from __future__ import annotations

import gc
import sys

_modules_at_freeze = -1


def freeze_import_heap() -> None:
    """Freeze the heap when new modules were imported, in a Spark task's worker process only;
    elsewhere (a driver, a test calling a reader or writer directly) the caller's heap is left
    alone."""
    global _modules_at_freeze
    if len(sys.modules) == _modules_at_freeze:
        return
    from pyspark import TaskContext
    if TaskContext.get() is None:
        return
    gc.collect()        # nothing collectable goes into the permanent generation
    gc.freeze()
    _modules_at_freeze = len(sys.modules)
