"""`ProducerReplay` (a part of `Log`): the log's producer state kept in step with its segments, as
Kafka's rebuildProducerState: rebuilt at open and after a truncation, replayed on at a reader's
refresh, and its last stable offset. A range-bounded reader (range_open.py) loads it only when the
exact LSO is first needed: until then the LSO floor its last commit recorded answers."""
from __future__ import annotations

from logcore.log.clock import now_ms
from logcore.log.log_loader import replay_producer_state
from logcore.log.producer_state import ProducerStateManager
from logcore.log.range_open import LsoFloor


class ProducerReplay:
    def __init__(self, log, storage, directory: str, read_range: tuple[int | None, int | None] | None):
        self._log = log
        self.state = ProducerStateManager(storage, directory, name=f"{log.topic}-{log.partition}")
        # False for a range-bounded reader until the exact LSO is needed.
        self.loaded = read_range is None
        self._lso_floor = LsoFloor(storage, directory, read_range)

    def rebuild(self, empty_at: int | None = None, listed_snapshots: tuple[int, ...] | None = None) -> None:
        """Reload the newest usable snapshot, then replay producer fields of later batches.

        Only batch headers are read, plus the one record of each transaction marker. `empty_at`
        (an open on an object store, which keeps no snapshots: what its last commit recorded):
        an offset where the producer state was empty, a later start of the replay than the log
        start when no snapshot is newer; without it an open read every segment's headers.
        listed_snapshots: the snapshots the open's listing found (None: list the folder again).
        """
        log, state = self._log, self.state
        state.truncate_and_reload(log.log_start_offset, log.log_end_offset, now_ms(),
                                  None if listed_snapshots is None else list(listed_snapshots))
        if (empty_at is not None and not state.producers
                and state.map_end_offset < empty_at <= log.log_end_offset):
            state.update_map_end_offset(empty_at)
        self._replay_from(state.map_end_offset)
        state.on_high_watermark_updated(log.high_watermark)

    def _replay_from(self, start: int) -> None:
        """Replay the producer fields of batches from `start` to the LEO (headers only)."""
        log = self._log
        replay_producer_state(self.state, log.log_segments, start, log.log_end_offset,
                              strict=log.writer, name=f"{log.topic}-{log.partition}")

    def refreshed(self, stored_lso: int | None) -> None:
        """A reader's refresh took new segments and HW: replay what is new (when loaded); the
        LSO the partition state now records may settle the LSO too."""
        if self.loaded:
            self._replay_from(self.state.map_end_offset)
        self.state.on_high_watermark_updated(self._log.high_watermark)
        self._lso_floor.record_stored(stored_lso)

    def record_stored(self, last_stable_offset: int | None) -> None:
        """The LSO the partition state records (a load)."""
        self._lso_floor.record_stored(last_stable_offset)

    @property
    def last_stable_offset(self) -> int:
        log = self._log
        if not self.loaded:
            with log.lock:
                bounded = self._lso_floor.settle(log.high_watermark, log.log_start_offset)
                if bounded is not None:
                    return bounded
                if not self.loaded:     # first need of the exact LSO
                    self.loaded = True
                    self.rebuild()
        first_unstable = self.state.first_unstable_offset
        if first_unstable is None:
            return log.high_watermark
        return min(first_unstable, log.high_watermark)
