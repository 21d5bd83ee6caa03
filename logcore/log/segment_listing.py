"""The segment list of a partition folder, shared by the loader (opening a log) and a reader's
refresh: listing the folder, the segment plan, segments a fenced writer left, the log start
offset (checked against the committed state), the readable end and the segments wholly below
the log start.

`SegmentListing` is a part that the `Log` (logcore.log.log) and each `LogLoader`
(logcore.log.log_loader) hold; it acts on the `LogSegments` it is handed (the list's only
writer) and asks the segment store (segment_store.py) what differs between local disk and an
object store. It owns one piece of state: the contradictory log start it already reported.
"""
from __future__ import annotations

import logging

from logcore.errors import SegLogError
from logcore.records.batch import parse_header
from logcore.log.segment import segment_name

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


class SegmentListing:
    """Listing, planning and trimming a partition's segment list."""

    def __init__(self, segment_store, topic: str, partition: int, *, remote=None, kafka_copy: bool = False):
        self.segment_store = segment_store
        self.topic = topic
        self.partition = partition
        self.remote = remote                # the remote tier's view (None: all local)
        # Where seglog itself records the log start it set (local disk, seglog's own root, no
        # remote tier): that record is trusted over the checkpoint.
        self.own_start_record = segment_store.in_place and not kafka_copy and remote is None
        self.reported_start: tuple | None = None    # a contradictory log start already reported

    def attach_remote(self, remote) -> None:
        """The log got a remote tier while open: the checkpoint alone says its start from now on."""
        self.remote = remote
        self.own_start_record = False

    def compacted_once(self) -> bool:
        """Whether the cleaner ever ran on the partition (its cleaner-offset-checkpoint entry, or
        an object store's list of cleaned segments): its segments may have offset gaps."""
        from logcore.log.checkpoint import OffsetCheckpoint
        storage, directory = self.segment_store.storage, self.segment_store.dir
        root = directory.rsplit("/", 1)[0] if "/" in directory else ""
        path = storage.join(root, "cleaner-offset-checkpoint") if root else "cleaner-offset-checkpoint"
        try:
            if (self.topic, self.partition) in OffsetCheckpoint(storage, path).read():
                return True
        except SegLogError:
            return True
        return self.segment_store.records_cleaned_list()

    def list_files(self) -> list[str]:
        return self.segment_store.list_files()

    def segment_plan(self, names: list[str], bases: list[int],
                     state) -> tuple[list[tuple[int, str | None]], set[int]]:
        """(base, stem) of each segment, and the bases of those that have a transaction index."""
        return self.segment_store.segment_plan(names, bases, state)

    def drop_unreachable_segments(self, log_segments, epoch_cache, *, delete: bool,
                                  needs=None) -> None:
        """A fenced writer may have published a segment after it lost the partition (object
        stores only: a local writer holds the folder's lock).

        Such a segment starts at or above the offset where the next writer took over and carries
        the older epoch; the leader-epoch checkpoint says which epoch owns each offset.
        delete: remove its files (a writer); needs: look only at the segments it accepts (the
        ones a range-bounded open prepares).
        """
        if not self.segment_store.fenced_writers_publish or not log_segments.list:
            return
        entries = epoch_cache.entries
        if len(entries) < 2:
            return
        first_takeover = entries[1][1]
        keep = []
        for seg in log_segments.list:
            if (seg.base_offset >= first_takeover and seg.stem == segment_name(seg.base_offset, "")
                    and (needs is None or needs(seg))):
                head = seg.read_bytes(0, 61)
                if len(head) == 61:
                    ple = parse_header(head).partition_leader_epoch
                    owner = epoch_cache.epoch_for_offset(seg.base_offset)
                    if ple >= 0 and owner is not None and ple != owner:
                        logger.warning("ignoring segment %s: written by fenced epoch %d, offset owned by %d",
                                       seg.log_path, ple, owner)
                        if delete:
                            seg.delete_files()
                        continue
            keep.append(seg)
        if len(keep) < len(log_segments.list):
            log_segments.keep(keep)

    def checked_start(self, state, bases: list[int]) -> int | None:
        """The checkpointed log start offset, unless it contradicts the committed HW (a log
        start is never above it) or, on a local seglog root, the log start seglog itself last
        set (`log-start-offset` in the partition folder, written before the checkpoint): then it
        is reported and not acted on (no segment goes). A crash between the two writes leaves
        the folder's value ahead: that one counts."""
        start, hw = state.log_start_offset, state.high_watermark
        witness = state.log_start_witness
        local = self.own_start_record
        if local and witness is not None and (start is None or witness > start):
            start = witness
        if start is None or self.remote is not None:
            return start
        first = bases[0] if bases else None
        why = None
        if hw is not None and start > hw:
            why = f"above the committed high watermark {hw}"
        elif (local and len(bases) > 1 and start >= bases[1]
              and (witness is None or start > witness)):
            # Acting on it would delete whole segments: only seglog's own record may say so.
            why = (f"above the log start seglog last set ({witness if witness is not None else 'none'},"
                   f" segments from {first})")
        if why is None:
            return start
        key = (self.topic, self.partition, start)
        if self.reported_start != key:
            self.reported_start = key
            logger.error("%s-%d: the log-start-offset-checkpoint entry %d is %s: ignored, no segment is"
                         " deleted. Correct or remove that entry", self.topic, self.partition, start, why)
        return witness if local and witness is not None and (hw is None or witness <= hw) else None

    @staticmethod
    def readable_end(segments: list, hw: int, leo: int) -> int:
        """Where the HW is capped: the LEO, unless the last segment holds bytes past its last
        whole batch while the committed HW is above that (damage a reader must fail on, not
        data to hide: reads of the offsets from the LEO on fail with the file and position)."""
        if hw <= leo or not segments:
            return leo
        last = segments[-1]
        end = last.scanned_end
        if end is not None and last.size() > end:
            return hw
        return leo

    def start_offset(self, checkpointed: int | None, first_base: int) -> int:
        """The log start offset: the checkpointed one, but never below the first local
        segment's base, unless the log has a remote tier. There the checkpoint alone says it: it
        is written before local copies go (local retention) and before remote segments go
        (total retention), so it never points below what exists; no entry means the log starts
        at its first local segment."""
        if self.remote is not None:
            return first_base if checkpointed is None else checkpointed
        return max(checkpointed or 0, first_base)

    def drop_segments_below_start(self, log_segments, log_start_offset: int, *, delete_files: bool) -> None:
        """Forget the leading segments wholly below the log start offset (and, for a writer,
        remove their files): what a retention pass left when it stopped after the checkpoint."""
        segments = log_segments.list
        count = 0
        while count + 1 < len(segments) and segments[count + 1].base_offset <= log_start_offset:
            count += 1
        if count == 0:
            return
        doomed = log_segments.remove_first(count)
        for seg in doomed:
            seg.close()
            if delete_files:
                logger.warning("%s-%d: deleting %s, below the log start offset %d", self.topic,
                               self.partition, seg.log_path, log_start_offset)
                seg.delete_files()
