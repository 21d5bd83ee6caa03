"""A `seglog broker` with every kind of listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, client
certificates required, re-authentication, an expired certificate) for the security tests, and the
JAAS and SCRAM helpers they share (conftest.py makes the fixtures)."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "kafka_clients")]

import broker_spawner  # noqa: E402
from broker_process import listening_line, subprocess_env  # noqa: E402
from pki import STORE_PASSWORD, Pki  # noqa: E402

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USERS = {"scram256": ("SCRAM-SHA-256", "s256-secret"), "scram512": ("SCRAM-SHA-512", "s512-secret")}
REAUTH_MS = 3000
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def jaas(module: str, **options) -> str:
    return module + " required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


class SecureBroker:
    def __init__(self, proc, endpoints: dict[str, tuple[str, int]], log: Path, root: Path):
        self.proc = proc
        self.endpoints = endpoints
        self.log = log
        self.root = root

    def bootstrap(self, listener: str) -> str:
        host, port = self.endpoints[listener]
        return f"{host}:{port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def broker_props(pki: Pki, root: Path) -> dict[str, str]:
    return {
        "listeners": ",".join(f"{n}://127.0.0.1:0" for n in
                              ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "MTLS", "REAUTH", "EXPIRED")),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,MTLS:SSL,REAUTH:SASL_PLAINTEXT,EXPIRED:SSL",
        "log.dirs": str(root), "node.id": "0", "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker_p12),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        # the MTLS listener: client certificates required, its own (PEM) keystore
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.location": str(pki.broker_pem),
        "sasl.jaas.config": jaas(PLAIN_MODULE, **{f"user_{u}": p for u, p in PLAIN_USERS.items()}),
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        # a listener whose certificate has expired
        "listener.name.expired.ssl.keystore.type": "PEM",
        "listener.name.expired.ssl.keystore.location": str(pki.expired_pem),
    }


def start_broker(folder: Path, props: dict[str, str]) -> SecureBroker:
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "broker.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    log = folder / "broker.stderr"
    with open(log, "wb") as err:
        proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                                    stdout=subprocess.PIPE, stderr=err, env=subprocess_env(), cwd=folder)
    text = listening_line(proc, 60)
    if "listening on " not in text:
        proc.kill()
        proc.wait()
        pytest.fail(f"broker did not start: {text!r}\n{log.read_text(errors='replace')[-3000:]}")
    endpoints = {}
    for ep in text.split("listening on ", 1)[1].split(","):
        name, address = ep.split("://")
        host, port = address.rsplit(":", 1)
        endpoints[name] = (host, int(port))
    return SecureBroker(proc, endpoints, log, Path(props["log.dirs"]))


def add_scram_users(bootstrap: str, users=SCRAM_USERS) -> None:
    """Create SCRAM credentials with AlterUserScramCredentials (seglog's client)."""
    import os as _os

    from logcore.security.scram_credential import MECHANISMS, salted_password
    from logcore.wire.client import bootstrap as connect
    upserts = []
    for user, (mechanism, password) in users.items():
        salt = _os.urandom(16)
        upserts.append({"name": user, "mechanism": MECHANISMS[mechanism][1], "iterations": 4096, "salt": salt,
                        "salted_password": salted_password(password, salt, 4096, mechanism)})
    with connect(bootstrap) as conn:
        body = conn.request(51, {"deletions": [], "upsertions": upserts})
    assert all(r.error_code == 0 for r in body.results), body
