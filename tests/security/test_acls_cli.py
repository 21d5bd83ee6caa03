"""ACLs over the wire on a `seglog broker` with Kafka's AclAuthorizer: `seglog acls` adds, lists
and removes them; Kafka 4.1's own kafka-acls (org.apache.kafka.tools.AclCommand) gives the same
listings against seglog and against Apache Kafka 4.1.1 (StandardAuthorizer, its KRaft one); and
confluent-kafka clients get the authorization errors they expect.

Until the broker authenticates (SASL), every client is User:ANONYMOUS: the broker that the tools
administer has it in super.users; the one the clients are refused on does not, and the ACLs
there name User:ANONYMOUS from 127.0.0.1.
"""
from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

from logcore.tools.cli import main  # noqa: E402

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
_ENTRY = re.compile(r"\(principal=[^)]*\)")
_RESOURCE = re.compile(r"`(ResourcePattern\([^`]*\))`")


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """(administered: ANONYMOUS is a super user, guarded: ANONYMOUS is not)."""
    started: list = []
    start = broker_process.start_factory(tmp_path_factory.mktemp("acl-brokers"), started)
    admin = start(tmp_path_factory.mktemp("admin-root"), **AUTHORIZER, **{"super.users": "User:ANONYMOUS"})
    guarded = start(tmp_path_factory.mktemp("guarded-root"), **AUTHORIZER,
                    **{"super.users": "User:nobody", "allow.everyone.if.no.acl.found": "false"})
    yield admin, guarded
    for b in started:
        b.stop()


def seglog_acls(*args: str) -> str:
    out = io.StringIO()
    old, sys.stdout = sys.stdout, out
    try:
        assert main(["acls", *args]) == 0
    finally:
        sys.stdout = old
    return out.getvalue()


def listing(text: str) -> dict[str, set[str]]:
    """{resource pattern: {entries}} of kafka-acls' (or seglog acls') --list text."""
    out: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("Current ACLs for resource"):
            current = _RESOURCE.search(line).group(1)
            out.setdefault(current, set())
        elif current is not None and _ENTRY.search(line):
            out[current].update(_ENTRY.findall(line))
    return {k: v for k, v in out.items() if v}


def test_seglog_acls_add_list_remove(brokers):
    admin, _ = brokers
    b = admin.bootstrap
    added = seglog_acls("--bootstrap-server", b, "--add", "--allow-principal", "User:alice", "--producer",
                        "--topic", "orders", "--transactional-id", "tx-", "--resource-pattern-type", "prefixed")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`" in added
    seglog_acls("--bootstrap-server", b, "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
                "--operation", "Read", "--operation", "Describe", "--topic", "orders")
    seglog_acls("--bootstrap-server", b, "--add", "--allow-principal", "User:bob", "--consumer",
                "--topic", "orders", "--group", "readers")
    got = listing(seglog_acls("--bootstrap-server", b, "--list"))
    assert got == {
        "ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)": {
            f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)"
            for op in ("WRITE", "DESCRIBE", "CREATE")},
        "ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx-, patternType=PREFIXED)": {
            f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" for op in ("WRITE", "DESCRIBE")},
        "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)": {
            "(principal=User:mallory, host=10.0.0.9, operation=READ, permissionType=DENY)",
            "(principal=User:mallory, host=10.0.0.9, operation=DESCRIBE, permissionType=DENY)",
            "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)",
            "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)"},
        "ResourcePattern(resourceType=GROUP, name=readers, patternType=LITERAL)": {
            "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)"},
    }
    # MATCH lists every pattern that covers a name; --principal narrows to one principal
    matched = listing(seglog_acls("--bootstrap-server", b, "--list", "--topic", "orders-eu",
                                  "--resource-pattern-type", "match"))
    assert list(matched) == ["ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)"]
    assert set(listing(seglog_acls("--bootstrap-server", b, "--list", "--principal", "User:bob"))) == {
        "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)",
        "ResourcePattern(resourceType=GROUP, name=readers, patternType=LITERAL)"}
    seglog_acls("--bootstrap-server", b, "--remove", "--force", "--deny-principal", "User:mallory",
                "--deny-host", "10.0.0.9", "--operation", "Read", "--topic", "orders")
    left = listing(seglog_acls("--bootstrap-server", b, "--list", "--topic", "orders"))
    assert "(principal=User:mallory, host=10.0.0.9, operation=READ, permissionType=DENY)" not in \
        left["ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"]
    for pattern in ("literal", "prefixed"):
        seglog_acls("--bootstrap-server", b, "--remove", "--force", "--topic", "orders", "--group", "readers",
                    "--transactional-id", "tx-", "--resource-pattern-type", pattern)
    assert listing(seglog_acls("--bootstrap-server", b, "--list")) == {}
    # kept in the log root, as a single broker keeps its dynamic configs
    assert json.loads((admin.root / "acls.json").read_text())["resources"] == []


def test_bad_acls_are_refused(brokers, capsys):
    admin, _ = brokers
    for args, why in ((["--allow-principal", "alice", "--topic", "t"], "principal 'alice' is not <type>:<name>"),
                      (["--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
                       "WRITE does not apply to GROUP")):
        assert main(["acls", "--bootstrap-server", admin.bootstrap, "--add", *args]) == 1
        assert why in capsys.readouterr().err


def test_clients_get_the_authorization_errors_they_expect(brokers):
    _, guarded = brokers
    b = guarded.bootstrap
    # Nobody may do anything yet (no ACL, allow.everyone.if.no.acl.found=false): not even create.
    admin = AdminClient({"bootstrap.servers": b})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("guarded", 1, 1)])["guarded"].result(20)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    producer = Producer({"bootstrap.servers": b, "message.timeout.ms": 10000, "enable.idempotence": False})
    reports = []
    producer.produce("guarded", b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(20)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    consumer = Consumer({"bootstrap.servers": b, "group.id": "readers", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["guarded"])
        codes = set()
        for _ in range(20):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                codes.add(msg.error().code())
            if KafkaError.GROUP_AUTHORIZATION_FAILED in codes:
                break
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes
    finally:
        consumer.close()
        del admin, producer           # librdkafka's handles stop connecting before the broker stops


@pytest.mark.soak          # a Kafka broker and ten kafka-acls JVMs: about a minute (-m soak)
@pytest.mark.timeout(600)
def test_kafka_acls_lists_the_same_on_seglog_and_kafka(brokers, kafka_jars, kafka_broker_factory):
    admin, _ = brokers
    kafka = kafka_broker_factory({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                  "super.users": "User:ANONYMOUS"})
    if not kafka_jars.has_class(ACL_COMMAND):
        pytest.skip(f"no {ACL_COMMAND} in the Kafka jars")
    steps = [
        ["--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
         "--topic", "ref-t", "--group", "ref-g"],
        ["--add", "--allow-principal", "User:bob", "--producer", "--topic", "ref-", "--resource-pattern-type",
         "prefixed"],
        ["--add", "--deny-principal", "User:eve", "--deny-host", "10.0.0.7", "--operation", "All", "--cluster"],
        ["--list"],
        ["--remove", "--force", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", "ref-t"],
        ["--list"],
    ]
    answers = {}
    for name, bootstrap in (("seglog", admin.bootstrap), ("kafka", kafka.bootstrap)):
        lists = []
        for args in steps:
            r = kafka_jars.run_tool(ACL_COMMAND, ["--bootstrap-server", bootstrap, *args], timeout=120)
            assert r.returncode == 0, f"{name}: kafka-acls {' '.join(args)}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
            if args[0] == "--list":
                lists.append(listing(r.stdout))
        answers[name] = lists
    for args in (["--remove", "--force", "--topic", "ref-t", "--group", "ref-g", "--cluster"],
                 ["--remove", "--force", "--topic", "ref-", "--resource-pattern-type", "prefixed"]):
        seglog_acls("--bootstrap-server", admin.bootstrap, *args)
    assert answers["seglog"] == answers["kafka"]
    first = answers["kafka"][0]
    assert "(principal=User:eve, host=10.0.0.7, operation=ALL, permissionType=DENY)" in \
        first["ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"]
