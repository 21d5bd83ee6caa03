"""Per-group configs (Kafka 4's GROUP config resource, 32) on one `seglog broker` (a subprocess,
shared by the module): DescribeConfigs with their sources, IncrementalAlterConfigs and
AlterConfigs validated as Kafka's GroupConfig validates them, a KIP-848 member's session timeout
and heartbeat interval following its group's config, ListConfigResources, the configs surviving a
restart. Kafka's own kafka-configs against seglog and Kafka: tests/kafka_ref/test_configs_reference.py."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from logcore.errors import SegLogError
from logcore.tools.config_admin import ConfigAdmin
from logcore.wire import error_codes as E
from logcore.wire.client import KafkaConnection
from logcore.wire.config_resources import (GROUP_RESOURCE, OP_APPEND, OP_DELETE, OP_SET, SOURCE_DEFAULT,
                                           SOURCE_DYNAMIC_GROUP)

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "broker"))
sys.path.insert(0, str(TESTS))
from broker_helpers import create, wait_until  # noqa: E402

sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

pytestmark = pytest.mark.timeout(300)

SESSION, INTERVAL = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
HB, DESCRIBE, ALTER_CONFIGS, LIST_CONFIG_RESOURCES = 68, 69, 33, 74
SETTINGS = {"offsets.topic.num.partitions": "2", "num.partitions": "2",
            "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.max.heartbeat.interval.ms": "3000",
            "group.consumer.min.session.timeout.ms": "1500", "group.consumer.session.timeout.ms": "8000",
            "group.consumer.max.session.timeout.ms": "20000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("gc-broker")
    started: list = []
    start = broker_process.start_factory(base, started)
    b = start(**SETTINGS)
    create(b, "t", 2)
    b.restart = lambda: start(b.root, **SETTINGS)
    yield b
    for s in started:
        s.stop()


def configs(b, group) -> dict[str, tuple[str, int]]:
    with ConfigAdmin(b.bootstrap) as admin:
        return {c.name: (c.value, c.source) for c in admin.describe(GROUP_RESOURCE, group)}


def alter(b, group, changes, validate_only=False):
    with ConfigAdmin(b.bootstrap) as admin:
        admin.incremental_alter(GROUP_RESOURCE, group, changes, validate_only)


def refused(b, group, changes) -> str:
    with pytest.raises(SegLogError) as err:
        alter(b, group, changes)
    return str(err.value)


def test_describe_alter_and_sources(broker):
    # a group that does not exist has the broker's values, as Kafka answers
    assert configs(broker, "nobody") == {SESSION: ("8000", SOURCE_DEFAULT), INTERVAL: ("500", SOURCE_DEFAULT)}
    alter(broker, "g1", [(SESSION, OP_SET, "2000"), (INTERVAL, OP_SET, "300")])
    assert configs(broker, "g1") == {SESSION: ("2000", SOURCE_DYNAMIC_GROUP), INTERVAL: ("300", SOURCE_DYNAMIC_GROUP)}
    alter(broker, "g1", [(INTERVAL, OP_DELETE, None)])
    assert configs(broker, "g1") == {SESSION: ("2000", SOURCE_DYNAMIC_GROUP), INTERVAL: ("500", SOURCE_DEFAULT)}
    alter(broker, "g1", [(SESSION, OP_SET, "9000")], validate_only=True)
    assert configs(broker, "g1")[SESSION] == ("2000", SOURCE_DYNAMIC_GROUP)
    with ConfigAdmin(broker.bootstrap) as admin:         # the keys asked for only
        assert [c.name for c in admin.describe(GROUP_RESOURCE, "g1", [INTERVAL])] == [INTERVAL]
    # AlterConfigs: the group's configs become exactly the ones given
    with KafkaConnection(broker.host, broker.port) as conn:
        r = conn.request(ALTER_CONFIGS, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": "g1",
                                                        "configs": [{"name": INTERVAL, "value": "400"}]}],
                                         "validate_only": False}, 1).responses[0]
        assert r.error_code == E.NONE, r.error_message
        assert configs(broker, "g1") == {SESSION: ("8000", SOURCE_DEFAULT), INTERVAL: ("400", SOURCE_DYNAMIC_GROUP)}
        empty = conn.request(32, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": "",
                                                 "configuration_keys": None}],
                                  "include_synonyms": False, "include_documentation": False}, 4).results[0]
        assert empty.error_code == E.INVALID_REQUEST


def test_validation_as_kafka(broker):
    cases = [
        ([(SESSION, OP_SET, "1000")], "consumer.session.timeout.ms must be greater than or equal to"
                                      " group.consumer.min.session.timeout.ms"),
        ([(SESSION, OP_SET, "30000")], "consumer.session.timeout.ms must be less than or equal to"
                                       " group.consumer.max.session.timeout.ms"),
        ([(INTERVAL, OP_SET, "50")], "consumer.heartbeat.interval.ms must be greater than or equal to"
                                     " group.consumer.min.heartbeat.interval.ms"),
        ([(SESSION, OP_SET, "2000"), (INTERVAL, OP_SET, "2500")],
         "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
        ([(SESSION, OP_SET, "soon")], "Not a number of type INT"),
        ([("consumer.no.such", OP_SET, "1")], "Unknown group config name: consumer.no.such"),
        ([("share.session.timeout.ms", OP_SET, "45000")], "seglog has no share groups"),
        ([("streams.num.standby.replicas", OP_SET, "1")], "seglog has no streams groups"),
        ([(SESSION, OP_APPEND, "1")], "not allowed"),
    ]
    for changes, message in cases:
        err = refused(broker, "g2", changes)
        assert message in err and "INVALID_CONFIG" in err, (changes, err)
    assert configs(broker, "g2")[SESSION] == ("8000", SOURCE_DEFAULT)


def _heartbeat(conn, group, member, epoch, join=False):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rebalance_timeout": 30000 if join else -1, "subscribed_topic_names": ["t"] if join else None,
            "server_assignor": None, "topic_partitions": [] if join else None}
    return conn.request(HB, body, 1)


def _ms(interval) -> int:
    return round(interval.total_seconds() * 1000)


def _members(conn, group) -> list[str]:
    g = conn.request(DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}, 0).groups[0]
    return [m.member_id for m in g.members]


def test_members_follow_their_group_config(broker):
    """A member that stops heartbeating is fenced after its group's session timeout (1.5 s), not
    the broker's (8 s); the heartbeat interval given is the group's."""
    alter(broker, "short", [(SESSION, OP_SET, "1500"), (INTERVAL, OP_SET, "200")])
    with KafkaConnection(broker.host, broker.port) as conn:
        short = _heartbeat(conn, "short", "s", 0, join=True)
        plain = _heartbeat(conn, "plain", "p", 0, join=True)
        assert (short.error_code, plain.error_code) == (E.NONE, E.NONE)
        assert (_ms(short.heartbeat_interval), _ms(plain.heartbeat_interval)) == (200, 500)
        started = time.monotonic()
        assert wait_until(lambda: not _members(conn, "short"), timeout=8)
        assert time.monotonic() - started < 5
        assert _members(conn, "plain") == ["p"]          # still within the broker's 8 s
        # a change applies from the member's next heartbeat
        alter(broker, "plain", [(INTERVAL, OP_SET, "700")])
        assert _ms(_heartbeat(conn, "plain", "p", plain.member_epoch).heartbeat_interval) == 700


def test_list_config_resources(broker):
    alter(broker, "listed", [(SESSION, OP_SET, "5000")])
    with KafkaConnection(broker.host, broker.port) as conn:
        def listed(types):
            r = conn.request(LIST_CONFIG_RESOURCES, {"resource_types": types}, 1)
            return r.error_code, {(c.resource_type, c.resource_name) for c in r.config_resources}
        code, groups = listed([GROUP_RESOURCE])
        assert code == E.NONE and (GROUP_RESOURCE, "listed") in groups
        assert all(kind == GROUP_RESOURCE for kind, _ in groups) and (GROUP_RESOURCE, "nobody") not in groups
        code, everything = listed([])
        assert {(4, "0"), (2, "t"), (GROUP_RESOURCE, "listed")} <= everything
        assert listed([16])[0] == E.UNSUPPORTED_VERSION          # client metrics: seglog has none to serve


def test_configs_survive_a_restart(broker):
    alter(broker, "kept", [(SESSION, OP_SET, "4000")])
    broker.stop()
    b = broker.restart()
    assert configs(b, "kept")[SESSION] == ("4000", SOURCE_DYNAMIC_GROUP)
