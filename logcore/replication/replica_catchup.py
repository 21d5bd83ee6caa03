"""A follower that cannot continue fetching from its log end (replication.md 1.5, KIP-405).

The leader answers a follower's fetch with
- OFFSET_OUT_OF_RANGE when the fetch offset is off its log: the follower asks the leader's log
  end (ListOffsets latest, as a replica); a shorter leader log means truncating to it; a leader
  log start above this replica's LEO (retention moved past it while it was away) means
  truncating fully and starting at the leader's log start (Kafka's truncateFullyAndStartAt:
  empty epoch cache and producer state, which the fetched batches fill again); otherwise the
  next fetch asks again from the LEO. Never fatal (KAFKA-7414).
- OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405) when the fetch offset lies between the leader's log
  start and its local log start (only the remote tier holds those offsets): the follower asks the
  leader's local log start (ListOffsets -4), finds in the shared remote metadata the remote
  segment holding the offset before it, truncates fully and starts right after that segment,
  with that segment's leader-epoch entries as its epoch cache, its producer snapshot as its
  producer state and the leader's log start offset as its own (Kafka's TierStateMachine). It
  fetches no record the remote tier holds.

Both run on the fetcher's loop; the log changes run in a thread, each only if the LEO is still
what the decision was made on.
"""
from __future__ import annotations

import asyncio
import logging
import time

from logcore.wire import error_codes as E
from logcore.errors import RemoteResourceNotFoundError, SegLogError
from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.wire.api_keys import LIST_OFFSETS
from logcore.wire.list_offsets import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

logger = logging.getLogger("logcore.replication.replica_fetcher")

LIST_OFFSETS_VERSION = 4


async def leader_offset(fetcher, conn, followed, timestamp: int) -> int | None:
    """The leader's answer to ListOffsets(`timestamp`) asked as a replica; None on an error."""
    replica = followed.replica
    body = {"replica_id": fetcher.manager.me, "isolation_level": 0, "topics": [
        {"name": replica.topic, "partitions": [
            {"partition_index": replica.index, "current_leader_epoch": followed.epoch,
             "timestamp": timestamp}]}]}
    resp = await conn.request(LIST_OFFSETS, body, version=LIST_OFFSETS_VERSION, timeout_s=fetcher.timeout_s)
    p = resp.topics[0].partitions[0]
    if int(p.error_code) != E.NONE:
        logger.info("broker %d: %s-%d: ListOffsets(%d) to leader %d answered error %d",
                    fetcher.manager.me, replica.topic, replica.index, timestamp, fetcher.leader,
                    int(p.error_code))
        return None
    return int(p.offset)


def _name(fetcher, followed) -> str:
    return f"broker {fetcher.manager.me}: {followed.replica.topic}-{followed.replica.index}"


def _back_off(fetcher, followed) -> None:
    """This partition's fetches wait the fetcher's backoff before the next try."""
    followed.delayed_until = time.monotonic() + fetcher.backoff_s


async def _truncate_to_shorter_leader(fetcher, conn, followed, log) -> bool | None:
    """Truncate to the leader's LEO when it is below this replica's. True: truncated (or the
    log changed meanwhile), None: the leader did not answer, False: the leader's log is not
    shorter."""
    leader_leo = await leader_offset(fetcher, conn, followed, LATEST_TIMESTAMP)
    if leader_leo is None:
        return None
    leo = log.log_end_offset
    if leader_leo >= leo:
        return False

    def cut():
        below = leader_leo < log.high_watermark
        logger.warning("%s: the leader's log ends at %d, before this replica's %d; truncating",
                       _name(fetcher, followed), leader_leo, leo)
        log.truncate_to(leader_leo, below_high_watermark=below, expected_end=leo,
                        follower_at=followed.epoch)
    await asyncio.to_thread(cut)
    return True


async def _leo_to_catch_up_from(fetcher, conn, followed, log) -> int | None:
    """The LEO the replica catches up from, or None when nothing more is to be done now: it has
    truncated to a leader with a shorter log, or asking the leader failed (the fetches then
    back off)."""
    shorter = await _truncate_to_shorter_leader(fetcher, conn, followed, log)
    if shorter is None:
        _back_off(fetcher, followed)
    return None if shorter is None or shorter else log.log_end_offset


async def handle_out_of_range(fetcher, conn, followed, log) -> None:
    leo = await _leo_to_catch_up_from(fetcher, conn, followed, log)
    if leo is None:
        return
    leader_start = await leader_offset(fetcher, conn, followed, EARLIEST_TIMESTAMP)
    if leader_start is None:
        _back_off(fetcher, followed)
        return
    if leader_start <= leo:
        # The LEO is within the leader's log again (its log start or end moved meanwhile).
        _back_off(fetcher, followed)
        return

    def restart():
        if log.truncate_fully_and_start_at(leader_start, expected_end=leo, follower_at=followed.epoch):
            logger.warning("%s: this replica ends at %d, below the leader's log start %d (retention"
                           " there moved past it); truncated fully, starting at %d",
                           _name(fetcher, followed), leo, leader_start, leader_start)
    await asyncio.to_thread(restart)


async def handle_moved_to_tiered(fetcher, conn, followed, log) -> None:
    name = _name(fetcher, followed)
    leo = await _leo_to_catch_up_from(fetcher, conn, followed, log)
    if leo is None:
        return
    local_start = await leader_offset(fetcher, conn, followed, EARLIEST_LOCAL_TIMESTAMP)
    leader_start = await leader_offset(fetcher, conn, followed, EARLIEST_TIMESTAMP)
    if local_start is None or leader_start is None or local_start <= leo:
        _back_off(fetcher, followed)
        return
    try:
        done = await asyncio.to_thread(_build_from_remote, name, log, leo, local_start, leader_start,
                                       followed.epoch)
    except SegLogError as exc:
        logger.error("%s: cannot build this replica's state from the remote tier: %s; retrying",
                     name, exc)
        done = False
    if not done:
        _back_off(fetcher, followed)


def _build_from_remote(name: str, log, leo: int, local_start: int, leader_start: int,
                       follower_at: int) -> bool:
    """KIP-405's follower catch-up from the remote segment holding `local_start` - 1."""
    view = log.remote
    store = getattr(view, "store", None)
    rsm = getattr(view, "rsm", None)
    if store is None or rsm is None:
        logger.error("%s: the leader keeps offsets below %d only in the remote tier, and this"
                     " broker has none (set remote.log.storage.system.enable and"
                     " rsm.config.storage.url as on the leader)", name, local_start)
        return False
    from logcore.tiered.rsm import IndexType

    store.refresh()
    meta = store.segment_for_offset(local_start - 1)
    if meta is None:
        logger.warning("%s: no finished remote segment holds offset %d (below the leader's local"
                       " log start %d) in %s; retrying", name, local_start - 1, local_start,
                       store.topic_id_partition)
        return False
    source = f"remote segment {meta.segment_id} of {store.topic_id_partition}"
    epochs = LeaderEpochCheckpoint.decode(rsm.fetch_index(meta, IndexType.LEADER_EPOCH),
                                          source=f"leader-epoch index of {source}")
    try:
        snapshot = rsm.fetch_index(meta, IndexType.PRODUCER_SNAPSHOT) or None
    except RemoteResourceNotFoundError:
        snapshot = None
    start_at = meta.end_offset + 1
    if not log.truncate_fully_and_start_at(start_at, log_start_offset=leader_start, epochs=epochs,
                                           producer_snapshot=snapshot,
                                           snapshot_source=f"producer snapshot of {source}",
                                           expected_end=leo, follower_at=follower_at):
        return True                          # the log changed meanwhile: the next fetch decides
    logger.warning("%s: this replica ends at %d, below the leader's local log start %d; rebuilt"
                   " from %s (epochs %s, %d producers) and starting at %d, log start %d", name, leo,
                   local_start, source, log.epoch_cache.entries, len(log.producer_state.producers),
                   start_at, log.log_start_offset)
    return True


def follow_log_start(log, leader_log_start: int) -> None:
    """A fetch answer's log start offset above this replica's: take it (Kafka's follower does,
    replication.md 1.5), so that a tiered replica's log start follows the leader's remote
    retention and a replica that becomes leader answers the same earliest offset."""
    try:
        log.move_log_start_offset(leader_log_start, reason="the leader's log start offset")
    except SegLogError as exc:
        logger.warning("%s-%d: moving the log start offset to the leader's %d failed: %s",
                       log.topic, log.partition, leader_log_start, exc)
