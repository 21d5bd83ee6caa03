"""The authorizer's semantics on arbitrary principals and hosts, without a broker: Kafka's
AclAuthorizer rules (deny wins, implied operations, wildcards, prefixes, super users,
allow.everyone.if.no.acl.found), the ACL APIs' filters, both stores' formats, and the config."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from logcore.errors import InvalidConfigError
from logcore.security.acl import (AccessControlEntry, AclBinding, AclBindingFilter, AclError, AclOperation as Op,
                                  AclPermissionType as P, PatternType, ResourcePattern, ResourceType as R,
                                  check_binding)
from logcore.security.acl_store import RootAclStore, change_notice, pattern_of_notice, pattern_path
from logcore.security.authorizer import (AclAuthorizer, NoAuthorizer, SecurityDisabledError, authorizer_for,
                                         check_authorizer_class, operations_bits, parse_super_users)
from logcore.storage import open_storage

ALICE, BOB = "User:alice", "User:bob"


def acl(rt, name, principal, op, perm=P.ALLOW, host="*", pattern=PatternType.LITERAL):
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm))


def req(principal, host="10.0.0.1"):
    return SimpleNamespace(principal=principal, client_host=host)


@pytest.fixture
def auth(tmp_path):
    a = AclAuthorizer(RootAclStore(open_storage(str(tmp_path))), frozenset({"User:admin"}))
    a.start()
    return a


def test_no_acl_denies_unless_allow_everyone(tmp_path):
    strict = AclAuthorizer(RootAclStore(open_storage(str(tmp_path / "a"))))
    open_ = AclAuthorizer(RootAclStore(open_storage(str(tmp_path / "b"))), allow_if_no_acl=True)
    for a in (strict, open_):
        a.start()
    assert not strict.authorize(ALICE, "h", Op.READ, R.TOPIC, "t")
    assert open_.authorize(ALICE, "h", Op.READ, R.TOPIC, "t")
    # once any ACL names the resource, allow.everyone no longer applies to it
    open_.create([acl(R.TOPIC, "t", BOB, Op.READ)])
    assert not open_.authorize(ALICE, "h", Op.READ, R.TOPIC, "t")
    assert open_.authorize(ALICE, "h", Op.READ, R.TOPIC, "other")


def test_allow_deny_implied_and_super_users(auth):
    assert auth.create([acl(R.TOPIC, "t", ALICE, Op.READ), acl(R.TOPIC, "t", ALICE, Op.WRITE),
                        acl(R.TOPIC, "t", ALICE, Op.WRITE, P.DENY),
                        acl(R.TOPIC, "c", ALICE, Op.ALTER_CONFIGS)]) == [None] * 4
    assert auth.authorize(ALICE, "h", Op.READ, R.TOPIC, "t")
    assert not auth.authorize(ALICE, "h", Op.WRITE, R.TOPIC, "t")          # DENY wins
    assert auth.authorize(ALICE, "h", Op.DESCRIBE, R.TOPIC, "t")           # implied by READ
    assert not auth.authorize(ALICE, "h", Op.DELETE, R.TOPIC, "t")
    assert auth.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, R.TOPIC, "c")   # implied by ALTER_CONFIGS
    assert not auth.authorize(ALICE, "h", Op.DESCRIBE, R.TOPIC, "c")
    assert not auth.authorize(BOB, "h", Op.READ, R.TOPIC, "t")
    assert auth.authorize("User:admin", "h", Op.DELETE, R.TOPIC, "t")      # super user
    # a DENY of an implying operation does not deny the implied one
    auth.create([acl(R.TOPIC, "t", ALICE, Op.READ, P.DENY)])
    assert not auth.authorize(ALICE, "h", Op.READ, R.TOPIC, "t")
    assert auth.authorize(ALICE, "h", Op.DESCRIBE, R.TOPIC, "t")           # still implied by the ALLOWs
    auth.create([acl(R.TOPIC, "t", ALICE, Op.DESCRIBE, P.DENY)])
    assert not auth.authorize(ALICE, "h", Op.DESCRIBE, R.TOPIC, "t")


def test_all_wildcards_prefixes_and_hosts(auth):
    auth.create([acl(R.TOPIC, "*", "User:*", Op.DESCRIBE),
                 acl(R.TOPIC, "logs-", ALICE, Op.ALL, pattern=PatternType.PREFIXED),
                 acl(R.TOPIC, "logs-secret", ALICE, Op.ALL, P.DENY),
                 acl(R.GROUP, "g", BOB, Op.READ, host="10.0.0.2")])
    assert auth.authorize(BOB, "h", Op.DESCRIBE, R.TOPIC, "anything")
    assert auth.authorize(ALICE, "h", Op.WRITE, R.TOPIC, "logs-app")
    assert auth.authorize(ALICE, "h", Op.DELETE, R.TOPIC, "logs-")
    assert not auth.authorize(ALICE, "h", Op.WRITE, R.TOPIC, "logsx")
    assert not auth.authorize(ALICE, "h", Op.READ, R.TOPIC, "logs-secret")
    assert auth.allows(req(BOB, "10.0.0.2"), Op.READ, R.GROUP, "g")
    assert not auth.allows(req(BOB, "10.0.0.3"), Op.READ, R.GROUP, "g")
    assert auth.allows_any(req(ALICE), Op.WRITE, R.TOPIC)
    assert not auth.allows_any(req(BOB), Op.WRITE, R.TOPIC)
    topic_ops = auth.authorized_operations(req(ALICE), R.TOPIC, "logs-a")
    assert topic_ops == operations_bits([Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
    assert auth.authorized_operations(req(BOB), R.TOPIC, "x") == 1 << int(Op.DESCRIBE)


def test_describe_and_delete_filters(auth):
    auth.create([acl(R.TOPIC, "t", ALICE, Op.READ), acl(R.TOPIC, "t", BOB, Op.WRITE),
                 acl(R.TOPIC, "t", ALICE, Op.READ, pattern=PatternType.PREFIXED),
                 acl(R.TOPIC, "*", ALICE, Op.DESCRIBE), acl(R.GROUP, "g", ALICE, Op.READ)])
    everything = auth.describe(AclBindingFilter())
    assert len(everything) == 5
    assert len(auth.describe(AclBindingFilter(R.TOPIC, "t", PatternType.LITERAL))) == 2
    # MATCH: every pattern that covers "tx": the wildcard and the prefix "t"
    matched = auth.describe(AclBindingFilter(R.TOPIC, "tx", PatternType.MATCH))
    assert {b.pattern.name for b in matched} == {"*", "t"}
    assert len(auth.describe(AclBindingFilter(principal=ALICE))) == 4
    removed = auth.delete([AclBindingFilter(R.TOPIC, "t", PatternType.ANY, principal=ALICE)])[0]
    assert {(b.pattern.pattern_type, b.entry.operation) for b in removed} == {
        (PatternType.LITERAL, Op.READ), (PatternType.PREFIXED, Op.READ)}
    assert len(auth.describe(AclBindingFilter())) == 3
    assert auth.delete([AclBindingFilter(operation=Op.UNKNOWN)]) == ["a filter's operation must not be UNKNOWN"]


def test_root_store_persists_across_restarts(tmp_path):
    storage = open_storage(str(tmp_path))
    a = AclAuthorizer(RootAclStore(storage))
    a.start()
    a.create([acl(R.TRANSACTIONAL_ID, "tx-", ALICE, Op.WRITE, pattern=PatternType.PREFIXED)])
    again = AclAuthorizer(RootAclStore(storage))
    again.start()
    assert again.authorize(ALICE, "h", Op.WRITE, R.TRANSACTIONAL_ID, "tx-1")
    doc = json.loads((tmp_path / "acls.json").read_text())
    assert doc["resources"][0]["acls"] == [{"principal": ALICE, "permissionType": "Allow",
                                            "operation": "Write", "host": "*"}]


def test_invalid_bindings_are_refused(auth):
    bad = [acl(R.ANY, "t", ALICE, Op.READ), acl(R.TOPIC, "t", "alice", Op.READ),
           acl(R.TOPIC, "t", ALICE, Op.ANY), acl(R.CLUSTER, "other", ALICE, Op.ALTER),
           acl(R.GROUP, "g", ALICE, Op.WRITE), acl(R.TOPIC, "*", ALICE, Op.READ, pattern=PatternType.PREFIXED),
           acl(R.TOPIC, "t", ALICE, Op.READ, P.ANY)]
    answers = auth.create(bad)
    assert all(isinstance(a, str) and a for a in answers), answers
    assert auth.describe(AclBindingFilter()) == []
    with pytest.raises(AclError):
        check_binding(acl(R.TOPIC, "", ALICE, Op.READ))


def test_zookeeper_layout_names():
    lit = ResourcePattern(R.TRANSACTIONAL_ID, "tx")
    pre = ResourcePattern(R.TOPIC, "logs-", PatternType.PREFIXED)
    assert pattern_path(lit) == "/kafka-acl/TransactionalId/tx"
    assert pattern_path(pre) == "/kafka-acl-extended/prefixed/Topic/logs-"
    assert pattern_path(ResourcePattern(R.CLUSTER, "kafka-cluster")) == "/kafka-acl/Cluster/kafka-cluster"
    for p in (lit, pre):
        folder, data = change_notice(p)
        assert pattern_of_notice(folder, data) == p
    assert change_notice(lit) == ("/kafka-acl-changes", b"TRANSACTIONAL_ID:tx")
    assert json.loads(change_notice(pre)[1]) == {"version": 1, "resourceType": "TOPIC", "name": "logs-",
                                                  "patternType": "PREFIXED"}
    assert pattern_of_notice("/kafka-acl-changes", b"Topic:t") == ResourcePattern(R.TOPIC, "t")


def test_authorizer_config(tmp_path):
    assert isinstance(authorizer_for("", None, "", False), NoAuthorizer)
    with pytest.raises(SecurityDisabledError):
        NoAuthorizer().create([])
    with pytest.raises(InvalidConfigError, match="KRaft"):
        check_authorizer_class("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    with pytest.raises(InvalidConfigError, match="not supported"):
        check_authorizer_class("com.example.MyAuthorizer")
    assert parse_super_users("User:a; User:CN=b,O=c ;") == {"User:a", "User:CN=b,O=c"}
    with pytest.raises(InvalidConfigError, match="super.users"):
        parse_super_users("alice")
    a = authorizer_for("kafka.security.authorizer.AclAuthorizer",
                       lambda: RootAclStore(open_storage(str(tmp_path))), "User:x", True)
    assert a.enabled and a.super_users == {"User:x"} and a.allow_if_no_acl
