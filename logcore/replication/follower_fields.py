"""What a follower's fetch round tells its leader of each partition it follows, kept between
rounds.

Each round states, per partition, the leader epoch it follows at, its LEO, its latest epoch, its
log start and its byte limit (the fetch session, fetch_session.py, then names only those that
changed). Reading them costs a few lookups in the partition's open log, per partition and per
round: on a broker that follows many idle partitions (the group and transaction coordinators'
fifty each) that walk took 4% of the brokers' busy time on a transactional produce. Yet a
follower's log changes almost only through its fetcher's own answers (appends, a truncation, a
log start followed), and a leader answers only the partitions with news. So the fields are
kept, and read again for a partition that an answer named (before the answer is applied: the
next round is prepared after it), for one followed anew (another Followed, at another epoch),
and for every partition once REFRESH_S has passed since they were all read: what changes a
follower's log beside its answers (retention moving its log start, a log closed or reopened, a
changed replica.fetch.max.bytes) is then told within that time.
"""
from __future__ import annotations

import time

REFRESH_S = 1.0


class FollowerFields:
    """The fields last read for each followed partition: key -> (Followed, LEO, fields)."""

    def __init__(self, refresh_s: float = REFRESH_S, clock=time.monotonic):
        self.refresh_s = refresh_s
        self._clock = clock
        self._kept: dict[tuple[str, int], tuple] = {}
        self._read_all_at = float("-inf")
        self.reads = 0                  # partitions read from their logs (for tests)

    def answered(self, key: tuple[str, int]) -> None:
        """The leader's answer names the partition: its log may change, read it again next round."""
        self._kept.pop(key, None)

    def round(self, ready: list, max_bytes: int) -> tuple[dict, dict]:
        """For the partitions `ready` (Followed, in order): {key: (followed, fetch offset)} and
        {key: (epoch, LEO, latest epoch or -1, log start, max_bytes)}; a partition whose log is
        not open is left out."""
        now = self._clock()
        if now - self._read_all_at >= self.refresh_s:
            self._read_all_at = now
            self._kept = {}
        kept = self._kept
        asked: dict = {}
        fields: dict = {}
        for followed in ready:
            replica = followed.replica
            key = (replica.topic, replica.index)
            entry = kept.get(key)
            if entry is None or entry[0] is not followed:
                log = replica.open_log()
                if log is None:
                    kept.pop(key, None)
                    continue
                self.reads += 1
                latest = log.epoch_cache.latest_epoch
                offset = log.log_end_offset
                entry = kept[key] = (followed, offset, (followed.epoch, offset, -1 if latest is None else latest,
                                                        log.log_start_offset, max_bytes))
            asked[key] = (followed, entry[1])
            fields[key] = entry[2]
        return asked, fields
