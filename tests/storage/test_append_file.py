"""AppendFile.flush syncs only what may not be on disk yet: no second fdatasync without a write."""
from __future__ import annotations

import os

from logcore.storage.append_file import AppendFile


def count_fdatasyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fdatasync

    def fdatasync(fd):
        calls.append(fd)
        return real(fd)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


def test_flush_syncs_once_per_change(tmp_path, monkeypatch):
    calls = count_fdatasyncs(monkeypatch)
    with AppendFile(str(tmp_path / "new")) as f:
        f.flush()                       # created by this open, nothing written: nothing to sync
        assert calls == []
        f.append(b"abc")
        f.flush()
        f.flush()                       # no write since: no second fdatasync
        assert len(calls) == 1
        f.truncate(1)
        f.flush()
        assert len(calls) == 2
        f.flush(fsync=False)
        assert len(calls) == 2


def test_an_existing_file_is_synced_at_its_first_flush(tmp_path, monkeypatch):
    """Whoever wrote it before may not have synced it."""
    (tmp_path / "old").write_bytes(b"written by someone else")
    calls = count_fdatasyncs(monkeypatch)
    with AppendFile(str(tmp_path / "old")) as f:
        f.flush()
        f.flush()
    assert len(calls) == 1
    with AppendFile(str(tmp_path / "old"), read_only=True) as f:
        f.flush()
    assert len(calls) == 1
