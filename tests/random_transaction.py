"""A transactional producer that randomised log tests step: each step either begins a
transaction (a transactional append) or ends the open one with a random COMMIT or ABORT marker."""
from __future__ import annotations

from logcore.records.control import ControlType


def next_sequence(log, producer_id: int) -> int:
    """The sequence `producer_id` goes on with on `log` (0 when the log keeps none of its batches)."""
    entry = log.producer_state.producers.get(producer_id)
    return 0 if entry is None or entry.is_empty else entry.last_seq + 1


class RandomTransaction:
    def __init__(self, rng, producer_id: int = 9):
        self.rng = rng
        self.producer_id = producer_id
        self.open = False
        self.sequence = 0

    def step(self, log, records) -> None:
        """Begin a transaction with `records()` (called only then, so that the random stream a
        seeded test draws from stays as it was) or end the open one."""
        if not self.open:
            batch = records()
            log.append_records(batch, producer_id=self.producer_id, producer_epoch=0,
                               base_sequence=self.sequence, is_transactional=True)
            self.sequence += len(batch)
        else:
            log.append_control(self.rng.choice([ControlType.COMMIT, ControlType.ABORT]),
                               producer_id=self.producer_id, producer_epoch=0)
        self.open = not self.open

    def resume_from(self, log) -> None:
        """Go on from what `log` kept (after a truncation): its next sequence and whether the
        producer's transaction is open there."""
        self.sequence = next_sequence(log, self.producer_id)
        entry = log.producer_state.producers.get(self.producer_id)
        self.open = entry is not None and entry.current_txn_first_offset is not None
