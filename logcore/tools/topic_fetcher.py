"""Records of one topic fetched from its partitions' leaders over the Kafka protocol, for
`seglog consume --bootstrap-server` (kafka-console-consumer's path).

`positions` says where each assigned partition reads next; `seek_to(partitions, EARLIEST |
LATEST | a timestamp)` sets them with ListOffsets; `fetch()` sends one Fetch per leader and
returns the records after each position, in offset order per partition, advancing the positions.
With read_committed (Kafka's consumer default for this tool, as `seglog consume --root`) the
broker answers up to the last stable offset with the aborted transactions of the range, and the
records of aborted transactions are dropped here as Kafka's consumer drops them: a transactional
batch of a producer whose aborted transaction started at or before the batch is skipped until
that producer's ABORT marker. Control batches are never returned.

An answer saying the leader moved refreshes Metadata (the next fetch goes to the new leader); an
OFFSET_OUT_OF_RANGE position is reset by `reset` (Kafka's auto.offset.reset: earliest or latest),
or is an error when `reset` is None.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from logcore.records.batch import TimestampType, decode_records, iter_batches
from logcore.records.control import ControlType, parse_control_type
from logcore.tools.partition_leaders import RETRY_ERRORS, PartitionLeaders
from logcore.wire.api_keys import FETCH, LIST_OFFSETS
from logcore.wire.client import KafkaConnectionError, KafkaError, error_name
from logcore.wire.error_codes import NONE, OFFSET_OUT_OF_RANGE
from logcore.wire.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

# Fetch v4..v12 name topics (v4: isolation level and aborted transactions); ListOffsets from v2
# (isolation level).
WINDOWS = {FETCH: (4, 12), LIST_OFFSETS: (2, 7)}
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
EARLIEST, LATEST = EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
MAX_PARTITION_BYTES = 1 << 20          # Kafka's max.partition.fetch.bytes
MAX_BYTES = 50 << 20                   # fetch.max.bytes


@dataclass(frozen=True)
class Fetched:
    partition: int
    timestamp_type: TimestampType
    record: object                     # logcore.records.Record


class TopicFetcher:
    """Fetches the assigned partitions of one topic from their leaders."""

    def __init__(self, leaders: PartitionLeaders, *, isolation_level: str, reset: int | None = LATEST):
        self.leaders = leaders
        self.isolation = ISOLATION[isolation_level]
        self.reset = reset
        self.positions: dict[int, int] = {}

    # ------------------------------------------------------------------ positions
    def seek_to(self, partitions, timestamp: int) -> None:
        """Set the positions of `partitions` to the offset ListOffsets gives for `timestamp`
        (EARLIEST, LATEST or ms; a time past the last record: the end)."""
        partitions = list(partitions)
        deadline = time.monotonic() + self.leaders.timeout_s
        to_end: list[int] = []
        while partitions:
            again = []
            for node, ps in self.leaders.by_leader(partitions, deadline).items():
                body = {"replica_id": -1, "isolation_level": self.isolation,
                        "topics": [{"name": self.leaders.topic, "partitions": [
                            {"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1}
                            for p in ps]}]}
                try:
                    response = self.leaders.connection(node).request(LIST_OFFSETS, body, window=WINDOWS[LIST_OFFSETS])
                except KafkaConnectionError:
                    self.leaders.drop(node)
                    again += ps
                    continue
                for t in response.topics:
                    for p in t.partitions:
                        code = int(p.error_code)
                        if code in RETRY_ERRORS:
                            again.append(int(p.partition_index))
                        elif code != NONE:
                            raise KafkaError(f"ListOffsets of {self.leaders.topic}-{p.partition_index} on"
                                             f" {self.leaders.where()}: {error_name(code)}", code)
                        elif int(p.offset) < 0 and timestamp >= 0:   # no record at or after the time
                            to_end.append(int(p.partition_index))
                        else:
                            self.positions[int(p.partition_index)] = int(p.offset)
            if again:
                if time.monotonic() >= deadline:
                    raise KafkaError(f"ListOffsets of {self.leaders.topic} on {self.leaders.where()}: no leader"
                                     f" answered for partitions {sorted(again)} within {self.leaders.timeout_s:g} s")
                time.sleep(0.2)
                self.leaders.refresh()
            partitions = again
        if to_end:
            self.seek_to(to_end, LATEST)

    # ------------------------------------------------------------------ fetching
    def fetch(self, max_wait_ms: int) -> list[Fetched]:
        """One Fetch per leader of the assigned partitions (waiting up to `max_wait_ms` for data)."""
        out: list[Fetched] = []
        deadline = time.monotonic() + self.leaders.timeout_s
        stale = False
        for node, ps in self.leaders.by_leader(sorted(self.positions), deadline).items():
            body = {"replica_id": -1, "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": 1,
                    "max_bytes": MAX_BYTES, "isolation_level": self.isolation, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": self.leaders.topic, "partitions": [
                        {"partition": p, "fetch_offset": self.positions[p], "partition_max_bytes": MAX_PARTITION_BYTES,
                         "current_leader_epoch": -1, "log_start_offset": -1} for p in ps]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            try:
                response = self.leaders.connection(node).request(FETCH, body, window=WINDOWS[FETCH])
            except KafkaConnectionError:
                self.leaders.drop(node)
                stale = True
                continue
            if int(getattr(response, "error_code", NONE)) != NONE:
                raise KafkaError(f"Fetch from {self.leaders.where()}: {error_name(response.error_code)}",
                                 int(response.error_code))
            for t in response.responses:
                for p in t.partitions:
                    partition, code = int(p.partition_index), int(p.error_code)
                    if code == OFFSET_OUT_OF_RANGE and self.reset is not None:
                        self.seek_to([partition], self.reset)
                    elif code in RETRY_ERRORS:
                        stale = True
                    elif code != NONE:
                        raise KafkaError(f"Fetch of {self.leaders.topic}-{partition} at offset"
                                         f" {self.positions[partition]} from {self.leaders.where()}:"
                                         f" {error_name(code)}", code)
                    elif p.records:
                        out += self._records(partition, p.records, p.aborted_transactions or ())
        if stale:
            time.sleep(0.1)
            self.leaders.refresh()
        return out

    def _records(self, partition: int, data: bytes, aborted_transactions) -> list[Fetched]:
        position = self.positions[partition]
        aborted = sorted((int(a.first_offset), int(a.producer_id)) for a in aborted_transactions)
        aborting: set[int] = set()
        out = []
        for pos, header in iter_batches(data):
            if header.next_offset <= position:
                continue
            if self.isolation and header.producer_id >= 0:
                while aborted and aborted[0][0] <= header.last_offset:
                    aborting.add(aborted.pop(0)[1])
                if header.is_control:
                    records = decode_records(data, pos, header)
                    if records and parse_control_type(records[0].key) == ControlType.ABORT:
                        aborting.discard(header.producer_id)
                    position = header.next_offset
                    continue
                if header.is_transactional and header.producer_id in aborting:
                    position = header.next_offset
                    continue
            if header.is_control:
                position = header.next_offset
                continue
            for record in decode_records(data, pos, header):
                if record.offset >= position:
                    out.append(Fetched(partition, header.timestamp_type, record))
            position = header.next_offset
        self.positions[partition] = position
        return out
