"""What a cluster member adds to Fetch (replication.md 1.4): only the leader serves a partition;
the request's current_leader_epoch is checked (FENCED_LEADER_EPOCH when older than the leader's,
UNKNOWN_LEADER_EPOCH when newer); a follower (replica_id >= 0, one of the partition's replicas)
reads up to the LEO, gets a diverging epoch instead of records when its log is not a prefix of
the leader's, and its fetch offset tells the leader its LEO (ISR and high watermark follow).
A follower asking for an offset only the remote tier holds (from the log start up to the local
log start) gets OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405).
Errors that mean "ask elsewhere" carry the current leader (v12+ tagged field).
"""
from __future__ import annotations

from logcore.wire import error_codes as E


class DivergedPartition:
    """A follower's partition request whose (last fetched epoch, fetch offset) is not on the
    leader's log: answered with `diverging` = (epoch, end offset) from the leader's epoch cache."""

    def __init__(self, request, diverging: tuple[int, int]):
        self.request = request
        self.diverging = diverging

    def __getattr__(self, name):
        return getattr(self.request, name)


def diverging_epoch(log, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
    """The leader's check of a follower's fetch (Kafka's Partition.fetchRecords): None when the
    follower's (last fetched epoch, fetch offset) lies on the leader's log, else the leader's
    (epoch, end offset) for that epoch, which the follower truncates by; (-1, -1) when the
    leader knows nothing of it (answered OFFSET_OUT_OF_RANGE)."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
    if epoch < 0 and end < 0:
        return -1, -1
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None


def replica_id_of(body, version: int) -> int:
    """The fetching replica's id: replica_id up to v14, replica_state.replica_id from v15; -1
    for a consumer."""
    if version >= 15:
        state = getattr(body, "replica_state", None)
        return getattr(state, "replica_id", -1) if state is not None else -1
    return getattr(body, "replica_id", -1)


class ClusterFetch:
    def __init__(self, manager):
        self.manager = manager

    def check(self, entry, follower: int):
        """The entry (name, topic id, partition request, Partition, error) with the cluster's
        verdict: an error, a DivergedPartition, or unchanged."""
        name, tid, p, part, error = entry
        if error != E.NONE or part is None:
            return entry
        manager = self.manager
        code = manager.partition_error(name, p.partition, getattr(p, "current_leader_epoch", -1))
        if code != E.NONE:
            return name, tid, p, part, code
        if follower < 0:
            return entry
        replica = manager.replicas[(name, p.partition)]
        if follower not in manager.assignment_of(replica) or follower == manager.me:
            code = E.UNKNOWN_LEADER_EPOCH if getattr(p, "current_leader_epoch", -1) >= 0 \
                else E.NOT_LEADER_OR_FOLLOWER
            return name, tid, p, part, code
        log = part._log
        if log is None:
            return name, tid, p, part, E.NOT_LEADER_OR_FOLLOWER
        diverging = diverging_epoch(log, getattr(p, "last_fetched_epoch", -1), p.fetch_offset)
        if diverging == (-1, -1):
            return name, tid, p, part, E.OFFSET_OUT_OF_RANGE
        if diverging is not None:
            return name, tid, DivergedPartition(p, diverging), part, E.NONE
        if log.remote is not None and log.log_start_offset <= p.fetch_offset < log.local_log_start_offset:
            # KIP-405: a follower does not fetch what only the remote tier holds; it builds its
            # state from the remote tier and starts at the local log start.
            return name, tid, p, part, E.OFFSET_MOVED_TO_TIERED_STORAGE
        return entry

    def epochs(self, wanted) -> dict:
        """The leader epoch of each partition the checks let through, taken right after them."""
        replicas = self.manager.replicas
        return {(name, p.partition): replicas[(name, p.partition)].epoch
                for name, _tid, p, part, error in wanted
                if error == E.NONE and part is not None and (name, p.partition) in replicas}

    def followed(self, wanted, results, follower: int, ends: dict, epochs: dict) -> None:
        """After a read for a follower: record its fetch offset as its LEO."""
        manager = self.manager
        for (name, _tid, p, part, error), res in zip(wanted, results):
            if error != E.NONE or isinstance(p, DivergedPartition) or res["error_code"] != E.NONE:
                continue
            replica = manager.replicas.get((name, p.partition))
            key = (name, p.partition)
            if replica is None or key not in ends or key not in epochs:
                continue
            manager.on_follower_fetch(replica, follower, p.fetch_offset,
                                      getattr(p, "log_start_offset", -1), ends[key], epochs[key])

    def annotate(self, wanted, results) -> None:
        """The current leader on answers that send the client elsewhere."""
        for (name, _tid, p, _part, _error), res in zip(wanted, results):
            if res["error_code"] in (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH) and name is not None:
                res["current_leader"] = self.manager.current_leader(name, p.partition)
