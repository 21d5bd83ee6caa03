"""Every API a broker serves x (no ACL / allowed / denied), on a broker with Kafka's AclAuthorizer.

The broker runs in this process (a BrokerServer on a loop thread) and each request is parsed
from its encoded frame as the server parses it, with the principal and client host set as an
authenticating listener sets them, so that any principal can be exercised:

- User:nobody has no ACL at all (allow.everyone.if.no.acl.found=false): refused everywhere;
- User:admin is in super.users: allowed everywhere;
- User:alice has ALLOW ALL on every resource (wildcard) from 127.0.0.1: allowed from there,
  refused from any other host;
- User:mallory has the same ALLOWs and a DENY ALL on every resource type: refused (DENY wins).

"Refused" is the API's authorization error (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_
AUTHORIZATION_FAILED) somewhere in the response; ListGroups and ListTransactions leave out what
the principal may not DESCRIBE instead; ApiVersions is open to all, as in Kafka.
"""
from __future__ import annotations

import dataclasses
import inspect
import uuid
from types import SimpleNamespace

import pytest

from logcore.broker.api_versions import SERVED
from logcore.broker.fetch_response import EncodedResponse
from logcore.records.batch import build_batch
from logcore.security.acl import (AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType as P,
                                  ResourcePattern, ResourceType as R)
from in_process_broker import InProcessBroker
from logcore.wire.protocol import ZERO_UUID, build, decode_response, encode_request, parse_request, request_type

AUTH_ERRORS = {29, 30, 31, 53}
LOCAL = "127.0.0.1"
TOPIC, GROUP, TXN = "t", "g", "tx"


def _fetch(replica_id: int) -> dict:
    return {"replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}


def _commit_topics() -> list:
    return [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]


BATCH = build_batch([(b"k", b"v", (), 1_700_000_000_000)])
# (label, api key, version, body); the labels of APIs with more than one form say which
REQUESTS = [
    ("Produce", 0, 9, {"acks": 1, "timeout": 5000, "transactional_id": None, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": BATCH}]}]}),
    ("Produce transactional", 0, 9, {"acks": 1, "timeout": 5000, "transactional_id": TXN, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": BATCH}]}]}),
    ("Fetch", 1, 12, _fetch(-1)),
    ("Fetch as a follower", 1, 12, _fetch(1)),
    ("ListOffsets", 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}),
    ("Metadata", 3, 12, {"topics": [{"name": TOPIC, "topic_id": ZERO_UUID}], "allow_auto_topic_creation": False,
                         "include_topic_authorized_operations": True}),
    ("OffsetCommit", 8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                            "group_instance_id": None, "topics": _commit_topics()}),
    ("OffsetFetch", 9, 8, {"groups": [{"group_id": GROUP, "topics": None}], "require_stable": False}),
    ("FindCoordinator", 10, 4, {"key_type": 0, "coordinator_keys": [GROUP]}),
    ("FindCoordinator transaction", 10, 4, {"key_type": 1, "coordinator_keys": [TXN]}),
    ("JoinGroup", 11, 5, {"group_id": "jg", "session_timeout": 10000, "rebalance_timeout": 10000,
                          "member_id": "m", "group_instance_id": None, "protocol_type": "consumer",
                          "protocols": [{"name": "range", "metadata": b""}]}),
    ("Heartbeat", 12, 3, {"group_id": GROUP, "generation_id": 1, "member_id": "m"}),
    ("LeaveGroup", 13, 4, {"group_id": GROUP, "members": [{"member_id": "m"}]}),
    ("SyncGroup", 14, 3, {"group_id": GROUP, "generation_id": 1, "member_id": "m", "assignments": []}),
    ("DescribeGroups", 15, 5, {"groups": [GROUP], "include_authorized_operations": True}),
    ("ListGroups", 16, 4, {"states_filter": []}),
    ("ApiVersions", 18, 3, {"client_software_name": "acl-table", "client_software_version": "1"}),
    ("CreateTopics", 19, 5, {"topics": [{"name": "new-topic", "num_partitions": 1, "replication_factor": 1,
                                         "assignments": [], "configs": []}], "timeout": 5000,
                             "validate_only": True}),
    ("DeleteTopics", 20, 6, {"topics": [{"name": "no-such-topic", "topic_id": ZERO_UUID}], "timeout": 5000}),
    ("DeleteTopics by id", 20, 6, {"topics": [{"name": None, "topic_id": uuid.UUID(int=12345)}], "timeout": 5000}),
    ("DeleteRecords", 21, 2, {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}],
                              "timeout": 5000}),
    ("InitProducerId idempotent", 22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                          "producer_id": -1, "producer_epoch": -1}),
    ("InitProducerId transactional", 22, 4, {"transactional_id": "tx-other", "transaction_timeout": 60000,
                                             "producer_id": -1, "producer_epoch": -1}),
    ("OffsetForLeaderEpoch", 23, 4, {"replica_id": -1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
    ("OffsetForLeaderEpoch as a follower", 23, 4, {"replica_id": 1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
    ("AddPartitionsToTxn", 24, 3, {"v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": 1,
                                   "v3_and_below_producer_epoch": 0,
                                   "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}),
    ("AddPartitionsToTxn brokers' v4", 24, 4, {"transactions": [
        {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": TOPIC, "partitions": [0]}]}]}),
    ("AddOffsetsToTxn", 25, 3, {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0, "group_id": GROUP}),
    ("EndTxn", 26, 3, {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0, "committed": False}),
    ("WriteTxnMarkers", 27, 1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                                             "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                                             "coordinator_epoch": 0}]}),
    ("TxnOffsetCommit", 28, 3, {"transactional_id": TXN, "group_id": GROUP, "producer_id": 1, "producer_epoch": 0,
                                "generation_id": -1, "member_id": "", "group_instance_id": None,
                                "topics": _commit_topics()}),
    ("DescribeAcls", 29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}),
    ("CreateAcls", 30, 3, {"creations": [{"resource_type": 2, "resource_name": "zz", "resource_pattern_type": 3,
                                          "principal": "User:x", "host": "*", "operation": 3,
                                          "permission_type": 3}]}),
    ("DeleteAcls", 31, 3, {"filters": [{"resource_type_filter": 2, "resource_name_filter": "zz",
                                        "pattern_type_filter": 3, "principal_filter": None, "host_filter": None,
                                        "operation": 1, "permission_type": 1}]}),
    ("DescribeConfigs topic", 32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                                                     "configuration_keys": None}],
                                      "include_synonyms": False, "include_documentation": False}),
    ("DescribeConfigs broker", 32, 4, {"resources": [{"resource_type": 4, "resource_name": "0",
                                                      "configuration_keys": None}],
                                       "include_synonyms": False, "include_documentation": False}),
    ("DescribeConfigs group", 32, 4, {"resources": [{"resource_type": 32, "resource_name": GROUP,
                                                     "configuration_keys": None}],
                                      "include_synonyms": False, "include_documentation": False}),
    ("IncrementalAlterConfigs group", 44, 1, {"resources": [{"resource_type": 32, "resource_name": GROUP,
                                                             "configs": []}], "validate_only": True}),
    ("ListConfigResources", 74, 1, {"resource_types": [32]}),
    ("AlterConfigs", 33, 2, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": []}],
                             "validate_only": True}),
    ("DescribeLogDirs", 35, 4, {"topics": None}),
    ("DescribeUserScramCredentials", 50, 0, {"users": None}),
    ("AlterUserScramCredentials", 51, 0, {"deletions": [{"name": "bob", "mechanism": 1}], "upsertions": []}),
    ("DescribeClientQuotas", 48, 1, {"components": [], "strict": False}),
    ("AlterClientQuotas", 49, 1, {"validate_only": True, "entries": [
        {"entity": [{"entity_type": "client-id", "entity_name": "c"}],
         "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}]}),
    ("CreatePartitions", 37, 3, {"topics": [{"name": TOPIC, "count": 2, "assignments": None}],
                                 "timeout": 5000, "validate_only": True}),
    ("DeleteGroups", 42, 2, {"groups_names": ["no-such-group"]}),
    ("IncrementalAlterConfigs", 44, 1, {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                                                       "configs": []}], "validate_only": True}),
    ("OffsetDelete", 47, 0, {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]}),
    ("DescribeCluster", 60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}),
    ("DescribeProducers", 61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}),
    ("DescribeTransactions", 65, 0, {"transactional_ids": [TXN]}),
    ("ListTransactions", 66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}),
    ("ConsumerGroupHeartbeat", 68, 0, {"group_id": "g848", "member_id": "m848", "member_epoch": 0,
                                       "instance_id": None, "rack_id": None, "rebalance_timeout": 10000,
                                       "subscribed_topic_names": [TOPIC], "server_assignor": None,
                                       "topic_partitions": []}),
    ("ConsumerGroupDescribe", 69, 0, {"group_ids": ["g848"], "include_authorized_operations": True}),
]
OPEN = {"ApiVersions"}
# listed only when the principal may DESCRIBE them: (response list, field, the name the admin made)
FILTERED = {"ListGroups": ("groups", "group_id", GROUP), "ListTransactions": ("transaction_states",
                                                                             "transactional_id", TXN)}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    base = tmp_path_factory.mktemp("acl-table")
    running = InProcessBroker({
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(base / "logs"), "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0", "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1"})
    loop, broker = running.loop, running.broker
    try:
        every = [R.TOPIC, R.GROUP, R.CLUSTER, R.TRANSACTIONAL_ID]
        grants = [AclBinding(ResourcePattern(rt, "kafka-cluster" if rt == R.CLUSTER else "*"),
                             AccessControlEntry(who, LOCAL if who == "User:alice" else "*", Op.ALL, P.ALLOW))
                  for rt in every for who in ("User:alice", "User:mallory")]
        denials = [AclBinding(ResourcePattern(rt, "kafka-cluster" if rt == R.CLUSTER else "*"),
                              AccessControlEntry("User:mallory", "*", Op.ALL, P.DENY)) for rt in every]
        assert broker.authorizer.create(grants + denials) == [None] * (len(grants) + len(denials))
        # the admin makes what the filtered lists should show: a topic, a group, a transactional id
        call(loop, broker, "User:admin", LOCAL, 19, 5, {"topics": [{"name": TOPIC, "num_partitions": 1,
                                                                     "replication_factor": 1}], "timeout": 5000})
        call(loop, broker, "User:admin", LOCAL, 8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1,
                                                         "member_id": "", "topics": _commit_topics()})
        call(loop, broker, "User:admin", LOCAL, 22, 4, {"transactional_id": TXN, "transaction_timeout": 60000,
                                                          "producer_id": -1, "producer_epoch": -1})
        yield loop, broker
    finally:
        running.stop()


def call(loop, broker, principal: str, host: str, key: int, version: int, body: dict):
    """The response (a dict, or the decoded kio response) of one request from `principal`@`host`."""
    frame = encode_request(key, version, 7, "acl-table", build(request_type(key, version), body))
    session = SimpleNamespace(principal=principal, client_host=host, listener="SASL_SSL")
    req = parse_request(frame[4:], {key: (version, version)}, session)

    async def run():
        result = await broker.handle(req)
        if inspect.isawaitable(result):
            result = await result
        return result
    result = loop.run(run())
    if isinstance(result, EncodedResponse):
        result = result.to_bytes()
    if isinstance(result, bytes):
        result = decode_response(key, version, result[4:])[1]
    return result


def error_codes(value) -> set[int]:
    """Every *error_code field anywhere in a response (dicts, kio dataclasses, lists)."""
    out: set[int] = set()
    if isinstance(value, dict):
        items = value.items()
    elif dataclasses.is_dataclass(value):
        items = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    elif isinstance(value, (list, tuple)):
        for v in value:
            out |= error_codes(v)
        return out
    else:
        return out
    for name, v in items:
        if name.endswith("error_code") and v is not None:
            out.add(int(v))
        else:
            out |= error_codes(v)
    return out


def listed(result, label: str) -> set[str]:
    field, name, _ = FILTERED[label]
    entries = result[field] if isinstance(result, dict) else getattr(result, field)
    return {e[name] if isinstance(e, dict) else getattr(e, name) for e in entries}


# SaslHandshake and SaslAuthenticate are answered by the connection's SASL layer before any
# principal exists (server.py), as in Kafka: not by the broker's handlers
SASL_LAYER = {17, 36}


def test_the_table_covers_every_served_api():
    assert {key for _, key, _, _ in REQUESTS} == set(SERVED) - SASL_LAYER
    for _, key, version, _ in REQUESTS:
        lo, hi = SERVED[key][1:]
        assert lo <= version <= hi


CASES = [("User:nobody", LOCAL, False), ("User:admin", "10.1.2.3", True), ("User:alice", LOCAL, True),
         ("User:alice", "10.1.2.3", False), ("User:mallory", LOCAL, False)]


@pytest.mark.parametrize("principal,host,allowed", CASES,
                         ids=["no-acl", "super-user", "allowed", "allowed-other-host", "denied"])
def test_every_served_api(secured, principal, host, allowed):
    loop, broker = secured
    wrong = []
    for label, key, version, body in REQUESTS:
        result = call(loop, broker, principal, host, key, version, body)
        codes = error_codes(result)
        if label in OPEN:
            ok = not codes & AUTH_ERRORS
        elif label in FILTERED:
            ok = not codes & AUTH_ERRORS and (FILTERED[label][2] in listed(result, label)) == allowed
        else:
            ok = bool(codes & AUTH_ERRORS) != allowed
        if not ok:
            wrong.append(f"{label}: error codes {sorted(codes)}")
    assert not wrong, f"{principal}@{host} ({'allowed' if allowed else 'refused'}): " + "; ".join(wrong)


def test_authorized_operations_follow_the_acls(secured):
    loop, broker = secured
    everything = call(loop, broker, "User:alice", LOCAL, 60, 1, {"include_cluster_authorized_operations": True})
    assert everything["cluster_authorized_operations"] == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    meta = call(loop, broker, "User:alice", LOCAL, 3, 12, {"topics": None, "include_topic_authorized_operations": True})
    assert [t["topic_authorized_operations"] for t in meta["topics"] if t["name"] == TOPIC] == [
        sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))]
    # all topics: the ones the principal may not DESCRIBE are left out, not refused
    hidden = call(loop, broker, "User:nobody", LOCAL, 3, 12, {"topics": None})
    assert [t["name"] for t in hidden["topics"]] == [] and not error_codes(hidden) & AUTH_ERRORS
