"""ACLs on a three-broker seglog cluster: written through one broker, kept in ZooKeeper as Kafka's
AclAuthorizer keeps them (/kafka-acl, /kafka-acl-extended/prefixed and their change
notifications), and enforced by every broker (each watches the notifications and caches).

The brokers run with allow.everyone.if.no.acl.found=true: until SASL lands every connection is
User:ANONYMOUS, the brokers' own included, and the cluster resource has no ACL, so replication
(CLUSTER_ACTION) goes on while the topic's ACLs are enforced."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("kazoo")

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "cluster"))
# zk_server, zk_hosts, zk_client: the session's ZooKeeper (tests/conftest.py)

from seglog_cluster import SeglogCluster  # noqa: E402

from logcore.tools.cli import main  # noqa: E402
from logcore.wire.api_keys import FETCH  # noqa: E402
from logcore.wire.client import KafkaConnection  # noqa: E402
from logcore.wire.error_codes import TOPIC_AUTHORIZATION_FAILED  # noqa: E402

pytestmark = [pytest.mark.soak, pytest.mark.timeout(300)]   # a 3-broker cluster, ~30 s: -m soak (one broker: test_acls_table.py, test_acls_cli.py)
PROPS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}


def fetch_error(address: str, topic: str) -> int:
    host, port = address.rsplit(":", 1)
    conn = KafkaConnection(host, int(port), timeout_s=10).connect()
    try:
        body = conn.request(FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}, 12)
        return body.responses[0].partitions[0].error_code
    finally:
        conn.close()


def every_broker(cluster, topic: str, refused: bool, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        codes = {b.id: fetch_error(b.address, topic) for b in cluster.brokers.values()}
        if all((c == TOPIC_AUTHORIZATION_FAILED) == refused for c in codes.values()):
            return
        assert time.monotonic() < deadline, f"brokers' Fetch answers: {codes} (refused expected: {refused})"
        time.sleep(0.2)


def test_acls_in_zookeeper_enforced_by_every_broker(tmp_path, zk_hosts, zk_client):
    with SeglogCluster.running(tmp_path, zk_hosts, props=PROPS) as cluster:
        cluster.create_topic("secret", partitions=1, rf=3)
        one, two = (cluster.brokers[i].address for i in (1, 2))
        every_broker(cluster, "secret", refused=False)
        assert main(["acls", "--bootstrap-server", one, "--add", "--deny-principal", "User:ANONYMOUS",
                     "--operation", "Read", "--topic", "secret"]) == 0
        assert main(["acls", "--bootstrap-server", one, "--add", "--allow-principal", "User:ANONYMOUS",
                     "--operation", "Write", "--topic", "sec", "--resource-pattern-type", "prefixed"]) == 0
        # Kafka's znodes and change notifications
        raw, _ = zk_client.get("/kafka-acl/Topic/secret")
        assert json.loads(raw) == {"version": 1, "acls": [
            {"principal": "User:ANONYMOUS", "permissionType": "Deny", "operation": "Read", "host": "*"}]}
        raw, _ = zk_client.get("/kafka-acl-extended/prefixed/Topic/sec")
        assert json.loads(raw)["acls"] == [
            {"principal": "User:ANONYMOUS", "permissionType": "Allow", "operation": "Write", "host": "*"}]
        literal = zk_client.get_children("/kafka-acl-changes")
        assert [n[:12] for n in literal] == ["acl_changes_"]
        assert zk_client.get(f"/kafka-acl-changes/{literal[0]}")[0] == b"TOPIC:secret"
        extended = zk_client.get_children("/kafka-acl-extended-changes")
        assert json.loads(zk_client.get(f"/kafka-acl-extended-changes/{extended[0]}")[0]) == {
            "version": 1, "resourceType": "TOPIC", "name": "sec", "patternType": "PREFIXED"}
        # every broker refuses the read; writes (the prefixed ALLOW) and replication go on
        every_broker(cluster, "secret", refused=True)
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce("secret", b"still writable")
        assert producer.flush(30) == 0
        del producer
        # the DENY removed through another broker: still refused, the prefixed ALLOW (of WRITE only)
        # names the topic; with it removed too no ACL names it and every broker serves the read
        assert main(["acls", "--bootstrap-server", two, "--remove", "--force", "--topic", "secret"]) == 0
        assert not zk_client.exists("/kafka-acl/Topic/secret")
        every_broker(cluster, "secret", refused=True, timeout=2)
        assert main(["acls", "--bootstrap-server", cluster.brokers[3].address, "--remove", "--force",
                     "--topic", "sec", "--resource-pattern-type", "prefixed"]) == 0
        every_broker(cluster, "secret", refused=False)
