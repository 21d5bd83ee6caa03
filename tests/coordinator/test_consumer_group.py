"""The consumer group protocol's parts without a broker: the record codec (Kafka's layout of
record types 3..8 and 16), topic regexes in RE2 syntax, the server assignors (uniform: balanced then sticky; range: Kafka's ranges),
and the reconciliation of members (a partition reaches its new owner only once the old one has
revoked it)."""
from __future__ import annotations

import re
import uuid

import pytest

from logcore.coordinator import assignors as A
from logcore.coordinator import consumer_group_records as CG
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.consumer_group import (STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS,
                                                ConsumerGroup, reconcile)
from logcore.coordinator.consumer_group_records import ConsumerGroupKey
from logcore.coordinator.topic_regex import InvalidTopicRegex, compile_topic_regex, matching

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


# ------------------------------------------------------------------------------ records

def test_keys_are_kafka_record_types():
    k = CG.key(ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, "g", "m"))
    assert k == b"\x00\x08" + b"\x00\x01g" + b"\x00\x01m"
    assert CG.key(ConsumerGroupKey(CG.GROUP_METADATA, "g")) == b"\x00\x03\x00\x01g"
    assert OT.parse_key(k, "here") == ConsumerGroupKey(8, "g", "m")
    assert OT.parse_key(b"\x00\x06\x00\x01g", "here") == ConsumerGroupKey(6, "g", None)
    regex = CG.key(ConsumerGroupKey(CG.REGULAR_EXPRESSION, "g", regex="t.*"))
    assert regex == b"\x00\x10" + b"\x00\x01g" + b"\x00\x03t.*"
    assert OT.parse_key(regex, "here") == ConsumerGroupKey(16, "g", regex="t.*")


def test_resolved_regex_value_layout():
    # version 0, compact array of compact strings, int64 version, int64 timestamp, no tags
    assert CG.resolved_regex_value(CG.ResolvedRegex(frozenset({"b", "a"}), 3, 9)) == \
        b"\x00\x00" + b"\x03" + b"\x02a" + b"\x02b" + (3).to_bytes(8, "big") + (9).to_bytes(8, "big") + b"\x00"


def test_group_epoch_value_layout():
    # version 0, int32 epoch, no tagged fields
    assert CG.group_epoch_value(7) == b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00"


@pytest.mark.parametrize("record_type,value", [
    (CG.GROUP_METADATA, 12),
    (CG.TARGET_ASSIGNMENT_METADATA, 11),
    (CG.PARTITION_METADATA, {"a": CG.TopicMetadata(T1, "a", 6), "b": CG.TopicMetadata(T2, "b", 1)}),
    (CG.MEMBER_METADATA, CG.MemberMetadata("inst", None, "client", "/127.0.0.1", ("a", "b"), None, 30000, "range")),
    (CG.MEMBER_METADATA, CG.MemberMetadata(None, "rack", "c", "", (), "t.*", -1, None)),
    (CG.TARGET_ASSIGNMENT_MEMBER, {T1: frozenset({0, 2}), T2: frozenset({5})}),
    (CG.CURRENT_MEMBER_ASSIGNMENT, CG.CurrentAssignment(4, 3, UNREVOKED_PARTITIONS, {T1: frozenset({1})},
                                                        {T2: frozenset({0, 3})})),
    (CG.REGULAR_EXPRESSION, CG.ResolvedRegex(frozenset({"t1", "t2"}), 1795965471273, 1795965474378)),
    (CG.REGULAR_EXPRESSION, CG.ResolvedRegex(frozenset(), -1, 0)),
])
def test_values_round_trip(record_type, value):
    data = CG.encode_value(record_type, value)
    assert CG.parse_value(record_type, data, "test") == value


def test_tagged_fields_are_skipped():
    # Kafka 4.1 adds MetadataHash as tag 0 of the group metadata value.
    data = b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x01" + b"\x00\x08" + b"\x00" * 8
    assert CG.parse_value(CG.GROUP_METADATA, data, "test") == 5


# ------------------------------------------------------------------------------ topic regexes

@pytest.mark.parametrize("pattern,python", [
    ("^.*topic_regex.*", "^.*topic_regex.*"),
    ("(^a.*)|(^b.*)", "(^a.*)|(^b.*)"),           # librdkafka joins its regexes so
    ("a+?b{2,3}", "a+?b{2,3}"),
    (r"\Qa.b\E.*", r"a\.b.*"),
    (r"x\z", r"x\Z"),
    ("(?<n>ab)", "(?P<n>ab)"),
    ("(?i)ab", "(?i)ab"),
    ("[[:digit:]_]+", "[0-9_]+"),
    ("[]a]", r"[\]a]"),
    ("x}+", "x}+"),
])
def test_re2_patterns_translate(pattern, python):
    assert compile_topic_regex(pattern).pattern == python


@pytest.mark.parametrize("pattern,why", [
    ("t[", "missing closing ]"), ("a(?=b)", "lookahead"), ("a(?<!b)", "negative lookbehind"),
    (r"(a)\1", "backreference"), ("(?P=n)", "backreference"), ("(?>a)", "atomic group"), ("a*+", "possessive"),
    ("a{2}+", "possessive"), (r"a\Z", r"\Z"), (r"\pL", "Unicode"), ("(?x)a", "flag x"), ("(?U)a", "ungreedy"),
    ("(?#c)", "comment"), ("[[:^alpha:]]", "negated"),
])
def test_what_re2_refuses_is_refused(pattern, why):
    with pytest.raises(InvalidTopicRegex, match=re.escape(why)):
        compile_topic_regex(pattern)


def test_regex_matches_whole_names():
    names = ["topic_a", "xtopic_regex1", "topic_regex2", "__consumer_offsets"]
    assert matching("^.*topic_regex.*", names) == {"xtopic_regex1", "topic_regex2"}
    assert matching("topic", names) == set()
    assert matching(".*", names, excluded={"__consumer_offsets"}) == set(names) - {"__consumer_offsets"}
    assert matching(r"\Qtopic_a\E", names) == {"topic_a"}


# ------------------------------------------------------------------------------ assignors

def _sizes(result):
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def _flat(result):
    return sorted((m, t, p) for m, a in result.items() for t, ps in a.items() for p in ps)


def test_uniform_balances_and_covers_every_partition():
    spec = A.AssignmentSpec({m: A.MemberSpec(frozenset({T1, T2})) for m in ("a", "b", "c")}, {T1: 7, T2: 3})
    result = A.UniformAssignor().assign(spec)
    sizes = _sizes(result)
    assert max(sizes.values()) - min(sizes.values()) <= 1
    owned = [(t, p) for _, t, p in _flat(result)]
    assert sorted(owned) == sorted([(T1, p) for p in range(7)] + [(T2, p) for p in range(3)])


def test_uniform_is_sticky_when_a_member_joins():
    two = A.UniformAssignor().assign(A.AssignmentSpec(
        {m: A.MemberSpec(frozenset({T1})) for m in ("a", "b")}, {T1: 6}))
    three = A.UniformAssignor().assign(A.AssignmentSpec(
        {"a": A.MemberSpec(frozenset({T1}), current=two["a"]), "b": A.MemberSpec(frozenset({T1}), current=two["b"]),
         "c": A.MemberSpec(frozenset({T1}))}, {T1: 6}))
    assert _sizes(three) == {"a": 2, "b": 2, "c": 2}
    # a and b only give partitions up, they never swap any
    assert three["a"][T1] <= two["a"][T1] and three["b"][T1] <= two["b"][T1]


def test_uniform_respects_subscriptions():
    spec = A.AssignmentSpec({"a": A.MemberSpec(frozenset({T1})), "b": A.MemberSpec(frozenset({T1, T2})),
                             "c": A.MemberSpec(frozenset({T2}))}, {T1: 4, T2: 4})
    result = A.UniformAssignor().assign(spec)
    assert T2 not in result["a"] and T1 not in result.get("c", {})
    assert sorted(_sizes(result).values()) == [2, 3, 3]


def test_range_is_kafkas_ranges():
    # Kafka's example: M0 gets T1P0, T1P1, T2P0, T2P1; M1 gets T1P2, T2P2.
    spec = A.AssignmentSpec({m: A.MemberSpec(frozenset({T1, T2})) for m in ("M0", "M1")}, {T1: 3, T2: 3})
    result = A.RangeAssignor().assign(spec)
    assert result == {"M0": {T1: frozenset({0, 1}), T2: frozenset({0, 1})}, "M1": {T1: frozenset({2}), T2: frozenset({2})}}


def test_range_orders_static_members_first():
    spec = A.AssignmentSpec({"a": A.MemberSpec(frozenset({T1})), "b": A.MemberSpec(frozenset({T1}), instance_id="z")},
                            {T1: 4})
    assert A.RangeAssignor().assign(spec) == {"b": {T1: frozenset({0, 1})}, "a": {T1: frozenset({2, 3})}}


def test_assignor_names():
    assert A.assignor_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    with pytest.raises(ValueError, match="uniform"):
        A.assignor_name("sticky")


# ------------------------------------------------------------------------------ reconciliation

def _group_with(members: dict[str, dict]) -> ConsumerGroup:
    """A group whose members have these current assignments at epoch 1."""
    g = ConsumerGroup("g")
    for mid, assigned in members.items():
        g.replay(ConsumerGroupKey(CG.MEMBER_METADATA, "g", mid),
                 CG.MemberMetadata(None, None, "c", "", ("t",), None, 30000, None))
        g.replay(ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, "g", mid),
                 CG.CurrentAssignment(1, 0, STABLE, assigned, {}))
    return g


def _update(g: ConsumerGroup, member) -> None:
    g.replay(ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, "g", member.member_id), member.current())


def test_a_partition_moves_only_after_its_owner_revoked_it():
    g = _group_with({"a": {T1: frozenset({0, 1, 2, 3})}, "b": {}})
    target = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}}
    # b first: 2 and 3 are still a's, so b gets nothing yet and waits at the new epoch
    b = reconcile(g.members["b"], 2, target["b"], g.partition_epoch, [])
    assert (b.state, b.member_epoch, b.assigned) == (UNRELEASED_PARTITIONS, 2, {})
    _update(g, b)
    # a still owns all four: it must revoke 2 and 3 first, staying at epoch 1
    a = reconcile(g.members["a"], 2, target["a"], g.partition_epoch, [(T1, [0, 1, 2, 3])])
    assert (a.state, a.member_epoch) == (UNREVOKED_PARTITIONS, 1)
    assert a.assigned == {T1: frozenset({0, 1})} and a.pending_revocation == {T1: frozenset({2, 3})}
    _update(g, a)
    b = reconcile(g.members["b"], 2, target["b"], g.partition_epoch, [])
    assert b.assigned == {} and g.partition_epoch(T1, 2) == 1        # still a's
    # a says it no longer owns 2 and 3: it moves to epoch 2, stable
    a = reconcile(g.members["a"], 2, target["a"], g.partition_epoch, [(T1, [0, 1])])
    assert (a.state, a.member_epoch, a.previous_member_epoch, a.pending_revocation) == (STABLE, 2, 1, {})
    _update(g, a)
    assert g.partition_epoch(T1, 2) == -1
    b = reconcile(g.members["b"], 2, target["b"], g.partition_epoch, [])
    assert (b.state, b.member_epoch, b.assigned) == (STABLE, 2, {T1: frozenset({2, 3})})


def test_unknown_owned_partitions_count_as_owned():
    g = _group_with({"a": {T1: frozenset({0, 1})}})
    a = reconcile(g.members["a"], 2, {T1: frozenset({0})}, g.partition_epoch, None)
    assert a.state == UNREVOKED_PARTITIONS
    assert reconcile(a, 2, {T1: frozenset({0})}, g.partition_epoch, None) == a


def test_group_state_follows_epochs():
    g = _group_with({"a": {T1: frozenset({0})}})
    g.replay(ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, "g"), 1)
    g.replay(ConsumerGroupKey(CG.GROUP_METADATA, "g"), 1)
    assert g.state == "Stable"
    g.replay(ConsumerGroupKey(CG.GROUP_METADATA, "g"), 2)
    assert g.state == "Assigning"
    g.replay(ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, "g"), 2)
    assert g.state == "Reconciling"
    for t in (CG.CURRENT_MEMBER_ASSIGNMENT, CG.TARGET_ASSIGNMENT_MEMBER, CG.MEMBER_METADATA):
        g.replay(ConsumerGroupKey(t, "g", "a"), None)
    assert g.state == "Empty" and not g.members


def test_classic_member_metadata_and_the_consumer_protocol_round_trip():
    """A classic member's record 5 (KIP-848's online migration: Kafka's tagged field 0, a
    nullable struct) and the consumer protocol's subscription and assignment bytes."""
    import struct

    from logcore.coordinator import consumer_group_records as CGR
    from logcore.coordinator.consumer_protocol import (MalformedConsumerProtocol, assignment_bytes,
                                                       parse_assignment, parse_subscription)
    sub_v3 = (struct.pack(">hi", 3, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1)
              + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 2, 0, 3)
              + struct.pack(">i", 7) + struct.pack(">h", 2) + b"r1")
    sub = parse_subscription(sub_v3)
    assert (sub.version, sub.topics, sub.owned, sub.generation_id, sub.rack_id) == (3, ("t",), {"t": (0, 3)}, 7, "r1")
    assert parse_subscription(struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"u" + struct.pack(">i", -1)).owned \
        is None
    with pytest.raises(MalformedConsumerProtocol):
        parse_subscription(b"\x00\x01\x00")
    assert parse_assignment(assignment_bytes({"t": (3, 1), "u": ()}, 3)) == {"t": (1, 3)}
    assert parse_assignment(b"") == {}
    meta = CGR.MemberMetadata(None, None, "c", "/h", ("t",), None, 3000, None,
                              CGR.ClassicMemberMetadata(6000, (("range", sub_v3), ("roundrobin", b""))))
    value = CGR.encode_value(CGR.MEMBER_METADATA, meta)
    assert CGR.parse_value(CGR.MEMBER_METADATA, value, "test") == meta
    plain = CGR.MemberMetadata(None, None, "c", "/h", ("t",), None, 3000, None)
    assert CGR.parse_value(CGR.MEMBER_METADATA, CGR.encode_value(CGR.MEMBER_METADATA, plain), "test") == plain
