"""`seglog repair`: cut a partition's log at damaged committed data."""
from __future__ import annotations

import sys

from logcore.errors import InvalidConfigError
from logcore.tools.arguments import _open_root


def cmd_repair(args) -> int:
    root = _open_root(args)
    out = sys.stdout
    try:
        if not root.storage.is_local:
            raise InvalidConfigError(
                f"seglog repair cuts segment files on a local disk; {root.storage.url} is an object store,"
                " whose segments are published whole and never recovered: readers name the damaged"
                " object and position, and a Spark query with failOnDataLoss=false skips it")
        info = root.describe_topic(args.topic)
        held = range(info.partitions) if info.hosted is None else info.hosted   # a cluster member's
        partitions = [args.partition] if args.partition is not None else list(held)
        for p in partitions:
            if not 0 <= p < info.partitions:
                raise InvalidConfigError(f"--partition {p}: topic {args.topic} has partitions "
                                         f"0..{info.partitions - 1}")
            log = root.log(args.topic, p, writer=True, repair=True)
            try:
                report = log.recovery
                name = f"{args.topic}-{p}"
                if not report.truncated and not report.rebuilt_indexes:
                    out.write(f"{name}: no damage found (log end offset {log.log_end_offset})\n")
                    continue
                for path in report.rebuilt_indexes:
                    out.write(f"{name}: rebuilt the indexes of {path}\n")
                for path, position, size, why in report.truncated:
                    out.write(f"{name}: cut {path} at position {position}: dropped {size} bytes ({why})\n")
                for path in report.deleted_segments:
                    out.write(f"{name}: deleted {path} (after the cut)\n")
                if report.dropped_offsets is not None:
                    first, end = report.dropped_offsets
                    out.write(f"{name}: dropped offsets {first}..{end - 1} ({end - first} offsets,"
                              f" {report.dropped_bytes} bytes); the log now ends at offset"
                              f" {log.log_end_offset}, high watermark {log.high_watermark}\n")
            finally:
                log.close()
    finally:
        root.close()
    return 0
