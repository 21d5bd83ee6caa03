"""A read at a log's tail costs one or two preads: the header scan from the offset index's
entry starts with a chunk that holds the index interval's batches, and the entry's check uses
that same read (a first chunk smaller than a batch cost a pread per header)."""
from __future__ import annotations

import os

import pytest

from logcore.log.log_root import LogRoot
from logcore.records.batch import parse_header


@pytest.fixture
def log(tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic("t", config={"file.delete.delay.ms": "0"})    # index.interval.bytes 4096
    log = root.log("t", 0, writer=True)
    yield log
    root.close()


def _count_preads(monkeypatch) -> list:
    calls = []
    for name in ("pread", "preadv"):
        real = getattr(os, name)

        def counted(*args, _real=real, _name=name):
            calls.append(_name)
            return _real(*args)
        monkeypatch.setattr(os, name, counted)
    return calls


def test_tail_read_of_small_batches_costs_two_preads(log, monkeypatch):
    for i in range(40):                                 # 1 KiB batches, one record each
        log.append_records([(b"k", bytes([i]) * 1000, (), 1_700_000_000_000 + i)])
    log.commit()
    end = log.log_end_offset
    expected = {o: bytes(log.read(o, 1 << 20).data) for o in range(end - 4, end)}
    calls = _count_preads(monkeypatch)
    for offset in range(end - 4, end):                  # each read: entry up to 4 KiB behind
        calls.clear()
        data = bytes(log.read(offset, 1 << 20).data)
        assert parse_header(data).base_offset == offset and data == expected[offset]
        assert len(calls) <= 2, (offset, calls)
