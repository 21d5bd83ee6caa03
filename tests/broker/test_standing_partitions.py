"""A follower session's partitions set aside across its fetches (fetch_sessions.StandingPartitions):
not tested, read nor parked on while they stay quiet, read again once their partition changes,
the request names them or a recheck finds them changed, and the follower's fetches of them
counted at the session's last fetch. The fetch checks are a plain stand-in here (which
partition is quiet, who watches); tests/cluster runs them on brokers."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from logcore.broker.fetch_sessions import (RECHECK_MS, FetchSession, FetchSessionCache, IncrementalFetch,
                                           SessionPartition)

FOLLOWER = 2
A, B = ("t", 0), ("t", 1)


class Checks:
    """The cluster's side: `quiet` says which partitions the quiet test passes; `watching` is
    each partition's watch (told of its next change by `change`); counts are recorded."""

    def __init__(self):
        self.quiet: set = set()
        self.tested: list = []
        self.watching: dict = {}
        self.counted: list = []

    def quiet_test(self, follower: int):
        assert follower == FOLLOWER

        def test(c) -> bool:
            self.tested.append(_key(c))
            return _key(c) in self.quiet
        return test

    def watch(self, c) -> None:
        assert _key(c) not in self.watching
        self.watching[_key(c)] = c

    def unwatch(self, c) -> None:
        del self.watching[_key(c)]

    def count_standing(self, c, follower: int, when: float) -> None:
        self.counted.append((_key(c), follower, when))

    def change(self, key, wake: bool) -> None:
        """The partition's notifier: the watch is told; an append (`wake`) spends it, a HW move
        leaves it (partition_log.PartitionLog.watch)."""
        c = self.watching.pop(key) if wake else self.watching[key]
        c.disturbed(wake)


def _key(c) -> tuple:
    return c.topic, c.request.partition


def _session(now: float = 0.0) -> FetchSession:
    parts = {k: SessionPartition(k[0], SimpleNamespace(partition=k[1], fetch_offset=5), 5, 0, settled="answered")
             for k in (A, B)}
    return FetchSession(7, True, False, parts, now)


def _fetch(session: FetchSession, checks: Checks, at: float, named=()) -> IncrementalFetch:
    session.last_used_ms = at               # the cache's touch at the request
    fetch = IncrementalFetch(session, set(named))
    fetch.set_aside(checks, FOLLOWER)
    return fetch


def _read(fetch: IncrementalFetch) -> set:
    return {(t, p.partition) for t, p in fetch.entries}


def test_a_quiet_partition_stays_aside_untested_until_it_changes():
    checks, session = Checks(), _session()
    checks.quiet = {A}
    assert _read(_fetch(session, checks, 10)) == {B}
    assert set(checks.watching) == {A}
    checks.tested.clear()
    for at in (20, 30, 40):
        assert _read(_fetch(session, checks, at)) == {B}
    assert checks.tested == [B, B, B] and checks.counted == []   # A neither tested nor counted per fetch
    checks.change(A, wake=False)             # e.g. its HW moved: news for the next fetch
    assert checks.counted == [(A, FOLLOWER, 40)]   # its fetches counted up to the last one
    checks.quiet = set()
    assert _read(_fetch(session, checks, 50)) == {A, B}
    assert set(checks.watching) == {A}       # kept until an append spends it, or the session ends
    checks.change(A, wake=True)
    assert checks.watching == {} and checks.counted == [(A, FOLLOWER, 40)]


def test_a_change_while_the_fetch_is_parked_wakes_it_and_is_read():
    async def run():
        loop = asyncio.get_running_loop()
        checks, session = Checks(), _session()
        checks.quiet = {A, B}
        fetch = _fetch(session, checks, 10)
        assert _read(fetch) == set()
        wake = loop.create_future()
        assert fetch.park(wake)
        checks.change(B, wake=False)         # a HW move: not a reason to answer early
        assert not wake.done()
        checks.change(A, wake=True)          # an append
        assert wake.done()
        assert {(t, p.partition) for t, p in fetch.woken()} == {A, B}
        assert _read(fetch) == {A, B} and fetch.woken() == []
        assert sorted(checks.counted) == [(A, FOLLOWER, 10), (B, FOLLOWER, 10)]
        # The next fetch: nothing aside, nothing to wake it for.
        checks.quiet = set()
        nxt = _fetch(session, checks, 20)
        assert _read(nxt) == {A, B} and not nxt.park(loop.create_future())
    asyncio.run(run())


def test_an_append_after_a_hw_move_still_wakes_the_parked_fetch():
    """The HW move takes the partition out of the set without waking anyone; the append that
    follows in the same wait must still wake the fetch (else it waits for max_wait)."""
    async def run():
        loop = asyncio.get_running_loop()
        checks, session = Checks(), _session()
        checks.quiet = {A, B}
        fetch = _fetch(session, checks, 10)
        wake = loop.create_future()
        assert fetch.park(wake)
        checks.change(A, wake=False)         # e.g. the append's own HW move, told first
        assert not wake.done() and set(checks.watching) == {A, B}
        checks.change(A, wake=True)          # then the append
        assert wake.done() and set(checks.watching) == {B}
        assert {(t, p.partition) for t, p in fetch.woken()} == {A}
        assert checks.counted == [(A, FOLLOWER, 10)]          # counted once
        # A HW move then an append in a later fetch, which reads A itself: spent, no double wake.
        checks.quiet = {B}
        nxt = _fetch(session, checks, 20)
        assert _read(nxt) == {A}
        session.close()
        assert checks.watching == {}
    asyncio.run(run())


def test_a_change_between_fetches_is_read_by_the_next():
    checks, session = Checks(), _session()
    checks.quiet = {A}
    _fetch(session, checks, 10)
    checks.change(A, wake=True)              # no fetch parked
    checks.quiet = set()
    fetch = _fetch(session, checks, 20)
    assert _read(fetch) == {A, B} and fetch.woken() == []   # read once, not also as woken


def test_a_recheck_counts_the_aside_and_returns_what_changed_unnoticed():
    """Every RECHECK_MS the members are tested again (a change no watch hears of, e.g.
    retention moving a log start); those still quiet are counted at that fetch."""
    checks, session = Checks(), _session()
    checks.quiet = {A, B}
    _fetch(session, checks, 0)
    checks.tested.clear()
    assert _read(_fetch(session, checks, RECHECK_MS - 1)) == set() and checks.tested == []
    checks.quiet = {A}
    fetch = _fetch(session, checks, RECHECK_MS)
    assert _read(fetch) == {B}
    assert checks.counted == [(A, FOLLOWER, RECHECK_MS)]      # B changed at an unknown time
    assert set(checks.watching) == {A}


def test_named_forgotten_and_ended_partitions_leave_the_set():
    checks, session = Checks(), _session()
    checks.quiet = {A, B}
    _fetch(session, checks, 10)
    # The follower names A again (its fetch position moved): counted, no longer aside.
    session.update([(A[0], SimpleNamespace(partition=A[1], fetch_offset=6))], [])
    assert set(checks.watching) == {B} and checks.counted == [(A, FOLLOWER, 10)]
    fetch = _fetch(session, checks, 20, named={A})
    assert _read(fetch) == {A}
    session.update([], [B])                  # forgotten
    assert checks.watching == {} and B not in session.partitions
    # The session ends (closed by the client, evicted): its partitions stop watching.
    cache = FetchSessionCache(4)
    checks.quiet = {A}
    cache.sessions[session.id] = session
    _fetch(session, checks, 30)
    assert set(checks.watching) == {A}
    cache.remove(session.id)
    assert checks.watching == {} and checks.counted[-1] == (A, FOLLOWER, 30)


def test_another_replica_id_on_the_session_is_counted_for_itself():
    checks, session = Checks(), _session()
    checks.quiet = {A}
    _fetch(session, checks, 10)
    other = Checks()
    session.last_used_ms = 20
    fetch = IncrementalFetch(session, set())
    fetch.set_aside(_Renamed(other, 3), 3)
    assert checks.watching == {} and checks.counted == [(A, FOLLOWER, 20)]
    assert _read(fetch) == {A, B}


class _Renamed:
    """Checks for another follower id (a session reused by another replica)."""

    def __init__(self, checks: Checks, follower: int):
        self.checks, self.follower = checks, follower

    def quiet_test(self, follower: int):
        assert follower == self.follower
        return lambda c: False

    def __getattr__(self, name):
        return getattr(self.checks, name)
