"""Kafka's text checkpoint files.

Layout (UTF-8, `\\n` line ends):

    <version>
    <entry count>
    <entry line>        exactly `count` lines, fields separated by whitespace

`OffsetCheckpoint` holds `topic partition offset` lines (replication-offset-checkpoint,
recovery-point-offset-checkpoint, log-start-offset-checkpoint, cleaner-offset-checkpoint);
`LeaderEpochCheckpoint` holds `epoch startOffset` lines (leader-epoch-checkpoint, and the
LEADER_EPOCH index uploaded to tiered storage). Writes replace the whole file atomically. A missing
or empty file reads as no entries; anything else that does not parse is a CorruptIndexError naming
the file and the line.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from logcore.errors import CorruptIndexError, InvalidTopicError, ResourceNotFoundError

if TYPE_CHECKING:
    from logcore.storage import Storage

_INT = re.compile(r"[+-]?[0-9]+\Z")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
INT32_MAX = 2**31 - 1


def _parse_int(text: str, what: str, line_no: int, line: str, source: str | None,
               low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    if not _INT.match(text) or not low <= int(text) <= high:
        raise CorruptIndexError(f"malformed {what} {text!r} on line {line_no} ({line!r}) of "
                                f"checkpoint file", file=source)
    return int(text)


def encode_checkpoint(version: int, lines: list[str]) -> bytes:
    """The file content for a checkpoint of `lines` (each without its line break)."""
    return "".join(f"{line}\n" for line in [str(version), str(len(lines)), *lines]).encode()


def parse_checkpoint(data: bytes, expected_version: int, fields: int, *,
                     source: str | None = None) -> list[tuple[int, list[str]]]:
    """The entry lines of a checkpoint, each as (line number, fields).

    Raises CorruptIndexError on a version other than `expected_version`, a count that does not
    match the lines, or a line without exactly `fields` fields.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptIndexError(f"checkpoint file is not UTF-8 (byte {exc.start})",
                                file=source) from None
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the final line break ends the last line, it does not start a new one
    if not lines:
        return []
    version = _parse_int(lines[0].strip(), "version", 1, lines[0], source)
    if version != expected_version:
        raise CorruptIndexError(f"unrecognised version {version} of checkpoint file (expected "
                                f"{expected_version}) on line 1", file=source)
    if len(lines) < 2:
        return []
    count = _parse_int(lines[1].strip(), "entry count", 2, lines[1], source, 0, INT32_MAX)
    entries: list[tuple[int, list[str]]] = []
    for line_no, line in enumerate(lines[2:], start=3):
        if len(entries) == count:
            raise CorruptIndexError(f"checkpoint file declares {count} entries on line 2 but has "
                                    f"more: unexpected line {line_no} ({line!r})", file=source)
        parts = line.split()
        if len(parts) != fields:
            raise CorruptIndexError(f"malformed line {line_no} of checkpoint file: {line!r} (expected "
                                    f"{fields} whitespace-separated fields)", file=source)
        entries.append((line_no, parts))
    if len(entries) != count:
        raise CorruptIndexError(f"checkpoint file declares {count} entries on line 2 but has only "
                                f"{len(entries)} (ends at line {len(lines)})", file=source)
    return entries


class _CheckpointFile:
    VERSION = 0

    def __init__(self, storage: Storage, path: str):
        self.storage = storage
        self.path = path

    @property
    def _where(self) -> str:
        return self.storage.describe(self.path)

    def _read_bytes(self) -> bytes | None:
        try:
            return self.storage.read(self.path)
        except ResourceNotFoundError:
            return None

    def exists(self) -> bool:
        return self.storage.exists(self.path)

    def delete(self) -> None:
        self.storage.delete(self.path, missing_ok=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where})"


class OffsetCheckpoint(_CheckpointFile):
    """`topic partition offset` lines: the root's HW, recovery point, log start and cleaner
    checkpoints."""

    @staticmethod
    def encode(offsets: Mapping[tuple[str, int], int]) -> bytes:
        lines = []
        for (topic, partition), offset in sorted(offsets.items()):
            if not isinstance(topic, str) or not topic or any(c.isspace() for c in topic):
                raise InvalidTopicError(f"topic name {topic!r} cannot be written to an offset "
                                        "checkpoint: it must be non-empty and without whitespace")
            if not isinstance(partition, int) or not 0 <= partition <= INT32_MAX:
                raise ValueError(f"partition {partition!r} of topic {topic!r} must be an int >= 0")
            if not isinstance(offset, int) or not INT64_MIN <= offset <= INT64_MAX:
                raise ValueError(f"offset {offset!r} of {topic}-{partition} must be an int64")
            lines.append(f"{topic} {partition} {offset}")
        return encode_checkpoint(OffsetCheckpoint.VERSION, lines)

    @staticmethod
    def decode(data: bytes, *, source: str | None = None) -> dict[tuple[str, int], int]:
        result: dict[tuple[str, int], int] = {}
        for line_no, (topic, partition, offset) in parse_checkpoint(
                data, OffsetCheckpoint.VERSION, 3, source=source):
            line = f"{topic} {partition} {offset}"
            key = (topic, _parse_int(partition, "partition", line_no, line, source, 0, INT32_MAX))
            result[key] = _parse_int(offset, "offset", line_no, line, source)
        return result

    def read(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): offset}; empty when the file is missing or empty.

        The root's files hold one line per partition and every partition's open reads them:
        the last decoding of each file is kept and reused while the file's bytes are unchanged
        (a root with thousands of partitions would otherwise parse them all at every open)."""
        data = self._read_bytes()
        if data is None:
            return {}
        where = self._where
        with _DECODED_LOCK:
            cached = _DECODED.get(where)
        if cached is not None and cached[0] == data:
            return dict(cached[1])
        decoded = self.decode(data, source=where)
        if len(data) >= _CACHE_MIN_BYTES:
            with _DECODED_LOCK:
                _DECODED[where] = (bytes(data), dict(decoded))
                while len(_DECODED) > _CACHE_FILES:
                    _DECODED.pop(next(iter(_DECODED)))
        return decoded

    def write(self, offsets: Mapping[tuple[str, int], int], *, durable: bool = True) -> None:
        """Replace the file with `offsets` (lines sorted by topic, partition); durable=False
        skips the fsyncs (the rename is still atomic for readers and survives a process crash)."""
        self.storage.write_atomic(self.path, self.encode(offsets), durable=durable)


_DECODED: dict[str, tuple[bytes, dict]] = {}    # file -> (its bytes, their decoding)
_DECODED_LOCK = threading.Lock()
_CACHE_MIN_BYTES = 4096                         # small files decode faster than they compare
_CACHE_FILES = 64


class LeaderEpochCheckpoint(_CheckpointFile):
    """`epoch startOffset` lines, in epoch order: a partition's leader-epoch-checkpoint."""

    @staticmethod
    def encode(entries: Iterable[tuple[int, int]]) -> bytes:
        lines = []
        for epoch, start_offset in entries:
            if not isinstance(epoch, int) or not 0 <= epoch <= INT32_MAX:
                raise ValueError(f"leader epoch {epoch!r} must be an int32 >= 0")
            if not isinstance(start_offset, int) or not 0 <= start_offset <= INT64_MAX:
                raise ValueError(f"start offset {start_offset!r} of leader epoch {epoch} must be "
                                 "an int64 >= 0")
            lines.append(f"{epoch} {start_offset}")
        return encode_checkpoint(LeaderEpochCheckpoint.VERSION, lines)

    @staticmethod
    def decode(data: bytes, *, source: str | None = None) -> list[tuple[int, int]]:
        result = []
        for line_no, (epoch, start) in parse_checkpoint(data, LeaderEpochCheckpoint.VERSION, 2,
                                                        source=source):
            line = f"{epoch} {start}"
            result.append((_parse_int(epoch, "leader epoch", line_no, line, source, 0, INT32_MAX),
                           _parse_int(start, "start offset", line_no, line, source, 0, INT64_MAX)))
        return result

    def read(self) -> list[tuple[int, int]]:
        """[(epoch, start_offset)] as stored; empty when the file is missing or empty."""
        data = self._read_bytes()
        return [] if data is None else self.decode(data, source=self._where)

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        self.storage.write_atomic(self.path, self.encode(entries))
