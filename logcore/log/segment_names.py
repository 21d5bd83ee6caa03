"""The file names of a segment: Kafka's 20-digit base offset, then the suffix of each file."""
from __future__ import annotations

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"       # a replaced or deleted segment file waiting for file.delete.delay.ms


def segment_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 zero-padded digits, then the suffix."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) for a name like 00000000000000001234.log, else None."""
    dot = name.find(".")
    if dot != 20 or not name[:20].isdigit():
        return None
    return int(name[:20]), name[20:]
