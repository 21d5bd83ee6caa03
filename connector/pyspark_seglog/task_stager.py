"""A sink task attempt's staging: its rows routed to target partitions, encoded into RecordBatch
v2 batches and staged as parts (staged_part.py) in the staging area (staging_area.py); nothing
it stages is visible before the driver's commit (sink.py)."""
from __future__ import annotations

import logging
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from logcore.log.log_root import LogRoot
from logcore.log.adoption import stamp_offsets
from logcore.records.batch import F_LAST_DELTA, F_POSITION, batch_fields
from logcore.records.compression import Compression
from logcore.records.encode import encode_batch_run_into, encode_plain_run_into, plain_columns
from logcore.storage import open_storage
from logcore.storage.direct_writer import ALIGN, DirectFileWriter

from pyspark_seglog.buffer_pool import AlignedBufferPool
from pyspark_seglog.offset_reservation import reserve_offsets
from pyspark_seglog.part_uploads import PartUploads
from pyspark_seglog import segment_uploads
from pyspark_seglog.row_router import RowRouter
from pyspark_seglog.segment_uploads import MULTIPART, upload_key
from pyspark_seglog.sink_options import default_batch_size
from pyspark_seglog.staged_part import StagedPart
from pyspark_seglog.staging_area import staging_path

# the sink's logger, as before this module was split from sink.py (users configure it by name)
logger = logging.getLogger("pyspark_seglog.sink")

# Staged parts: on local disk a task appends to a part file in chunks, and the commit adopts a
# part of at least `staging.adopt.bytes` as a segment (no copy); smaller parts are copied into
# the active segment, so that small micro-batches do not make a segment each.
DEFAULT_LOCAL_PART_BYTES = 256 << 20
DEFAULT_OBJECT_PART_BYTES = 8 << 20
_WRITE_CHUNK_BYTES = 4 << 20
# A local task writes each target partition's batches in chunks of _WRITE_CHUNK_BYTES, from two
# buffers per partition; with many target partitions the chunks shrink so that the buffers stay
# within this budget (down to _MIN_WRITE_CHUNK_BYTES).
_STAGING_MEMORY_BYTES = 64 << 20
_MIN_WRITE_CHUNK_BYTES = 64 << 10
_FIRST_BUFFER_BYTES = 256 << 10
# Encode buffers outlive a task: the worker's next task reuses their pages (see buffer_pool).
_STAGING_BUFFERS = AlignedBufferPool(keep_bytes=_STAGING_MEMORY_BYTES)
_MAX_KEPT_BATCHES = 1 << 16     # a part's batch_fields rows sent with its commit message (4.5 MiB)
_FIELD_ROW_BYTES = 9 * 8        # one batch_fields row: 9 int64
_NO_POSITIONS = np.empty(0, dtype=np.int64)
_PARALLEL_PUTS = 4              # object store: parts of a task written at the same time
# object store: bytes of finished parts a task holds while they are written in the background
# (part_uploads.py); past that it waits before encoding on
_UPLOAD_MEMORY_BYTES = 64 << 20


@dataclass(frozen=True)
class TopicFacts:
    """What a task needs of a target topic's config (pickled with a batch job's writer)."""
    partitions: int
    compression_type: str
    segment_bytes: int
    max_message_bytes: int
    cleanup_policy: str             # as Kafka lists it: "compact,delete"
    compression_level: int | None = None    # the topic's level for its codec
    # what decides whether a part can become a segment as the task wrote it (its batches'
    # timestamps are not the commit's, its batches fit the indexes): staging.publish=multipart
    log_append_time: bool = False
    segment_index_bytes: int = 10 << 20

    @classmethod
    def of(cls, partitions: int, config) -> TopicFacts:
        return cls(partitions, config.compression_type, config.segment_bytes, config.max_message_bytes,
                   ",".join(config.cleanup_policy), config.compression_level, config.log_append_time,
                   config.segment_index_bytes)

    def takes_as_segment(self, size: int, batches: int) -> bool:
        """Whether a part of `size` bytes in `batches` batches, stamped with its offsets, can be
        a segment as it is (Log.staged_objects_refusal checks the same at the commit)."""
        return not self.log_append_time and size <= self.segment_bytes and batches < self.segment_index_bytes // 12 - 1


class _PartBuffer:
    """A target partition's encoded batches not yet staged: reusable, page-aligned buffers, so
    encoding costs no allocation (and no fresh pages) per call, and a local part file takes them
    with O_DIRECT. On local disk there are two: the task encodes into one while the other is
    being written (`writing`) on the stager's writer thread. A buffer may start with a few bytes
    already counted in the open part (the unaligned tail carried over from the last write)."""

    def __init__(self):
        self.data = _STAGING_BUFFERS.take(_FIRST_BUFFER_BYTES)
        self.spare = None
        self.writing = None     # the Future of the spare buffer's write
        self.fill = 0
        self.kept = 0           # bytes at the start that belong to the open part already
        self.records = 0
        self.part_base = 0      # the position in the open (or next) part of data[0]
        self.fields: list[bytes] = []      # local: batch_fields rows of the open part (int64 bytes)
        # local: the same rows not yet written out, and positions of headers a write left for
        # the next (their blocks were carried over): see TaskStager._header_blocks
        self.heads: list[bytes] = []
        self.head_rest = _NO_POSITIONS

    def wait(self) -> None:
        """Wait for the spare buffer's write; raise its error."""
        writing, self.writing = self.writing, None
        if writing is not None:
            writing.result()


class TaskStager(RowRouter):
    """One task attempt's rows: routed, encoded and staged per target partition. `writer` is the
    sink writer (sink.py) whose options, input columns, root and topics the task uses."""

    def __init__(self, writer, query_id: str, batch_id: int, task: int, attempt: int):
        super().__init__(writer.opts, writer.columns, task)
        self.w = writer
        self.prefix = staging_path(query_id, batch_id)
        self.job_id = query_id
        self.name = f"{task}-{attempt}-{uuid.uuid4().hex[:12]}"
        self.storage = open_storage(self.opts.root, self.opts.storage_options)
        # On local disk a part is a file the task appends to and the commit adopts as a
        # segment; on an object store it is one object written whole.
        self.local = self.storage.is_local
        self.root: LogRoot | None = None
        # topic -> partitions, codec, part limit, batch bytes, write chunk, codec level
        self.topics: dict[str, tuple[int, Compression, int, int, int, int | None]] = {}
        self.policies: dict[str, str] = {}      # topic -> cleanup.policy
        self.facts: dict[str, TopicFacts] = {}
        # staging.publish=multipart: partitions a part of which was staged as an object (not
        # uploaded as its segment); their later parts too, so that the commit, which publishes
        # the uploads first, keeps the task's order
        self.uploads_stopped: set[tuple[str, int]] = set()
        self.pending: dict[tuple[str, int], _PartBuffer] = {}
        self.open_parts: dict[tuple[str, int], StagedPart] = {}
        self.part_files: dict[tuple[str, int], DirectFileWriter] = {}    # local: the open part's file
        self.seq: dict[tuple[str, int], int] = {}
        self.parts: list[StagedPart] = []
        # local: part files are written on one thread while the task encodes the next chunk
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="seglog-stage") if self.local else None
        # object store: finished parts are written in the background while the task encodes on
        self.uploads = None if self.local else PartUploads(
            self._stamp if writer.reserves_offsets else None, self._put, _PARALLEL_PUTS, _UPLOAD_MEMORY_BYTES)
        self._ready: list[tuple[StagedPart, bytearray]] = []     # finished parts not handed over
        # the last Arrow batch's plain_columns: (keys, values, ts, headers, codec, columns)
        self._plain: tuple | None = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.shutdown(wait=True)     # no write may be running on a closed file
        if self.uploads is not None:
            self.uploads.close()                # nor a part PUT after the discard that may follow
        self._ready.clear()
        for file in self.part_files.values():
            file.abandon()
        self.part_files.clear()
        for out in self.pending.values():       # no write of them is running either now
            for buffer in (out.data, out.spare):
                if buffer is not None:
                    _STAGING_BUFFERS.give_back(buffer)
            out.data = out.spare = None
        self.pending.clear()
        if self.root is not None:
            self.root.close()

    def discard(self) -> None:
        """Delete every part this attempt staged, abort its uploads (best effort: it runs on
        the failure path)."""
        segment_uploads.abort(self.storage, segment_uploads.ids(self.parts))
        for part in self.parts + list(self.open_parts.values()):
            if part.upload_key is not None:
                continue
            try:
                self.storage.delete(part.path, missing_ok=True)
            except Exception as exc:          # noqa: BLE001 - the task's own error matters more
                logger.warning("seglog sink: could not delete staged part %s: %s", part.path, exc)
        self.parts.clear()
        self.open_parts.clear()

    def _facts(self, topic: str) -> TopicFacts:
        """What the task needs of `topic`: as the write's planning read it (a batch job's
        `topic` option), else from the root (the topic created if missing and allowed)."""
        planned = self.w.topic_facts
        if planned is not None and topic == self.opts.topic:
            return planned
        if self.root is None:
            self.root = self.w.open_root()
        info = self.w.ensure_topic(self.root, topic)
        return TopicFacts.of(info.partitions, self.root.topic_config(topic))

    def _topic(self, topic: str) -> tuple[int, Compression, int, int, int, int | None]:
        found = self.topics.get(topic)
        if found is None:
            facts = self.facts[topic] = self._facts(topic)
            self.policies[topic] = facts.cleanup_policy
            codec, level = self.opts.stored_codec(facts.compression_type, facts.compression_level)
            if self.opts.staging_part_bytes is not None:
                limit = self.opts.staging_part_bytes
            elif self.local:
                limit = DEFAULT_LOCAL_PART_BYTES
            else:
                limit = DEFAULT_OBJECT_PART_BYTES
            batch_bytes = self.opts.batch_size or default_batch_size(facts.max_message_bytes)
            # A part the commit adopts as a segment must fit one (a batch may overshoot by one
            # batch, so leave room for the largest).
            limit = max(1, min(limit, facts.segment_bytes - 2 * max(batch_bytes, 1 << 20)))
            chunk = limit
            if self.local:
                # two buffers per partition, each a chunk plus room for an encode call's batches
                # (about as much again)
                per_partition = _STAGING_MEMORY_BYTES // (4 * max(1, facts.partitions))
                chunk = min(limit, max(_MIN_WRITE_CHUNK_BYTES, min(_WRITE_CHUNK_BYTES, per_partition)))
            found = self.topics[topic] = (facts.partitions, codec, limit, batch_bytes, chunk, level)
        return found

    def _cleanup_policy(self, topic: str) -> str:
        self._topic(topic)
        return self.policies[topic]

    def add(self, batch) -> None:
        super().add(batch)
        if self._ready:
            # the parts this batch filled (often one per target partition, as rows spread
            # evenly) go together: one reservation, their PUTs at the same time
            self._hand_over()

    def _hand_over(self) -> None:
        ready, self._ready = self._ready, []
        for i in range(0, len(ready), _PARALLEL_PUTS):
            self.uploads.submit(ready[i:i + _PARALLEL_PUTS])

    def _encode(self, topic, partition, codec, keys, values, ts, headers, rows) -> None:
        tp = (topic, partition)
        out = self.pending.get(tp)
        if out is None:
            out = self.pending[tp] = _PartBuffer()
        limit, batch_bytes, threshold, level = self.topics[topic][2:6]
        plain = self._plain_columns(codec, keys, values, ts, headers)
        while True:
            if plain is not None:
                size, batches, fields = encode_plain_run_into(
                    plain, out.data, out.fill, rows=rows, batch_bytes=batch_bytes,
                    max_records=self.opts.max_records, fields_base=out.part_base + out.fill)
            else:
                size, batches = encode_batch_run_into(
                    out.data, out.fill, keys, values, ts, rows=rows, headers=headers, compression=codec,
                    compression_level=level, batch_bytes=batch_bytes, max_records=self.opts.max_records)
                fields = None
            if batches >= 0:
                break
            # No room. A buffer that cannot hold a chunk plus these rows grows (once, usually);
            # a big enough one is staged and reused.
            want = threshold + 2 * size
            if len(out.data) < want:
                grown = _STAGING_BUFFERS.take(want)
                grown[:out.fill] = out.data[:out.fill]
                _STAGING_BUFFERS.give_back(out.data)   # not the one being written: the spare is
                out.data = grown
            else:
                self._write(tp)
        if self.local and batches:
            # The headers just encoded: the commit adopts the part without scanning it (see
            # StagedPart.batches).
            if fields is None:
                scanned = batch_fields(memoryview(out.data)[out.fill:out.fill + size], verify_crc=False)
                scanned[:, F_POSITION] += out.part_base + out.fill
                fields = scanned.tobytes()
            out.fields.append(fields)
            out.heads.append(fields)
        out.fill += size
        out.records += len(values) if rows is None else len(rows)
        if out.fill >= threshold:
            self._write(tp)

    def _plain_columns(self, codec, keys, values, ts, headers):
        """`plain_columns` of an Arrow batch's rows, taken once for all its target partitions
        (the router hands each partition the same arrays)."""
        cached = self._plain
        if (cached is not None and cached[0] is keys and cached[1] is values and cached[2] is ts
                and cached[3] is headers and cached[4] == codec):
            return cached[5]
        columns = plain_columns(keys, values, ts, headers, codec)
        self._plain = (keys, values, ts, headers, codec, columns)
        return columns

    def _write(self, tp) -> None:
        """Stage the encoded batches of `tp`: append them to its open part (local disk), or
        make them one part object, written once handed over (`_hand_over`)."""
        out = self.pending.get(tp)
        if out is None or out.fill == out.kept:
            return
        part = self.open_parts.get(tp)
        if part is None:
            seq = self.seq.get(tp, 0)
            self.seq[tp] = seq + 1
            path = f"{self.prefix}/{tp[0]}-{tp[1]}/{self.name}-{seq}"
            part = self.open_parts[tp] = StagedPart(tp[0], tp[1], path, 0, self.task, seq)
        # Staging needs no fsync: a staged part that a crash loses fails its commit, and
        # nothing is visible before the commit; the commit itself is durable.
        if self.local:
            file = self.part_files.get(tp)
            if file is None:
                os_path = self.storage.local_path(part.path)
                os.makedirs(os.path.dirname(os_path), exist_ok=True)
                file = self.part_files[tp] = DirectFileWriter(os_path)
            # Write whole blocks of this buffer on the writer thread; carry the rest to the
            # start of the spare one (once its own write is done) and encode on into that.
            out.wait()
            length = file.aligned(out.fill)
            rest = out.fill - length
            if out.spare is None or len(out.spare) < len(out.data):
                if out.spare is not None:
                    _STAGING_BUFFERS.give_back(out.spare)
                out.spare = _STAGING_BUFFERS.take(len(out.data))
            out.spare[:rest] = out.data[length:out.fill]
            out.writing = self.writer.submit(file.write, out.data, length, self._header_blocks(out, length))
            out.data, out.spare = out.spare, out.data
            part.size = out.part_base + out.fill
            out.fill = out.kept = rest
            out.part_base = part.size - rest
        else:
            self._ready.append((part, bytearray(out.data[:out.fill])))
            part.size += out.fill
            out.fill = 0
        part.records += out.records
        out.records = 0
        if not self.local or part.size >= self.topics[tp[0]][2]:
            self._finish(tp)

    def _finish(self, tp) -> None:
        file = self.part_files.pop(tp, None)
        part = self.open_parts.pop(tp, None)
        if file is not None:
            out = self.pending[tp]
            out.wait()
            file.close(out.data, out.fill)
            out.fill = out.kept = out.part_base = 0
            out.heads, out.head_rest = [], _NO_POSITIONS
            fields, out.fields = out.fields, []
            if part is not None and 0 < sum(len(f) for f in fields) // _FIELD_ROW_BYTES <= _MAX_KEPT_BATCHES:
                part.batches = b"".join(fields)
        if part is not None:
            self.parts.append(part)

    def _stamp(self, puts: list[tuple[StagedPart, bytearray]]) -> None:
        """Reserve offsets for these parts (one conditional write for all) and stamp them into
        their batches, with the epoch of their partition's commit (offset_reservation.py)."""
        fields = [batch_fields(data, verify_crc=False) for _part, data in puts]
        offsets = [int((rows[:, F_LAST_DELTA] + 1).sum()) for rows in fields]
        counts: dict[tuple[str, int], int] = {}
        for (part, _data), n in zip(puts, offsets):
            counts[(part.topic, part.partition)] = counts.get((part.topic, part.partition), 0) + n
        ranges = reserve_offsets(self.storage, self.job_id, counts)
        for (part, data), rows, n in zip(puts, fields, offsets):
            tp = (part.topic, part.partition)
            if tp not in ranges:
                continue
            first, epoch = ranges[tp]
            ranges[tp] = (first + n, epoch)
            if 0 < len(rows) <= _MAX_KEPT_BATCHES:     # else appended at the commit (not stamped)
                stamp_offsets(data, rows, first, epoch)
                part.base, part.epoch, part.batches = first, epoch, rows.tobytes()
            if self.opts.staging_publish == MULTIPART and tp not in self.uploads_stopped:
                if part.base >= 0 and self.facts[part.topic].takes_as_segment(len(data), len(rows)):
                    part.upload_key = upload_key(part.topic, part.partition, part.base)
                else:
                    self.uploads_stopped.add(tp)

    @staticmethod
    def _header_blocks(out: _PartBuffer, length: int) -> np.ndarray:
        """Offsets in out.data of the blocks that hold the first 16 bytes (what the commit
        patches) of the batches written now, `out.data[:length]`: kept in the page cache too,
        so that the commit patches them without reading them from the disk."""
        if not out.heads and not len(out.head_rest):
            return _NO_POSITIONS
        positions = np.frombuffer(b"".join(out.heads), dtype=np.int64)[F_POSITION::9]
        out.heads = []
        if len(out.head_rest):
            positions = np.concatenate((out.head_rest, positions))
        offsets = positions - out.part_base
        now = offsets[offsets + 16 <= length]
        out.head_rest = positions[offsets + 16 > length]
        return np.unique(np.concatenate((now // ALIGN, (now + 15) // ALIGN))) * ALIGN

    def flush_all(self) -> None:
        for tp in sorted(self.pending):
            self._write(tp)
        if self.uploads is not None:
            # the task's last parts (one per target partition, usually all of them) are PUT
            # together, not one round trip after another; then every part is written
            self._hand_over()
            self.uploads.finish()
        for tp in sorted(self.open_parts):
            self._finish(tp)

    def _put(self, part: StagedPart, data: bytearray) -> None:
        """Write one part object, or upload it as its segment (on an upload thread:
        part_uploads.py). The upload id is kept first, so that a failure aborts it."""
        if part.upload_key is None:
            self.storage.write_atomic(part.path, data, durable=False)
            return
        part.upload_id = self.storage.start_upload(part.upload_key)
        part.etag = self.storage.upload_part(part.upload_key, part.upload_id, data)
