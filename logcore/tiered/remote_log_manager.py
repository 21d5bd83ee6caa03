"""The remote log manager: copies a partition's sealed segments to the remote tier and expires
remote segments past total retention (KIP-405's RemoteLogManager copy and expiration tasks).

It works on a partition log opened as writer (the maintenance pass holds it, so no other process
copies or deletes this partition's remote segments at the same time):

- `collect`: a copy or delete that a killed process left half-done is finished now: attempts
  still COPY_SEGMENT_STARTED are deleted (no grace period is needed: the writer that started them
  is gone, since we hold the partition), interrupted deletes completed.
- `copy_segments`: every sealed segment whose next segment starts at or below the last stable
  offset and that lies above the highest remote offset is copied, oldest first: the attempt is
  recorded (COPY_SEGMENT_STARTED) before any byte goes up, its data copied by the RSM (log,
  offset/time/transaction indexes, producer snapshot, leader epochs), then marked
  COPY_SEGMENT_FINISHED, which makes it visible. A failed copy is recorded deleted and retried at
  the next pass; until then the segment stays local (local retention waits for the copy). A
  segment whose head another replica already copied (a new leader whose segment boundaries
  differ from the old leader's) is copied from the first offset above the remote tier on, as a
  segment of its own, so remote segments never overlap and leave no gap.
- `expire`: remote segments wholly below the log start offset, beyond retention.bytes (remote
  plus local-only bytes) or older than retention.ms (by their largest timestamp) go, oldest
  first. The log start offset is checkpointed past them FIRST, so no reader is ever sent to a
  segment being deleted; then each is marked DELETE_SEGMENT_STARTED (hidden), its data deleted,
  and marked DELETE_SEGMENT_FINISHED.
- `delete_all`: remote storage turned off with remote.log.delete.on.disable=true: the log start
  offset moves to the local log start, then every remote segment is deleted the same way.
"""
from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass

from logcore.errors import CommitFailedError, RemoteStorageError, SegLogError
from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.log.log import Log
from logcore.log.retention import BREACH_LOG_START, BREACH_SIZE, BREACH_TIME
from logcore.log.segment import SNAPSHOT_SUFFIX, LogSegment, segment_name
from logcore.records.batch import iter_batches
from logcore.storage import open_storage
from logcore.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from logcore.tiered.orphans import collect_orphans
from logcore.tiered.remote_log import RemotePartition
from logcore.tiered.rsm import FileSource, LogSegmentData

logger = logging.getLogger(__name__)
S = RemoteLogSegmentState


@dataclass
class TieringResult:
    """What one pass of the remote log manager did to one partition."""
    segments_copied: int = 0
    bytes_copied: int = 0
    remote_segments_deleted: int = 0
    remote_bytes_deleted: int = 0
    attempts_collected: int = 0
    error: str | None = None            # a copy or delete that failed (retried next pass)


class RemoteLogManager:
    """Copy and expiration for partition logs that have a remote tier (see the module docstring)."""

    def __init__(self, broker_id: int = -1):
        self.broker_id = broker_id

    @staticmethod
    def _view(log: Log) -> RemotePartition:
        if not isinstance(log.remote, RemotePartition):
            raise RemoteStorageError(f"{log.topic}-{log.partition} has no remote tier")
        return log.remote

    def collect(self, log: Log, result: TieringResult) -> None:
        view = self._view(log)
        done = collect_orphans(view.store, view.rsm, grace_ms=0)
        result.attempts_collected += len(done)

    # -- copy ----------------------------------------------------------------------------------

    def copy_segments(self, log: Log, result: TieringResult) -> None:
        """Copy every eligible sealed segment, oldest first; stops at the first failure."""
        view = self._view(log)
        store = view.store
        store.refresh()
        highest = store.highest_offset()
        bound = log.last_stable_offset
        segments = list(log.segments)
        for seg, following in zip(segments, segments[1:]):
            next_base = following.base_offset
            if next_base > bound:
                break                       # not yet stable: neither this nor later segments
            end = next_base - 1
            if (highest is not None and end <= highest) or end < log.log_start_offset or seg.size() == 0:
                continue
            if highest is not None and seg.base_offset <= highest:
                # The remote tier holds this segment's head: another replica copied it, and its
                # segment boundaries differ from this one's (a new leader after failover).
                meta = self._copy_tail(log, view, seg, highest + 1, end)
            else:
                meta = self._copy_one(log, view, seg, end)
            if meta is None:
                result.error = f"copy of segment {seg.base_offset} failed; retried at the next pass"
                break
            result.segments_copied += 1
            result.bytes_copied += meta.segment_size_in_bytes
            highest = end

    def _copy_tail(self, log: Log, view: RemotePartition, seg: LogSegment, start: int,
                   end: int) -> RemoteLogSegmentMetadata | None:
        """Copy the batches of `seg` from offset `start` on, as a segment of their own (written
        with its indexes to a temporary folder first), so that the remote segments stay
        contiguous and never overlap. None when no batch of `seg` starts at `start`."""
        position = None
        for pos, header in seg.scan_headers(0):
            if header.base_offset >= start:
                position = pos if header.base_offset == start else None
                break
        if position is None:
            logger.warning("%s-%d: segment %d straddles the highest remote offset %d and no batch"
                           " of it starts at %d; not copied", log.topic, log.partition,
                           seg.base_offset, start - 1, start)
            return None
        data = bytes(seg.read_bytes(position, seg.size()))
        source = f"{log.topic}-{log.partition} segment {seg.base_offset} from offset {start}"
        headers = [header for _, header in iter_batches(data, source=source)]
        with tempfile.TemporaryDirectory(prefix="seglog-tail-") as folder:
            storage = open_storage(folder)
            tail = LogSegment(storage, "", start, index_interval_bytes=log.config.index_interval_bytes,
                              max_index_size=log.config.segment_index_bytes, writable=True)
            try:
                tail.append(data, headers)
                tail.seal()
            finally:
                tail.close()
            logger.info("%s-%d: segment %d starts below the highest remote offset %d: copying its"
                        " batches from %d on", log.topic, log.partition, seg.base_offset, start - 1,
                        start)
            return self._copy_one(log, view, tail, end, original=seg)

    def _copy_one(self, log: Log, view: RemotePartition, seg: LogSegment, end: int, *,
                  original: LogSegment | None = None) -> RemoteLogSegmentMetadata | None:
        store, rsm = view.store, view.rsm
        meta = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(store.topic_id_partition), seg.base_offset, end,
            seg.largest_timestamp, _segment_epochs(log, seg.base_offset, end), seg.size(),
            broker_id=self.broker_id)
        # The copy quota (shared by the broker's partitions) admits the segment before it goes.
        waited = view.copy_quota.acquire(meta.segment_size_in_bytes)
        store.add_segment(meta)
        started = time.monotonic()
        try:
            custom = rsm.copy_log_segment_data(meta, _segment_data(log, seg, end + 1, original))
        except SegLogError as exc:
            logger.warning("%s-%d: copying segment %d to the remote tier failed: %s", log.topic,
                           log.partition, seg.base_offset, exc)
            view.metrics.record_copy_error(log.topic)
            self._delete_attempt(view, meta)
            return None
        elapsed = time.monotonic() - started
        try:
            finished = store.update_state(meta.segment_id, S.COPY_SEGMENT_FINISHED,
                                          custom_metadata=custom, broker_id=self.broker_id)
        except CommitFailedError as exc:
            # Another copy of these offsets finished first: it stands, ours goes.
            logger.warning("%s-%d: %s", log.topic, log.partition, exc)
            self._delete_attempt(view, meta)
            return None
        view.metrics.record_copy(log.topic, meta.segment_size_in_bytes, elapsed, waited)
        logger.info("%s-%d: copied segment %d-%d (%d bytes) to the remote tier as %s", log.topic,
                    log.partition, seg.base_offset, end, meta.segment_size_in_bytes, meta.segment_id)
        return finished

    @staticmethod
    def _delete_attempt(view: RemotePartition, meta: RemoteLogSegmentMetadata) -> None:
        """Record a failed attempt deleted; if the remote store fails too, the attempt stays
        STARTED (never served) and the next pass's collection finishes it."""
        try:
            view.store.update_state(meta.segment_id, S.DELETE_SEGMENT_STARTED)
            view.rsm.delete_log_segment_data(meta)
            view.store.update_state(meta.segment_id, S.DELETE_SEGMENT_FINISHED)
        except SegLogError as exc:
            logger.warning("cleaning up failed copy %s: %s (collected at the next pass)",
                           meta.segment_id, exc)

    # -- expiration ----------------------------------------------------------------------------

    def expire(self, log: Log, result: TieringResult, now_ms: int) -> None:
        """Total retention over the remote tier; moves the log start offset (see the module)."""
        view = self._view(log)
        store = view.store
        store.refresh()
        segments = store.list_segments()
        if not segments:
            return
        config = log.config
        reasons: list[str] = []
        i = 0
        while i < len(segments) and segments[i].end_offset < log.log_start_offset:
            reasons.append(BREACH_LOG_START)
            i += 1
        if config.delete and config.retention_bytes >= 0:
            highest = max(m.end_offset for m in segments)
            local_only = sum(s.size() for s in log.segments if s.base_offset > highest)
            excess = sum(m.segment_size_in_bytes for m in segments[i:]) + local_only - config.retention_bytes
            while i < len(segments) and excess - segments[i].segment_size_in_bytes >= 0:
                excess -= segments[i].segment_size_in_bytes
                reasons.append(BREACH_SIZE)
                i += 1
        if config.delete and config.retention_ms >= 0:
            while i < len(segments) and now_ms - segments[i].max_timestamp_ms > config.retention_ms:
                reasons.append(BREACH_TIME)
                i += 1
        doomed = segments[:i]
        if not doomed:
            return
        # Readers first: past the new log start offset nobody is sent to a doomed segment.
        log.move_log_start_offset(doomed[-1].end_offset + 1, reason="remote " + reasons[-1])
        for meta in doomed:
            if not self._delete_segment(log, view, meta, result):
                logger.warning("%s-%d: %s", log.topic, log.partition, result.error)
                return
        logger.info("%s-%d: expired %d remote segments (%s); log start offset now %d", log.topic,
                    log.partition, len(doomed), ", ".join(sorted(set(reasons))), log.log_start_offset)

    def _delete_segment(self, log: Log, view: RemotePartition, meta: RemoteLogSegmentMetadata,
                        result: TieringResult) -> bool:
        """Delete one remote segment (its state DELETE_SEGMENT_STARTED, then FINISHED); False
        with `result.error` set when that failed."""
        try:
            view.store.update_state(meta.segment_id, S.DELETE_SEGMENT_STARTED, broker_id=self.broker_id)
            view.rsm.delete_log_segment_data(meta)
            view.store.update_state(meta.segment_id, S.DELETE_SEGMENT_FINISHED, broker_id=self.broker_id)
        except SegLogError as exc:
            view.metrics.record_delete_error(log.topic)
            result.error = f"deleting remote segment {meta.segment_id} failed: {exc}"
            return False
        view.metrics.record_delete(log.topic, meta.segment_size_in_bytes)
        result.remote_segments_deleted += 1
        result.remote_bytes_deleted += meta.segment_size_in_bytes
        return True

    # -- remote storage turned off -------------------------------------------------------------

    def delete_all(self, log: Log, result: TieringResult) -> None:
        """Remote storage turned off with remote.log.delete.on.disable (KIP-950): the log start
        offset moves to the local log start FIRST (the partition serves its local data only,
        and no reader is sent to a segment being deleted), then every remote segment, finished
        or left half-copied, is deleted as retention deletes one."""
        view = self._view(log)
        store = view.store
        self.collect(log, result)
        store.refresh()
        segments = store.list_segments()
        if not segments:
            return
        if log.log_start_offset < log.local_log_start_offset:
            log.move_log_start_offset(log.local_log_start_offset, reason="remote storage disabled")
        for meta in segments:
            if not self._delete_segment(log, view, meta, result):
                return
        logger.info("%s-%d: remote storage disabled: deleted %d remote segments; log start offset"
                    " now %d", log.topic, log.partition, len(segments), log.log_start_offset)


def _segment_epochs(log: Log, base: int, end: int) -> dict[int, int]:
    """Leader epoch -> first offset of that epoch within [base, end], from the log's cache."""
    epochs: dict[int, int] = {}
    for epoch, start in log.epoch_cache.entries:
        if start <= base:
            epochs = {epoch: base}
        elif start <= end:
            epochs[epoch] = start
    return epochs or {0: base}


def _segment_data(log: Log, seg: LogSegment, next_base: int,
                  original: LogSegment | None = None) -> LogSegmentData:
    """What the RSM copies for `seg`: its files, with the log's producer snapshot at
    `next_base` and leader epochs. `original`: `seg` is the tail of that segment of the log
    (written elsewhere), whose transaction index it takes."""

    def source(storage, path: str, *, required: bool = True) -> FileSource | None:
        if not storage.exists(path):
            return b"" if required else None
        return storage.local_path(path) if storage.is_local else storage.read(path)

    storage = seg.storage
    log_source: FileSource = (storage.local_path(seg.log_path) if storage.is_local and not seg.in_memory
                              else seg.read_bytes(0, seg.size()))
    snapshot = log.storage.join(log.dir, segment_name(next_base, SNAPSHOT_SUFFIX))
    epochs = LeaderEpochCheckpoint.encode(log.epoch_cache.entries_up_to(next_base))
    # The transaction index lists aborted transactions by offset range: the original's entries
    # below the tail are never asked for.
    txn = original if original is not None else seg
    return LogSegmentData(log_segment=log_source, offset_index=source(storage, seg.index_path),
                          time_index=source(storage, seg.time_index_path),
                          producer_snapshot=source(log.storage, snapshot), leader_epoch_index=epochs,
                          transaction_index=source(log.storage, txn.txn_index_path, required=False))
