"""Operating-system resources the broker budgets: open file descriptors.

Each open partition log holds about FDS_PER_PARTITION descriptors (the active segment's .log,
.index and .timeindex, the writer epoch file it pins, and the two lock files of its writer
fence). The broker keeps at most `log.max.open.partitions` logs open (an LRU of idle logs,
logcore.broker.partitions) so that a root with any number of partitions opens under the
process's open-file limit.
"""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

FDS_PER_PARTITION = 6
RESERVED_FDS = 256          # connections, sendfile slices, sealed-segment reads, the root's files
MIN_OPEN_PARTITIONS = 16


def raise_nofile_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a sensible default for a server, as
    Kafka's packaging does with LimitNOFILE); returns (soft, hard) after, None where the
    platform has no such limit."""
    try:
        import resource
    except ImportError:         # not on POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            logger.info("raised the open-file limit (RLIMIT_NOFILE) from %d to %d", soft, hard)
            soft = hard
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft, hard


def open_partition_budget(configured: int) -> int:
    """`log.max.open.partitions`: the configured value, or for -1 what the open-file limit
    allows after RESERVED_FDS (at least MIN_OPEN_PARTITIONS, at most 100,000)."""
    if configured != -1:
        return configured
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except ImportError:
        return 1000
    if soft == resource.RLIM_INFINITY:
        return 100_000
    return max(MIN_OPEN_PARTITIONS, min(100_000, (soft - RESERVED_FDS) // (FDS_PER_PARTITION + 1)))


def check_remote_before_root(config) -> None:
    """With tiered storage configured, write and delete a probe at the remote root before the
    log root is created or opened: wrong credentials or a bucket that cannot be written fail
    the start with nothing written locally."""
    tiered = getattr(config, "tiered", None)
    if tiered is None or not tiered.enabled:
        return
    from logcore.tiered.remote_log import RemoteTier
    tier = RemoteTier(tiered)
    try:
        tier.check_access()
    finally:
        tier.close()
