"""How a log is opened: one named policy per mode, picked by `LogRoot.log`.

A mode used to be a set of switches given to `Log` (fence, read_only, kafka_clean,
truncate_uncommitted, resume, repair, kafka_copy, replica, read_range) and checked against each
other by hand. Each mode is now a small class that says what it allows, so a combination that
makes no sense (a range-bounded writer, a repairing replica) cannot be built:

- `PathWriter`: takes the partition by its writer fence and leads at the fence's epoch; a
  writer that opens it cuts what an earlier writer appended but never committed; its commit
  moves the HW to the log end (the single-node policy).
- `RepairWriter`: a path writer whose recovery checks every segment and may cut committed data
  (`seglog repair`).
- `ReplicaWriter`: a cluster member's log (local disk): the fence only locks its folder, the
  leader epoch is given from outside (become_leader / become_follower), opening never cuts, and
  the HW moves with replication, never at a commit.
- `PlainReader`, `RangeReader` (only what reading offsets [start, end) needs, range_open.py)
  and `KafkaCopyReader` (a copy of a Kafka broker's log dir, its own checkpoints).
"""
from __future__ import annotations


class OpenMode:
    """A reader's or writer's rules for one open log; subclasses set what differs."""

    writer = False                  # takes the partition (holds its writer fence)
    replica = False                 # epoch from outside, HW by replication (a cluster member)
    repair = False                  # recovery checks every segment, may cut committed data
    kafka_copy = False              # a Kafka broker's copy (its own checkpoints)
    kafka_clean = False             # ... which that broker shut down cleanly
    truncates_uncommitted = False   # opening cuts the tail above the committed HW
    read_range: tuple[int | None, int | None] | None = None    # a range-bounded reader's [start, end)
    resume: tuple[int, str] | None = None      # a writer's last hold (epoch, writer id) to take back

    @property
    def commit_moves_high_watermark(self) -> bool:
        """The single-node policy: a commit makes everything appended visible. A replica's
        HW moves with replication only."""
        return self.writer and not self.replica

    @property
    def leads_when_opened(self) -> bool:
        """Whether the opened log takes a leader's appends before anyone says so."""
        return not self.replica

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PlainReader(OpenMode):
    """Reads the whole log as committed by its writer."""


class RangeReader(OpenMode):
    """Reads offsets [start, end) (start None: the HW; end None: the log end); the open
    prepares only what that needs."""

    def __init__(self, start: int | None, end: int | None):
        self.read_range = (start, end)

    def __repr__(self) -> str:
        return f"RangeReader{self.read_range}"


class KafkaCopyReader(OpenMode):
    """Reads a copy of a Kafka broker's log dir; `clean`: the broker shut down cleanly (its
    `.kafka_cleanshutdown` marker), so no recovery scan is needed. Optionally range-bounded."""

    kafka_copy = True

    def __init__(self, *, clean: bool, read_range: tuple[int | None, int | None] | None = None):
        self.kafka_clean = clean
        self.read_range = read_range


class PathWriter(OpenMode):
    """Takes the partition by its writer fence (see the module docstring)."""

    writer = True

    def __init__(self, *, resume: tuple[int, str] | None = None, truncate_uncommitted: bool = True):
        self.resume = resume
        self.truncates_uncommitted = truncate_uncommitted


class RepairWriter(PathWriter):
    """`seglog repair`: a path writer whose recovery may cut committed data."""

    repair = True


class ReplicaWriter(OpenMode):
    """A cluster member's log on local disk (see the module docstring)."""

    writer = True
    replica = True

    def __init__(self, *, resume: tuple[int, str] | None = None):
        self.resume = resume
