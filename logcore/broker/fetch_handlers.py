"""The Fetch handler of the Broker: long polling, the read of every requested partition, and
records handed to the server as file ranges (sendfile) or bytes.

Held by the `Broker` (logcore/broker/broker.py), which dispatches Fetch to it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from logcore.wire import error_codes as E
from logcore.broker.fetch_sessions import FetchSessionCache, FetchSessions, SessionError
from logcore.broker.fetch_response import EncodedResponse, encode_fetch_response
from logcore.broker.cluster_fetch import (DivergedPartition, ElsewherePartition, ThrottledPartition,
                                          reads_any_replica, replica_id_of)
from logcore.broker.quota_handlers import ThrottledResponse
from logcore.broker.tail_reads import TailReads
from logcore.broker.wanted_partition import WantedPartition
from logcore.errors import CorruptRecordError, SegLogError
from logcore.log.file_slice import FileSlice
from logcore.metrics.topic_metrics import TopicMetrics
from logcore.quota.client_quotas import ClientQuotas
from logcore.wire.protocol import Request
from logcore.broker.access_rules import replica_id
from logcore.security.acl import AclOperation

READ = AclOperation.READ

if TYPE_CHECKING:
    from logcore.broker.broker import Result


# The broker's log: these lines keep the logger name they had when the handlers were in broker.py.
logger = logging.getLogger("logcore.broker.broker")

_DAMAGE_LOGGED: dict[tuple, float] = {}     # (file, position) -> when it was last logged
_DAMAGE_LOG_INTERVAL_S = 60.0


def _log_damage(topic: str, partition: int, offset: int, exc: CorruptRecordError) -> None:
    """A fetch met damaged bytes (it answers CORRUPT_MESSAGE for them): log the segment file and
    position, once a minute per place (a consumer retries the same offset)."""
    key = (exc.file, exc.position)
    now = time.monotonic()
    if now - _DAMAGE_LOGGED.get(key, -_DAMAGE_LOG_INTERVAL_S) < _DAMAGE_LOG_INTERVAL_S:
        return
    if len(_DAMAGE_LOGGED) > 4096:
        _DAMAGE_LOGGED.clear()
    _DAMAGE_LOGGED[key] = now
    logger.error("fetch of %s-%d at offset %d: damaged data, answered CORRUPT_MESSAGE: %s",
                 topic, partition, offset, exc)


# Fetch records below this size are copied into the response: sendfile's fixed cost (an
# event-loop round trip per range) is larger than copying them.
SENDFILE_MIN_BYTES = 64 * 1024


class FetchHandlers:
    """Over the broker's `config` and open `partitions`; `membership` gives the fetch checks
    (a broker alone's, or a cluster member's); `quotas` the consumers' byte rates."""

    def __init__(self, config, partitions, membership, topic_metrics: TopicMetrics | None = None,
                 access=None, quotas: ClientQuotas | None = None):
        self.config = config
        self.access = access        # access_rules.RequestAccess: READ on each topic (None: everything)
        self.partitions = partitions
        self.membership = membership
        self.topic_metrics = topic_metrics or TopicMetrics()     # bytes out per topic (counted, not exported)
        self.quotas = quotas or ClientQuotas()
        # KIP-227: clients (followers, consumers) that keep a session send and get only what changed
        self.sessions = FetchSessions(FetchSessionCache(config["max.incremental.fetch.session.cache.slots"]))
        # The last small read, or appended run, of each partition's tail (kept by the partitions)
        self.tail_reads: TailReads = partitions.tail_reads

    # ------------------------------------------------------------------ Fetch
    async def fetch(self, req: Request) -> Result:
        body = req.body
        v = req.api_version
        follower = replica_id_of(body, v) >= 0
        context = self.sessions.context(body, v, follower)
        if isinstance(context, SessionError):
            return {"throttle_time": 0, "error_code": context.error_code, "session_id": 0, "responses": []}
        if self.quotas.active and not follower:
            return await self._fetch_within_quota(req, context)
        return await self._fetch(body, v, req.correlation_id, req, context)

    async def _fetch_within_quota(self, req: Request, context) -> EncodedResponse | ThrottledResponse:
        """A consumer's fetch under its consumer_byte_rate (followers have none): at most the
        quota's bytes over the measured span, the response's size recorded; over the quota it
        is answered empty with the throttle time, as Kafka does."""
        limit = self.quotas.fetch_limit(req)
        response = await self._fetch(req.body, req.api_version, req.correlation_id, req, context, limit)
        throttle = self.quotas.fetched(req, response.size)
        if not throttle:
            return response
        response.close()
        return ThrottledResponse(encode_fetch_response(req.correlation_id, req.api_version, {
            "throttle_time": throttle, "error_code": E.NONE, "session_id": context.throttled(),
            "responses": []}), throttle)

    async def _fetch(self, body, v: int, correlation_id: int, req: Request, context,
                     limit: int | None = None) -> EncodedResponse:
        loop = asyncio.get_running_loop()
        isolation = "read_committed" if getattr(body, "isolation_level", 0) == 1 else "read_uncommitted"
        max_bytes = max(0, min(body.max_bytes, self.config["fetch.max.bytes"], limit or body.max_bytes))
        deadline = loop.time() + max(0.0, body.max_wait.total_seconds())
        checks = self.membership.fetch_checks  # a broker alone's, or a cluster member's
        follower = checks.follower_of(body, v)
        any_replica = follower < 0 and reads_any_replica(v)
        if follower >= 0:
            context.set_aside(checks, follower)    # a follower's session: partitions with nothing to do
        entries = context.entries              # (topic name, or topic id from v13; partition entry)
        if self._names_unknown(entries, v):
            await asyncio.to_thread(self.partitions.refresh_topics)   # created by another process?
        # A consumer needs READ on each topic; a follower was checked for CLUSTER_ACTION before.
        consumer = self.access is not None and self.access.authorizer.enabled and replica_id(body) < 0
        wanted = self._wanted(entries, v, req, consumer)
        wanted = [checks.check(entry, follower, any_replica) for entry in wanted]
        if any_replica:
            wanted = checks.preferred(wanted, getattr(body, "rack_id", "") or "")
        if follower >= 0:
            isolation = "log_end"               # a follower reads up to the leader's LEO
            # The epochs the checks passed at: a fetch answered after a long poll counts
            # for the follower's progress only if this broker still leads at that epoch.
            epochs = checks.epochs(wanted)
        while True:
            # Parked before the read (which may run in a thread): an append meanwhile wakes it.
            # A follower reads to the LEO: a HW move alone gives it nothing to read.
            wake = loop.create_future()
            parked = False
            for w in wanted:
                if w.part is not None:
                    w.part.park_fetch(wake, follower < 0)
                    parked = True
            if context.park(wake):             # the set-aside partitions' changes wake it too
                parked = True
            if follower >= 0:
                ends = {w.key: w.part.log_if_open.log_end_offset
                        for w in wanted if w.part is not None and w.part.is_open}
            results, total, failed = await self._read_for(wanted, isolation, max_bytes)
            if follower >= 0:
                checks.followed(wanted, results, follower, ends, epochs)
                failed = failed or any("diverging_epoch" in r for r in results)
            # A consumer sent to another replica is answered at once (as Kafka's delayed fetch).
            failed = failed or any(r["preferred_read_replica"] >= 0 for r in results)
            remaining = deadline - loop.time()
            if total >= body.min_bytes or failed or remaining <= 0 or not parked:
                wake.cancel()                 # left in the partitions' lists: dropped there
                break
            _close_records(results)           # not enough yet: wait, then read again
            # Any partition with news ends the wait (not all of them), or max_wait does.
            timer = loop.call_later(remaining, _wake_up, wake)
            try:
                await wake
            finally:
                timer.cancel()
            # As Kafka's delayed fetch: the role and the leader epoch are checked again
            # before a parked fetch reads, so records of a newer epoch (or of a deposed
            # leader) never answer a request made at an older one.
            wanted = [checks.check(entry, follower, any_replica) for entry in wanted]
            if follower >= 0:
                # Set-aside partitions with news since are read from now on.
                back = context.woken()
                if back:
                    woken = [checks.check(entry, follower) for entry in self._wanted(back, v, req, consumer)]
                    wanted += woken
                    epochs.update(checks.epochs(woken))
            if loop.time() >= deadline:
                results, total, failed = await self._read_for(wanted, isolation, max_bytes)
                break
        checks.annotate(wanted, results)
        settle = None
        if follower >= 0:
            checks.sent(wanted, results)
            settle = checks.settle(epochs)
        session_id, answered = context.answered(list(zip(wanted, results)), settle)
        topics: dict[Any, dict] = {}
        counted = self.topic_metrics.fetched if follower < 0 else None    # consumers' bytes only
        for w, res in answered:
            if counted is not None and res["records"]:
                counted(w.name, len(res["records"]))
            key = w.topic_id if v >= 13 else w.name
            topic = topics.get(key)
            if topic is None:
                topic = topics[key] = {"topic": w.name, "topic_id": w.topic_id, "partitions": []}
            topic["partitions"].append(res)
        return encode_fetch_response(correlation_id, v, {
            "throttle_time": 0, "error_code": E.NONE, "session_id": session_id, "responses": list(topics.values())})

    def _wanted(self, entries: list[tuple], v: int, req: Request, consumer: bool) -> list[WantedPartition]:
        """The partitions of `entries`, resolved: their topic's name and id, their open log, and
        the error they are answered with when they cannot be read here."""
        wanted: list[WantedPartition] = []
        topics_of: dict = {}               # topic key -> (name, topic id, READ refused)
        for key, p in entries:
            topic = topics_of.get(key)
            if topic is None:
                if v >= 13:
                    name = self.partitions.topic_ids.get(key.bytes)
                    tid = key
                else:
                    name, tid = key, self.partitions.topic_uuid(key)
                refused = consumer and name is not None and not self.access.topic_allowed(req, READ, name)
                topic = topics_of[key] = (name, tid, refused)
            name, tid, refused = topic
            if refused:
                wanted.append(WantedPartition(name, tid, p, None, E.TOPIC_AUTHORIZATION_FAILED))
                continue
            part = self.partitions.get(name, p.partition) if name else None
            error = E.NONE if part else (E.UNKNOWN_TOPIC_ID if name is None else E.UNKNOWN_TOPIC_OR_PARTITION)
            if part is None and (name, p.partition) in self.partitions.damaged:
                error = E.KAFKA_STORAGE_ERROR       # damaged committed data: see `seglog repair`
            wanted.append(WantedPartition(name, tid, p, part, error))
        return wanted

    def _names_unknown(self, entries: list[tuple], v: int) -> bool:
        for key, p in entries:
            name = self.partitions.topic_ids.get(key.bytes) if v >= 13 else key
            if name is None or self.partitions.get(name, p.partition) is None:
                return True
        return False

    async def _read_for(self, wanted, isolation: str, max_bytes: int) -> tuple[list[dict], int, bool]:
        """The read of every wanted partition, done here on the event loop when every log is
        open, no log's lock is busy and every offset lies in the active segment (page cache;
        records of a large range go out with sendfile, not read here): the thread hand-off
        would cost more than the read, twice per replicated produce for followers (the read
        that sends the records, and the next fetch that reports the follower's new LEO and
        moves the HW) and once per record a tailing consumer sees. Otherwise (history, a log
        to open, a busy lock) in a worker thread."""
        read = self._read_all(wanted, isolation, max_bytes, nowait=True)
        if read is not None:
            return read
        return await asyncio.to_thread(self._read_all, wanted, isolation, max_bytes)

    def _read_all(self, wanted, isolation: str, max_bytes: int,
                  nowait: bool = False) -> tuple[list[dict], int, bool] | None:
        """With `nowait`: None (nothing kept open) where the read would block (a log not open,
        a busy lock, an offset before the active segment)."""
        results = []
        total = 0
        failed = False
        for w in wanted:
            name, p, part, error = w.name, w.request, w.part, w.error
            res = {"partition_index": p.partition, "error_code": error, "high_watermark": -1,
                   "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                   "aborted_transactions": None, "records": b""}
            results.append(res)
            if part is None or error != E.NONE:
                failed = True
                continue
            if nowait:
                log = part.log_if_open
                if log is None:
                    _close_records(results)
                    return None
            else:
                try:
                    log = part.log
                except ConnectionAbortedError:
                    # Closed meanwhile: its topic was deleted, or (cluster) the replica was
                    # reassigned away from this broker.
                    res["error_code"] = self.membership.fetch_checks.closed_error
                    failed = True
                    continue
            if isinstance(p, ElsewherePartition):
                # KIP-392: read from the preferred replica instead; no records from here.
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset, preferred_read_replica=p.node)
                continue
            if isinstance(p, ThrottledPartition):
                # The leader's replication throttle is over its rate: no records this time.
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset)
                continue
            if isinstance(p, DivergedPartition):
                # A follower whose log is not a prefix of this leader's: no records, no state.
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset, records=None,
                           diverging_epoch={"epoch": p.diverging[0], "end_offset": p.diverging[1]})
                continue
            try:
                budget = min(p.partition_max_bytes, max_bytes - total)
                if budget <= 0 and total > 0:
                    fetched = None
                elif nowait:
                    # a small range is copied, and the same range asked again (the other
                    # follower's fetch, then a consumer's) served from that copy
                    fetched = self.tail_reads.read_nowait(part, log, p.fetch_offset, max(budget, 0), isolation,
                                                          total == 0, copy_below=SENDFILE_MIN_BYTES)
                    if fetched is None:
                        _close_records(results)
                        return None
                else:
                    fetched = log.read(p.fetch_offset, max(budget, 0), isolation=isolation,
                                       min_one_batch=total == 0, zero_copy=True)
            except SegLogError as exc:
                if isinstance(exc, CorruptRecordError):
                    _log_damage(name, p.partition, p.fetch_offset, exc)
                res["error_code"] = E.error_code(exc)
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset)
                failed = True
                continue
            if fetched is None:
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset)
                continue
            data = fetched.data
            if isinstance(data, FileSlice):
                if data.size < SENDFILE_MIN_BYTES:
                    with data:         # a small range is cheaper copied than sent with sendfile
                        data = data.read()
                else:                  # a consumer reading history: read this and the next range ahead
                    data.prefetch(ahead=data.size)
            res.update(high_watermark=fetched.high_watermark, last_stable_offset=fetched.last_stable_offset,
                       log_start_offset=fetched.log_start_offset, records=data)
            if isolation == "read_committed":
                res["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                               for a in fetched.aborted]
            total += len(data)
        return results, total, failed


def _wake_up(wake: asyncio.Future) -> None:
    if not wake.done():
        wake.set_result(None)


def _close_records(results: list[dict]) -> None:
    for res in results:
        if isinstance(res["records"], FileSlice):
            res["records"].close()
