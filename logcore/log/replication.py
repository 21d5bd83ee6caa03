"""The follower's append (Kafka's appendAsFollower): the leader's batches kept byte for byte,
checked to follow the LEO, written by the log's one append path
(`ClientAppend.append_batch_locked`, client_append.py).

`FollowerAppend` is a part of `Log` (logcore.log.log), holding the log, its `ClientAppend` (the
write every batch goes through) and its `ReplicaRole` (the epoch it follows at; the HW
operations and epoch-based truncation are the role's, replica_role.py). Local disk only: an
object-store log takes its epoch from its writer fence.
"""
from __future__ import annotations

from logcore.errors import InvalidRecordError, RecordTooLargeError
from logcore.records.batch import iter_batches
from logcore.log.clock import now_ms as _now_ms
from logcore.log.log_reader import _end_marker
from logcore.log.producer_entry import in_sequence
from logcore.log.producer_state import AppendOrigin, ProducerBatch
from logcore.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK


class FollowerAppend:
    """A replica log's append of its leader's batches (for `Log.append_as_follower`)."""

    def __init__(self, log, append, role):
        self._log = log
        self._append = append           # ClientAppend: the one write every batch goes through
        self._role = role               # ReplicaRole: the epoch this replica follows at
        self._segment_bytes = log.config.segment_bytes      # hot-path copies of the config
        self._segment_ms = log.config.segment_ms

    def reconfigure(self, config) -> None:
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms

    # ------------------------------------------------------------------ follower append
    def append_as_follower(self, records, *, follower_at: int | None = None) -> tuple[int, int]:
        """Append the leader's batches verbatim (Kafka's appendAsFollower).

        `records`: bytes of whole RecordBatch v2 batches (or a list of such bytes), as a fetch
        from the leader returns them. Offsets, partition leader epochs, timestamps and producer
        fields are kept: nothing is restamped, so the follower's segments hold the leader's
        bytes. Each batch's length, magic and CRC are checked. The first batch must start at
        the LEO and each one right after the previous one; a batch below that (overlap) raises
        InvalidRecordError, and so does one above it (a gap) unless the log may be compacted
        (the leader's cleaner leaves gaps). Nothing is written when a check fails.

        The epoch cache learns every epoch newer than its latest at the batch that starts it;
        producer state is updated without sequence checks (AppendOrigin.REPLICATION) and
        aborted transactions go to the transaction index. Segments roll by the same rules as
        the leader's appends. The HW does not move (`update_high_watermark` does that).
        Returns (first offset, last offset), or (-1, -1) for no batch.

        `follower_at`: the leader epoch the fetch was made at; the append happens only while
        this replica still follows at it (else NotLeaderOrFollowerError, nothing written).
        """
        self._role.require_local_writer("append as a follower")
        buf, batches = self._follower_batches(records)
        if not batches:
            return -1, -1
        with self._log.critical():
            if follower_at is not None:
                self._role.require_follower(follower_at, "append")
            return self._append_follower_locked(buf, batches, nonblocking=False)

    def append_as_follower_nowait(self, records, *, follower_at: int | None = None) -> tuple[int, int] | None:
        """append_as_follower() for a caller that must not block (the broker's event loop):
        None, with nothing written, when the append would wait for a lock, roll a segment,
        reach the flush policy or write the epoch cache (a batch of a new leader epoch); the
        caller then appends in a worker thread. Raises as append_as_follower does."""
        self._role.require_local_writer("append as a follower")
        buf, batches = self._follower_batches(records)
        if not batches:
            return -1, -1
        if not self._log.lock.acquire(blocking=False):
            return None
        try:
            if not self._log.fence.try_enter_critical():
                return None
            try:
                if follower_at is not None:
                    self._role.require_follower(follower_at, "append")
                return self._append_follower_locked(buf, batches, nonblocking=True)
            finally:
                self._log.fence.exit_critical()
        finally:
            self._log.lock.release()

    def _follower_batches(self, records) -> tuple[bytes | bytearray, list]:
        source = f"{self._log.topic}-{self._log.partition} follower append"
        if isinstance(records, (list, tuple)):
            buf = b"".join(records)
        elif isinstance(records, bytes):
            buf = records                   # immutable: written as it is, no copy
        else:
            buf = bytearray(records)        # a buffer its owner may reuse: a copy of its bytes
        return buf, list(iter_batches(buf, source=source, allow_partial_tail=False))

    def _append_follower_locked(self, buf: bytes | bytearray, batches: list, *,
                                nonblocking: bool) -> tuple[int, int] | None:
        """A follower's append of the leader's batches: each checked to follow the LEO, then
        written by `ClientAppend.append_batch_locked`, as a leader's batch is."""
        log = self._log
        source = f"{log.topic}-{log.partition} follower append"
        log.check_open()
        expected = log.log_end_offset
        for pos, header in batches:
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"{source}: the batch at position {pos} starts at offset {header.base_offset},"
                    f" below the next offset {expected}: it overlaps what the log holds")
            if header.base_offset > expected and log.gapless:
                raise InvalidRecordError(
                    f"{source}: the batch at position {pos} starts at offset {header.base_offset},"
                    f" leaving a gap after {expected - 1}")
            if header.size > self._segment_bytes:
                raise RecordTooLargeError(
                    f"{source}: batch of {header.size} bytes at position {pos} exceeds"
                    f" segment.bytes={self._segment_bytes}")
            expected = header.next_offset
        now = _now_ms()
        if nonblocking:
            if self._follower_append_blocks(batches, now):
                return None
            # Nothing rolls and no new epoch starts (checked just above): when no batch needs
            # the producer state's analysis, the run is one write (one pwrite, its index
            # entries) and its producers' next batches.
            headers = [header for _pos, header in batches]
            if _next_batches(log.producer_state, headers):
                first = batches[0][0]
                last_pos, last = batches[-1]
                self._append.append_next_run_locked(memoryview(buf)[first:last_pos + last.size], headers)
                log.maybe_flush(now)
                return headers[0].base_offset, last.last_offset
        view = memoryview(buf)
        write = self._append.append_batch_locked
        for pos, header in batches:
            data = view[pos:pos + header.size]
            analysis = None
            if header.producer_id >= 0:
                marker = _end_marker(bytes(data), header, source, pos) if header.is_control else None
                analysis = log.producer_state.analyze([ProducerBatch.from_header(header, marker)],
                                                      AppendOrigin.REPLICATION)
            write(data, header, now, header.partition_leader_epoch, analysis)
        log.maybe_flush(now)
        return batches[0][1].base_offset, batches[-1][1].last_offset

    def _follower_append_blocks(self, batches: list, now: int) -> bool:
        """Whether appending `batches` would do blocking work: roll a segment (checked for the
        batches as one run), reach the flush policy, or write the epoch cache."""
        log = self._log
        active = log.segments[-1]
        records = 0
        latest = log.epoch_cache.latest_epoch
        pending = 0
        first_ts = None
        for i, (_pos, header) in enumerate(batches):
            if active.should_roll(header.size, header.max_timestamp, header.last_offset,
                                  segment_bytes=self._segment_bytes, segment_ms=self._segment_ms,
                                  now_ms=now, pending_bytes=pending, pending_batches=i,
                                  pending_first_timestamp=first_ts):
                return True
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                return True
            pending += header.size
            records += header.records_count
            if first_ts is None:
                first_ts = header.max_timestamp
        return log.flush_due(records, now)



def _next_batches(producer_state, headers) -> bool:
    """Whether every batch of a run (in log order) that has a producer is a data batch
    continuing its producer and its transaction state (no control batch: a marker ends a
    transaction; no transaction's first batch), counting the run's earlier batches: the
    producer state's is_next_batch for each in turn, nothing changed. Their producer state is
    then what `append_next_batch` records, as an analysis with AppendOrigin.REPLICATION would
    leave it."""
    last: dict[int, tuple[int, int, bool]] = {}    # producer id -> (epoch, last sequence, transactional)
    for h in headers:
        pid = h.producer_id
        if pid < 0:
            continue
        if h.attributes & CONTROL_MASK:
            return False
        transactional = bool(h.attributes & TRANSACTIONAL_MASK)
        seen = last.get(pid)
        if seen is None:
            if not producer_state.is_next_batch(pid, h.producer_epoch, h.base_sequence, transactional):
                return False
        elif seen[0] != h.producer_epoch or seen[2] != transactional or not in_sequence(seen[1], h.base_sequence):
            return False
        last[pid] = (h.producer_epoch, h.last_sequence, transactional)
    return True
