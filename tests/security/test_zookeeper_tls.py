"""ZooKeeper over TLS as Kafka's brokers use it (`zookeeper.ssl.*`): Debian's ZooKeeper with only
a secureClientPort (Netty), its own PKCS12 keystore and truststore made here, and
ssl.clientAuth=need. A 3-broker cluster forms over it with TLS and the SASL login together
(zookeeper.set.acl), one broker giving the ZooKeeper client's JVM property names and PEM stores;
a broker with an untrusted CA or without a client certificate refuses to start, naming the
setting; every setting is checked or refused when the broker starts."""
from __future__ import annotations

import ssl
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("kazoo")
pytest.importorskip("puresasl", reason="pure-sasl is not installed (kazoo's SASL needs it)")
ck = pytest.importorskip("confluent_kafka")

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "cluster"), str(TESTS / "security")]

from pki import STORE_PASSWORD, Pki, issue  # noqa: E402
from seglog_cluster import SeglogCluster  # noqa: E402
from zookeeper_reference import ServerTls, running_zookeeper  # noqa: E402

from logcore.broker.config import BrokerConfig  # noqa: E402
from logcore.cluster.tls_handler import TlsHandler  # noqa: E402
from logcore.cluster.znode_acls import znode_acls  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.security.zookeeper_tls import NETTY_SOCKET, NIO_SOCKET, ZooKeeperTls  # noqa: E402

pytestmark = pytest.mark.timeout(240)
USER, PASSWORD = "kafka", "kafka-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("zk-pki"))


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory, pki):
    """One ZooKeeper: TLS only, client certificates required, SASL logins accepted."""
    probe = ssl.create_default_context(cafile=str(pki.ca_pem))
    probe.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    tls = ServerTls(pki.broker_p12, pki.truststore_p12, STORE_PASSWORD, probe)
    with running_zookeeper(tmp_path_factory.mktemp("zk-tls"), sasl_users={USER: PASSWORD}, tls=tls) as zk:
        yield zk


def tls_props(pki, **extra) -> dict[str, str]:
    return {"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": NETTY_SOCKET,
            "zookeeper.ssl.keystore.location": str(pki.client_p12),
            "zookeeper.ssl.keystore.password": STORE_PASSWORD,
            "zookeeper.ssl.truststore.location": str(pki.truststore_p12),
            "zookeeper.ssl.truststore.password": STORE_PASSWORD, **extra}


def client_jaas(path: Path) -> Path:
    path.write_text("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required"
                    f' username="{USER}" password="{PASSWORD}";\n}};\n')
    return path


def tls_kazoo(zk, pki):
    """A kazoo client of our own over TLS (the server has no plaintext port)."""
    from kazoo.client import KazooClient
    tls = ZooKeeperTls.from_props(tls_props(pki), cluster=True, where="test")
    client = KazooClient(hosts=zk.connect_string, timeout=5, handler=TlsHandler(tls, "test"))
    client.start(timeout=15)
    return client


def test_a_cluster_forms_over_tls_and_sasl(tmp_path, pki, tls_zookeeper):
    from kazoo.security import ACL, Id, Permissions
    props = {"java.security.auth.login.config": str(client_jaas(tmp_path / "jaas.conf")), "zookeeper.set.acl": "true"}
    # brokers 1, 2: Kafka's names and PKCS12 stores; broker 3: the ZooKeeper client's JVM property
    # names and PEM stores (its key encrypted with the keystore password, as ZooKeeper opens one)
    pem_keystore = pki.client.write_keystore_pem(tmp_path, "zk-client", password="pem-secret")
    jvm_names = {"zookeeper.client.secure": "true", "zookeeper.ssl.keyStore.location": str(pem_keystore),
                 "zookeeper.ssl.keyStore.password": "pem-secret", "zookeeper.ssl.trustStore.location": str(pki.ca_pem),
                 "zookeeper.ssl.hostnameVerification": "true", "zookeeper.ssl.enabledProtocols": "TLSv1.2,TLSv1.3"}
    per_broker = {1: tls_props(pki), 2: tls_props(pki), 3: jvm_names}
    hosts = tls_zookeeper.connect_string + "/tls"
    with SeglogCluster.running(tmp_path / "cluster", hosts, size=3, props=props, per_broker=per_broker) as cluster:
        cluster.create_topic("secured", partitions=1, rf=3)
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(20):
            producer.produce("secured", key=str(i).encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0
        del producer                                    # before the brokers go
        assert [v for _o, _k, v in cluster.read_partition("secured")] == [f"v{i}".encode() for i in range(20)]
        outsider = tls_kazoo(tls_zookeeper, pki)
        try:
            assert sorted(outsider.get_children("/tls/brokers/ids")) == ["1", "2", "3"]
            acls, _ = outsider.get_acls("/tls/brokers/topics/secured")
            # the brokers' SASL identity owns it (with the certificate's, which ZooKeeper adds
            # for a client-authenticated TLS session), everyone else reads
            assert ACL(Permissions.ALL, Id("sasl", USER)) in acls
            assert ACL(Permissions.ALL, Id("x509", "CN=alice,O=seglog tests")) in acls
            assert ACL(Permissions.READ, Id("world", "anyone")) in acls
        finally:
            outsider.stop()
            outsider.close()


def test_set_acl_with_the_certificate_as_the_only_identity(tmp_path, pki, tls_zookeeper):
    """Kafka's rule without a SASL login: the znodes belong to the certificate's subject, so
    brokers sharing it change them and a client with another subject only reads them."""
    from kazoo.exceptions import NoAuthError
    from kazoo.security import ACL, Id, Permissions

    from logcore.cluster.zookeeper_store import ZooKeeperStore
    config = BrokerConfig.from_props({"zookeeper.connect": tls_zookeeper.connect_string + "/x509",
                                      "zookeeper.set.acl": "true", **tls_props(pki)})
    assert config.security.zookeeper_login is None

    def store(tls):
        return ZooKeeperStore(config["zookeeper.connect"], session_timeout_ms=4000, connect_timeout_s=10,
                              acls=znode_acls(True), tls=tls).start()

    first, second = store(config.security.zookeeper_tls), store(config.security.zookeeper_tls)
    other_p12 = issue(pki.ca, "mallory", hosts=()).write_pkcs12(tmp_path, "mallory")
    other = store(_tls(pki, **{"zookeeper.ssl.keystore.location": str(other_p12)}))
    try:
        first.cluster_id()
        acls, _ = first.client.get_acls("/cluster/id")
        assert sorted(acls, key=str) == sorted([ACL(Permissions.ALL, Id("x509", "CN=alice,O=seglog tests")),
                                                ACL(Permissions.READ, Id("world", "anyone"))], key=str)
        second.client.set("/cluster/id", first.client.get("/cluster/id")[0])      # same subject: allowed
        assert other.client.get("/cluster/id")[0]
        with pytest.raises(NoAuthError):
            other.client.set("/cluster/id", b"{}")
    finally:
        for s in (first, second, other):
            s.close()


def _refused_start(tmp_path, zk, props: dict[str, str]) -> list[str]:
    """Start one broker per props (at once) and return each one's output after it exited."""
    clusters = [SeglogCluster(tmp_path / f"refused-{i}", zk.connect_string, size=1, props=p)
                for i, p in enumerate(props)]
    for c in clusters:
        c.brokers[1].start(wait=False)
    out = []
    for c in clusters:
        proc = c.brokers[1].proc
        try:
            assert proc.wait(60) != 0
        finally:
            c.close()
        out.append(c.brokers[1].log_text())
    return out


def test_a_broker_with_an_untrusted_ca_or_no_client_certificate_refuses_to_start(tmp_path, pki, tls_zookeeper):
    untrusted = tls_props(pki, **{"zookeeper.ssl.truststore.location": str(pki.other_ca_pem),
                                  "zookeeper.ssl.truststore.type": "PEM"})
    del untrusted["zookeeper.ssl.truststore.password"]
    no_cert = {k: v for k, v in tls_props(pki).items() if not k.startswith("zookeeper.ssl.keystore.")}
    logs = _refused_start(tmp_path, tls_zookeeper, [untrusted, no_cert])
    # refused at once (InvalidConfigError), not after the connect timeout (which would say so)
    assert not any("no ZooKeeper answered" in log for log in logs), logs
    assert "is not trusted by zookeeper.ssl.truststore.location=" + str(pki.other_ca_pem) in logs[0], logs[0]
    assert "it asks for a client certificate (ssl.clientAuth=need) and zookeeper.ssl.keystore.location is not set" \
        in logs[1], logs[1]


def test_a_client_certificate_of_another_ca_is_refused_by_name(tmp_path, pki, tls_zookeeper):
    from logcore.cluster.zookeeper_store import ZooKeeperStore
    rogue = issue(pki.other_ca, "rogue", hosts=()).write_pkcs12(tmp_path, "rogue")
    store = ZooKeeperStore(tls_zookeeper.connect_string, session_timeout_ms=4000, connect_timeout_s=10,
                           tls=_tls(pki, **{"zookeeper.ssl.keystore.location": str(rogue)}))
    with pytest.raises(InvalidConfigError, match="refused this broker's client certificate"
                                                 r" \(zookeeper.ssl.keystore.location=.*rogue.p12\)"):
        store.start()


def test_a_plaintext_client_of_a_tls_only_zookeeper_is_told_why(tls_zookeeper):
    from logcore.cluster.zookeeper_store import ZooKeeperStore
    from logcore.errors import CoordinatorUnavailableError
    store = ZooKeeperStore(tls_zookeeper.connect_string, session_timeout_ms=2000, connect_timeout_s=2)
    with pytest.raises(CoordinatorUnavailableError, match="set zookeeper.ssl.client.enable=true"):
        store.start()


BASE = {"zookeeper.connect": "127.0.0.1:2181"}


def _tls(pki, **extra):
    return BrokerConfig.from_props({**BASE, **tls_props(pki, **extra)}).security.zookeeper_tls


@pytest.mark.parametrize("props, message", [
    ({"zookeeper.ssl.client.enable": "true"}, "needs zookeeper.connect"),
    ({**BASE, "zookeeper.ssl.keystore.location": "/x.p12"},
     "zookeeper.ssl.keystore.location is set but TLS to ZooKeeper is off"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": NIO_SOCKET},
     "cannot do TLS"),
    ({**BASE, "zookeeper.clientCnxnSocket": "com.example.Sock"}, "must be org.apache.zookeeper.ClientCnxnSocketNetty"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.crl.enable": "true"},
     "zookeeper.ssl.crl.enable=true: certificate revocation checks are not supported"),
    ({**BASE, "zookeeper.client.secure": "true", "zookeeper.ssl.ocsp": "true"},
     "zookeeper.ssl.ocsp=true: certificate revocation checks are not supported"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.enabled.protocols": "TLSv1.1,TLSv1.2"},
     "TLSv1.1 is not allowed"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.protocol": "SSLv3"}, "must be TLSv1.2"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.endpoint.identification.algorithm": "LDAPS"},
     "must be HTTPS"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": "/k.jks"},
     "is a JKS store, which seglog cannot read"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": "/k.store"},
     "set zookeeper.ssl.keystore.type"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.password": "x"},
     "zookeeper.ssl.truststore.password is set without zookeeper.ssl.truststore.location"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.set.acl": "true"},
     "needs the brokers' ZooKeeper login.*or give ZooKeeper a TLS client certificate"),
    ({**BASE, "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": "/nonexistent.p12"},
     "zookeeper.ssl.keystore.location=/nonexistent.p12: cannot read it"),
])
def test_settings_refused(props, message):
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props(props)


def test_store_and_suite_refusals_name_the_zookeeper_setting(tmp_path, pki):
    with pytest.raises(InvalidConfigError, match="a wrong zookeeper.ssl.keystore.password"):
        _tls(pki, **{"zookeeper.ssl.keystore.password": "wrong"})
    with pytest.raises(InvalidConfigError, match=r"private key of .*zookeeper.ssl.keystore.location=.*"
                                                 r"\(a wrong zookeeper.ssl.keystore.password"):
        _tls(pki, **{"zookeeper.ssl.keystore.location": str(pki.client.write_keystore_pem(tmp_path, "enc", "right")),
                     "zookeeper.ssl.keystore.password": "wrong"})
    # a plain PEM key with a keystore password (as ZooKeeper takes one) opens
    assert _tls(pki, **{"zookeeper.ssl.keystore.location": str(pki.client.write_keystore_pem(tmp_path, "plain")),
                        "zookeeper.ssl.keystore.password": "unused"}).has_keystore
    with pytest.raises(InvalidConfigError, match="zookeeper.ssl.cipher.suites: TLS_NOPE is not a cipher suite"):
        _tls(pki, **{"zookeeper.ssl.cipher.suites": "TLS_NOPE", "zookeeper.ssl.enabled.protocols": "TLSv1.2"})
    with pytest.raises(InvalidConfigError, match="names only some TLS 1.3 suites"):
        _tls(pki, **{"zookeeper.ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                     "zookeeper.ssl.protocol": "TLS"})
    with pytest.raises(InvalidConfigError, match="names no TLS 1.3 suite while TLSv1.3 is enabled"):
        _tls(pki, **{"zookeeper.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                     "zookeeper.ssl.enabled.protocols": "TLSv1.3"})


def test_settings_do_what_they_say(pki):
    # Kafka's defaults: TLSv1.2 only, host names checked
    default = _tls(pki)
    context = default.context()
    assert default.versions == ("TLSv1.2",) and context.check_hostname
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_2
    both = _tls(pki, **{"zookeeper.ssl.protocol": "TLS"}).context()
    assert (both.minimum_version, both.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert not _tls(pki, **{"zookeeper.ssl.endpoint.identification.algorithm": ""}).context().check_hostname
    # the JVM property names, and Kafka's name winning over them
    assert not _tls(pki, **{"zookeeper.ssl.hostnameVerification": "false"}).check_hostname
    assert _tls(pki, **{"zookeeper.ssl.hostnameVerification": "false",
                        "zookeeper.ssl.endpoint.identification.algorithm": "HTTPS"}).check_hostname
    suites = _tls(pki, **{"zookeeper.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}).context()
    assert [c["name"] for c in suites.get_ciphers() if c["protocol"] == "TLSv1.2"] == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    assert BrokerConfig.from_props({**BASE, "zookeeper.clientCnxnSocket": NETTY_SOCKET}).security.zookeeper_tls is None


def test_the_documented_tls_zoo_cfg_is_the_one_running(tls_zookeeper):
    """docs/cluster.md's TLS zoo.cfg sets what this module's ZooKeeper runs with (paths, ports
    and addresses aside): a Netty secureClientPort, the stores, client certificates required,
    and no plaintext clientPort."""
    import re
    doc = (TESTS.parent / "docs" / "cluster.md").read_text()
    block = next(b for b in re.findall(r"```\n(.*?)```", doc, flags=re.S) if b.startswith("# zoo.cfg: TLS"))
    documented = dict(line.split("=", 1) for line in block.splitlines() if line and not line.startswith("#"))
    running = dict(line.split("=", 1) for line in tls_zookeeper.nodes[0].cfg.read_text().splitlines() if line)
    tls_keys = {k for k in running if k.startswith(("ssl.", "secureClient", "serverCnxnFactory"))}
    assert tls_keys <= set(documented) and "clientPort" not in documented and "clientPort" not in running
    for key in ("serverCnxnFactory", "ssl.clientAuth"):
        assert documented[key] == running[key]


class OneShotTlsServer:
    """A TLS server on 127.0.0.1 (Python's ssl) that accepts one connection and sends `payload`
    in one write (one TLS record), then waits for the client to close."""

    def __init__(self, issued, payload: bytes):
        import socket
        import threading
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(*[str(p) for p in issued])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.payload = payload
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            raw, _ = self.listener.accept()
            with self.context.wrap_socket(raw, server_side=True) as conn:
                conn.sendall(self.payload)
                conn.recv(1)
        except (OSError, ssl.SSLError):
            pass
        finally:
            self.listener.close()


def test_decrypted_bytes_waiting_in_the_tls_buffer_count_as_readable(tmp_path, pki):
    """kazoo reads one response at a time and then selects on the raw socket: a second response
    in the same TLS record must not wait for the next packet."""
    server = OneShotTlsServer(pki.broker.write_pem(tmp_path, "server"), b"first|second")
    tls = _tls(pki, **{"zookeeper.ssl.truststore.location": str(pki.ca_pem), "zookeeper.ssl.truststore.type": "PEM"})
    handler = TlsHandler(tls, "test")
    conn = handler.create_connection(("127.0.0.1", server.port), hostname="127.0.0.1", timeout=5)
    try:
        assert handler.select([conn], [], [], 5)[0] == [conn]
        assert conn.recv(6) == b"first|"
        started = time.monotonic()
        assert handler.select([conn], [], [], 5)[0] == [conn]        # nothing more on the wire
        assert time.monotonic() - started < 1 and conn.recv(100) == b"second"
    finally:
        conn.close()


def test_a_server_certificate_for_another_host_is_refused_by_name(tmp_path, pki):
    elsewhere = issue(pki.ca, "zk", hosts=("zk.example",))
    server = OneShotTlsServer(elsewhere.write_pem(tmp_path, "elsewhere"), b"")
    handler = TlsHandler(_tls(pki), "test")
    with pytest.raises(ssl.SSLCertVerificationError):
        handler.create_connection(("127.0.0.1", server.port), hostname="127.0.0.1", timeout=5)
    assert "does not name that host" in handler.failure(1) and "HTTPS" in handler.failure(1)
    # with the check off, the same certificate is accepted (its chain is still verified)
    server = OneShotTlsServer(elsewhere.write_pem(tmp_path, "elsewhere"), b"x")
    unchecked = TlsHandler(_tls(pki, **{"zookeeper.ssl.endpoint.identification.algorithm": ""}), "test")
    conn = unchecked.create_connection(("127.0.0.1", server.port), hostname="127.0.0.1", timeout=5)
    try:
        assert conn.recv(1) == b"x"
    finally:
        conn.close()


def test_the_session_reconnects_over_tls_after_zookeeper_restarts(pki, tls_zookeeper):
    """Last in this module: it restarts the module's ZooKeeper."""
    from logcore.cluster.zookeeper_store import ZooKeeperStore
    store = ZooKeeperStore(tls_zookeeper.connect_string, session_timeout_ms=6000, connect_timeout_s=10,
                           tls=_tls(pki)).start()
    try:
        node = tls_zookeeper.nodes[0]
        node.stop()
        node.start()
        tls_zookeeper.wait_serving()
        deadline = time.monotonic() + 20
        while not store.connected and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.connected and store.cluster_id()
    finally:
        store.close()
