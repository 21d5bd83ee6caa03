"""ZooKeeper authentication and znode ACLs as Kafka's brokers do them: a ZooKeeper accepting SASL
DIGEST-MD5 logins (a server JAAS file), brokers logging in with a JAAS file's Client section and
`zookeeper.set.acl=true`. The brokers form a cluster and change their metadata; a client without
a login may read it but change nothing, and cannot read /config/brokers at all (Kafka's
sensitive paths); a wrong password or a missing login is refused with a clear error."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("kazoo")
pytest.importorskip("puresasl", reason="pure-sasl is not installed (kazoo's SASL needs it)")
ck = pytest.importorskip("confluent_kafka")

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "cluster")]

from seglog_cluster import SeglogCluster  # noqa: E402
from zookeeper_reference import running_zookeeper  # noqa: E402

from logcore.broker.config import BrokerConfig  # noqa: E402
from logcore.cluster.znode_acls import SECURE  # noqa: E402
from logcore.cluster.zookeeper_store import ZooKeeperStore  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.security.zookeeper_login import ZooKeeperLogin  # noqa: E402

pytestmark = pytest.mark.timeout(240)
USER, PASSWORD = "kafka", "kafka-secret"


def client_jaas(path: Path, password: str = PASSWORD, extra: str = "") -> Path:
    path.write_text("// the brokers' ZooKeeper login\nClient {\n"
                    f'  org.apache.zookeeper.server.auth.DigestLoginModule required username="{USER}"'
                    f' password="{password}";\n}};\n{extra}')
    return path


@pytest.fixture(scope="module")
def sasl_zookeeper(tmp_path_factory):
    with running_zookeeper(tmp_path_factory.mktemp("zk-sasl"), sasl_users={USER: PASSWORD}) as zk:
        yield zk


def anonymous(zk):
    from kazoo.client import KazooClient
    c = KazooClient(hosts=zk.connect_string, timeout=5)
    c.start(timeout=15)
    return c


def test_brokers_log_in_and_only_they_change_the_metadata(tmp_path, sasl_zookeeper):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import ACL, Id, Permissions
    hosts = sasl_zookeeper.connect_string + "/secured"      # created by the brokers, as Kafka's do
    props = {"java.security.auth.login.config": str(client_jaas(tmp_path / "jaas.conf")),
             "zookeeper.set.acl": "true"}
    with SeglogCluster.running(tmp_path / "cluster", hosts, size=2, props=props) as cluster:
        cluster.create_topic("guarded", partitions=2, rf=2, config={"retention.ms": "3600000"})
        outsider = anonymous(sasl_zookeeper)
        try:
            root = "/secured"
            # readable by all ...
            assert sorted(outsider.get_children(f"{root}/brokers/ids")) == ["1", "2"]
            assert b'"partitions"' in outsider.get(f"{root}/brokers/topics/guarded")[0]
            assert b"retention.ms" in outsider.get(f"{root}/config/topics/guarded")[0]
            for path in (root, f"{root}/brokers/ids/1", f"{root}/brokers/topics/guarded/partitions/0/state"):
                acls, _ = outsider.get_acls(path)
                assert sorted(acls, key=str) == sorted([ACL(Permissions.ALL, Id("sasl", USER)),
                                                        ACL(Permissions.READ, Id("world", "anyone"))], key=str), path
            # ... writable only by the brokers' login
            for attempt in (lambda: outsider.delete(f"{root}/brokers/ids/1"),
                            lambda: outsider.set(f"{root}/brokers/topics/guarded", b"{}"),
                            lambda: outsider.create(f"{root}/brokers/ids/99", b"{}"),
                            lambda: outsider.create(f"{root}/config/topics/evil", b"{}"),
                            lambda: outsider.set(f"{root}/config/topics/guarded", b"{}"),
                            lambda: outsider.delete(f"{root}/controller"),
                            lambda: outsider.create(f"{root}/admin/delete_topics/guarded")):
                with pytest.raises(NoAuthError):
                    attempt()
            assert outsider.exists(f"{root}/controller") and len(outsider.get_children(f"{root}/brokers/ids")) == 2
            # Kafka's sensitive roots: not even readable
            with pytest.raises(NoAuthError):
                outsider.get_children(f"{root}/config/brokers")
        finally:
            outsider.stop()
            outsider.close()
        # the brokers themselves still change it: a deletion goes through /admin and the controller
        cluster.admin().delete_topics(["guarded"], request_timeout=30)["guarded"].result(30)
        cluster.wait_for(lambda: "guarded" not in cluster.admin().list_topics(timeout=10).topics, 30,
                         "the deletion of guarded")


def test_a_wrong_password_fails_the_start_clearly(tmp_path, sasl_zookeeper):
    login = ZooKeeperLogin.from_file(str(client_jaas(tmp_path / "bad.conf", password="nope")), "Client", "test")
    store = ZooKeeperStore(sasl_zookeeper.connect_string, session_timeout_ms=4000, connect_timeout_s=10,
                           login=login, acls=SECURE)
    with pytest.raises(InvalidConfigError, match="refused the SASL DIGEST-MD5 login of user 'kafka'"):
        store.start()


@pytest.mark.parametrize("props, message", [
    ({"zookeeper.set.acl": "true"}, "zookeeper.set.acl=true needs the brokers' ZooKeeper login"),
    ({"java.security.auth.login.config": "/nonexistent/jaas.conf"}, "cannot be read"),
    ({"zookeeper.sasl.clientconfig": "Other"}, "which is not set"),
])
def test_settings_refused(props, message):
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props({"zookeeper.connect": "127.0.0.1:2181", **props})


def test_jaas_file_refusals(tmp_path):
    base = {"zookeeper.connect": "127.0.0.1:2181"}
    server = 'KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b"; };'
    with pytest.raises(InvalidConfigError, match="KafkaServer are not read by seglog"):
        BrokerConfig.from_props({**base, "java.security.auth.login.config": str(client_jaas(tmp_path / "a", extra=server))})
    kerberos = tmp_path / "k"
    kerberos.write_text("Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };")
    with pytest.raises(InvalidConfigError, match="Kerberos and other login modules are not supported"):
        BrokerConfig.from_props({**base, "java.security.auth.login.config": str(kerberos)})
    with pytest.raises(InvalidConfigError, match="no section Other"):
        BrokerConfig.from_props({**base, "java.security.auth.login.config": str(client_jaas(tmp_path / "c")),
                                 "zookeeper.sasl.clientconfig": "Other"})
    with pytest.raises(InvalidConfigError, match="needs zookeeper.connect"):
        BrokerConfig.from_props({"zookeeper.set.acl": "false"})
    config = BrokerConfig.from_props({**base, "java.security.auth.login.config": str(client_jaas(tmp_path / "d")),
                                      "zookeeper.set.acl": "true"})
    assert config.security.zookeeper_login.sasl_options() == {"mechanism": "DIGEST-MD5", "username": USER,
                                                              "password": PASSWORD}
    assert PASSWORD not in repr(config.security.zookeeper_login)


def test_a_login_refused_on_reconnecting_is_logged(tmp_path, sasl_zookeeper, caplog):
    """The servers stop accepting the broker's password (rotated there first): kazoo gives up
    reconnecting, and the session says why instead of reporting a plain expiry. Last in this
    module: it restarts the module's ZooKeeper with the old password back."""
    import logging
    import time

    from zookeeper_reference import server_jaas
    login = ZooKeeperLogin.from_file(str(client_jaas(tmp_path / "jaas.conf")), "Client", "test")
    store = ZooKeeperStore(sasl_zookeeper.connect_string, session_timeout_ms=4000, connect_timeout_s=10,
                           login=login, acls=SECURE)
    store.start()
    node = sasl_zookeeper.nodes[0]
    try:
        with caplog.at_level(logging.ERROR, logger="logcore.cluster.zookeeper_session"):
            node.stop()
            node.jaas.write_text(server_jaas({USER: "rotated"}))
            node.start()
            sasl_zookeeper.wait_serving()
            deadline = time.monotonic() + 20
            while "refused the SASL login of user 'kafka'" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.1)
        assert "refused the SASL login of user 'kafka'" in caplog.text and "on reconnecting" in caplog.text
        assert not store.connected
    finally:
        store.close()
        node.stop()
        node.jaas.write_text(server_jaas({USER: PASSWORD}))
        node.start()
        sasl_zookeeper.wait_serving()
