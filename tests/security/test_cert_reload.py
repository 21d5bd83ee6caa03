"""A TLS listener's keystore replaced without a restart through a dynamic broker config
(`listener.name.<l>.ssl.keystore.*`, Kafka's form): validated first (a wrong password, a missing
file, an expired certificate, another subject or other alternative names, the cluster default,
no listener prefix, a listener without TLS: each refused, the old keystore still serving), then
new connections get the new certificate while an open connection goes on; a new truststore
admits a new CA's clients; the inter-broker listener takes a new CA's certificate only once its
truststore trusts that CA; Kafka's own kafka-configs does it too, and the changes survive a
restart."""
from __future__ import annotations

import json
import socket
import ssl
import struct

import pytest

from kafka_reference import KafkaUnavailable, kafka_unavailable, resolve_jars
from pki import STORE_PASSWORD, issue, make_ca
from secure_broker import start_broker
from logcore.errors import SegLogError
from logcore.tools.config_admin import ConfigAdmin
from logcore.wire.config_resources import BROKER_RESOURCE, OP_SET

PREFIX = "listener.name.ssl."


def _props(pki, root) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,INTERNAL:SSL",
            # the inter-broker listener: its new stores must be accepted by brokers on its old ones
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.ssl.truststore.type": "PEM",
            "listener.name.internal.ssl.truststore.location": str(pki.ca_pem),
            # client certificates required, trusted by the first CA only (until the truststore changes)
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.truststore.location": str(pki.ca_pem),
            "log.dirs": str(root), "node.id": "0", "num.partitions": "1",
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker_p12),
            "ssl.keystore.password": STORE_PASSWORD}


@pytest.fixture(scope="module")
def reload_broker(tmp_path_factory, pki):
    base = tmp_path_factory.mktemp("cert-reload")
    props = _props(pki, base / "logs")
    broker = start_broker(base / "first", props)
    holder = {"broker": broker, "base": base, "props": props}
    try:
        yield holder
    finally:
        holder["broker"].stop()


@pytest.fixture(scope="module")
def new_ca(tmp_path_factory):
    folder = tmp_path_factory.mktemp("new-ca")
    ca = make_ca("the new CA")
    (folder / "ca.crt").write_bytes(ca.cert_pem())
    return ca, folder


class TlsConnection:
    """A TLS connection trusting only `cafile` that sends ApiVersions v0 requests."""

    def __init__(self, address: tuple[str, int], cafile, client=None):
        """`client`: (certificate, key) files offered for client auth."""
        context = ssl.create_default_context(cafile=str(cafile))
        if client is not None:
            context.load_cert_chain(str(client[0]), str(client[1]))
        raw = socket.create_connection(address, timeout=10)
        try:
            self.sock = context.wrap_socket(raw, server_hostname=address[0])
        except BaseException:
            raw.close()
            raise
        self.correlation = 0
        self.issuer = dict(x[0] for x in self.sock.getpeercert()["issuer"])["commonName"]

    def api_versions(self) -> int:
        self.correlation += 1
        client = b"reload-test"
        body = struct.pack(">hhih", 18, 0, self.correlation, len(client)) + client
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", self._read(4))[0]
        reply = self._read(size)
        correlation, error = struct.unpack(">ih", reply[:6])
        assert correlation == self.correlation
        return error

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def _refused(bootstrap: str, entity: str, changes: dict[str, str]) -> str:
    with ConfigAdmin(bootstrap) as admin:
        with pytest.raises(SegLogError) as err:
            admin.incremental_alter(BROKER_RESOURCE, entity, [(k, OP_SET, v) for k, v in changes.items()])
    return str(err.value)


def _set(bootstrap: str, changes: dict[str, str]) -> None:
    with ConfigAdmin(bootstrap) as admin:
        admin.incremental_alter(BROKER_RESOURCE, "0", [(k, OP_SET, v) for k, v in changes.items()])


def _keystore(issued, folder, name, password=STORE_PASSWORD) -> dict[str, str]:
    path = issued.write_pkcs12(folder, name, password)
    return {PREFIX + "ssl.keystore.location": str(path), PREFIX + "ssl.keystore.password": STORE_PASSWORD}


def test_invalid_keystores_are_refused_and_the_old_one_serves(reload_broker, pki, new_ca):
    broker = reload_broker["broker"]
    ca, folder = new_ca
    plain, tls = broker.bootstrap("PLAINTEXT"), broker.endpoints["SSL"]
    cases = {
        "wrong password": ("0", _keystore(issue(ca, "broker"), folder, "wrong-pw", password="not-it"),
                           "wrong ssl.keystore.password"),
        "missing file": ("0", {PREFIX + "ssl.keystore.location": str(folder / "nowhere.p12"),
                               PREFIX + "ssl.keystore.password": STORE_PASSWORD}, "cannot read it"),
        "expired": ("0", _keystore(issue(ca, "broker", expired=True), folder, "expired"), "expired on"),
        "other subject": ("0", _keystore(issue(ca, "someone else"), folder, "other-dn"),
                          "Keystore DistinguishedName does not match"),
        "other names": ("0", _keystore(issue(ca, "broker", hosts=("127.0.0.1",)), folder, "other-san"),
                        "Keystore SubjectAltNames do not match"),
        "cluster default": ("", _keystore(issue(ca, "broker"), folder, "default"),
                            "broker id must be specified"),
        "no listener prefix": ("0", {"ssl.keystore.location": str(pki.broker_p12)}, "only per-listener"),
        "plaintext listener": ("0", {"listener.name.plaintext.ssl.keystore.location": str(pki.broker_p12)},
                               "PLAINTEXT is not a TLS listener"),
        "static setting": ("0", {PREFIX + "ssl.client.auth": "required"}, "Cannot update these configs dynamically"),
        "bad type": ("0", {PREFIX + "ssl.keystore.type": "JKS"}, "must be PEM or PKCS12"),
    }
    for what, (entity, changes, expected) in cases.items():
        message = _refused(plain, entity, changes)
        assert expected in message, (what, message)
    conn = TlsConnection(tls, pki.ca_pem)          # the first CA's certificate still serves
    assert conn.issuer == "seglog test CA" and conn.api_versions() == 0
    conn.close()
    path = broker.root / "seglog-broker-configs.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    assert not any(k.startswith(PREFIX) for k in stored.get("brokers", {}).get("0", {}))


def test_new_keystore_serves_new_connections_while_open_ones_go_on(reload_broker, pki, new_ca):
    broker = reload_broker["broker"]
    ca, folder = new_ca
    tls = broker.endpoints["SSL"]
    with pytest.raises(ssl.SSLCertVerificationError):
        TlsConnection(tls, folder / "ca.crt")       # the new CA is not the one serving yet
    old = TlsConnection(tls, pki.ca_pem)
    assert old.api_versions() == 0
    _set(broker.bootstrap("PLAINTEXT"), _keystore(issue(ca, "broker"), folder, "broker-new"))
    fresh = TlsConnection(tls, folder / "ca.crt")
    assert fresh.issuer == "the new CA" and fresh.api_versions() == 0
    with pytest.raises(ssl.SSLCertVerificationError):
        TlsConnection(tls, pki.ca_pem)
    assert old.api_versions() == 0                  # the open connection goes on
    old.close()
    fresh.close()
    stored = json.loads((broker.root / "seglog-broker-configs.json").read_text())
    assert stored["brokers"]["0"][PREFIX + "ssl.keystore.location"].endswith("broker-new.p12")


def test_new_truststore_admits_clients_of_the_new_ca(reload_broker, pki, new_ca):
    broker = reload_broker["broker"]
    ca, folder = new_ca
    mtls = broker.endpoints["MTLS"]
    newcomer = issue(ca, "bob", hosts=()).write_pem(folder, "bob")
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        TlsConnection(mtls, pki.ca_pem, newcomer).api_versions()     # TLS 1.3: refused at the first read
    old = TlsConnection(mtls, pki.ca_pem, (pki.client_cert, pki.client_key))
    assert old.api_versions() == 0
    both = folder / "both-cas.crt"
    both.write_bytes(pki.ca_pem.read_bytes() + (folder / "ca.crt").read_bytes())
    _set(broker.bootstrap("PLAINTEXT"), {"listener.name.mtls.ssl.truststore.location": str(both)})
    conn = TlsConnection(mtls, pki.ca_pem, newcomer)
    assert conn.api_versions() == 0
    conn.close()
    assert old.api_versions() == 0
    old.close()


def test_inter_broker_listener_rotates_its_ca_in_two_steps(reload_broker, pki, new_ca):
    """Kafka's rule for the inter-broker listener: a certificate of a new CA is refused while the
    truststore (the other brokers') does not trust that CA; trusted first, it is then accepted."""
    broker = reload_broker["broker"]
    ca, folder = new_ca
    plain = broker.bootstrap("PLAINTEXT")
    internal = "listener.name.internal."
    keystore = {internal + k.removeprefix(PREFIX): v
                for k, v in _keystore(issue(ca, "broker"), folder, "internal-new").items()}
    message = _refused(plain, "0", keystore)
    assert "the current truststore does not trust the new certificate" in message, message
    both = folder / "internal-cas.crt"
    both.write_bytes(pki.ca_pem.read_bytes() + (folder / "ca.crt").read_bytes())
    _set(plain, {internal + "ssl.truststore.location": str(both)})
    _set(plain, keystore)
    conn = TlsConnection(broker.endpoints["INTERNAL"], folder / "ca.crt")
    assert conn.issuer == "the new CA" and conn.api_versions() == 0
    conn.close()


def test_kafka_configs_tool_sets_a_pem_keystore_that_survives_a_restart(reload_broker, new_ca):
    try:
        jars = resolve_jars()
    except (KafkaUnavailable, OSError) as exc:
        kafka_unavailable(str(exc))
    broker = reload_broker["broker"]
    ca, folder = new_ca
    pem = issue(ca, "broker").write_keystore_pem(folder, "broker-pem")
    run = jars.run_tool("kafka.admin.ConfigCommand", [
        "--bootstrap-server", broker.bootstrap("PLAINTEXT"), "--entity-type", "brokers", "--entity-name", "0",
        "--alter", "--add-config", f"{PREFIX}ssl.keystore.type=PEM,{PREFIX}ssl.keystore.location={pem}",
        "--delete-config", f"{PREFIX}ssl.keystore.password"])
    assert run.returncode == 0, run.stderr[-2000:]
    conn = TlsConnection(broker.endpoints["SSL"], folder / "ca.crt")
    assert conn.api_versions() == 0
    conn.close()
    broker.stop()
    # restarted on the same root: the persisted dynamic keystore is the one served
    restarted = start_broker(reload_broker["base"] / "second", reload_broker["props"])
    reload_broker["broker"] = restarted
    for listener in ("SSL", "INTERNAL"):       # INTERNAL: its two steps taken together at start
        conn = TlsConnection(restarted.endpoints[listener], folder / "ca.crt")
        assert conn.issuer == "the new CA" and conn.api_versions() == 0
        conn.close()
    assert "ERROR" not in restarted.log_text()


def test_offline_configs_refuse_store_settings(tmp_path, capsys):
    """`seglog configs <root>` on a stopped broker cannot check stores against the listener: refused."""
    from logcore.tools.cli import main
    root = tmp_path / "root"
    assert main(["topics", "--root", str(root), "--create", "--topic", "t", "--partitions", "1"]) == 0
    code = main(["configs", str(root), "--entity-type", "brokers", "--entity-name", "0", "--alter",
                 "--add-config", PREFIX + "ssl.keystore.location=/any.p12"])
    assert code != 0 and "changed through the running broker" in capsys.readouterr().err
    assert not (root / "seglog-broker-configs.json").exists()


def test_inter_broker_client_side_follows_the_listener_stores(pki, new_ca):
    """The broker's own connections to the others (ClientTls) take the inter-broker listener's new
    truststore too: a peer already on the new CA's certificate is then trusted."""
    from logcore.security.tls_context import ClientTls, ServerTls, handshake_in_memory, server_context
    from logcore.security.tls_reconfiguration import ListenerTlsUpdates
    ca, folder = new_ca
    settings = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker_p12),
                "ssl.keystore.password": STORE_PASSWORD, "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(pki.ca_pem)}
    client = ClientTls(settings, "test")
    updates = ListenerTlsUpdates({"INTERNAL": ServerTls(settings, "test")}, "INTERNAL", client)
    peer = server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": STORE_PASSWORD,
                           "ssl.keystore.location": str(issue(ca, "broker").write_pkcs12(folder, "peer"))}, "peer")
    with pytest.raises(ssl.SSLError):
        handshake_in_memory(client.context, peer)
    both = folder / "client-side-cas.crt"
    both.write_bytes(pki.ca_pem.read_bytes() + (folder / "ca.crt").read_bytes())
    layer = {"listener.name.internal.ssl.truststore.location": str(both)}
    updates.check(layer)
    updates.apply(layer)
    handshake_in_memory(client.context, peer)
