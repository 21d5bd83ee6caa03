"""Incremental fetch sessions (KIP-227), the broker's side: a client that keeps a session sends
only the partitions whose fetch position changed, and is answered only the partitions with
news (records, a new high watermark or log start offset, an error, a diverging epoch, a
preferred read replica), while the broker keeps the rest of the session's partitions and reads
them all at every fetch, as Kafka does.

A request's (session_id, session_epoch) picks its context (Kafka's FetchManager.newContext):
- epoch -1 (FINAL): a fetch without a session (and the end of session_id, if one is named);
- epoch 0 (INITIAL): a full fetch that opens a session (ending session_id, if one is named);
  the answer carries the new session's id, or 0 when the cache has no room for it;
- epoch > 0: an incremental fetch of session_id at that epoch: FETCH_SESSION_ID_NOT_FOUND for
  a session the cache does not hold, INVALID_FETCH_SESSION_EPOCH for another epoch,
  FETCH_SESSION_TOPIC_ID_ERROR when the request names topics by id and the session by name or
  the other way round. A session left with no partitions is closed and the fetch answered
  without one.

The cache holds max.incremental.fetch.session.cache.slots sessions. A new session takes a slot
from a session unused for two minutes, else from a less valuable one created over two minutes
ago: followers' sessions before consumers', then more partitions before fewer (Kafka's
FetchSessionCache.tryEvict); when none is less valuable, the fetch is answered without a session.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from logcore.wire import error_codes as E
from logcore.wire.fetch_metadata import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

EVICTION_MS = 120_000          # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
_MAX_SESSION_ID = 0x7FFFFFFF


def _now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: how the client named its topic (the name, or the topic id
    from Fetch v13), its last request entry (fetch offset, leader epoch, ...) and the high
    watermark and log start offset last answered (-1: answer it at the next fetch)."""
    topic: object
    request: object
    high_watermark: int = -1
    log_start_offset: int = -1
    settled: object = None       # the fetch checks' note of the state last answered (a follower's session)
    standing: object = None      # its session's StandingPartitions while set aside
    watched_by: object = None    # the StandingPartitions whose watch its partition holds

    def disturbed(self, wake: bool) -> None:
        """Its partition changed (partition_log.PartitionLog.watch): read again from now on."""
        if self.watched_by is not None:
            self.watched_by.disturbed(self, wake)

    def must_answer(self, res: dict) -> bool:
        """Whether an incremental answer carries this partition's result `res` (Kafka's
        CachedPartition.maybeUpdateResponseData); what it answers is remembered."""
        answer = bool(res["records"])
        if res["high_watermark"] != self.high_watermark:
            self.high_watermark = res["high_watermark"]
            answer = True
        if res["log_start_offset"] != self.log_start_offset:
            self.log_start_offset = res["log_start_offset"]
            answer = True
        if res["error_code"] != E.NONE:
            self.high_watermark = -1        # answered again once the error is gone
            answer = True
        return answer or res["preferred_read_replica"] >= 0 or "diverging_epoch" in res


class FetchSession:
    """A client's session: its id, the epoch its next fetch must carry, whether it names topics
    by id, whether it is a follower's (privileged), and its partitions in order (those answered
    with records move to the end, so that a bounded answer turns over all of them)."""

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool,
                 partitions: dict[tuple, SessionPartition], now_ms: float):
        self.id = session_id
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.standing: StandingPartitions | None = None    # a follower's, from its first set-aside

    def update(self, entries: list[tuple], forgotten: list[tuple]) -> None:
        """An incremental request's partitions added or updated (their cached answer kept),
        then its forgotten ones removed."""
        for topic, p in entries:
            key = (topic, p.partition)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = SessionPartition(topic, p)
            else:
                if cached.watched_by is not None:
                    cached.watched_by.release(cached)
                cached.request = p
        for key in forgotten:
            cached = self.partitions.pop(key, None)
            if cached is not None and cached.watched_by is not None:
                cached.watched_by.release(cached)

    def close(self) -> None:
        """The session ends: its set-aside partitions stop watching."""
        if self.standing is not None:
            self.standing.release_all()

    def eviction_key(self) -> tuple:
        return self.privileged, len(self.partitions), self.id


class FetchSessionCache:
    """The broker's sessions, at most `slots` of them."""

    def __init__(self, slots: int, eviction_ms: float = EVICTION_MS, clock=_now_ms):
        self.slots = slots
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._rng = random.SystemRandom()

    def __len__(self) -> int:
        return len(self.sessions)

    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.clock()

    def create(self, privileged: bool, uses_topic_ids: bool,
               partitions: dict[tuple, SessionPartition]) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no slot for it."""
        now = self.clock()
        if len(self.sessions) >= self.slots and not self._evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        while True:
            session_id = self._rng.randint(1, _MAX_SESSION_ID)
            if session_id not in self.sessions:
                break
        self.sessions[session_id] = FetchSession(session_id, privileged, uses_topic_ids, partitions, now)
        return session_id

    def _evict(self, privileged: bool, size: int, now: float) -> bool:
        """Frees a slot for a new session (Kafka's tryEvict): the least recently used session if
        it is stale, else the least valuable session that may be evicted, if it is worth less
        than the new one."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now - oldest.last_used_ms > self.eviction_ms:
            return self._evicted(oldest)
        settled = [s for s in self.sessions.values()
                   if now - s.created_ms > self.eviction_ms or (privileged and not s.privileged)]
        if not settled:
            return False
        weakest = min(settled, key=FetchSession.eviction_key)
        if (privileged, size) <= weakest.eviction_key()[:2]:
            return False
        return self._evicted(weakest)

    def _evicted(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        session.close()
        self.evictions += 1
        return True


# ----------------------------------------------------------------------------------- contexts

def _topic_key(topic, version: int):
    return topic.topic_id if version >= 13 else topic.topic


def request_entries(body, version: int) -> list[tuple]:
    """A Fetch request's partitions, in order, as (topic key, partition entry): the key is the
    topic's name, or its id (a UUID) from v13."""
    return [(_topic_key(t, version), p) for t in body.topics for p in t.partitions]


class SessionlessFetch:
    """A fetch without a session: every partition asked is read and answered."""
    error_code = E.NONE

    def __init__(self, entries: list[tuple]):
        self.entries = entries

    def set_aside(self, checks, follower: int) -> None:
        """Only a session knows what its client was told: nothing is set aside."""

    def park(self, wake) -> bool:
        """Whether partitions set aside wake the fetch (with `wake`) when they change."""
        return False

    def woken(self) -> list[tuple]:
        return []

    def answered(self, pairs: list[tuple], settle=None) -> tuple[int, list[tuple]]:
        """(session id, the (wanted, result) pairs the answer carries) for the (wanted, result)
        pairs of `entries`, in order."""
        return INVALID_SESSION_ID, pairs

    def throttled(self) -> int:
        return INVALID_SESSION_ID


class FullFetch(SessionlessFetch):
    """A full fetch that opens a session once answered: every partition asked is answered, and
    the session remembers each one's answer."""

    def __init__(self, entries: list[tuple], cache: FetchSessionCache, privileged: bool, uses_topic_ids: bool):
        super().__init__(entries)
        self.cache = cache
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.created = INVALID_SESSION_ID

    def answered(self, pairs: list[tuple], settle=None) -> tuple[int, list[tuple]]:
        partitions = {}
        for (topic, p), (_, res) in zip(self.entries, pairs):
            partitions[(topic, p.partition)] = SessionPartition(
                topic, p, -1 if res["error_code"] != E.NONE else res["high_watermark"], res["log_start_offset"])
        self.created = self.cache.create(self.privileged, self.uses_topic_ids, partitions)
        return self.created, pairs

    def throttled(self) -> int:
        """An answer thrown away for the client's quota: no session is opened by it."""
        self.cache.remove(self.created)
        return INVALID_SESSION_ID


class IncrementalFetch:
    """An incremental fetch of `session`: every partition of the session is read, and only those
    with news are answered. In a follower's session, the partitions the request does not name
    and that the fetch checks find quiet (nothing to read, nothing new to tell, checked at the
    same leadership before) are set aside, not checked nor read, until they change
    (StandingPartitions)."""
    error_code = E.NONE

    def __init__(self, session: FetchSession, named: set):
        self.session = session
        self.named = named                 # (topic key, partition) of the partitions the request names
        # read, in the order of `entries`: the session's partitions not set aside
        self.cached = [c for c in session.partitions.values() if c.standing is None]
        self.entries = [(c.topic, c.request) for c in self.cached]
        self.standing: StandingPartitions | None = None

    def set_aside(self, checks, follower: int) -> None:
        """A follower's fetch: the partitions `checks` find quiet join the session's standing
        set and leave `entries`; standing ones that a recheck finds changed join them."""
        session = self.session
        standing = session.standing
        if standing is None or standing.follower != follower:
            if standing is not None:
                standing.release_all()      # another replica id on the session: counted for the first
                self.cached = [c for c in session.partitions.values() if c.standing is None]
            standing = session.standing = StandingPartitions(session, checks, follower)
        self.standing = standing
        cached = self.cached
        back = standing.begin()
        if back:
            cached = cached + back
        read, named, test = [], self.named, standing.test
        for c in cached:
            if c.settled is not None and (not named or (c.topic, c.request.partition) not in named) and test(c):
                standing.add(c)
            else:
                read.append(c)
        self.cached = read
        self.entries = [(c.topic, c.request) for c in read]

    def park(self, wake) -> bool:
        standing = self.standing
        if standing is None or not standing.members:
            return False
        standing.wake = wake
        return True

    def woken(self) -> list[tuple]:
        """The standing partitions that changed since the fetch began (news came while it was
        parked), moved to the end of `entries`: their (topic key, partition entry)."""
        standing = self.standing
        if standing is None or not standing.returned:
            return []
        woken, standing.returned = standing.returned, []
        self.cached.extend(woken)
        added = [(c.topic, c.request) for c in woken]
        self.entries = self.entries + added
        return added

    def answered(self, pairs: list[tuple], settle=None) -> tuple[int, list[tuple]]:
        """`settle(wanted, result)`: the fetch checks' note of a partition's answered state, kept
        for set_aside (None: nothing to keep)."""
        out = []
        partitions = self.session.partitions
        for cached, pair in zip(self.cached, pairs):
            if cached.must_answer(pair[1]):
                out.append(pair)
                if pair[1]["records"]:
                    key = (cached.topic, cached.request.partition)
                    if partitions.get(key) is cached:       # to the end: the next answers start after it
                        del partitions[key]
                        partitions[key] = cached
            cached.settled = settle(*pair) if settle is not None else None
        return self.session.id, out

    def throttled(self) -> int:
        """An answer thrown away for the client's quota: what it would have told is told next
        time."""
        for cached in self.cached:
            cached.high_watermark = -1
            cached.settled = None
        return self.session.id


RECHECK_MS = 1000.0     # standing partitions tested again (and counted) at least this often


class StandingPartitions:
    """A follower session's partitions set aside across its fetches (the leader's side of
    KIP-227 between brokers). Each was found quiet at a fetch (`checks.quiet_test`: led here at
    the epoch last answered, the follower in the ISR asking for the log end, the HW and log
    start as last answered) and stays aside, its partition watching for it (PartitionLog.watch),
    until the partition changes (an append, a HW move, a state change), the request names it,
    or the session ends: a fetch neither checks, nor reads, nor parks on it meanwhile.

    Every fetch of the session is a fetch of these partitions too, and counts for the ISR:
    the follower asked for the log end. That count is applied when a partition leaves the set
    (before any reader of the follower's state can see the change that ends its quiet) and at
    each recheck, at the time of the session's last fetch: the state every fetch would have
    left. Every RECHECK_MS the members are tested again, for changes that reach no watcher
    (retention moving a log start, a log closed)."""

    def __init__(self, session: FetchSession, checks, follower: int):
        self.session = session
        self.checks = checks               # quiet_test, watch, unwatch, count_standing
        self.follower = follower
        self.test = checks.quiet_test(follower)
        self.members: dict[int, SessionPartition] = {}      # by id()
        self.watched: dict[int, SessionPartition] = {}      # by id(): members, and those a HW move
        #                                                      took out, until an append spends it
        self.returned: list[SessionPartition] = []          # changed since the current fetch began
        self.wake = None                   # the session's parked fetch, woken by an append
        self.checked_ms = session.last_used_ms

    def begin(self) -> list[SessionPartition]:
        """At a fetch's start: the members a due recheck finds changed, to be read by it."""
        self.returned = []
        self.wake = None
        now = self.session.last_used_ms
        if not self.members or now - self.checked_ms < RECHECK_MS:
            return []
        self.checked_ms = now
        back = []
        count, follower, test = self.checks.count_standing, self.follower, self.test
        for c in list(self.members.values()):
            if test(c):
                count(c, follower, now)
            else:                           # changed at an unknown time: counted by its read
                self._leave(c)
                back.append(c)
        return back

    def add(self, c: SessionPartition) -> None:
        c.standing = self
        self.members[id(c)] = c
        if id(c) not in self.watched:
            self.watched[id(c)] = c
            c.watched_by = self
            self.checks.watch(c)

    def disturbed(self, c: SessionPartition, wake: bool) -> None:
        """`c`'s partition changed: counted and read from now on if it was aside. With `wake`
        (an append; the watch is spent) the parked fetch is woken if it is to read `c`, also
        when a HW move took `c` out of the set earlier in this fetch: that move woke nothing."""
        if self.members.pop(id(c), None) is not None:
            c.standing = None
            self.checks.count_standing(c, self.follower, self.session.last_used_ms)
            self.returned.append(c)
        if not wake:
            return
        if self.watched.pop(id(c), None) is not None:
            c.watched_by = None
        wait = self.wake
        if wait is not None and not wait.done() and any(r is c for r in self.returned):
            wait.set_result(None)

    def release(self, c: SessionPartition) -> None:
        """`c` named by a request or forgotten, or the session ended: counted, no longer aside."""
        if id(c) in self.members:
            self.checks.count_standing(c, self.follower, self.session.last_used_ms)
            self._leave(c)
        elif self.watched.pop(id(c), None) is not None:
            c.watched_by = None
            self.checks.unwatch(c)

    def release_all(self) -> None:
        for c in list(self.watched.values()):
            self.release(c)

    def _leave(self, c: SessionPartition) -> None:
        del self.members[id(c)]
        c.standing = None
        if self.watched.pop(id(c), None) is not None:
            c.watched_by = None
            self.checks.unwatch(c)


class SessionError:
    """A request whose session cannot be used: answered with `error_code` alone."""

    def __init__(self, error_code: int):
        self.error_code = error_code


class FetchSessions:
    """The broker's side of fetch sessions: the context of each Fetch request."""

    def __init__(self, cache: FetchSessionCache):
        self.cache = cache

    def context(self, body, version: int, follower: bool):
        """SessionlessFetch, FullFetch, IncrementalFetch or SessionError for a Fetch request."""
        session_id = getattr(body, "session_id", INVALID_SESSION_ID)
        epoch = getattr(body, "session_epoch", FINAL_EPOCH)
        uses_topic_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)          # the client ends its session
            entries = request_entries(body, version)
            if epoch == FINAL_EPOCH or self.cache.slots <= 0:
                return SessionlessFetch(entries)
            return FullFetch(entries, self.cache, follower, uses_topic_ids)
        session = self.cache.get(session_id)
        if session is None:
            return SessionError(E.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionError(E.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionError(E.FETCH_SESSION_TOPIC_ID_ERROR)
        forgotten = [(_topic_key(t, version), index) for t in (getattr(body, "forgotten_topics_data", None) or ())
                     for index in t.partitions]
        entries = request_entries(body, version)
        session.update(entries, forgotten)
        if not session.partitions:
            self.cache.remove(session.id)
            return SessionlessFetch(entries)
        self.cache.touch(session)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetch(session, {(topic, p.partition) for topic, p in entries})
