"""A follower's side of an incremental fetch session (KIP-227) with one leader (Kafka's
FetchSessionHandler): the leader keeps the partitions this follower fetches and the fields last
sent for each, so a round names only the partitions whose fields changed (a new LEO, log start,
epoch) and those it no longer fetches (forgotten), and the leader answers only the partitions
with news. On a broker with many partitions and few of them moving, both sides walk a few
partitions per round instead of all of them.

The first round of a session is a full fetch at epoch 0: every partition, and the session id to
close, if any; the answer's session id opens the next (0: the leader keeps no session for it,
and every round is a full fetch). After an answer, the next request carries the next epoch.
Anything else (an error answer, a round abandoned or timed out, a new connection) ends the
session: the next round is a full fetch again, closing the old one.
"""
from __future__ import annotations

from logcore.wire.fetch_metadata import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch


class SessionRound:
    """What one round sends: the session id and epoch, and either every partition (`full`) or
    the `changed` partitions and the `forgotten` ones."""
    __slots__ = ("session_id", "epoch", "full", "changed", "forgotten")

    def __init__(self, session_id: int, epoch: int, full: bool, changed: list, forgotten: list):
        self.session_id, self.epoch, self.full = session_id, epoch, full
        self.changed, self.forgotten = changed, forgotten


class FollowerSession:
    """The session with one leader."""

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH          # of the next request; 0: a full fetch
        self._held: dict = {}               # key -> fields: what the leader holds once it reads the round in flight
        self._in_flight = False

    def next_round(self, fields: dict) -> SessionRound:
        """The round for partitions `fields` ({key: fields tuple}, in order): full at epoch 0,
        else the partitions whose fields differ from what the leader holds and those it holds
        but this round leaves out. Nothing changes until sent()."""
        if self.epoch == INITIAL_EPOCH:
            return SessionRound(self.session_id, INITIAL_EPOCH, True, list(fields), [])
        held = self._held
        changed = [key for key, value in fields.items() if held.get(key) != value]
        forgotten = [key for key in held if key not in fields]
        return SessionRound(self.session_id, self.epoch, False, changed, forgotten)

    def sent(self, fields: dict) -> None:
        """The round for `fields` is on its way (or may be: a write that fails calls failed())."""
        self._held = fields
        self._in_flight = True

    def answered(self, session_id: int) -> None:
        """The round in flight was answered without error, with `session_id`."""
        if not self._in_flight:
            return
        self._in_flight = False
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
        else:
            self.epoch = next_epoch(self.epoch)

    def failed(self) -> None:
        """The round in flight failed or was dropped, or the connection changed: the next round
        is a full fetch that ends this session."""
        self._in_flight = False
        self.epoch = INITIAL_EPOCH
        self._held = {}
