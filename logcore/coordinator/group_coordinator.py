"""The group coordinator: classic consumer groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
and committed offsets (OffsetCommit, OffsetFetch) kept in the compacted `__consumer_offsets` topic.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable as in Kafka's classic
protocol. A rebalance parks every member's JoinGroup until all known members have rejoined (or
their rebalance timeout passes; those that did not are dropped); the first rebalance of an
empty group waits group.initial.rebalance.delay.ms after the last newcomer. The leader gets
every member's subscription and computes the assignment client-side; its SyncGroup hands each
member its share. Members that stop heartbeating for their session timeout are removed.

The groups and members are `group.Group` and `group.Member`; when a rebalance completes and a
session ends is `group_timers.GroupTimers`' (the coordinator's `timers`), the answers it hands
out are `group_answers`'; the committed offsets, plain and transactional, are a part of their
own (`group_offsets.GroupOffsets`, the coordinator's `offsets`), which this coordinator feeds
with its appends and its loads.

Committed offsets and each generation's group metadata are appended to the group's partition
of `__consumer_offsets` (through the partition's append queue and group commit) before the
request is answered, so they survive a restart: at start the coordinator reads the topic back.
As in Kafka, a group read back (a restart, or a new coordinator in a cluster) is Stable with
the members, protocol, leader and assignments of the generation last written, and each
member's session starts again then: a member that goes on heartbeating keeps its id, its
assignment and its commits, with no rebalance; one that does not is expired.

In a cluster (`attach_cluster`), `__consumer_offsets` is a replicated topic like any other and
a broker coordinates exactly the groups of the partitions it leads (Kafka's ZooKeeper-era
rule): when it becomes leader of one (the replica manager's leadership listener) it loads
that partition's groups from the log (COORDINATOR_LOAD_IN_PROGRESS meanwhile); when it stops
leading it drops them, parked JoinGroup/SyncGroup answers get NOT_COORDINATOR and the members
find the new coordinator, which has loaded them. Every other broker answers NOT_COORDINATOR. Records
appended for a group are acknowledged only once the partition's high watermark passes them
(acks=all, offsets.commit.timeout.ms); leadership lost meanwhile answers NOT_COORDINATOR.

Everything here runs on the event loop; only the log appends and the load go to threads.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Awaitable, Callable, Protocol

from logcore.wire import error_codes as E
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator import placement
from logcore.coordinator.group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, Group, Member, resume
from logcore.coordinator.group_admin import GroupAdmin
from logcore.coordinator.group_answers import join_answer, join_error, sync_answer, sync_error
from logcore.coordinator.group_timers import GroupTimers, changed
from logcore.coordinator.group_offsets import GroupOffsets
from logcore.coordinator.partition_tenure import PartitionTenure
from logcore.coordinator.transaction_appends import CoordinatorAppender
from logcore.coordinator.transaction_offsets import LogEntry, replay
from logcore.errors import SegLogError
from logcore.forwarding import forwarded
from logcore.records.batch import build_batch

logger = logging.getLogger(__name__)

class OffsetsPartitions(Protocol):
    """The broker's open partitions as the coordinator uses them (its PartitionManager, taken
    duck-typed so that the coordinator stays below the broker)."""
    topics: dict                                # topic name -> its info (`partitions`: the count)

    def get(self, topic: str, index: int): ...  # the partition (its `log`), None if not open here

    def submit(self, part, records) -> Awaitable: ...   # the append's info (`last_offset`)

    def unpin_thread(self) -> None: ...         # after a read in a worker thread


class GroupCoordinator:
    def __init__(self, partitions: OffsetsPartitions, ensure_topic: Callable[[], None], *,
                 num_partitions: int, initial_delay_ms: int, min_session_ms: int, max_session_ms: int,
                 offsets_retention_ms: int = 7 * 24 * 3600 * 1000, retention_check_ms: int = 600000):
        self.partitions = partitions
        self._ensure_topic = ensure_topic         # blocking: creates __consumer_offsets if missing
        self.num_partitions = num_partitions
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.groups: dict[str, Group] = {}
        # When rebalances complete and sessions end (group_timers.py); completing is ours.
        self.timers = GroupTimers(lambda: self.groups.values(), initial_delay_ms, self._complete_join)
        self._topic_ready = False
        self._topic_lock: asyncio.Lock | None = None
        # Which groups this broker may coordinate (placement): all of them, until
        # attach_cluster. A cluster member: those of the __consumer_offsets partitions it leads
        # and has loaded (partition_tenure.py).
        self.placement = placement.SingleNode()
        self.commit_timeout_s = 5.0
        # (the read looked up at each load: a test stands in for it on the instance)
        self.tenure = PartitionTenure(partitions, OT.TOPIC, "groups", logger,
                                      read=lambda part: self._read_partition(part),
                                      loaded=self._loaded, lost=self._lost, gained=self._load_begins)
        # The committed offsets, transactional ones too; they reach the log through _append.
        self.offsets = GroupOffsets(self.partition_of, self._append, self._group)
        self.appender = CoordinatorAppender(partitions)
        # DeleteGroups, OffsetDelete and the expiry of committed offsets (group_admin.py).
        self.admin = GroupAdmin(self, retention_ms=offsets_retention_ms, check_interval_ms=retention_check_ms)
        # The consumer-protocol groups (KIP-848), when served: a ConsumerGroupCoordinator that
        # shares this placement, these appends and offsets (consumer_group_coordinator.py).
        self.consumer_groups = None

    def attach_cluster(self, replica_manager, commit_timeout_ms: int) -> None:
        """Coordinate the groups of the __consumer_offsets partitions this broker leads."""
        self.placement = placement.Cluster(replica_manager, OT.TOPIC)
        self.commit_timeout_s = commit_timeout_ms / 1000
        self._topic_ready = True                  # created through the catalog (FindCoordinator)
        replica_manager.leadership_listeners.append(self.tenure.on_leadership)

    owned = forwarded("tenure.owned", "The __consumer_offsets partitions coordinated here (loaded).")
    loading = forwarded("tenure.loading", "The __consumer_offsets partitions being loaded.")

    def partition_count(self) -> int:
        """Partitions of __consumer_offsets: the topic's own count once it exists."""
        return self.placement.partition_count(self.num_partitions)

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count())

    def coordinator_error(self, group_id: str) -> int:
        """NONE when this broker coordinates `group_id`; COORDINATOR_LOAD_IN_PROGRESS while it
        loads the group's partition; NOT_COORDINATOR when another broker leads it."""
        return self.placement.coordinator_error(self.partition_of(group_id), self.owned, self.loading)

    def loads_at_open(self) -> bool:
        """Whether the broker loads every group when it opens (else as it becomes leader)."""
        return self.placement.loads_at_open()

    # ------------------------------------------------------------------ leadership (cluster)
    on_leadership = forwarded("tenure.on_leadership", "The replica manager's leadership listener.")

    def _load_begins(self, p: int) -> None:
        """A load of partition p begins: transaction markers for its offsets wait for it."""
        self.offsets.defer_markers(p)

    def _loaded(self, p: int, records: list[LogEntry], tenure: int) -> int:
        """Coordinate the groups read back from partition p; returns how many."""
        self._unload(p)                         # whatever an earlier tenure left
        self.offsets.replay(p, records, self._apply_group_record)
        self.offsets.apply_deferred(p)
        loaded = [g for gid, g in self.groups.items() if self.partition_of(gid) == p]
        resume(loaded, asyncio.get_running_loop().time())
        if self.consumer_groups is not None:
            self.consumer_groups.resume(lambda gid: self.partition_of(gid) == p, asyncio.get_running_loop().time())
        return len(loaded)

    def _lost(self, p: int) -> None:
        self.offsets.discard_deferred(p)
        self._unload(p)

    def _read_partition(self, part) -> list[LogEntry]:
        """Every record and transaction marker of the partition up to its log end (a thread)."""
        try:
            log = part.log
            return list(replay(log, log.log_start_offset, "log_end"))
        finally:
            self.partitions.unpin_thread()

    def _unload(self, p: int) -> None:
        """Drop the groups of partition p: their members rejoin at the new coordinator."""
        self.offsets.drop_partition(p)
        if self.consumer_groups is not None:
            self.consumer_groups.unload(lambda gid: self.partition_of(gid) == p)
        gone = [gid for gid in self.groups if self.partition_of(gid) == p]
        for gid in gone:
            group = self.groups.pop(gid)
            self.timers.cancel_rebalance(group)
            for m in group.members.values():
                if m.join is not None and not m.join.done():
                    m.join.set_result(join_error(E.NOT_COORDINATOR, m.member_id))
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result(sync_error(E.NOT_COORDINATOR))
        if gone:
            logger.info("no longer coordinating %d groups of %s-%d", len(gone), OT.TOPIC, p)

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> int:
        """Rebuild groups and committed offsets from `__consumer_offsets` (blocking; at start).
        Returns the number of records read."""
        info = self.partitions.topics.get(OT.TOPIC)
        if info is None:
            return 0
        self._topic_ready = True
        if info.partitions != self.num_partitions:
            logger.warning("%s has %d partitions, offsets.topic.num.partitions says %d: the topic wins",
                           OT.TOPIC, info.partitions, self.num_partitions)
            self.num_partitions = info.partitions
        count = 0
        for p in range(info.partitions):
            part = self.partitions.get(OT.TOPIC, p)
            log = part.log
            entries = list(replay(log, log.log_start_offset, "read_uncommitted"))
            count += len(entries)
            self.offsets.replay(p, entries, self._apply_group_record)
        resume(self.groups.values(), time.monotonic())     # the event loop's clock
        if self.consumer_groups is not None:
            self.consumer_groups.resume(lambda gid: True, time.monotonic())
        logger.info("loaded %d groups (%d records) from %s", len(self.groups), count, OT.TOPIC)
        return count

    def _apply_group_record(self, key: OT.GroupKey, record_value: bytes | None, where: str) -> None:
        """A group's metadata read back from its partition (a bad one raises SegLogError)."""
        if not isinstance(key, OT.GroupKey):
            if self.consumer_groups is not None:       # a consumer-protocol group's record
                self.consumer_groups.apply_record(key, record_value, where)
            return
        if record_value is None:
            # Kafka: the group is gone, not its offsets (their own tombstones remove them; a
            # group upgraded to a consumer group keeps them).
            self.groups.pop(key.group, None)
            return
        g = OT.parse_group_value(record_value, where)
        group = self._group(key.group)
        group.generation, group.protocol_type = g.generation, g.protocol_type or None
        group.state_timestamp_ms = g.state_timestamp
        # Kafka's loadGroup: the members of the last generation written, with their
        # assignments, so a stable group goes on at a new coordinator (or after a
        # restart) without a rebalance; each session starts again at the load.
        group.protocol, group.leader = (g.protocol, g.leader) if g.protocol else (None, None)
        group.members = {
            m.member_id: Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                m.session_timeout_ms, m.rebalance_timeout_ms, g.protocol_type,
                                [(g.protocol, m.subscription)], 0.0, m.assignment)
            for m in g.members} if g.protocol else {}

    async def start(self) -> None:
        self.timers.start()
        self.admin.start()
        if self.consumer_groups is not None:
            await self.consumer_groups.start()

    async def stop(self) -> None:
        self.timers.stop()                      # no session expires, no rebalance completes now
        self.admin.stop()
        if self.consumer_groups is not None:
            await self.consumer_groups.stop()
        for task in self.tenure.load_tasks():
            task.cancel()

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def forget(self, group_id: str) -> None:
        """The group was deleted or expired (its tombstones written): drop it and its offsets."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            self.timers.cancel_rebalance(group)
        self.offsets.drop_group(group_id)

    def release(self, group_id: str) -> None:
        """The group became a consumer group (KIP-848's online upgrade): parked JoinGroup and
        SyncGroup answers get REBALANCE_IN_PROGRESS (the members rejoin it); its offsets stay."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            self.timers.cancel_rebalance(group)
        for m in group.members.values() if group is not None else ():
            if m.join is not None and not m.join.done():
                m.join.set_result(join_error(E.REBALANCE_IN_PROGRESS, m.member_id))
            if m.sync is not None and not m.sync.done():
                m.sync.set_result(sync_error(E.REBALANCE_IN_PROGRESS))

    def adopt(self, group: Group, reason: str) -> tuple[bytes, bytes]:
        """A consumer group turned back into this classic group (KIP-848's online downgrade),
        Stable until the rebalance this starts; the record to write."""
        group.state = STABLE
        for m in group.members.values():
            m.last_seen = asyncio.get_running_loop().time()
        self.groups[group.group_id] = group
        record = (OT.group_key(group.group_id), OT.group_value(group.record(self.admin.clock_ms())))
        self.timers.prepare_rebalance(group, reason)
        return record

    def describe(self, group_id: str) -> dict:
        """DescribeGroups' answer for one group (a group it does not know is "Dead", error NONE)."""
        group = self.groups.get(group_id)
        return group.description() if group is not None else Group(group_id, state=DEAD).description()

    # ------------------------------------------------------------------ the offsets topic
    async def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        if self._topic_lock is None:
            self._topic_lock = asyncio.Lock()
        async with self._topic_lock:
            if not self._topic_ready:
                await asyncio.to_thread(self._ensure_topic)
                self._topic_ready = True

    async def append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append a group's records (the consumer-protocol groups'); as _append."""
        return await self._append(group_id, records)

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]],
                      producer: tuple[int, int] | None = None) -> int:
        """Append records to the group's partition and wait for their commit (in a cluster:
        until the partition's HW passes them). The error code, with Kafka's mapping of the
        append's errors for the coordinator: NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR; no
        such partition, NOT_ENOUGH_REPLICAS(_AFTER_APPEND) -> COORDINATOR_NOT_AVAILABLE;
        REQUEST_TIMED_OUT as it is."""
        p = self.partition_of(group_id)
        where = f"{OT.TOPIC}-{p}"
        tenure = self.tenure.current(p)
        code, message = self.placement.write_check(p, self.owned)
        if code != E.NONE:
            if message is not None:
                logger.warning("group %s: not writing to %s: %s", group_id, where, message)
            return _coordinator_code(code)
        try:
            await self.ensure_topic()
            part = self.partitions.get(OT.TOPIC, p)
            if part is None:
                raise SegLogError(f"{where} (the partition of group {group_id!r}) is not open")
            if producer is not None:      # TxnOffsetCommit: a transactional batch of the producer
                info = await self.appender.append_transactional(part, records, producer_id=producer[0],
                                                                producer_epoch=producer[1])
            else:
                now = int(time.time() * 1000)
                batch = build_batch([(k, v, (), now) for k, v in records])
                info = await self.partitions.submit(part, batch)
        except Exception as exc:  # noqa: BLE001 - reported to the client, the broker goes on
            if producer is not None and isinstance(exc, SegLogError) and E.error_code(exc) in (
                    E.INVALID_PRODUCER_EPOCH, E.INVALID_TXN_STATE, E.OUT_OF_ORDER_SEQUENCE_NUMBER):
                return E.error_code(exc)        # a fenced (zombie) producer's offsets
            logger.error("group %s: writing to %s failed: %s", group_id, where, exc)
            return E.COORDINATOR_NOT_AVAILABLE
        code = await self.placement.commit(
            p, info.last_offset + 1, self.commit_timeout_s,
            lambda: self.tenure.lasts(p, tenure) and p in self.owned)
        if code != E.NONE:
            logger.info("group %s: records appended to %s at offset %d not acknowledged: error %d",
                        group_id, where, info.last_offset, code)
        return _coordinator_code(code)

    # ------------------------------------------------------------------ JoinGroup
    async def join(self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> dict:
        if not group_id:
            return join_error(E.INVALID_GROUP_ID, member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return join_error(E.INVALID_SESSION_TIMEOUT, member_id)
        if not protocols or not protocol_type:
            return join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        await self.ensure_topic()
        group = self._group(group_id)
        loop = asyncio.get_running_loop()
        now = loop.time()
        if group.members and (protocol_type != group.protocol_type
                              or not group.supported() & {name for name, _ in protocols}):
            return join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        known_static = group.static_member(group_instance_id)
        if not member_id and known_static is not None:
            # KIP-345: a static member back (a restart) takes its old place under a new id.
            return await self._rejoin_static(group, known_static, f"{client_id or 'member'}-{uuid.uuid4()}",
                                             client_id, session_timeout_ms, rebalance_timeout_ms, protocols)
        if member_id and known_static is not None and known_static != member_id:
            return join_error(E.FENCED_INSTANCE_ID, member_id)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member and group_instance_id is None:
                # KIP-394: hand out the id first; the member joins again with it.
                group.pending[member_id] = now + session_timeout_ms / 1000
                return join_error(E.MEMBER_ID_REQUIRED, member_id)
        elif member_id not in group.members and member_id not in group.pending:
            return join_error(E.UNKNOWN_MEMBER_ID, member_id)
        group.pending.pop(member_id, None)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, list(protocols), now)
            group.members[member_id] = member
            group.last_newcomer = now
            if group.protocol_type is None or len(group.members) == 1:
                group.protocol_type = protocol_type
        else:
            unchanged = member.protocols == list(protocols)
            member.last_seen = now
            member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            if group.state in (STABLE, COMPLETING) and unchanged and member_id != group.leader:
                # A follower asking again with the same subscription: nothing to rebalance.
                return join_answer(group, member)
            member.protocols = list(protocols)
        if member.join is not None and not member.join.done():
            member.join.set_result(join_error(E.REBALANCE_IN_PROGRESS, member_id))
        member.join = loop.create_future()
        self.timers.prepare_rebalance(group, f"member {member_id} joined")
        changed(group).set()
        return await member.join

    async def _rejoin_static(self, group: Group, old_id: str, new_id: str, client_id: str, session_timeout_ms: int,
                             rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]]) -> dict:
        """Kafka's updateStaticMemberAndRebalance: the member of `old_id` goes on as `new_id`
        (the old id is fenced: its parked answers get FENCED_INSTANCE_ID) with its assignment. A
        Stable group whose protocol stays does not rebalance: the metadata is written and the
        member answered at once, naming the leader as it was so that a rejoining leader does not
        compute a new assignment nobody would receive; otherwise the group rebalances."""
        loop = asyncio.get_running_loop()
        member = group.members.pop(old_id)
        if member.join is not None and not member.join.done():
            member.join.set_result(join_error(E.FENCED_INSTANCE_ID, old_id))
        if member.sync is not None and not member.sync.done():
            member.sync.set_result(sync_error(E.FENCED_INSTANCE_ID))
        member.join = member.sync = None
        member.member_id, member.client_id = new_id, client_id
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        member.protocols = list(protocols)
        member.last_seen = loop.time()
        group.members[new_id] = member
        leader_before = group.leader
        if group.leader == old_id:
            group.leader = new_id
        logger.info("group %s: static member %s rejoined as %s", group.group_id, member.group_instance_id, new_id)
        if group.state == STABLE and group.select_protocol() == group.protocol:
            code = await self._persist_group(group)
            if code != E.NONE:
                return join_error(code, new_id)
            answer = join_answer(group, member)
            answer["leader"] = leader_before or ""
            return answer
        member.join = loop.create_future()
        self.timers.prepare_rebalance(group, f"static member {member.group_instance_id} rejoined as {new_id}")
        changed(group).set()
        return await member.join

    def _fenced(self, group: Group | None, member_id: str, instance_id: str | None) -> bool:
        """KIP-345: another member id holds this group.instance.id."""
        if group is None or instance_id is None:
            return False
        known = group.static_member(instance_id)
        return known is not None and known != member_id

    async def _complete_join(self, group: Group) -> None:
        """The rebalance is over: the new generation, its leader and protocol to every member
        that rejoined (an empty group is written as such)."""
        group.generation += 1
        if not group.members:
            group.state, group.protocol, group.leader = EMPTY, None, None
            group.state_timestamp_ms = self.admin.clock_ms()
            logger.info("group %s: empty at generation %d", group.group_id, group.generation)
            await self._persist_group(group)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        now = asyncio.get_running_loop().time()
        logger.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                    group.generation, len(group.members), group.protocol, group.leader)
        for m in group.members.values():
            m.last_seen = now
            m.assignment = b""
            if m.join is not None and not m.join.done():
                m.join.set_result(join_answer(group, m))
            m.join = None

    async def _persist_group(self, group: Group) -> int:
        """Write the group's metadata; the error code (Kafka's storeGroup: a timeout is
        COORDINATOR_NOT_AVAILABLE)."""
        code = await self._append(group.group_id, [(OT.group_key(group.group_id),
                                                    OT.group_value(group.record(self.admin.clock_ms())))])
        if code != E.NONE:
            logger.error("group %s: writing its metadata to %s failed: error %d", group.group_id, OT.TOPIC, code)
        return E.COORDINATOR_NOT_AVAILABLE if code == E.REQUEST_TIMED_OUT else code

    # ------------------------------------------------------------------ SyncGroup
    async def sync(self, *, group_id: str, generation_id: int, member_id: str,
                   assignments: list[tuple[str, bytes]], group_instance_id: str | None = None) -> dict:
        group = self.groups.get(group_id)
        if self._fenced(group, member_id, group_instance_id):
            return sync_error(E.FENCED_INSTANCE_ID)
        if group is None or member_id not in group.members:
            return sync_error(E.UNKNOWN_MEMBER_ID)
        member = group.members[member_id]
        member.last_seen = asyncio.get_running_loop().time()
        if generation_id != group.generation:
            return sync_error(E.ILLEGAL_GENERATION)
        if group.state == PREPARING:
            return sync_error(E.REBALANCE_IN_PROGRESS)
        if group.state == STABLE:
            return sync_answer(group, member)
        if member.sync is not None and not member.sync.done():
            member.sync.set_result(sync_error(E.REBALANCE_IN_PROGRESS))
        member.sync = asyncio.get_running_loop().create_future()
        waiting = member.sync
        if member_id == group.leader:
            given = dict(assignments)
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            generation = group.generation
            code = await self._persist_group(group)
            if self.groups.get(group_id) is not group:
                pass                            # unloaded meanwhile: the members were told
            elif group.generation == generation and group.state == COMPLETING:
                if code == E.NONE:
                    group.state = STABLE
                    for m in group.members.values():
                        if m.sync is not None and not m.sync.done():
                            m.sync.set_result(sync_answer(group, m))
                        m.sync = None
                else:
                    # Kafka: every member gets the error (NOT_COORDINATOR sends them to the new
                    # coordinator) and the group rebalances.
                    for m in group.members.values():
                        if m.sync is not None and not m.sync.done():
                            m.sync.set_result(sync_error(code))
                        m.sync = None
                    self.timers.prepare_rebalance(group, "its metadata could not be written")
        return await waiting

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup
    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> int:
        group = self.groups.get(group_id)
        if self._fenced(group, member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        if group is None or member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        group.members[member_id].last_seen = asyncio.get_running_loop().time()
        if generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state == PREPARING:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup of (member id, group.instance.id) each: a static member may be named by
        its instance id alone (an empty member id, as the admin client's removal sends)."""
        group = self.groups.get(group_id)
        codes = []
        left = []
        for mid, instance_id in members:
            if group is not None and instance_id is not None:
                known = group.static_member(instance_id)
                if known is None:
                    codes.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if mid and mid != known:
                    codes.append(E.FENCED_INSTANCE_ID)
                    continue
                mid = known
            if group is None or (mid not in group.members and mid not in group.pending):
                codes.append(E.UNKNOWN_MEMBER_ID)
                continue
            codes.append(E.NONE)
            group.pending.pop(mid, None)
            member = group.members.pop(mid, None)
            if member is not None:
                left.append(mid)
                if member.join is not None and not member.join.done():
                    member.join.set_result(join_error(E.UNKNOWN_MEMBER_ID, mid))
                if member.sync is not None and not member.sync.done():
                    member.sync.set_result(sync_error(E.UNKNOWN_MEMBER_ID))
        if group is not None and left:
            self.timers.member_gone(group, f"member {', '.join(left)} left")
        return codes

    # ------------------------------------------------------------------ offsets
    def check_commit(self, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None = None) -> int:
        """Whether this member of this generation may commit the group's offsets (the
        group's side of OffsetCommit and TxnOffsetCommit; the offsets are `self.offsets`')."""
        if self.consumer_groups is not None and self.consumer_groups.owns(group_id):
            return self.consumer_groups.check_commit(group_id, generation_id, member_id, None)
        group = self.groups.get(group_id)
        if self._fenced(group, member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        if generation_id < 0 and (group is None or not group.members):
            # An admin or a consumer that assigns its own partitions: allowed while no member
            # owns the group, whatever member id it sends (Kafka's; librdkafka's KIP-848
            # consumer sends the id it made up itself).
            return E.NONE
        if generation_id < 0 and not member_id:
            return E.UNKNOWN_MEMBER_ID
        if group is None or member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state == COMPLETING:
            return E.REBALANCE_IN_PROGRESS
        group.members[member_id].last_seen = asyncio.get_running_loop().time()
        return E.NONE


def partition_for(group_id: str, partitions: int) -> int:
    return OT.partition_for(group_id, partitions)


def _coordinator_code(code: int) -> int:
    """The coordinator's answer for an append's error (Kafka's GroupMetadataManager)."""
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return E.COORDINATOR_NOT_AVAILABLE
    return code

