"""Shared helpers of the cleaner tests: writing a keyed log and reading it back."""
from __future__ import annotations

from logcore.log.log_root import LogRoot

DAY = 86_400_000


def open_root(target, **config):
    root = LogRoot.open(target.url, storage_options=target.storage_options, create=True)
    props = {"cleanup.policy": "compact", "segment.bytes": "2000", "delete.retention.ms": str(DAY)}
    props.update({k.replace("_", "."): str(v) for k, v in config.items()})
    root.create_topic("t", 1, props)
    return root


def reader_root(target):
    return LogRoot.open(target.url, storage_options=target.storage_options)


def write(log, items, *, per_commit: int = 7, ts: int = 1_000_000):
    """Append (key, value) pairs one record per batch, committing every `per_commit`; returns
    {offset: (key, value)} of what was written."""
    written = {}
    for i, (key, value) in enumerate(items):
        info = log.append_records([(key, value, (), ts + i)])
        written[info.first_offset] = (key, value)
        if (i + 1) % per_commit == 0:
            log.commit()
    log.commit()
    return written


def read_all(log, start: int = 0, isolation: str = "read_committed"):
    return [(r.offset, r.key, r.value) for r in log.read_records(start, isolation=isolation)]


def check_compacted(records, written, *, tombstones_expected: bool):
    """The four guarantees on what a reader from the start sees after cleaning."""
    offsets = [o for o, _k, _v in records]
    assert offsets == sorted(set(offsets)), "order preserved, no duplicates"
    for offset, key, value in records:
        assert written[offset] == (key, value), f"offset {offset} changed content"
    last = {}
    for offset in sorted(written):
        key, value = written[offset]
        last[key] = (offset, value)
    seen = {o for o in offsets}
    for key, (offset, value) in last.items():
        if value is not None or tombstones_expected:
            assert offset in seen, f"final record of {key!r} at {offset} is missing"
    # only latest values survive below what was cleaned: no key appears twice with a value
    # written before its final record unless it is past the cleaned part (checked by callers)
    return last
