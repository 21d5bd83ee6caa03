"""The segment list of a partition folder, shared by the loader (opening a log) and a reader's
refresh: listing the folder, the segment plan (an object store's cleaned segments), segments a
fenced writer left, the log start offset (checked against the committed state), the readable end
and the segments wholly below the log start.

A mixin of `Log` (logcore.log.log) and of `LogLoader` (logcore.log.log_loader): the methods act
on the `log_segments` (logcore.log.log_segments, the list's only writer) and `log_start_offset`
of whichever object they run on.
"""
from __future__ import annotations

import logging

from logcore.errors import ResourceNotFoundError, SegLogError
from logcore.records.batch import parse_header
from logcore.log.segment import parse_segment_name, segment_name

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


def _txn_index_bases(names: list[str]) -> set[int]:
    return {p[0] for p in map(parse_segment_name, names) if p and p[1] == ".txnindex"}


class SegmentListing:
    """Listing, planning and trimming a partition's segment list."""

    @staticmethod
    def _compacted_once(storage, directory: str, topic: str, partition: int) -> bool:
        """Whether the cleaner ever ran on the partition (its cleaner-offset-checkpoint entry, or
        an object store's list of cleaned segments): its segments may have offset gaps."""
        from logcore.log.checkpoint import OffsetCheckpoint
        root = directory.rsplit("/", 1)[0] if "/" in directory else ""
        path = storage.join(root, "cleaner-offset-checkpoint") if root else "cleaner-offset-checkpoint"
        try:
            if (topic, partition) in OffsetCheckpoint(storage, path).read():
                return True
        except SegLogError:
            return True
        if storage.is_local:
            return False
        try:
            return b'"cleaned"' in storage.read(storage.join(directory, "partition-state.json"))
        except ResourceNotFoundError:
            return False

    def _list_files(self) -> list[str]:
        if not self.storage.exists(self.dir):
            return []
        return self.storage.list_dir(self.dir)

    def _segment_plan(self, names: list[str], bases: list[int],
                      state) -> tuple[list[tuple[int, str | None]], set[int]]:
        """(base, stem) of each segment, and the bases of those that have a transaction index.
        On an object store the cleaner's list in the partition state names the segments below
        its end; listed originals there were replaced."""
        txn_bases = _txn_index_bases(names)
        cleaned = getattr(state, "cleaned", None)
        if self.storage.is_local or not cleaned:
            return [(b, None) for b in bases], txn_bases
        end = int(cleaned["end"])
        plan = [(int(b), str(stem)) for b, stem in cleaned["segments"]]
        for base, stem in plan:
            if stem + ".txnindex" in names:
                txn_bases.add(base)
        txn_bases = {b for b in txn_bases if b >= end or any(b == p[0] for p in plan)}
        return plan + [(b, None) for b in bases if b >= end], txn_bases

    def _drop_unreachable_object_segments(self, *, only_needed: bool = False) -> None:
        """Object stores: a fenced writer may have published a segment after it lost the partition.

        Such a segment starts at or above the offset where the next writer took over and carries
        the older epoch; the leader-epoch checkpoint says which epoch owns each offset.
        only_needed: look only at the segments a range-bounded open prepares.
        """
        entries = self.epoch_cache.entries
        if len(entries) < 2:
            return
        first_takeover = entries[1][1]
        keep = []
        for seg in self.segments:
            if (seg.base_offset >= first_takeover and seg.stem == segment_name(seg.base_offset, "")
                    and (not only_needed or self._needs(seg))):
                head = seg.read_bytes(0, 61)
                if len(head) == 61:
                    ple = parse_header(head).partition_leader_epoch
                    owner = self.epoch_cache.epoch_for_offset(seg.base_offset)
                    if ple >= 0 and owner is not None and ple != owner:
                        logger.warning("ignoring segment %s: written by fenced epoch %d, offset owned by %d",
                                       seg.log_path, ple, owner)
                        if self.writer:
                            seg.delete_files()
                        continue
            keep.append(seg)
        if len(keep) < len(self.segments):
            self.log_segments.keep(keep)

    def _checked_start(self, state) -> int | None:
        """The checkpointed log start offset, unless it contradicts the committed HW (a log
        start is never above it) or, on a local seglog root, the log start seglog itself last
        set (`log-start-offset` in the partition folder, written before the checkpoint): then it
        is reported and not acted on (no segment goes). A crash between the two writes leaves
        the folder's value ahead: that one counts."""
        start, hw = state.log_start_offset, state.high_watermark
        witness = state.log_start_witness
        local = self.storage.is_local and not self._kafka_copy and self.remote is None
        if local and witness is not None and (start is None or witness > start):
            start = witness
        if start is None or self.remote is not None:
            return start
        first = self.bases[0] if self.bases else None
        why = None
        if hw is not None and start > hw:
            why = f"above the committed high watermark {hw}"
        elif (local and len(self.bases) > 1 and start >= self.bases[1]
              and (witness is None or start > witness)):
            # Acting on it would delete whole segments: only seglog's own record may say so.
            why = (f"above the log start seglog last set ({witness if witness is not None else 'none'},"
                   f" segments from {first})")
        if why is None:
            return start
        key = (self.topic, self.partition, start)
        if self._reported_start != key:
            self._reported_start = key
            logger.error("%s-%d: the log-start-offset-checkpoint entry %d is %s: ignored, no segment is"
                         " deleted. Correct or remove that entry", self.topic, self.partition, start, why)
        return witness if local and witness is not None and (hw is None or witness <= hw) else None

    def _readable_end(self, hw: int, leo: int) -> int:
        """Where the HW is capped: the LEO, unless the last segment holds bytes past its last
        whole batch while the committed HW is above that (damage a reader must fail on, not
        data to hide: reads of the offsets from the LEO on fail with the file and position)."""
        if hw <= leo or not self.segments:
            return leo
        last = self.segments[-1]
        end = last.scanned_end
        if end is not None and last.size() > end:
            return hw
        return leo

    def _start_offset(self, checkpointed: int | None, first_base: int) -> int:
        """The log start offset: the checkpointed one, but never below the first local
        segment's base, unless the log has a remote tier. There the checkpoint alone says it: it
        is written before local copies go (local retention) and before remote segments go
        (total retention), so it never points below what exists; no entry means the log starts
        at its first local segment."""
        if self.remote is not None:
            return first_base if checkpointed is None else checkpointed
        return max(checkpointed or 0, first_base)

    def _drop_segments_below_start(self, *, delete_files: bool) -> None:
        """Forget the leading segments wholly below the log start offset (and, for a writer,
        remove their files): what a retention pass left when it stopped after the checkpoint."""
        count = 0
        while (count + 1 < len(self.segments)
               and self.segments[count + 1].base_offset <= self.log_start_offset):
            count += 1
        if count == 0:
            return
        doomed = self.log_segments.remove_first(count)
        for seg in doomed:
            seg.close()
            if delete_files:
                logger.warning("%s-%d: deleting %s, below the log start offset %d", self.topic,
                               self.partition, seg.log_path, self.log_start_offset)
                seg.delete_files()
