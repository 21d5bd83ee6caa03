"""The group coordinator's admin side over a real log root (one broker's PartitionManager) with
the retention clock injected: committed offsets expire as KIP-211 says (standalone commits by
commit time, an Empty consumer group from when it became empty, a Stable group only for topics
no member subscribes to), their tombstones are in __consumer_offsets so that a reload agrees,
and DeleteGroups / OffsetDelete refuse what Kafka refuses."""
from __future__ import annotations

import asyncio
import struct

from logcore.broker.partitions import PartitionManager
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.group import EMPTY, STABLE, subscription_topics
from logcore.coordinator.group_coordinator import GroupCoordinator
from logcore.coordinator.transaction_offsets import replay
from logcore.log.log_root import LogRoot
from logcore.wire import error_codes as E

RETENTION_MS = 60_000


def _open(path, initial_delay_ms: int = 0):
    root = LogRoot.open(str(path), create=True)
    for name in ("data", "other"):
        if name not in root.list_topics():
            root.create_topic(name, 2)
    pm = PartitionManager(root)
    pm.open_all()

    def ensure():
        if OT.TOPIC not in pm.topics:
            root.create_topic(OT.TOPIC, 3, {"cleanup.policy": "compact"})
            pm.open_topic(root.describe_topic(OT.TOPIC))
    gc = GroupCoordinator(pm, ensure, num_partitions=3, initial_delay_ms=initial_delay_ms, min_session_ms=10,
                          max_session_ms=60_000, offsets_retention_ms=RETENTION_MS, retention_check_ms=3_600_000)
    clock = [1_000_000]
    gc.admin.clock_ms = lambda: clock[0]
    return pm, gc, clock


def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


async def _member(gc, group: str, *topics: str) -> str:
    """A consumer joins (and syncs) `group` subscribed to `topics`; its member id."""
    joined = await gc.join(group_id=group, member_id="", group_instance_id=None, client_id="c", client_host="",
                           session_timeout_ms=30_000, rebalance_timeout_ms=1_000, protocol_type="consumer",
                           protocols=[("range", _subscription(*topics))], require_known_member=False)
    assert joined["error_code"] == E.NONE, joined
    mid = joined["member_id"]
    synced = await gc.sync(group_id=group, generation_id=joined["generation_id"], member_id=mid,
                           assignments=[(mid, b"a")])
    assert synced["error_code"] == E.NONE
    return mid


def _commit(gc, group: str, offsets: dict, at_ms: int):
    return gc.offsets.commit(group, {tp: OT.CommittedOffset(o, commit_timestamp=at_ms) for tp, o in offsets.items()})


def _tombstones(pm) -> list[bytes]:
    keys = []
    for p in range(3):
        log = pm.get(OT.TOPIC, p).log
        keys += [e.key for e in replay(log, log.log_start_offset, "read_uncommitted") if e.value is None]
    return keys


def test_subscription_topics_parse_the_consumer_protocol():
    assert subscription_topics(_subscription("a", "bb")) == ["a", "bb"]
    assert subscription_topics(b"\x00") is None
    assert subscription_topics(struct.pack(">hih", 0, 1, 50) + b"x") is None


def test_standalone_commits_expire_by_commit_time_then_the_group_goes(tmp_path):
    pm, gc, clock = _open(tmp_path)

    async def run():
        await gc.ensure_topic()
        t0 = clock[0]
        assert await _commit(gc, "solo", {("data", 0): 5}, t0) == E.NONE
        assert await _commit(gc, "solo", {("data", 1): 7}, t0 + 30_000) == E.NONE
        clock[0] = t0 + RETENTION_MS - 1
        assert await gc.admin.expire_offsets() == 0
        clock[0] = t0 + RETENTION_MS
        assert await gc.admin.expire_offsets() == 1
        assert gc.offsets.committed("solo", None) == [("data", [(1, OT.CommittedOffset(7, commit_timestamp=t0 + 30_000))])]
        assert "solo" in gc.groups
        clock[0] = t0 + 30_000 + RETENTION_MS
        assert await gc.admin.expire_offsets() == 1
        assert "solo" not in gc.groups            # no offsets left: removed with a tombstone
    asyncio.run(run())
    assert set(_tombstones(pm)) == {OT.offset_key("solo", "data", 0), OT.offset_key("solo", "data", 1),
                                    OT.group_key("solo")}
    pm.close()
    pm, gc, _ = _open(tmp_path)
    gc.load()
    assert "solo" not in gc.groups and gc.offsets.committed("solo", None) == []
    pm.close()


def test_an_empty_consumer_group_expires_from_when_it_became_empty(tmp_path):
    pm, gc, clock = _open(tmp_path)

    async def run():
        await gc.start()
        try:
            t0 = clock[0]
            # a consumer outside any group commits with generation -1, with or without a member
            # id (librdkafka's KIP-848 consumer sends the one it made up): allowed, as in Kafka
            assert gc.check_commit("g", -1, "") == E.NONE
            assert gc.check_commit("g", -1, "made-up-by-the-client") == E.NONE
            mid = await _member(gc, "g", "data")
            gen = gc.groups["g"].generation
            assert gc.check_commit("g", gen, mid) == E.NONE
            # ... not once a member owns the group
            assert gc.check_commit("g", -1, "") == E.UNKNOWN_MEMBER_ID
            assert gc.check_commit("g", -1, "made-up-by-the-client") == E.UNKNOWN_MEMBER_ID
            assert await _commit(gc, "g", {("data", 0): 3}, t0) == E.NONE
            clock[0] = t0 + 2 * RETENTION_MS              # old commit, but the group has a member
            assert await gc.admin.expire_offsets() == 0
            became_empty = clock[0]
            assert gc.leave("g", [(mid, None)]) == [E.NONE]
            for _ in range(100):
                if gc.groups["g"].state == EMPTY and gc.groups["g"].rebalance is None:
                    break
                await asyncio.sleep(0.01)
            assert gc.groups["g"].state_timestamp_ms == became_empty
            clock[0] = became_empty + RETENTION_MS - 1
            assert await gc.admin.expire_offsets() == 0   # empty for less than the retention
            clock[0] = became_empty + RETENTION_MS
            assert await gc.admin.expire_offsets() == 1
            assert "g" not in gc.groups
        finally:
            await gc.stop()
    asyncio.run(run())
    pm.close()


def test_a_stable_group_keeps_subscribed_topics_and_loses_the_others(tmp_path):
    pm, gc, clock = _open(tmp_path)

    async def run():
        await gc.start()
        try:
            t0 = clock[0]
            mid = await _member(gc, "s", "data")
            assert gc.groups["s"].state == STABLE
            assert await _commit(gc, "s", {("data", 0): 1, ("other", 0): 2}, t0) == E.NONE
            clock[0] = t0 + RETENTION_MS
            assert await gc.admin.expire_offsets() == 1
            assert [t for t, _ in gc.offsets.committed("s", None)] == ["data"]
            # OffsetDelete: a subscribed topic is refused, and a group of members cannot go.
            code, results = await gc.admin.delete_offsets("s", [("data", 0)])
            assert code == E.NONE and results == {("data", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}
            assert await gc.admin.delete_groups(["s", "nope"]) == [("s", E.NON_EMPTY_GROUP),
                                                                 ("nope", E.GROUP_ID_NOT_FOUND)]
            gc.leave("s", [(mid, None)])
            for _ in range(100):
                if gc.groups["s"].state == EMPTY and gc.groups["s"].rebalance is None:
                    break
                await asyncio.sleep(0.01)
            code, results = await gc.admin.delete_offsets("s", [("data", 0)])
            assert code == E.NONE and results == {("data", 0): E.NONE}
            assert gc.offsets.committed("s", None) == []
            assert await gc.admin.delete_groups(["s"]) == [("s", E.NONE)]
            assert "s" not in gc.groups
        finally:
            await gc.stop()
    asyncio.run(run())
    pm.close()


def test_static_member_rejoins_without_rebalance_and_the_old_id_is_fenced(tmp_path):
    pm, gc, clock = _open(tmp_path)

    async def join(member_id, instance, topics=("data",)):
        return await gc.join(group_id="st", member_id=member_id, group_instance_id=instance, client_id="c",
                             client_host="", session_timeout_ms=30_000, rebalance_timeout_ms=1_000,
                             protocol_type="consumer", protocols=[("range", _subscription(*topics))],
                             require_known_member=True)

    async def run():
        await gc.start()
        try:
            first = await join("", "i-1")     # a static member needs no MEMBER_ID_REQUIRED round
            assert first["error_code"] == E.NONE
            old = first["member_id"]
            gen = first["generation_id"]
            assert (await gc.sync(group_id="st", generation_id=gen, member_id=old,
                                  assignments=[(old, b"p0")]))["error_code"] == E.NONE
            again = await join("", "i-1")     # the same instance restarted
            assert again["error_code"] == E.NONE and again["member_id"] != old
            assert again["generation_id"] == gen and again["leader"] == old   # no rebalance
            new = again["member_id"]
            assert gc.groups["st"].state == STABLE and gc.groups["st"].leader == new
            synced = await gc.sync(group_id="st", generation_id=gen, member_id=new, assignments=[])
            assert synced["error_code"] == E.NONE and synced["assignment"] == b"p0"
            assert gc.heartbeat(group_id="st", generation_id=gen, member_id=old,
                                group_instance_id="i-1") == E.FENCED_INSTANCE_ID
            assert gc.check_commit("st", gen, old, "i-1") == E.FENCED_INSTANCE_ID
            assert (await join(old, "i-1"))["error_code"] == E.FENCED_INSTANCE_ID
            assert gc.heartbeat(group_id="st", generation_id=gen, member_id=new, group_instance_id="i-1") == E.NONE
            assert gc.leave("st", [("", "i-2"), (old, "i-1"), ("", "i-1")]) == [
                E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID, E.NONE]
            assert not gc.groups["st"].members
            assert gc.describe("st")["members"] == []
        finally:
            await gc.stop()
    asyncio.run(run())
    pm.close()


def test_a_kip848_group_loses_the_offsets_of_topics_no_member_subscribes_to(tmp_path):
    """Kafka's new coordinator: a consumer group's offset expires by its commit time once no
    member subscribes to its topic; once the group has no members, every offset does."""
    from logcore.coordinator import consumer_group_records as CG
    from logcore.coordinator.consumer_group_coordinator import ConsumerGroupCoordinator, ConsumerGroupSettings
    from logcore.coordinator.consumer_group_records import ConsumerGroupKey
    pm, gc, clock = _open(tmp_path)
    gc.consumer_groups = ConsumerGroupCoordinator(gc, lambda: None, ConsumerGroupSettings())
    member = ConsumerGroupKey(CG.MEMBER_METADATA, "k", "m1")

    async def run():
        await gc.ensure_topic()
        # The group as it is read back from __consumer_offsets: its epoch and one member.
        gc.consumer_groups.apply_record(ConsumerGroupKey(CG.GROUP_METADATA, "k"),
                                        CG.encode_value(CG.GROUP_METADATA, 1), "test")
        gc.consumer_groups.apply_record(member, CG.encode_value(CG.MEMBER_METADATA, CG.MemberMetadata(
            None, None, "c", "", ("data",), None, 30_000, None)), "test")
        t0 = clock[0]
        assert await _commit(gc, "k", {("data", 0): 1, ("other", 0): 2}, t0) == E.NONE
        clock[0] = t0 + RETENTION_MS - 1
        assert await gc.admin.expire_offsets() == 0
        clock[0] = t0 + RETENTION_MS
        assert await gc.admin.expire_offsets() == 1
        assert [t for t, _ in gc.offsets.committed("k", None)] == ["data"]
        gc.consumer_groups.apply_record(member, None, "test")        # the member left
        assert await gc.admin.expire_offsets() == 1
        assert gc.offsets.committed("k", None) == []
    asyncio.run(run())
    assert {OT.offset_key("k", "data", 0), OT.offset_key("k", "other", 0)} <= set(_tombstones(pm))
    pm.close()
