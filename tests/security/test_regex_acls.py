"""A KIP-848 regex subscription resolves only to the topics the member's principal may DESCRIBE,
as Kafka's group coordinator filters it (filterTopicDescribeAuthorizedTopics): librdkafka with
group.protocol=consumer over SASL_PLAINTEXT as User:alice, on a `seglog broker` with Kafka's
AclAuthorizer, subscribes `^t.*` and is assigned only what alice may see. An ACL granted later
is seen at the group's next resolution: a new group resolves at once and gets it.

The broker is administered over its PLAINTEXT listener, where User:ANONYMOUS is a super user.
"""
from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,  # noqa: E402
                                   ResourcePatternType, ResourceType)

from secure_broker import PLAIN_MODULE, jaas, start_broker  # noqa: E402

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("regex-acls")
    b = start_broker(base, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(base / "logs"), "node.id": "0", "num.partitions": "1",
        "sasl.jaas.config": jaas(PLAIN_MODULE, **{f"user_{u}": p for u, p in USERS.items()}),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false",
        # heartbeats every 500 ms: the regex's partitions come one heartbeat after its resolution
        "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500",
    })
    try:
        yield b
    finally:
        b.stop()


def allow(principal: str, rtype, name: str, op, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def assigned(consumer, wanted, timeout: float = 20.0) -> list[tuple[str, int]]:
    """The consumer's assignment once `wanted(assignment)` holds (or the last one seen)."""
    deadline = time.monotonic() + timeout
    now: list[tuple[str, int]] = []
    while time.monotonic() < deadline:
        consumer.poll(0.2)
        now = sorted((p.topic, p.partition) for p in consumer.assignment())
        if wanted(now):
            break
    return now


def alice_consumer(broker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": USERS["alice"],
                     "group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest"})


def test_regex_assigns_only_topics_the_principal_may_describe(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    for f in admin.create_topics([NewTopic("t-seen", 2, 1), NewTopic("t-hidden", 1, 1),
                                  NewTopic("other", 1, 1)]).values():
        f.result(15)
    # alice may read the groups rx-* and the topics t-seen and other (READ implies DESCRIBE);
    # t-hidden matches her regex but she has no ACL on it.
    grants = [allow("User:alice", ResourceType.GROUP, "rx-", AclOperation.READ, ResourcePatternType.PREFIXED),
              allow("User:alice", ResourceType.TOPIC, "t-seen", AclOperation.READ),
              allow("User:alice", ResourceType.TOPIC, "other", AclOperation.READ)]
    for f in admin.create_acls(grants).values():
        f.result(15)

    c = alice_consumer(broker, "rx-1")
    try:
        c.subscribe(["^t.*"])
        got = assigned(c, lambda a: len(a) == 2)
        assert got == [("t-seen", 0), ("t-seen", 1)], got
        # The group resolved its regex once; t-hidden stays out however long alice heartbeats.
        assert assigned(c, lambda a: a != got, timeout=2) == got
        desc = admin.describe_consumer_groups(["rx-1"])["rx-1"].result(15)
        topics = {tp.topic for m in desc.members for tp in m.assignment.topic_partitions}
        assert topics == {"t-seen"}, desc
    finally:
        c.close()

    # DESCRIBE granted on t-hidden: a group resolving now (a new one) sees it.
    for f in admin.create_acls([allow("User:alice", ResourceType.TOPIC, "t-hidden", AclOperation.DESCRIBE)]).values():
        f.result(15)
    c = alice_consumer(broker, "rx-2")
    try:
        c.subscribe(["^t.*"])
        got = assigned(c, lambda a: len(a) == 3)
        assert got == [("t-hidden", 0), ("t-seen", 0), ("t-seen", 1)], got
    finally:
        c.close()
