"""The last small read of each partition's tail, served again to the next fetch of the same range.

At the tail of a replicated partition the same bytes are read several times within a
millisecond: each follower's fetch reads the batch the leader just appended (from its offset up to
the LEO), and a consumer's fetch reads it once more when the high watermark has passed it (the
same offset, up to the HW, which is then the same bound). One such read of a small batch costs
more than the rest of its fetch (the offset index lookup, the entry's check, the batch headers
scanned from the entry, the copy), so the second and third are served from the first.

A read is kept only when it was made on the event loop (the active segment, which the cleaner
never rewrites) and copied (a small range; larger ones go out with sendfile and are not kept).
It is served again only for the same log, offset, bound (the LEO, HW or LSO value the read
stopped at), byte budget, first-batch rule, isolation kind, log start offset and truncation
count, checked under the log's lock: below the bound nothing in the active segment changes but
by a truncation, which counts, or by the log start moving, which is compared. The high watermark,
LSO and log start offset of the answer are taken afresh.

The batches produce rounds appended on the event loop are kept the same way, as written (their
offsets and leader epoch stamped), so that the first follower's fetch of them is not a read
either: served for a read from a run's first offset while the log ends where the last run ended
(the bound, LEO or HW, at that end too: nothing appended since, so the run is still in the
active segment), nothing truncated since before the append, the log start where it was, the
run within the read's byte budget and no read_committed read (whose aborted transactions come
from the index).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from logcore.log.file_slice import FileSlice
from logcore.log.log_reader import FetchResult

KEPT_PARTITIONS = 64          # entries kept, least recently stored dropped first
KEPT_BYTES = 64 * 1024        # a read larger than this is not kept (the broker sends it with sendfile)
# The produced runs kept per partition: a producer with several requests in flight (the Java
# client's five, each a 16 KiB batch per partition by default) has its leader append that many
# runs before a follower's fetch of the first arrives; kept to 64 KiB, a quarter of the
# followers' fetches missed the oldest run and read the log.
KEPT_RUNS_BYTES = 256 * 1024


@dataclass(frozen=True)
class TailRead:
    """A read copied here: its records and aborted transactions, and the log's HW, LSO and log
    start offset (as they are now, for a read served again)."""
    data: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list


@dataclass(frozen=True)
class _Kept:
    log: object
    key: tuple
    data: bytes
    aborted: list


class _Appended:
    """The runs produce rounds appended one after another, the last ending at `end`: `starts`
    the first offset of each, `chunks` its bytes as written; the oldest dropped past
    KEPT_RUNS_BYTES."""
    __slots__ = ("log", "starts", "chunks", "size", "end", "truncations", "log_start_offset")

    def __init__(self, log, truncations: int, log_start_offset: int):
        self.log, self.truncations, self.log_start_offset = log, truncations, log_start_offset
        self.starts: list[int] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.end = -1

    def add(self, start: int, end: int, data: bytes) -> None:
        self.starts.append(start)
        self.chunks.append(data)
        self.size += len(data)
        self.end = end
        while self.size > KEPT_RUNS_BYTES:
            self.starts.pop(0)
            self.size -= len(self.chunks.pop(0))

    def from_offset(self, offset: int, budget: int) -> bytes | None:
        """The batches from `offset` to the end, if `offset` starts a kept run and they fit."""
        try:
            i = self.starts.index(offset)
        except ValueError:
            return None
        chunks = self.chunks[i:]
        if sum(len(c) for c in chunks) > budget:
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class TailReads:
    """The kept reads, one per partition (keyed by the broker's PartitionLog); `served` counts
    the reads answered from a kept one."""

    def __init__(self, max_partitions: int = KEPT_PARTITIONS):
        self._kept: OrderedDict = OrderedDict()
        self._max = max_partitions
        self.served = 0

    def read_nowait(self, part, log, offset: int, budget: int, isolation: str, min_one_batch: bool,
                    copy_below: int = KEPT_BYTES) -> FetchResult | TailRead | None:
        """Log.read_nowait (zero-copy) of `part`'s `log`, a range under `copy_below` bytes copied
        and kept, and the same range asked again served from it. The log's lock is held from the
        key to the keep, so that the key is the one the read saw; None, having read nothing, when
        the lock is busy or the read would block."""
        if not log.lock.acquire(blocking=False):
            return None
        try:
            key = (offset, log.bound(isolation), budget, min_one_batch, isolation == "read_committed",
                   log.log_start_offset, log.truncations)
            if offset == key[1] and offset >= key[5]:
                # At the bound (a follower at the LEO, a consumer at the HW: a parked fetch's
                # first read): nothing to read, the log's answer without its read path.
                return TailRead(b"", log.high_watermark, log.last_stable_offset, key[5], [])
            kept = self._kept.get(part)
            if kept is not None and kept.log is log:
                if type(kept) is _Appended:
                    if (key[1] == kept.end == log.log_end_offset and not key[4]
                            and key[5] == kept.log_start_offset and key[6] == kept.truncations):
                        data = kept.from_offset(offset, budget)
                        if data is not None:
                            self.served += 1
                            return TailRead(data, log.high_watermark, log.last_stable_offset,
                                            log.log_start_offset, [])
                elif kept.key == key:
                    self.served += 1
                    return TailRead(kept.data, log.high_watermark, log.last_stable_offset,
                                    log.log_start_offset, kept.aborted)
            fetched = log.read_nowait(offset, budget, isolation=isolation, min_one_batch=min_one_batch,
                                      zero_copy=True)
            if fetched is None or not isinstance(fetched.data, FileSlice) or fetched.data.size >= copy_below:
                return fetched
            with fetched.data as data:
                copied = data.read()
            if copied and len(copied) <= KEPT_BYTES:
                self._keep(part, _Kept(log, key, copied, fetched.aborted))
            return TailRead(copied, fetched.high_watermark, fetched.last_stable_offset,
                            fetched.log_start_offset, fetched.aborted)
        finally:
            log.lock.release()

    def appended(self, part, log, start: int, end: int, written: list, truncations: int) -> None:
        """Keep the batches `written` (as written, in order) that a produce round appended to
        `part`'s `log` from offset `start` to `end`, when `truncations` (read before the append)
        still stands and the log still ends at `end`; copied (they may be views of a request
        frame). A run that continues the one kept (it starts at its end, nothing truncated or
        deleted between) is added to it, so that a follower still at an earlier run's start
        (several produce requests in flight) is served the runs from there. A run over
        KEPT_BYTES is not kept."""
        if sum(len(b) for b in written) > KEPT_BYTES or not log.lock.acquire(blocking=False):
            return
        try:
            if log.truncations != truncations or log.log_end_offset != end:
                return
            kept = self._kept.get(part)
            if not (type(kept) is _Appended and kept.log is log and kept.end == start
                    and kept.truncations == truncations and kept.log_start_offset == log.log_start_offset):
                kept = _Appended(log, truncations, log.log_start_offset)     # not a continuation
            kept.add(start, end, b"".join(written))
            self._keep(part, kept)
        finally:
            log.lock.release()

    def _keep(self, part, entry) -> None:
        self._kept[part] = entry
        self._kept.move_to_end(part)
        if len(self._kept) > self._max:
            self._kept.popitem(last=False)
