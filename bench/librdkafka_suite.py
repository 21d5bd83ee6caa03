"""librdkafka's own integration suite (the C and C++ tests under its `tests/` folder) against
Apache Kafka (the reference), one `seglog broker` and a three-broker seglog cluster, as a table
test -> PASSED / FAILED / SKIPPED per server. A long run (minutes per server), not part of pytest.

    python bench/librdkafka_suite.py [--version 2.15.0] [--targets kafka,kafka3,seglog,seglog3]
        [--tests 0001,0012,0103,...|general|transactions|all] [--seglog-tree DIR]
        [--scenario default|noautocreate] [--group-protocol classic|consumer] [--subtests NAME,...]
        [--initial-rebalance-delay MS] [--security plaintext|ssl|sasl_plaintext|sasl_ssl]
        [--sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512]
        [--full] [--timeout 600] [--source GIT_DIR] [--workdir DIR]

(docs/compatibility.md has the measured table and why each failure fails.)

With ``--security`` other than plaintext the seglog targets get a second client listener of that
protocol (beside PLAINTEXT, which stays the inter-broker one), certificates made with `cryptography`
in the work folder, and every test's clients connect to it: test.conf gets security.protocol,
ssl.* and sasl.* as trivup writes them, the environment the SSL_* files 0097 reads; a SCRAM user is
created with AlterUserScramCredentials. ``--tests security`` names the tests that need it (0097 SSL
verification, 0142 re-authentication, 0126 OIDC) with a few ordinary ones run over it.

librdkafka is built from its release tag v<version> (default: the librdkafka that confluent-kafka
bundles) in a cache folder outside the checkout, ``$SEGLOG_LIBRDKAFKA_CACHE`` or
``~/.cache/seglog-librdkafka/<version>``, once; later runs reuse it. The source is cloned from
GitHub, or archived from a local clone given with ``--source``. Build tools and the libraries the
tests want (RapidJSON for 0098's checks, zstd) are installed with apt-get when missing.

Each test runs as its own `test-runner` process (librdkafka's runner, without trivup): ``TESTS=<n>``,
``-L`` (broker tests only: the mock-cluster ones are irrelevant here), ``-Q`` (librdkafka's quick
mode, what its CI runs; ``--full`` drops it), a ``test.conf`` naming the server, and
``TEST_KAFKA_VERSION`` set to the reference Kafka's version for every server, so every server is
asked the same tests. Tests that run Kafka's tools (kafka-topics.sh, 0098's Java transactional
producer) get a ``KAFKA_PATH`` whose ``libs`` are the reference Kafka's jars (tests/kafka_reference.py)
and whose ``bin`` runs Kafka's own classes from them.

The servers have the settings of librdkafka's test scenario (`--scenario`: topic auto-creation on
or off; 4 partitions per topic, replication factor 3 on three nodes), no rebalance delay, and a transaction
state log that fits them; a seglog tree without a transaction coordinator gets no
``transaction.state.log.*`` settings (it would refuse them) and its transaction tests fail at
InitProducerId. Every server this script starts is stopped by its process id at the end; each
test's output is kept in the work folder (printed at the end) for reading why it failed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kafka_reference import KafkaBroker, KafkaCluster, resolve_jars  # noqa: E402
from common import stop_process  # noqa: E402

GITHUB = "https://github.com/confluentinc/librdkafka.git"
# Kerberos (GSSAPI) and OIDC (curl) are left out of the build: their tests need servers set up
# for them, which none of these are.
CONFIGURE = ["--disable-gssapi", "--disable-curl"]
APT_PACKAGES = {"gcc": "gcc", "g++": "g++", "make": "make", "pkg-config": "pkg-config"}
APT_HEADERS = {"/usr/include/rapidjson/schema.h": "rapidjson-dev", "/usr/include/zstd.h": "libzstd-dev",
               "/usr/include/openssl/ssl.h": "libssl-dev", "/usr/include/zlib.h": "zlib1g-dev"}

# Produce/consume, groups, offsets, admin and idempotence tests that need a broker, then the
# transaction tests (0098 consumer side with Kafka's Java producer and librdkafka's, 0103 producer,
# 0129 aborted messages in a fetch).
GENERAL = ["0001", "0002", "0003", "0005", "0007", "0008", "0011", "0012", "0013", "0014", "0015", "0017",
           "0018", "0019", "0020", "0021", "0022", "0026", "0028", "0029", "0030", "0031", "0033", "0034",
           "0035", "0036", "0039", "0040", "0041", "0044", "0045", "0048", "0050", "0051", "0052", "0053",
           "0054", "0056", "0057", "0059", "0060", "0061", "0063", "0064", "0065", "0067", "0069", "0070",
           "0073", "0081", "0082", "0083", "0084", "0085", "0086", "0090", "0092", "0093", "0099", "0102",
           "0107", "0109", "0110", "0112", "0113", "0114", "0118", "0122", "0125", "0127", "0130", "0132",
           "0137", "0140"]
TRANSACTIONS = ["0098", "0103", "0129"]
# The broker tests that check SSL/SASL themselves (they skip over plaintext), then ordinary ones
# (produce, consume, groups) that must work the same over a secured listener.
SECURITY = ["0097", "0126", "0142", "0001", "0011", "0018"]

# librdkafka's test scenarios (its tests/scenarios/*.json): topics are auto-created or not, 4
# partitions each; a test of another scenario is skipped by the runner. No rebalance delay anywhere.
SCENARIOS = {"default": {"auto.create.topics.enable": "true"}, "noautocreate": {"auto.create.topics.enable": "false"}}
COMMON = {"num.partitions": "4", "group.initial.rebalance.delay.ms": "0"}
# Kafka's ACL authorizer on the one-node reference, open to everyone until a test adds an ACL (0081
# CreateAcls, 0109 kafka-acls.sh). Not on three KRaft nodes: over PLAINTEXT every principal is
# ANONYMOUS, and the controllers' quorum only starts with its principal a super user, which would
# make every client one too. seglog's ZooKeeper-era AclAuthorizer, the same way open, on one broker
# and three (the brokers' own requests need no ACL while the cluster resource has none); a seglog
# tree without ACLs gets none (it would refuse the setting).
KAFKA_ACLS = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}
SEGLOG_ACLS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
               "allow.everyone.if.no.acl.found": "true"}
ONE_NODE = {"default.replication.factor": "1", "offsets.topic.replication.factor": "1"}
THREE_NODES = {"default.replication.factor": "3", "offsets.topic.replication.factor": "3"}
ONE_NODE_TXN = {"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "3"}
THREE_NODES_TXN = {"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
                   "transaction.state.log.num.partitions": "3"}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*(PASSED|FAILED|SKIPPED|RUNNING|DNS)\s*\|\s*([\d.]+)s\s*\|\s?(.*)$")


def bundled_version() -> str | None:
    with contextlib.suppress(ImportError):
        import confluent_kafka
        return confluent_kafka.libversion()[0]
    return None


# ------------------------------------------------------------------------------------ the build

def cache_root() -> Path:
    base = os.environ.get("SEGLOG_LIBRDKAFKA_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "seglog-librdkafka"


def apt_install(packages: list[str]) -> None:
    if not packages:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise SystemExit(f"librdkafka's build needs {', '.join(packages)}: install them (no apt-get as root here)")
    print(f"installing {' '.join(packages)} with apt-get", flush=True)
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, check=True)
        subprocess.run(cmd, capture_output=True, check=True)


class LibrdkafkaBuild:
    """librdkafka `version` and its test-runner, built once in the cache folder."""

    def __init__(self, version: str, source: str | None):
        self.version = version
        self.source = source
        self.folder = cache_root() / version
        self.tree = self.folder / "librdkafka"
        self.marker = self.folder / "built"

    @property
    def tests(self) -> Path:
        return self.tree / "tests"

    def ensure(self) -> float:
        """Build if not built yet; the seconds the build took (0 when cached)."""
        if self.marker.exists() and (self.tests / "test-runner").exists():
            return 0.0
        apt_install(sorted({pkg for tool, pkg in APT_PACKAGES.items() if shutil.which(tool) is None}
                           | {pkg for header, pkg in APT_HEADERS.items() if not Path(header).exists()}))
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.tree.exists():
            shutil.rmtree(self.tree)
        self._checkout()
        started = time.monotonic()
        jobs = str(os.cpu_count() or 2)
        log = self.folder / "build.log"
        with open(log, "wb") as out:
            for cmd in (["./configure", *CONFIGURE], ["make", f"-j{jobs}", "libs"],
                        ["make", "-C", "tests", f"-j{jobs}", "build"]):
                print(f"librdkafka {self.version}: {' '.join(cmd)}", flush=True)
                if subprocess.run(cmd, cwd=self.tree, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                    raise SystemExit(f"`{' '.join(cmd)}` failed; see {log}")
        seconds = time.monotonic() - started
        self.marker.write_text(json.dumps({"configure": CONFIGURE, "build_seconds": round(seconds, 1)}) + "\n")
        return seconds

    def _checkout(self) -> None:
        tag = f"v{self.version}"
        self.tree.mkdir(parents=True)
        if self.source:
            git_dir = Path(self.source)
            git_dir = git_dir / ".git" if (git_dir / ".git").exists() else git_dir
            archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", tag], capture_output=True)
            if archive.returncode != 0:
                raise SystemExit(f"{git_dir} has no tag {tag}: {archive.stderr.decode().strip()} "
                                 f"(pass --version with one of its release tags)")
            subprocess.run(["tar", "-x", "-C", str(self.tree)], input=archive.stdout, check=True)
        else:
            clone = subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", tag, GITHUB, str(self.tree)],
                                   capture_output=True, text=True)
            if clone.returncode != 0:
                shutil.rmtree(self.tree, ignore_errors=True)
                raise SystemExit(f"could not clone {GITHUB} at {tag}: {clone.stderr.strip()} "
                                 f"(pass --source with a local clone, or --version)")

    def _table(self) -> list[tuple[str, str, str]]:
        """test.c's table of tests: (number, name, flags) of each entry."""
        text = (self.tests / "test.c").read_text(errors="replace")
        table = text[text.index("struct test tests[]"):]
        table = table[:table.index("\n};")]
        return [(n, f"{n}_{name}", flags) for n, name, flags in
                re.findall(r"_TEST\((\d{4})_(\w+)\s*,\s*([^,)]*)", table)]

    def broker_tests(self) -> list[str]:
        """Every test number of the 0001-0999 series that has a test needing a broker (an entry
        without TEST_F_LOCAL)."""
        return list(dict.fromkeys(n for n, _name, flags in self._table()
                                  if "TEST_F_LOCAL" not in flags and "0001" <= n <= "0999"))

    def local_tests(self) -> set[str]:
        """The names of the tests that need no broker (mock cluster or none): -L leaves them out."""
        return {name for _n, name, flags in self._table() if "TEST_F_LOCAL" in flags}

    def kafka_path(self, jars) -> Path:
        """A KAFKA_PATH for the tests that run Kafka's tools: `libs` is the reference Kafka's jars,
        `bin` runs Kafka's classes from them (kafka-run-class.sh for 0098's Java producer,
        kafka-topics.sh for the tests that alter topics with it)."""
        path = self.folder / f"kafka-{jars.version}"
        (path / "bin").mkdir(parents=True, exist_ok=True)
        libs = path / "libs"
        if not libs.exists():
            libs.symlink_to(jars.folder / "jars")
        log4j = jars.folder / "log4j2-tools.properties"
        run_class = path / "bin" / "kafka-run-class.sh"
        run_class.write_text("#!/bin/sh\n# Kafka's classes from libs/, with the caller's CLASSPATH in front.\n"
                             f'exec java -Xmx256m -Dlog4j2.configurationFile={log4j} '
                             f'-cp "$CLASSPATH:{libs}/*" "$@"\n')
        tools = {"kafka-topics.sh": jars.topic_command,
                 "kafka-acls.sh": jars.first_class("org.apache.kafka.tools.AclCommand", "kafka.admin.AclCommand")}
        for name, main_class in tools.items():
            (path / "bin" / name).write_text(f'#!/bin/sh\nexec "$(dirname "$0")/kafka-run-class.sh" {main_class} "$@"\n')
        for script in path.glob("bin/*.sh"):
            script.chmod(0o755)
        return path


# ------------------------------------------------------------------------------------ security

SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_USER, SASL_PASSWORD = "rdkafka", "rdkafka-secret"
KEY_PASSWORD = "client-key-secret"
# librdkafka's 0142 re-authenticates within the smallest connections.max.reauth.ms of the brokers
# (unset: it skips).
REAUTH_MS = "10000"


class Security:
    """How the servers' client listener and the tests' clients are secured (`--security`): the
    protocol, the SASL mechanism, and the certificates made for it with `cryptography`
    (tests/security/pki.py): a CA, a broker certificate for 127.0.0.1, a client certificate whose
    key is password-protected, written as trivup writes them for librdkafka's tests (test.conf's
    ssl.* settings and the SSL_* variables 0097 reads)."""

    def __init__(self, protocol: str, mechanism: str, folder: Path):
        if protocol not in SECURITY_PROTOCOLS:
            raise SystemExit(f"--security: {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        if mechanism not in SASL_MECHANISMS:
            raise SystemExit(f"--sasl-mechanism: {mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}")
        self.protocol, self.mechanism, self.folder = protocol, mechanism, folder
        self.pki = None
        if self.tls:
            self._make_certificates()

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("ssl")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("sasl")

    @property
    def scram(self) -> bool:
        return self.sasl and self.mechanism.startswith("SCRAM")

    @property
    def listener(self) -> str:
        """The client listener's name (and protocol)."""
        return self.protocol.upper()

    def _make_certificates(self) -> None:
        sys.path.insert(0, str(REPO / "tests" / "security"))
        from cryptography.hazmat.primitives import serialization
        from pki import STORE_PASSWORD, Pki
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pki = pki = Pki(self.folder)
        self.store_password = STORE_PASSWORD
        der = serialization.Encoding.DER
        client = pki.client
        files = {"client.pem": client.cert_pem(), "client.key": client.key_pem(KEY_PASSWORD),
                 "client.der": client.cert.public_bytes(der),
                 "client.key.der": client.key.private_bytes(der, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption()),
                 "ca.der": pki.ca.cert.public_bytes(der),
                 "all-cas.pem": pki.ca.cert_pem() + pki.other_ca.cert_pem()}
        for name, data in files.items():
            (self.folder / name).write_bytes(data)
        self.client_p12 = client.write_pkcs12(self.folder, "client-ks", KEY_PASSWORD)

    def broker_settings(self) -> dict[str, str]:
        """The client listener's settings (the listener itself is named by the target)."""
        props: dict[str, str] = {}
        if self.protocol == "plaintext":
            return props
        props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT," + f"{self.listener}:{self.listener}"
        if self.tls:
            props.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.pki.broker_p12),
                          "ssl.keystore.password": self.store_password,
                          "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca_pem)})
            if self.protocol == "ssl":
                props[f"listener.name.{self.protocol}.ssl.client.auth"] = "required"
        if self.sasl:
            props["sasl.enabled.mechanisms"] = self.mechanism
            props["connections.max.reauth.ms"] = REAUTH_MS
            if self.mechanism == "PLAIN":
                props["sasl.jaas.config"] = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                                             f'user_{SASL_USER}="{SASL_PASSWORD}";')
        return props

    def client_conf(self) -> dict[str, str]:
        """test.conf's lines for every client of the tests."""
        conf = {"security.protocol": self.protocol}
        if self.tls:
            conf.update({"ssl.ca.location": str(self.pki.ca_pem),
                         "ssl.certificate.location": str(self.folder / "client.pem"),
                         "ssl.key.location": str(self.folder / "client.key"), "ssl.key.password": KEY_PASSWORD})
        if self.sasl:
            conf.update({"sasl.mechanisms": self.mechanism, "sasl.username": SASL_USER,
                         "sasl.password": SASL_PASSWORD})
        return conf

    def environment(self) -> dict[str, str]:
        """The SSL_* variables trivup exports for 0097."""
        if not self.tls:
            return {}
        f = self.folder
        return {"SSL_pkcs": str(self.client_p12), "SSL_password": KEY_PASSWORD,
                "SSL_pub_pem": str(f / "client.pem"), "SSL_pub_der": str(f / "client.der"),
                "SSL_priv_pem": str(f / "client.key"), "SSL_priv_der": str(f / "client.key.der"),
                "SSL_ca_pem": str(self.pki.ca_pem), "SSL_ca_der": str(f / "ca.der"),
                "SSL_all_cas_pem": str(f / "all-cas.pem"),
                "SSL_client_auth": "required" if self.protocol == "ssl" else "none"}

    def add_users(self, plaintext_bootstrap: str) -> None:
        """The SCRAM credential of the tests' user, with AlterUserScramCredentials over the
        PLAINTEXT listener (stored in ZooKeeper's /config/users on a cluster)."""
        if not self.scram:
            return
        sys.path.insert(0, str(REPO))
        from logcore.security.scram_credential import MECHANISMS, salted_password
        from logcore.wire.client import bootstrap as connect
        salt = os.urandom(16)
        upsert = {"name": SASL_USER, "mechanism": MECHANISMS[self.mechanism][1], "iterations": 4096, "salt": salt,
                  "salted_password": salted_password(SASL_PASSWORD, salt, 4096, self.mechanism)}
        deadline = time.monotonic() + 30
        while True:
            with connect(plaintext_bootstrap) as conn:
                body = conn.request(51, {"deletions": [], "upsertions": [upsert]})
            errors = [r.error_code for r in body.results if r.error_code]
            if not errors:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"AlterUserScramCredentials failed: {body}")
            time.sleep(0.5)


# ------------------------------------------------------------------------------------ the servers

def seglog_has_transactions(tree: Path) -> bool:
    return (tree / "logcore" / "coordinator" / "transaction_coordinator.py").exists()


def seglog_has_acls(tree: Path) -> bool:
    return (tree / "logcore" / "security" / "authorizer.py").exists()


class KafkaTarget:
    """Apache Kafka (KRaft), one node or three."""

    def __init__(self, jars, workdir: Path, nodes: int, scenario: dict[str, str]):
        self.jars, self.workdir, self.nodes = jars, workdir, nodes
        self.scenario = {**COMMON, **scenario}
        self.server = None

    def start(self) -> str:
        if self.nodes == 1:
            self.server = KafkaBroker.create(self.jars, self.workdir, {**self.scenario, **KAFKA_ACLS, **ONE_NODE, **ONE_NODE_TXN}).start()
        else:
            self.server = KafkaCluster.create(self.jars, self.workdir, self.nodes,
                                              {**self.scenario, **THREE_NODES, **THREE_NODES_TXN}).start()
        return self.server.bootstrap

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class SeglogBrokerTarget:
    """One `seglog broker` of the tree `tree`, as a user starts it."""

    def __init__(self, tree: Path, workdir: Path, scenario: dict[str, str], security: Security):
        self.tree, self.workdir = tree, workdir
        self.scenario = {**COMMON, **scenario}
        self.security = security
        self.proc: subprocess.Popen | None = None

    def settings(self) -> dict[str, str]:
        # a secured client listener beside the PLAINTEXT one the SCRAM credential is set through
        listeners = "PLAINTEXT://127.0.0.1:0" + ("" if self.security.protocol == "plaintext"
                                                 else f",{self.security.listener}://127.0.0.1:0")
        props = {"listeners": listeners, "log.dirs": str(self.workdir / "logs"), "node.id": "0",
                 "offsets.topic.num.partitions": "3", **self.scenario, **ONE_NODE,
                 **self.security.broker_settings()}
        if seglog_has_transactions(self.tree):
            props.update(ONE_NODE_TXN)
        if seglog_has_acls(self.tree):
            props.update(SEGLOG_ACLS)
        return props

    def start(self) -> str:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "broker.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.settings().items()))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.tree), str(self.tree / "connector")])}
        with open(self.workdir / "broker.log", "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                                         stdout=subprocess.PIPE, stderr=err, env=env, cwd=self.workdir)
        line = self.proc.stdout.readline().decode().strip()
        if "listening on PLAINTEXT://" not in line:
            self.stop()
            raise RuntimeError(f"seglog broker did not start: {line!r}\n"
                               f"{(self.workdir / 'broker.log').read_text(errors='replace')[-3000:]}")
        endpoints = dict(ep.split("://") for ep in line.split("listening on ", 1)[1].split(","))
        self.security.add_users(endpoints["PLAINTEXT"])
        return endpoints[self.security.listener]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc)


class SeglogClusterTarget:
    """Three `seglog broker`s of the tree `tree` over one ZooKeeper (tests/cluster/seglog_cluster.py)."""

    def __init__(self, tree: Path, workdir: Path, scenario: dict[str, str], security: Security, size: int = 3):
        self.tree, self.workdir, self.size = tree, workdir, size
        self.scenario = {**COMMON, **scenario}
        self.security = security
        self.zk = self.cluster = None

    def start(self) -> str:
        for p in (self.tree / "tests", self.tree / "tests" / "cluster"):
            sys.path.insert(0, str(p))
        from seglog_cluster import SeglogCluster
        from zookeeper_reference import ZooKeeperCluster, free_ports
        props = {**self.scenario, **THREE_NODES, **self.security.broker_settings()}
        if seglog_has_transactions(self.tree):
            props.update(THREE_NODES_TXN)
        if seglog_has_acls(self.tree):
            props.update(SEGLOG_ACLS)
        self.zk = ZooKeeperCluster(self.workdir / "zk", size=1)
        self.zk.start()
        self.cluster = SeglogCluster(self.workdir / "seglog", self.zk.connect_string, size=self.size, props=props)
        if self.security.protocol == "plaintext":
            self.cluster.start()
            return self.cluster.bootstrap
        # each broker's secured client listener beside its PLAINTEXT one (inter-broker and tools)
        taken = {b.port for b in self.cluster.brokers.values()}
        ports = [p for p in free_ports(2 * self.size) if p not in taken][:self.size]
        name = self.security.listener
        for (i, b), port in zip(sorted(self.cluster.brokers.items()), ports):
            self.cluster.per_broker[i] = {"listeners": f"PLAINTEXT://{b.host}:{b.port},{name}://127.0.0.1:{port}"}
        self.cluster.start()
        self.security.add_users(self.cluster.bootstrap)
        return ",".join(f"127.0.0.1:{port}" for port in ports)

    def stop(self) -> None:
        if self.cluster is not None:
            for b in self.cluster.brokers.values():
                with contextlib.suppress(Exception):
                    b.stop(30)
        if self.zk is not None:
            self.zk.stop()


# ------------------------------------------------------------------------------------ the runs

@dataclass
class Result:
    name: str
    state: str            # PASSED / FAILED / SKIPPED / TIMEOUT / CRASHED
    seconds: float
    reason: str
    log: Path


@dataclass
class Options:
    """How every test-runner runs: librdkafka's quick mode, the timeout of one runner, the test
    scenario, and the consumer group protocol of its consumers (librdkafka's
    TEST_CONSUMER_GROUP_PROTOCOL: `classic`, or KIP-848's `consumer`)."""
    quick: bool = True
    timeout: float = 600
    scenario: str = "default"
    group_protocol: str = "classic"
    security: Security | None = None    # the tests' clients: test.conf lines and SSL_* variables


def run_test(build: LibrdkafkaBuild, number: str, bootstrap: str, kafka_path: Path, broker_version: str,
             outdir: Path, options: Options, subtest: str | None = None) -> list[Result]:
    """One test-runner process for test `number` against `bootstrap`: one Result per test of that
    number (0045 has several). With `subtest`, only the sub-tests whose name holds it run
    (librdkafka's SUBTESTS) and the rows are named `<test> [<subtest>]`."""
    outdir.mkdir(parents=True, exist_ok=True)
    conf = outdir / "test.conf"
    security = options.security.client_conf() if options.security else {}
    conf.write_text(f"bootstrap.servers={bootstrap}\n# a Python broker on a shared machine: "
                    "librdkafka's own timeouts, doubled\ntest.timeout.multiplier=2\n"
                    + "".join(f"{k}={v}\n" for k, v in security.items()))
    log = outdir / (f"{number}.log" if subtest is None else f"{number}-{re.sub(r'[^A-Za-z0-9_]+', '_', subtest)}.log")
    env = {**os.environ, "TESTS": number, "TEST_KAFKA_VERSION": broker_version, "RDKAFKA_TEST_CONF": str(conf),
           "KAFKA_PATH": str(kafka_path), "BROKERS": bootstrap, "TEST_CONSUMER_GROUP_PROTOCOL": options.group_protocol,
           "LD_LIBRARY_PATH": f"{build.tree / 'src'}:{build.tree / 'src-cpp'}",
           **(options.security.environment() if options.security else {})}
    if subtest is not None:
        env["SUBTESTS"] = subtest
    quick, timeout, scenario = options.quick, options.timeout, options.scenario
    # line-buffered: a runner that aborts after a failure (threads left behind) keeps its summary
    args = ["stdbuf", "-oL", "-eL", "./test-runner", "-p1", "-L", "-s", scenario, *(["-Q"] if quick else [])]
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=build.tests, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)       # its Java children go with it
        try:
            proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            timed_out = True
    seconds = time.monotonic() - started
    text = _ANSI.sub("", log.read_text(errors="replace"))
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if m and m.group(1) != "<MAIN>":       # <MAIN> is the runner itself
            rows.append(Result(m.group(1), m.group(2), float(m.group(3)), m.group(4).strip(), log))
    # -L leaves out the tests of the same number that need no broker: not rows of this table
    local = build.local_tests()
    rows = [r for r in rows if r.name not in local]
    if timed_out:
        return [Result(name, "TIMEOUT", seconds, f"no result within {timeout:.0f} s; last lines: {_last_lines(text)}",
                       log) for name in ([r.name for r in rows] or [number])]
    if not rows:
        return [Result(number, "CRASHED", seconds, f"exit {proc.returncode}; last lines: {_last_lines(text)}", log)]
    failures = _failure_messages(text)
    for r in rows:
        if r.state == "RUNNING":     # the runner gave up on it
            r.state = "FAILED"
        if r.state == "PASSED" and quick and r.seconds == 0.0:
            # every sub-test of it is a full-mode one (SUB_TEST, not SUB_TEST_QUICK): it ran nothing
            r.state, r.reason = "SKIPPED", "no sub-test runs in quick mode (-Q): run it with --full"
        if r.state == "FAILED":
            r.reason = failures.get(r.name) or r.reason or _last_lines(text)
    if subtest is not None:
        # a filter that matched no sub-test, or only sub-tests that skipped themselves, passes
        # vacuously: say so
        marks = [line for line in (ln.split("] ", 1)[-1].strip() for ln in text.splitlines())
                 if line.startswith("[ ") and subtest in line]
        skips = [m for m in marks if ": SKIP: " in m]
        done = [m for m in marks if ": PASS (" in m]
        for r in rows:
            r.name = f"{r.name} [{subtest}]"
            if r.state == "PASSED" and not marks:
                r.state, r.reason = "NOT RUN", f"no sub-test of {number} matched {subtest!r}"
            elif r.state == "PASSED" and skips and not done:
                r.state, r.reason = "SKIPPED", skips[0].split(": SKIP: ", 1)[1].rstrip(" ]")
    return rows


_FAILED_AT = re.compile(r'^### Test "([^" (]+)(?: \(([^)]*)\))?" failed at ([^ ]+) ')


def _failure_messages(text: str) -> dict[str, str]:
    """{test name: its first failure}: the sub-test, where it failed and the assertion's message
    (the line after librdkafka's `### Test "..." failed at ...` line)."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _FAILED_AT.match(line.strip())
        if m and m.group(1) not in out:
            detail = lines[i + 1].strip() if i + 1 < len(lines) else ""
            where = f"{m.group(2)}: " if m.group(2) else ""
            out[m.group(1)] = f"{where}{detail} [{m.group(3)}]"[:500]
    return out


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(("|", "#", "TEST "))]
    return " / ".join(lines[-n:])[-400:]


def run_target(label: str, target, build, tests: list[str], kafka_path: Path, broker_version: str,
               workdir: Path, options: Options, subtests: list[str]) -> list[Result]:
    print(f"== {label}: starting", flush=True)
    results: list[Result] = []
    try:
        started = time.monotonic()
        bootstrap = target.start()
        print(f"== {label}: {bootstrap} (started in {time.monotonic() - started:.0f} s)", flush=True)
        for number in tests:
            for subtest in subtests or [None]:
                for r in run_test(build, number, bootstrap, kafka_path, broker_version, workdir / label, options,
                                  subtest):
                    print(f"   {r.name:<45} {r.state:<8} {r.seconds:7.1f}s {r.reason[:160]}", flush=True)
                    results.append(r)
    except Exception as exc:     # noqa: BLE001 - a server that does not start: every test says why
        print(f"== {label}: {exc}", flush=True)
        done = {r.name.split("_")[0] for r in results}
        results += [Result(n, "NOT RUN", 0.0, f"server failed: {str(exc)[:300]}", workdir)
                    for n in tests if n not in done]
    finally:
        target.stop()
    return results


def table(columns: dict[str, list[Result]]) -> str:
    names: list[str] = []
    for results in columns.values():
        for r in results:
            if r.name not in names:
                names.append(r.name)
    names.sort()
    by = {label: {r.name: r for r in results} for label, results in columns.items()}
    lines = ["| test | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name in names:
        cells = []
        for label in columns:
            r = by[label].get(name)
            cells.append("" if r is None else (r.state if r.state in ("SKIPPED", "NOT RUN")
                                               else f"{r.state} ({r.seconds:.0f} s)"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = []
    for label, results in columns.items():
        counts = {s: sum(1 for r in results if r.state == s) for s in ("PASSED", "FAILED", "SKIPPED")}
        other = len(results) - sum(counts.values())
        totals.append(f"{counts['PASSED']} passed, {counts['FAILED'] + other} failed, {counts['SKIPPED']} skipped")
    lines.append("| **total** | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=bundled_version(), help="librdkafka release (tag v<version>)")
    ap.add_argument("--source", help="a local clone of librdkafka (default: clone from GitHub)")
    ap.add_argument("--targets", default="kafka,kafka3,seglog,seglog3",
                    help="comma list of kafka, kafka3, seglog, seglog3")
    ap.add_argument("--tests", default=",".join(GENERAL + TRANSACTIONS),
                    help="comma list of test numbers; 'general' and 'transactions' name the two default sets, "
                         "'security' the SSL/SASL ones, "
                         "'all' every broker test of librdkafka's 0001-0999 series")
    ap.add_argument("--seglog-tree", default=str(REPO), help="the seglog checkout whose broker runs")
    ap.add_argument("--scenario", default="default", choices=sorted(SCENARIOS),
                    help="librdkafka's test scenario: the servers' topic auto-creation; the runner skips "
                         "the tests of the other one")
    ap.add_argument("--initial-rebalance-delay", type=int, default=0, metavar="MS",
                    help="every server's group.initial.rebalance.delay.ms (default 0; Kafka's own default is "
                         "3000): how long the first generation of a classic group waits for more members")
    ap.add_argument("--full", action="store_true", help="without librdkafka's quick mode (-Q)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for one test-runner process")
    ap.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"),
                    help="the consumer group protocol of the tests' consumers (librdkafka's "
                         "TEST_CONSUMER_GROUP_PROTOCOL; `consumer` is KIP-848's)")
    ap.add_argument("--subtests", help="comma list: run each test once per name, only its sub-tests whose "
                                       "name holds it (librdkafka's SUBTESTS), e.g. do_test_DeleteRecords")
    ap.add_argument("--security", default="plaintext", choices=SECURITY_PROTOCOLS,
                    help="the seglog targets' client listener and the tests' security.protocol (certificates "
                         "made in the work folder; Kafka targets only over plaintext)")
    ap.add_argument("--sasl-mechanism", default="SCRAM-SHA-512", choices=SASL_MECHANISMS,
                    help="with a sasl_* --security: the tests' sasl.mechanisms (SCRAM credentials are set "
                         "with AlterUserScramCredentials)")
    ap.add_argument("--workdir", help="where servers and test logs go (default: a new temporary folder, kept)")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args(argv)
    if not args.version:
        ap.error("no --version and no confluent-kafka to take librdkafka's version from")

    build = LibrdkafkaBuild(args.version, args.source)
    seconds = build.ensure()
    tests: list[str] = []
    for item in args.tests.split(","):
        named = {"general": GENERAL, "transactions": TRANSACTIONS, "security": SECURITY, "all": build.broker_tests}
        tests += named[item.strip()]() if item.strip() == "all" else named.get(item.strip(), [item.strip()])
    tests = list(dict.fromkeys(tests))
    print(f"librdkafka {args.version}: " + (f"built in {seconds:.0f} s" if seconds else "cached")
          + f" ({build.tests / 'test-runner'})", flush=True)
    if args.build_only:
        return 0

    jars = resolve_jars()
    kafka_path = build.kafka_path(jars)
    tree = Path(args.seglog_tree).resolve()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="librdkafka-suite-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.initial_rebalance_delay < 0:
        ap.error("--initial-rebalance-delay must be 0 or more")
    scenario = {**SCENARIOS[args.scenario], "group.initial.rebalance.delay.ms": str(args.initial_rebalance_delay)}
    options = Options(quick=not args.full, timeout=args.timeout, scenario=args.scenario,
                      group_protocol=args.group_protocol,
                      security=Security(args.security, args.sasl_mechanism, workdir / "pki"))
    security = options.security
    subtests = [s.strip() for s in (args.subtests or "").split(",") if s.strip()]
    makers = {
        "kafka": (f"Kafka {jars.version}", lambda d: KafkaTarget(jars, d, 1, scenario)),
        "kafka3": (f"Kafka {jars.version} x3", lambda d: KafkaTarget(jars, d, 3, scenario)),
        "seglog": ("seglog", lambda d: SeglogBrokerTarget(tree, d, scenario, security)),
        "seglog3": ("seglog x3", lambda d: SeglogClusterTarget(tree, d, scenario, security)),
    }
    columns: dict[str, list[Result]] = {}
    for key in args.targets.split(","):
        key = key.strip()
        if key not in makers:
            ap.error(f"unknown target {key!r}: one of {', '.join(makers)}")
        if key.startswith("kafka") and security.protocol != "plaintext":
            ap.error(f"--security {security.protocol}: the Kafka targets run over plaintext only")
        label, make = makers[key]
        columns[label] = run_target(key, make(workdir / f"server-{key}"), build, tests, kafka_path,
                                    jars.version, workdir, options, subtests)
    print()
    print(f"librdkafka {args.version} test suite ({'full' if args.full else 'quick'} mode, scenario "
          f"{args.scenario}, group protocol {args.group_protocol}, initial rebalance delay "
          f"{args.initial_rebalance_delay} ms, security {security.protocol}"
          f"{' ' + security.mechanism if security.sasl else ''}), seglog tree "
          f"{tree.name}{' with' if seglog_has_transactions(tree) else ' without'} a transaction coordinator")
    print(table(columns))
    failures = [(label, r) for label, results in columns.items() for r in results
                if r.state not in ("PASSED", "SKIPPED")]
    if failures:
        print("\nfailures:")
        for label, r in failures:
            print(f"- {label} {r.name}: {r.state}: {r.reason}")
    (workdir / "results.json").write_text(json.dumps(
        {label: [{"name": r.name, "state": r.state, "seconds": r.seconds, "reason": r.reason, "log": str(r.log)}
                 for r in results] for label, results in columns.items()}, indent=1))
    print(f"\ntest logs and results.json: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
