"""Followers pull from leaders: one fetcher task per leader broker, for every partition this
broker follows there (Kafka's ReplicaFetcherThread, num.replica.fetchers=1).

Each round is one Fetch v12 to the leader with replica_id = this broker, and per partition
fetch_offset = the local LEO, last_fetched_epoch = the latest epoch of the local epoch cache
and current_leader_epoch = the epoch this broker follows at. The answer, per partition
(replication.md 1.5, 3.3):
- records: appended verbatim (Log.append_as_follower), then HW = min(leader's HW, own LEO);
- a diverging epoch (the local log is not a prefix of the leader's): truncate to where the logs
  agree, by leader epoch (KIP-101/279), never to the HW, and do not take the HW from that answer;
- records: also log start = max(own, the leader's log start);
- OFFSET_OUT_OF_RANGE: ask the leader's log end (ListOffsets as a replica) and truncate to it
  if the local log is longer, or truncate fully and start at the leader's log start if the
  local log ends below it (logcore.replication.replica_catchup);
- OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): build the epoch cache and producer state from the
  remote tier and start at the leader's local log start (logcore.replication.replica_catchup);
- FENCED_LEADER_EPOCH: this broker is behind; wait for the new state from ZooKeeper;
- UNKNOWN_LEADER_EPOCH: the leader is behind (it has not applied the state yet): retry after
  50 ms (at most replica.fetch.backoff.ms);
- any other error: back off replica.fetch.backoff.ms for that partition.
A partition added to a fetcher (this broker starts following a leader, or a new epoch of it)
is fetched at once: neither the backoff after an error nor a round parked at the leader
(replica.fetch.wait.max.ms, answered in order on its connection) holds it back; Kafka's fetcher
thread likewise drops and re-adds partitions on LeaderAndIsr. The round in flight is abandoned
with its connection and a new one starts.
Replication throttle (Kafka's shouldFollowerThrottle): a partition the topic's
follower.replication.throttled.replicas names for this broker is left out of a round while it
is not caught up (its LEO below the leader's last HW) and this broker's follower throttle is
over its rate; the bytes received for such partitions count towards it. When only throttled
partitions are ready, the fetcher waits until the rate is back within the bound.
A response is applied only if the partition is still followed at the same epoch and its LEO is
still the offset the request asked for (a truncation or a new state may have come meanwhile); an
idle partition's answer that would change nothing (no records, no error, the HW and log start the
replica has) is not applied at all. The fetcher keeps an incremental fetch session with the
leader (KIP-227, fetch_session.py): after a full first round, a round names only the partitions
whose fields changed, and the leader answers only those with news. Each round's request is a
template kept for the set of partitions it names, with the changing fields patched, and one
timer, moved by each round, times the rounds out. The common
answer (records or none, no error, nothing to wait for) is applied in the protocol callback that
reads it, which also writes the next round's request; anything else goes to the fetcher's task.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from logcore.event_wait import cancel_and_wait, wait_event
from logcore.wire import error_codes as E
from logcore.quota.replication_quota import throttles
from logcore.replication import replica_catchup
from logcore.errors import NotLeaderOrFollowerError, SegLogError
from logcore.wire.api_keys import FETCH
from logcore.wire.client import AsyncKafkaConnection, KafkaConnectionError, KafkaError
from logcore.wire.fetch_request import FetchRequestTemplate
from logcore.replication.fetch_session import FollowerSession
from logcore.replication.follower_fields import FollowerFields

logger = logging.getLogger(__name__)

FETCH_VERSION = 12
LEADER_CATCH_UP_S = 0.05   # retrying a leader that does not know the followed epoch yet
_CUT_SHORT = object()      # a round's wait ended by cut_short(), not by the answer
_APPLIED = object()        # the answer was applied in the protocol callback; no next round sent
_SESSION_ERRORS = frozenset((E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH))
_TEMPLATES = 64            # request templates a fetcher keeps, one per set of partitions a round names


class _Rest:
    """A round's answer that the protocol callback applied in part (`applied`: the partition
    keys done): the fetcher's task applies the rest."""
    __slots__ = ("response", "applied")

    def __init__(self, response, applied: set):
        self.response = response
        self.applied = applied


@dataclass(eq=False)
class Followed:
    replica: object                  # partition.Partition
    epoch: int                       # the leader epoch followed at
    delayed_until: float = 0.0       # monotonic seconds: backing off after an error
    fenced: bool = False             # the leader has a newer epoch: wait for ZooKeeper
    caught_up: bool = False          # the last answer left the LEO at the leader's HW


def truncation_offset(log, leader_epoch: int, leader_end: int) -> int:
    """Where a follower cuts its log when the leader answers (epoch, end offset) for the
    follower's latest epoch (a Fetch's diverging epoch, or OffsetForLeaderEpoch): Kafka's
    getOffsetTruncationState (KIP-101 with KIP-279). The follower looks up its own end of the
    leader's epoch: if it knows that epoch, the logs agree up to the smaller end; if not, it cuts
    to its own end of the largest epoch below, and the next fetch asks again with that epoch."""
    leo = log.log_end_offset
    if leader_end < 0:
        return min(log.high_watermark, leo)               # the leader knows no epochs
    if leader_epoch < 0:
        return min(leader_end, leo)                       # an answer without an epoch (v0)
    epoch, end = log.end_offset_for_epoch(leader_epoch)
    if epoch < 0 or end < 0:
        return min(leader_end, leo)                       # nothing of that epoch or before here
    if epoch == leader_epoch:
        return min(leader_end, end, leo)
    return min(end, leo)


def _time_out(conn: AsyncKafkaConnection, wait: asyncio.Future, timeout_s: float) -> None:
    """A fetch round not answered in time: its connection fails (and with it the request)."""
    if not wait.done():
        conn.fail(KafkaConnectionError(f"{conn.where()} did not answer Fetch within {timeout_s:g} s"))


def _diverging(p):
    """A partition answer's diverging epoch (epoch, end offset), or None: the schema's
    default (-1, -1)."""
    diverging = getattr(p, "diverging_epoch", None)
    if diverging is None or (diverging.epoch < 0 and diverging.end_offset < 0):
        return None
    return diverging


class _Later(Exception):
    """A partition's answer that the protocol callback leaves to the fetcher's task."""


class RoundDeadline:
    """The timeout of a fetcher's round in flight, on one timer re-armed lazily: a round only
    moves the deadline, and the timer, when it fires before the current round's deadline, is
    set again for it. A timer per round (armed, then cancelled when the answer comes a
    millisecond later) cost a heap push and a cancelled handle for the event loop to drop on
    every round; this costs one timer per timeout period. The round still fails exactly at
    its own deadline."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._round: tuple[AsyncKafkaConnection, asyncio.Future] | None = None
        self._at = 0.0                   # loop time the round in flight times out
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop, conn: AsyncKafkaConnection, wait: asyncio.Future) -> None:
        self._round = (conn, wait)
        self._at = loop.time() + self.timeout_s
        if self._timer is None:
            self._timer = loop.call_at(self._at, self._fire, loop)

    def done(self) -> None:
        self._round = None

    def cancel(self) -> None:
        self._round = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, loop) -> None:
        self._timer = None
        if self._round is None:
            return                       # no round in flight: the next one arms the timer
        if loop.time() < self._at:
            self._timer = loop.call_at(self._at, self._fire, loop)
            return
        conn, wait = self._round
        _time_out(conn, wait, self.timeout_s)


class ReplicaFetchers:
    """The fetcher tasks of this broker, one per leader it follows partitions of."""

    def __init__(self, manager):
        self.manager = manager
        self.by_leader: dict[int, LeaderFetcher] = {}

    def add(self, replica, leader: int) -> None:
        fetcher = self.by_leader.get(leader)
        if fetcher is None:
            fetcher = self.by_leader[leader] = LeaderFetcher(self.manager, leader)
            fetcher.start()
        fetcher.partitions[replica.key] = Followed(replica, replica.epoch)
        fetcher.wake.set()
        fetcher.cut_short()              # fetch it now, not after a parked round or a backoff

    def remove(self, replica) -> None:
        for fetcher in self.by_leader.values():
            fetcher.partitions.pop(replica.key, None)

    def brokers_changed(self) -> None:
        """A leader's address may have changed: reconnect at the next round."""
        for leader, fetcher in self.by_leader.items():
            if fetcher.address != self.manager.address_of(leader):
                fetcher.reconnect = True
            fetcher.wake.set()

    async def stop(self) -> None:
        for fetcher in self.by_leader.values():
            await fetcher.stop()
        self.by_leader.clear()


class LeaderFetcher:
    def __init__(self, manager, leader: int):
        self.manager = manager
        self.leader = leader
        self.config = manager.config
        self.partitions: dict[tuple[str, int], Followed] = {}
        self.wake = asyncio.Event()
        self.switched = asyncio.Event()  # a partition was added: cut a parked round or backoff short
        self.conn: AsyncKafkaConnection | None = None
        self.address: tuple[str, int] | None = None
        self.reconnect = False
        self.task: asyncio.Task | None = None
        self.backoff_s = self.config["replica.fetch.backoff.ms"] / 1000.0
        self.timeout_s = self.config["replica.socket.timeout.ms"] / 1000.0
        self.wait_ms = self.config["replica.fetch.wait.max.ms"]
        self._warned: str | None = None
        self._round_wait: asyncio.Future | None = None    # the round in flight's wait, to cut short
        self._asked: dict = {}           # the round in flight's partitions: key -> (followed, offset)
        self._deadline = RoundDeadline(self.timeout_s + self.wait_ms / 1000.0)
        self._templates: dict[tuple, FetchRequestTemplate] = {}   # (named, forgotten) -> template
        self._head: dict | None = None   # the templates' request fields besides the session's
        self._client_id: str | None = None
        self.session = FollowerSession()  # KIP-227: rounds name only what changed
        self.fields = FollowerFields()    # each partition's fields, read again when they may have changed
        self._session_conn: AsyncKafkaConnection | None = None

    def cut_short(self) -> None:
        """A partition was added: end a round parked at the leader, a backoff or a wait for the
        quota now."""
        self.switched.set()
        wait = self._round_wait
        if wait is not None and not wait.done():
            wait.set_result(_CUT_SHORT)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.leader}")

    async def stop(self) -> None:
        if self.task is not None:
            await cancel_and_wait(self.task)
        self._deadline.cancel()
        if self.conn is not None:
            self.conn.close()

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            ready = [f for f in self.partitions.values() if not f.fenced and f.delayed_until <= now]
            held = self._throttled(ready)
            if ready and len(held) == len(ready):
                await self._wait_for_quota()
                continue
            ready = [f for f in ready if f not in held]
            if not ready:
                self.wake.clear()
                delays = [f.delayed_until - now for f in self.partitions.values() if not f.fenced]
                await wait_event(self.wake, min(delays) if delays else None)
                continue
            try:
                conn = await self._connection()
                if conn is None:
                    await self._backoff()
                    continue
                await self._round(conn, ready)
                self._warned = None
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                self._warn(f"fetching from broker {self.leader} failed: {exc}")
                self.session.failed()
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                await self._backoff()
            except Exception:   # noqa: BLE001 - a bug must not stop replication of the others
                self.session.failed()
                logger.exception("broker %d: fetcher for leader %d failed; retrying", self.manager.me,
                                 self.leader)
                await self._backoff()

    def _quota(self):
        return self.manager.broker.replication_quotas.follower

    def _throttles(self, followed: Followed) -> bool:
        log = followed.replica.open_log()
        return log is not None and throttles(log.config.follower_replication_throttled_replicas,
                                             followed.replica.index, self.manager.me)

    def _throttled(self, ready: list[Followed]) -> list[Followed]:
        """The ready partitions left out of this round by the follower throttle."""
        quota = self._quota()
        if not quota.bounded or not quota.exceeded():
            return []
        return [f for f in ready if not f.caught_up and self._throttles(f)]

    async def _wait_for_quota(self) -> None:
        """Until the follower rate is back within its bound (at most the fetch backoff), or a
        partition is added."""
        wait_s = min(max(self._quota().wait_ms(), 10) / 1000.0, self.backoff_s)
        await wait_event(self.switched, wait_s)
        self.switched.clear()

    async def _backoff(self) -> None:
        """replica.fetch.backoff.ms after a failure, unless a partition is added meanwhile
        (a new leadership is tried at once)."""
        await wait_event(self.switched, self.backoff_s)
        self.switched.clear()            # one retry at once per addition, then the backoff again

    def _warn(self, message: str) -> None:
        if message != self._warned:                  # once per distinct failure
            self._warned = message
            logger.warning("broker %d: %s", self.manager.me, message)

    async def _connection(self) -> AsyncKafkaConnection | None:
        address = self.manager.address_of(self.leader)
        if address is None:
            self._warn(f"leader {self.leader} is not registered; waiting for it")
            return None
        if self.conn is not None and (self.reconnect or address != self.address or not self.conn.connected):
            self.conn.close()
            self.conn = None
        if self.conn is None:
            self.reconnect = False
            self.address = address
            self.conn = AsyncKafkaConnection(address[0], address[1], timeout_s=self.timeout_s,
                                             client_id=f"replica-fetcher-{self.manager.me}",
                                             security=getattr(self.manager.broker, "inter_broker_security", None))
            await self.conn.connect()
        return self.conn

    # ------------------------------------------------------------------ one round
    def _prepare(self, conn: AsyncKafkaConnection, ready: list[Followed]):
        """This round's request, what the leader reads for it per partition (followed, fetch
        offset) and each partition's fields. In a session (KIP-227) an incremental round names
        only the partitions whose fields changed and those no longer fetched; a full round
        names them all. Either is a template kept for that set of partitions (the same few
        sets come round after round), patched with the session's id and epoch and each named
        partition's LEO, latest epoch and log start. The fields come from `self.fields`, read
        from the logs again only where they may have changed (follower_fields.py)."""
        asked, fields = self.fields.round(ready, self.config["replica.fetch.max.bytes"])
        if not asked:
            return None, asked, fields
        if conn is not self._session_conn:          # a session lives on one connection here
            self.session.failed()
            self._session_conn = conn
        plan = self.session.next_round(fields)
        named = tuple(asked) if plan.full else tuple(plan.changed)
        request = self._template(conn, named, () if plan.full else tuple(plan.forgotten))
        request.set_session(plan.session_id, plan.epoch)
        for i, key in enumerate(named):
            request.set_partition(i, *fields[key])
        return request, asked, fields

    def _template(self, conn: AsyncKafkaConnection, named: tuple, forgotten: tuple) -> FetchRequestTemplate:
        """The request template naming `named` and forgetting `forgotten` (built once per set,
        at most _TEMPLATES kept)."""
        head = {"replica_id": self.manager.me, "max_wait": self.wait_ms,
                "min_bytes": self.config["replica.fetch.min.bytes"],
                "max_bytes": self.config["replica.fetch.response.max.bytes"], "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "rack_id": ""}
        if head != self._head or conn.client_id != self._client_id:
            self._templates.clear()
            self._head, self._client_id = head, conn.client_id
        request = self._templates.get((named, forgotten))
        if request is None:
            if len(self._templates) >= _TEMPLATES:
                self._templates.clear()
            gone: dict[str, list] = {}
            for topic, index in forgotten:
                gone.setdefault(topic, []).append(index)
            request = self._templates[(named, forgotten)] = FetchRequestTemplate(
                conn.client_id, FETCH_VERSION,
                {**head, "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in gone.items()]},
                list(named))
        return request

    async def _round(self, conn: AsyncKafkaConnection, ready: list[Followed]) -> None:
        request, asked, fields = self._prepare(conn, ready)
        if request is None:
            await self._backoff()
            return
        self.switched.clear()
        self.session.sent(fields)          # a write that fails ends the session (_run)
        # One future to wait on, the request's own: set with the answer (or the connection's
        # failure) by the connection as it reads it, by cut_short(), or failed by the deadline;
        # the round resumes in the next event-loop pass, where tasks for the request and the
        # switch, shield and wait_for took several per round.
        loop = asyncio.get_running_loop()
        wait = self._round_wait = loop.create_future()
        self._asked = asked
        try:
            await conn.submit(FETCH, request, version=FETCH_VERSION, into=wait, at_once=self._answered)
            self._deadline.start(loop, conn, wait)
            if self.switched.is_set() and not wait.done():      # added while the request was written
                wait.set_result(_CUT_SHORT)
            try:
                await wait
            finally:
                self._deadline.done()
        finally:
            self._round_wait = None
        response = wait.result()           # the connection's failure (a timeout) raises here
        if response is _CUT_SHORT:
            # A partition was added while this round may sit parked at the leader for up to
            # replica.fetch.wait.max.ms; its connection answers in order, so start afresh.
            self.session.failed()
            if self.conn is conn:
                conn.close()
                self.conn = None
            return
        if response is _APPLIED:
            return
        applied = ()
        if type(response) is _Rest:
            response, applied = response.response, response.applied
        elif response.error_code in _SESSION_ERRORS:
            # The leader no longer holds this session (evicted, or it restarted): a full round now.
            self.session.failed()
            return
        elif response.error_code == E.NONE:
            self.session.answered(response.session_id)
        if response.error_code != E.NONE:
            raise KafkaError(f"Fetch answered error {int(response.error_code)}", int(response.error_code))
        asked = self._asked                # rounds answered in the callback may have come between
        answered = self.fields.answered
        for topic in response.responses:
            for p in topic.partitions:
                key = (topic.topic, p.partition_index)
                answered(key)
                entry = asked.get(key)
                if entry is None or key in applied:
                    continue
                followed, offset = entry
                if self._unchanged(followed, offset, p):
                    continue
                # The replica's io lock: a replica being deleted (reassigned away) waits for
                # this write, and a write that waited finds it no longer followed.
                async with followed.replica.io:
                    if self.partitions.get(key) is not followed:
                        continue                # no longer followed here, or at another epoch
                    with self._answer_errors(followed, key):
                        await self._apply(conn, followed, offset, p)

    @contextlib.contextmanager
    def _answer_errors(self, followed: Followed, key: tuple[str, int]):
        """What applying one partition's answer may raise, handled for that partition alone."""
        try:
            yield
        except NotLeaderOrFollowerError as exc:
            # The role changed while this answer was in flight: the new state's own
            # transition (become leader, or follow at the new epoch) takes over.
            logger.info("broker %d: dropped a fetch answer for %s-%d: %s", self.manager.me, key[0], key[1], exc)
        except (SegLogError, OSError) as exc:
            # A failed disk (ENOSPC, EIO, ...) takes the log dir offline: the broker stops.
            self.manager.partitions.storage_failed(exc, f"follower append to {key[0]}-{key[1]}")
            logger.error("broker %d: replicating %s-%d from broker %d failed: %s; retrying",
                         self.manager.me, key[0], key[1], self.leader, exc)
            followed.delayed_until = time.monotonic() + self.backoff_s

    # ------------------------------------------------------------------ in the protocol callback
    def _answered(self, response) -> bool:
        """The round's answer, offered by the connection in the protocol callback that read it:
        applied here when every partition's part is the common case and nothing waits (the
        replica's io lock free, no error, no divergence, the leader's log start not ahead, the
        append done on the event loop), and the next round's request written here too; the
        fetcher's task stays parked on the round's future, and a follower's round costs one
        event-loop pass (the answer's read) instead of two (the read, then the task). Otherwise
        the future is set and the task goes on as before: with the answer (nothing applied),
        with what the callback left (a _Rest), or with _APPLIED when only the next round's
        request could not be sent from here."""
        wait, conn = self._round_wait, self.conn
        if wait is None or wait.done() or conn is None or response.error_code != E.NONE:
            return False
        self.session.answered(response.session_id)
        applied = set()
        answered = self.fields.answered
        try:
            for topic in response.responses:
                for p in topic.partitions:
                    key = (topic.topic, p.partition_index)
                    answered(key)
                    entry = self._asked.get(key)
                    if entry is None:
                        continue
                    followed, offset = entry
                    if not (self._unchanged(followed, offset, p) or self.partitions.get(key) is not followed):
                        if followed.replica.io.locked():
                            raise _Later
                        with self._answer_errors(followed, key):
                            if not self._apply_now(followed, offset, p):
                                raise _Later
                    applied.add(key)
        except _Later:
            wait.set_result(_Rest(response, applied))
            return True
        self._warned = None
        if not self._next_round_now(conn, wait):
            wait.set_result(_APPLIED)      # the task's loop sends the next round
        return True

    def _next_round_now(self, conn: AsyncKafkaConnection, wait: asyncio.Future) -> bool:
        """The next round's request written from the protocol callback, as the task's loop
        would send it; False (nothing sent) where the loop must decide: a reconnect due, no
        partition ready, the follower throttle holding one back, a login due or the
        connection's writes paused."""
        if self.reconnect or self.switched.is_set():
            return False
        now = time.monotonic()
        ready = [f for f in self.partitions.values() if not f.fenced and f.delayed_until <= now]
        if not ready or self._throttled(ready):
            return False
        request, asked, fields = self._prepare(conn, ready)
        if request is None or not conn.submit_nowait(FETCH, request, version=FETCH_VERSION, into=wait,
                                                     at_once=self._answered):
            return False
        self.session.sent(fields)
        self._asked = asked
        self._deadline.start(asyncio.get_running_loop(), conn, wait)
        return True

    def _unchanged(self, followed: Followed, offset: int, p) -> bool:
        """An idle partition's answer that changes nothing: no records, no error, no diverging
        epoch, and the HW and log start it gives are what this replica has (its HW already
        min(leader's, own LEO)). Applying it would take the locks and find nothing to do."""
        if p.records or p.error_code != E.NONE or _diverging(p) is not None:
            return False
        log = followed.replica.open_log()
        if log is None or log.log_end_offset != offset or p.log_start_offset > log.log_start_offset:
            return False
        caught_up = offset >= p.high_watermark
        if followed.caught_up != caught_up:
            return False
        return log.high_watermark == max(log.log_start_offset, min(p.high_watermark, offset))

    def _apply_now(self, followed: Followed, offset: int, p) -> bool:
        """A partition's answer applied on the event loop when that needs no waiting: no error,
        no diverging epoch, the leader's log start not ahead, and its records (if any) appended
        without a thread. False, with nothing changed, when the answer needs _apply."""
        if p.error_code != E.NONE or _diverging(p) is not None:
            return False
        log = followed.replica.open_log()
        if log is None:
            return True
        if p.log_start_offset > log.log_start_offset:
            return False
        records = p.records
        if records:
            if log.log_end_offset != offset:        # truncated meanwhile: drop this answer
                return True
            # On the event loop when nothing slow is due (the usual case: the records go to
            # the page cache), else in a worker thread (_apply); the next fetch, which tells
            # the leader this replica's new LEO, goes out as soon as every partition of this
            # answer is applied. follower_at: written only while this replica still follows at
            # the epoch the fetch was made at (a become_leader in a worker thread may come first).
            if log.append_as_follower_nowait(records, follower_at=followed.epoch) is None:
                return False
        self._took(followed, log, p)
        self.manager.notify(followed.replica)
        return True

    def _took(self, followed: Followed, log, p) -> None:
        """After a partition's records (if any) are appended: the HW, caught up, the throttle."""
        log.update_high_watermark(p.high_watermark, follower_at=followed.epoch)
        followed.caught_up = log.log_end_offset >= p.high_watermark
        if p.records and self._quota().bounded and self._throttles(followed):
            self._quota().record(len(p.records))

    async def _apply(self, conn, followed: Followed, offset: int, p) -> None:
        if self._apply_now(followed, offset, p):
            return
        replica = followed.replica
        code = int(p.error_code)
        log = replica.open_log()
        if log is None:
            return
        if code == E.NONE:
            diverging = _diverging(p)
            if diverging is not None:
                await asyncio.to_thread(self._truncate_on_divergence, followed, log, offset,
                                        diverging.epoch, diverging.end_offset)
                return
            records = p.records
            if records:
                def append():
                    if log.log_end_offset != offset:    # truncated meanwhile: drop this answer
                        return False
                    log.append_as_follower(records, follower_at=followed.epoch)
                    return True
                if not await asyncio.to_thread(append):
                    return
            self._took(followed, log, p)
            if p.log_start_offset > log.log_start_offset:
                await asyncio.to_thread(replica_catchup.follow_log_start, log, p.log_start_offset)
            self.manager.notify(replica)
        elif code == E.OFFSET_OUT_OF_RANGE:
            await self._out_of_range(conn, followed, log)
        elif code == E.OFFSET_MOVED_TO_TIERED_STORAGE:
            await self._moved_to_tiered(conn, followed, log)
        elif code == E.FENCED_LEADER_EPOCH:
            followed.fenced = True       # the new state from ZooKeeper re-adds the partition
            logger.info("broker %d: %s-%d: leader %d is at a newer epoch than %d; waiting for the"
                        " new state", self.manager.me, replica.topic, replica.index, self.leader,
                        followed.epoch)
        elif code == E.UNKNOWN_LEADER_EPOCH:
            # The leader has not applied the epoch this broker already follows at (both learn it
            # from ZooKeeper): it will in a moment; the full backoff would delay the new HW.
            followed.delayed_until = time.monotonic() + min(self.backoff_s, LEADER_CATCH_UP_S)
        else:
            followed.delayed_until = time.monotonic() + self.backoff_s

    def _truncate_on_divergence(self, followed: Followed, log, offset: int, leader_epoch: int,
                                leader_end: int) -> None:
        """Kafka's getOffsetTruncationState: cut where this log and the leader's agree."""
        replica = followed.replica
        leo = log.log_end_offset
        if leo != offset:
            return                                         # changed meanwhile: the next round
        target = truncation_offset(log, leader_epoch, leader_end)
        below = target < log.high_watermark
        if below:
            logger.warning("broker %d: %s-%d: truncating to %d, below the high watermark %d"
                           " (only an unclean election makes this happen)", self.manager.me,
                           replica.topic, replica.index, target, log.high_watermark)
        if target < leo:
            logger.info("broker %d: %s-%d: log diverged from leader %d at epoch %d; truncating from"
                        " %d to %d", self.manager.me, replica.topic, replica.index, self.leader,
                        leader_epoch, leo, target)
        # At or past the LEO this still drops epoch-cache entries the leader does not have
        # (KAFKA-10706), so that the next probe asks about an epoch both know.
        log.truncate_to(target, below_high_watermark=below, expected_end=offset,
                        follower_at=followed.epoch)

    async def _out_of_range(self, conn, followed: Followed, log) -> None:
        await replica_catchup.handle_out_of_range(self, conn, followed, log)

    async def _moved_to_tiered(self, conn, followed: Followed, log) -> None:
        await replica_catchup.handle_moved_to_tiered(self, conn, followed, log)
