"""What a partition's producer state keeps of one producer id: its epochs, the open transaction
and the metadata of its last batches (Kafka's ProducerStateEntry and BatchMetadata), with the
int32 sequence arithmetic they use."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """sequence + increment with int32 wrap to 0 after INT_MAX."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    """What is retained of one appended batch: enough to answer a retry with its offsets."""

    last_seq: int
    last_offset: int
    offset_delta: int     # last offset - first offset (= last seq - first seq)
    timestamp: int        # the batch's max timestamp

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    """The state of one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate_batch(self, producer_epoch: int, first_seq: int, last_seq: int
                             ) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        if self.producer_epoch != producer_epoch:
            self.batches.clear()   # sequences restart with a new epoch
            self.producer_epoch = producer_epoch

    def add_batch_metadata(self, batch: BatchMetadata) -> None:
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.batches.append(batch)

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.add_batch_metadata(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update_from(self, staged: ProducerStateEntry) -> None:
        """Apply the result of a staged append (`ProducerAppendInfo`)."""
        self.maybe_update_producer_epoch(staged.producer_epoch)
        self.coordinator_epoch = staged.coordinator_epoch
        self.last_timestamp = staged.last_timestamp
        self.current_txn_first_offset = staged.current_txn_first_offset
        for batch in staged.batches:
            self.add_batch_metadata(batch)

    def staged_copy(self) -> ProducerStateEntry:
        """Same epochs, timestamp and open transaction; no batches (Kafka's updatedEntry)."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset)
