"""What a writer's `Log` does once loaded, before it serves (after `Log._apply_loaded`): roll a
first segment into an empty log, bring a stored HW above the LEO down, cut an uncommitted tail
(unless a replica), rebuild the producer state and take its epoch at the LEO. It works through
the log's public operations and its `ReplicaRole`."""
from __future__ import annotations

import logging

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


def finish_writer_open(log, role, loaded) -> None:
    """`loaded`: the `LoadedLog` the log has just applied."""
    # The load's listing names the producer snapshots unless this writes or deletes some
    # first (a roll on local disk snapshots, a truncation drops the ones above its cut).
    listed: tuple[int, ...] | None = loaded.snapshot_offsets
    if not log.segments:
        log.roll_to(log.log_start_offset)
        if log.segment_store.in_place:
            listed = None       # a roll on local disk may snapshot; an object store's writes none
    leo = log.log_end_offset
    if log.segment_store.in_place and loaded.committed_hw is not None and loaded.committed_hw > leo:
        # Committed data that a power cut took (it was not fsynced): the stored HW comes
        # down to the LEO now, or offsets appended from here would count as committed.
        logger.warning("%s-%d: the committed high watermark %d is above the log end %d",
                       log.topic, log.partition, loaded.committed_hw, leo)
        log.state_store.commit(high_watermark=leo, log_start_offset=log.log_start_offset,
                               first_segment_base=log.segments[0].base_offset,
                               epoch=log.leader_epoch, recovery_point=log.recovery_point)
    if log.truncate_uncommitted and leo > log.high_watermark:
        logger.warning("%s-%d: dropping %d uncommitted offsets above the high watermark %d",
                       log.topic, log.partition, leo - log.high_watermark, log.high_watermark)
        log.truncate_locked(log.high_watermark)
        listed = None
    log.rebuild_producer_state(loaded.empty_producers_at, listed)
    if not log.mode.leads_when_opened:
        # A replica: its epoch is the latest it holds until the controller says more.
        latest = log.epoch_cache.latest_epoch
        role.opened_at(latest if latest is not None else -1)
    else:
        log.epoch_cache.assign(log.leader_epoch, log.log_end_offset)
    log.epoch_cache.flush()        # the truncation above, when assign changed nothing
    log.segment_store.writer_opened()
