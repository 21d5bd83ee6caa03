"""What a cluster member adds to Fetch (replication.md 1.4): only the leader serves a partition;
the request's current_leader_epoch is checked (FENCED_LEADER_EPOCH when older than the leader's,
UNKNOWN_LEADER_EPOCH when newer); a follower (replica_id >= 0, one of the partition's replicas)
reads up to the LEO, gets a diverging epoch instead of records when its log is not a prefix of
the leader's, and its fetch offset tells the leader its LEO (ISR and high watermark follow).
A follower asking for an offset only the remote tier holds (from the log start up to the local
log start) gets OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405).
Errors that mean "ask elsewhere" carry the current leader (v12+ tagged field).
A consumer's fetch (v11+, KIP-392) may be served by a follower, up to the follower's own high
watermark (LSO with read_committed) and at the follower's leader epoch; the leader, with
replica.selector.class set to the rack-aware selector, answers a consumer in another rack with
the preferred read replica (an in-sync follower in the consumer's rack) and no records.
A follower that is not in the ISR, fetching a partition the topic's
leader.replication.throttled.replicas names for this broker, gets no records while this
broker's leader throttle is over its rate; the bytes sent for such partitions count towards it
(Kafka's shouldLeaderThrottle; logcore.quota.replication_quota).
The Fetch handler asks its checks object: ClusterFetch for a cluster member, SingleNodeFetch
(no follower, nothing to check) for a broker alone.
"""
from __future__ import annotations

from logcore.wire import error_codes as E
from logcore.broker.replica_selector import LeaderSelector, ReplicaView, replica_selector
from logcore.broker.wanted_partition import WantedPartition
from logcore.quota.replication_quota import throttles
from logcore.replication.partition import FOLLOWER, LEADER, now_ms


class DivergedPartition:
    """A follower's partition request whose (last fetched epoch, fetch offset) is not on the
    leader's log: answered with `diverging` = (epoch, end offset) from the leader's epoch cache."""

    def __init__(self, request, diverging: tuple[int, int]):
        self.request = request
        self.diverging = diverging

    def __getattr__(self, name):
        return getattr(self.request, name)


class ThrottledPartition:
    """A follower's partition request the leader answers without records: the leader's
    replication throttle is over its rate."""

    def __init__(self, request):
        self.request = request

    def __getattr__(self, name):
        return getattr(self.request, name)


class ElsewherePartition:
    """A consumer's partition request the leader answers with a preferred read replica
    (`node`) and no records (KIP-392)."""

    def __init__(self, request, node: int):
        self.request = request
        self.node = node

    def __getattr__(self, name):
        return getattr(self.request, name)


_ASKING_ELSEWHERE = (DivergedPartition, ThrottledPartition, ElsewherePartition)


def reads_any_replica(version: int) -> bool:
    """Whether a consumer's Fetch of this version may be served by a follower: from v11, the
    version that names the consumer's rack (KIP-392); older consumers read from leaders only."""
    return version >= 11


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


class SingleNodeFetch:
    """A broker alone: every Fetch is a consumer's, every partition held here is led here, and a
    partition closed under a fetch was deleted."""
    closed_error = E.UNKNOWN_TOPIC_OR_PARTITION

    @staticmethod
    def follower_of(body, version: int) -> int:
        return -1

    @staticmethod
    def check(entry: WantedPartition, follower: int, any_replica: bool = False) -> WantedPartition:
        return entry

    @staticmethod
    def preferred(wanted: list[WantedPartition], client_rack: str) -> list[WantedPartition]:
        return wanted

    @staticmethod
    def annotate(wanted: list[WantedPartition], results) -> None:
        pass

    @staticmethod
    def sent(wanted: list[WantedPartition], results) -> None:
        pass


class ClusterFetch:
    """A cluster member: only the leader serves a partition, at the request's epoch; a
    follower's fetch is checked for divergence and reports its LEO; a partition closed under a
    fetch was reassigned away (or deleted)."""
    closed_error = E.NOT_LEADER_OR_FOLLOWER

    def __init__(self, manager):
        self.manager = manager
        self.selector = replica_selector(manager.config["replica.selector.class"])
        self.rack = manager.config["broker.rack"] or None

    @staticmethod
    def follower_of(body, version: int) -> int:
        return replica_id_of(body, version)

    def check(self, entry: WantedPartition, follower: int, any_replica: bool = False) -> WantedPartition:
        """The entry with the cluster's verdict: an error, a DivergedPartition, or unchanged.
        `any_replica`: a consumer whose fetch a follower may serve (reads_any_replica)."""
        p, part = entry.request, entry.part
        if entry.error != E.NONE or part is None:
            return entry
        manager = self.manager
        epoch = getattr(p, "current_leader_epoch", -1)
        if follower < 0 and any_replica:
            code = self._replica_read_error(entry.name, p.partition, epoch)
        else:
            code = manager.partition_error(entry.name, p.partition, epoch)
        if code != E.NONE:
            return entry.refused(code)
        if follower < 0:
            return entry
        replica = manager.replicas[(entry.name, p.partition)]
        if follower not in manager.assignment_of(replica) or follower == manager.me:
            code = E.UNKNOWN_LEADER_EPOCH if getattr(p, "current_leader_epoch", -1) >= 0 \
                else E.NOT_LEADER_OR_FOLLOWER
            return entry.refused(code)
        log = part.log_if_open
        if log is None:
            return entry.refused(E.NOT_LEADER_OR_FOLLOWER)
        diverging = diverging_epoch(log, getattr(p, "last_fetched_epoch", -1), p.fetch_offset)
        if diverging == (-1, -1):
            return entry.refused(E.OFFSET_OUT_OF_RANGE)
        if diverging is not None:
            return entry.asking(DivergedPartition(p, diverging))
        if log.remote is not None and log.log_start_offset <= p.fetch_offset < log.local_log_start_offset:
            # KIP-405: a follower does not fetch what only the remote tier holds; it builds its
            # state from the remote tier and starts at the local log start.
            return entry.refused(E.OFFSET_MOVED_TO_TIERED_STORAGE)
        if follower not in replica.isr and self._leader_throttled(p.partition, log) \
                and self._quota().exceeded():
            return entry.asking(ThrottledPartition(p))
        return entry

    def _quota(self):
        return self.manager.broker.replication_quotas.leader

    def _leader_throttled(self, index: int, log) -> bool:
        return throttles(log.config.leader_replication_throttled_replicas, index, self.manager.me)

    def sent(self, wanted: list[WantedPartition], results) -> None:
        """After answering a follower: the bytes of its throttled partitions count towards the
        leader throttle (in sync or not, as Kafka counts them)."""
        quota = self._quota()
        if not quota.bounded:
            return
        total = 0
        for w, res in zip(wanted, results):
            log = w.part.log_if_open if w.part is not None else None
            if res.get("records") and log is not None and self._leader_throttled(w.request.partition, log):
                total += len(res["records"])
        quota.record(total)

    def _replica_read_error(self, topic: str, p: int, epoch: int) -> int:
        """A consumer read that a follower may serve (Kafka's localLogWithEpochOrThrow with
        requireLeader=false): a follower answers at its own leader epoch, the leader as always."""
        replica = self.manager.replicas.get((topic, p))
        if replica is None or replica.role != FOLLOWER:
            return self.manager.partition_error(topic, p, epoch)
        if epoch >= 0 and epoch < replica.epoch:
            return E.FENCED_LEADER_EPOCH
        if epoch >= 0 and epoch > replica.epoch:
            return E.UNKNOWN_LEADER_EPOCH
        return E.NONE

    def preferred(self, wanted: list[WantedPartition], client_rack: str) -> list[WantedPartition]:
        """A consumer's entries, those led here answered by a preferred read replica where the
        selector picks a follower for the consumer's rack."""
        if self.selector is LeaderSelector or not client_rack:
            return wanted
        out = []
        for w in wanted:
            node = self._preferred_node(w, client_rack) if w.error == E.NONE and w.part is not None else None
            out.append(w if node is None else w.asking(ElsewherePartition(w.request, node)))
        return out

    def _preferred_node(self, w: WantedPartition, client_rack: str) -> int | None:
        manager = self.manager
        replica = manager.replicas.get(w.key)
        log = w.part.log_if_open
        if replica is None or not replica.is_leader or log is None:
            return None
        offset, now = w.request.fetch_offset, now_ms()
        leader = ReplicaView(manager.me, self.rack, log.log_end_offset, 0.0)
        followers = [ReplicaView(node, getattr(manager.brokers[node], "rack", None), state.log_end_offset,
                                 now - state.last_caught_up_ms)
                     for node, state in replica.followers.items()
                     if node in replica.isr and node in manager.brokers
                     and state.log_end_offset >= offset and state.log_start_offset <= offset]
        return self.selector.select(client_rack, leader, followers)

    def epochs(self, wanted: list[WantedPartition]) -> dict:
        """The leader epoch of each partition the checks let through, taken right after them."""
        replicas = self.manager.replicas
        return {w.key: replicas[w.key].epoch for w in wanted
                if w.error == E.NONE and w.part is not None and w.key in replicas}

    def followed(self, wanted: list[WantedPartition], results, follower: int, ends: dict,
                 epochs: dict) -> None:
        """After a read for a follower: record its fetch offset as its LEO."""
        replicas = self.manager.replicas
        for w, res in zip(wanted, results):
            p = w.request
            if w.error != E.NONE or isinstance(p, DivergedPartition) or res["error_code"] != E.NONE:
                continue
            key = w.key
            replica = replicas.get(key)
            if replica is None or key not in ends or key not in epochs:
                continue
            replica.on_follower_fetch(follower, p.fetch_offset, getattr(p, "log_start_offset", -1),
                                      ends[key], epochs[key])

    # ------------------------------------------------------------------ a follower's session (KIP-227)
    def settle(self, epochs: dict):
        """For a follower's session: the note kept with each partition answered without error,
        (replica, leader epoch, partition log, partition key), that quiet_test checks at the
        next fetch."""
        replicas = self.manager.replicas

        def settled(w: WantedPartition, res: dict):
            if w.error != E.NONE or res["error_code"] != E.NONE or type(w.request) in _ASKING_ELSEWHERE:
                return None
            key = w.key
            replica, epoch = replicas.get(key), epochs.get(key)
            return None if replica is None or epoch is None else (replica, epoch, w.part, key)
        return settled

    def quiet_test(self, follower: int):
        """A test of a follower's session partition (fetch_sessions.SessionPartition, settled
        at its last answer) that its fetch need neither check nor read: this broker still leads
        it at the epoch it was answered at, the follower is in the ISR and asks for the log end,
        and the high watermark and log start are those last answered. Its fetches are then
        counted as the full path would count them (count_standing)."""
        replicas = self.manager.replicas

        def quiet(c) -> bool:
            # Run for every partition a follower's fetch may set aside: the replica's fields
            # are read directly (its epoch, ISR and role properties are these).
            replica, epoch, part, key = c.settled
            state = replica.state
            if state is None or state.leader_epoch != epoch or replica.role != LEADER \
                    or follower not in state.isr or replicas.get(key) is not replica:
                return False
            log = part.log_if_open
            return (log is not None and log.log_end_offset == c.request.fetch_offset
                    and log.high_watermark == c.high_watermark and log.log_start_offset == c.log_start_offset)
        return quiet

    @staticmethod
    def watch(c) -> None:
        """A set-aside partition hears of its partition's next change (fetch_sessions.StandingPartitions)."""
        c.settled[2].watch(c)

    @staticmethod
    def unwatch(c) -> None:
        c.settled[2].unwatch(c)

    @staticmethod
    def count_standing(c, follower: int, when: float) -> None:
        """The follower's fetches of a set-aside partition counted, up to its fetch at `when`: at
        the log end, which it asked for, at the epoch it was checked at."""
        replica, epoch, _, _ = c.settled
        p = c.request
        replica.on_quiet_follower_fetch(follower, p.fetch_offset, getattr(p, "log_start_offset", -1), epoch, when)

    def annotate(self, wanted: list[WantedPartition], results) -> None:
        """The current leader on answers that send the client elsewhere."""
        for w, res in zip(wanted, results):
            if res["error_code"] in (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH) and w.name is not None:
                res["current_leader"] = self.manager.current_leader(w.name, w.request.partition)
