"""failOnDataLoss: what happens to offsets that are gone (below the log start) or bytes that
cannot be read; the driver's offset resolution and the tasks' reads both ask it."""
from __future__ import annotations

import logging

from logcore.errors import CorruptRecordError, OffsetOutOfRangeError

# the source's logger, as before this module was split from source.py (users configure it by name)
logger = logging.getLogger("pyspark_seglog.source")


def data_loss(topic: str, partition: int, wanted: int, log_start: int, fail: bool, what: str = "") -> int:
    """Offsets below the log start are gone: fail (failOnDataLoss=true) or skip to the log start."""
    message = (f"{topic}-{partition}: offsets {wanted} to {log_start - 1} are no longer in the log"
               f" (it now starts at offset {log_start}: removed by retention or deleted){what}")
    if fail:
        raise OffsetOutOfRangeError(
            f"data loss: {message}. Set the option failOnDataLoss=false to skip lost data with a warning"
            " instead of failing the query",
            topic=topic, partition=partition, offset=wanted, log_start_offset=log_start)
    logger.warning("failOnDataLoss=false: %s; skipping to offset %d", message, log_start)
    return log_start


def damaged(log, offset: int, exc: CorruptRecordError, fail: bool) -> int:
    """Bytes of the log that cannot be read at `offset` (the error names the segment file and
    the byte position in it): fail (failOnDataLoss=true) or skip exactly the unreadable range
    with a warning, returning the offset to go on from."""
    if fail:
        raise CorruptRecordError(
            f"{exc.reason}; set the option failOnDataLoss=false to skip the damaged range with a"
            " warning instead of failing the query", file=exc.file, position=exc.position) from exc
    next_offset, what = log.skip_damage(offset, exc)
    logger.warning("failOnDataLoss=false: %s-%d: %s; skipping to offset %d", log.topic, log.partition,
                   what, next_offset)
    return next_offset
