"""The fields a follower's fetch round states per partition (logcore/replication/follower_fields.py):
kept between rounds, read again from the log where an answer named the partition, for a
partition followed anew, and for all of them every refresh interval."""
from __future__ import annotations

from dataclasses import dataclass

from logcore.log.log_root import LogRoot
from logcore.replication.follower_fields import FollowerFields
from logcore.replication.replica_fetcher import Followed

MAX = 1 << 20


@dataclass(eq=False)
class _Replica:
    """The replica's face the fetcher uses: its key and its open log (None: not open here)."""
    topic: str
    index: int
    log: object

    def open_log(self):
        return self.log


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _logs(tmp_path, n: int):
    root = LogRoot.open(str(tmp_path), create=True)
    root.create_topic("t", partitions=n)
    logs = [root.log("t", i, writer=True) for i in range(n)]
    for log in logs:
        log.append_records([(None, b"x", (), 1_700_000_000_000)])
    return logs


def _expected(followed, log) -> tuple:
    latest = log.epoch_cache.latest_epoch
    return (followed.epoch, log.log_end_offset, -1 if latest is None else latest, log.log_start_offset, MAX)


def test_fields_are_the_logs_and_are_read_again_only_where_answered(tmp_path):
    logs = _logs(tmp_path, 3)
    followed = [Followed(_Replica("t", i, log), 4) for i, log in enumerate(logs)]
    clock = _Clock()
    fields = FollowerFields(refresh_s=1.0, clock=clock)
    asked, got = fields.round(followed, MAX)
    assert got == {("t", i): _expected(f, log) for i, (f, log) in enumerate(zip(followed, logs))}
    assert asked == {("t", i): (f, log.log_end_offset) for i, (f, log) in enumerate(zip(followed, logs))}
    assert fields.reads == 3
    # The fetcher appends to partition 1 for an answer that named it; partition 2 changes
    # without an answer (a record appended here stands for retention or any other change).
    fields.answered(("t", 1))
    logs[1].append_records([(None, b"y", (), 1_700_000_000_001)])
    logs[2].append_records([(None, b"z", (), 1_700_000_000_002)])
    clock.now += 0.5
    asked, got = fields.round(followed, MAX)
    assert fields.reads == 4
    assert got[("t", 1)] == _expected(followed[1], logs[1]) and asked[("t", 1)][1] == 2
    assert got[("t", 2)][1] == 1            # not read again yet: still the LEO read before
    # A refresh interval after the last full read, every partition is read again.
    clock.now += 0.5
    asked, got = fields.round(followed, MAX)
    assert fields.reads == 7
    assert got == {("t", i): _expected(f, log) for i, (f, log) in enumerate(zip(followed, logs))}


def test_a_partition_followed_anew_or_not_open_is_read_again(tmp_path):
    logs = _logs(tmp_path, 2)
    replicas = [_Replica("t", i, log) for i, log in enumerate(logs)]
    first = [Followed(r, 4) for r in replicas]
    fields = FollowerFields(refresh_s=60.0, clock=_Clock())
    fields.round(first, MAX)
    # Followed again at a newer epoch (a new leadership): its fields are read, with that epoch.
    again = [first[0], Followed(replicas[1], 5)]
    _, got = fields.round(again, MAX)
    assert got[("t", 1)][0] == 5 and fields.reads == 3
    # A log not open here is left out of the round, as before it was kept.
    replicas[1].log = None
    fields.answered(("t", 1))
    asked, got = fields.round(again, MAX)
    assert ("t", 1) not in asked and ("t", 1) not in got and ("t", 0) in got
