"""Apache Kafka itself as the reference: jars from Maven Central, a single-node KRaft broker on
loopback, and Kafka's tools run as Java main classes.

Used by tests (the fixtures at the end: tests/conftest.py defines the session's shared broker, other
conftests import the rest) and by benchmarks
(bench/kafka_anchor.py puts this folder on sys.path). Nothing here imports pytest at module level.

- `resolve_jars(version)` writes a small pom into a cache folder outside the checkout
  (``$SEGLOG_KAFKA_CACHE`` or ``~/.cache/seglog-kafka/<version>``) and runs
  ``mvn -q -B dependency:copy-dependencies`` on it once; later calls reuse the jars. A lock file
  keeps concurrent resolutions (several pytest processes) from racing.
- `KafkaBroker.start(jars, workdir)` formats a temporary ``log.dirs`` with Kafka's StorageTool
  (random cluster id), starts ``kafka.Kafka`` as a combined broker+controller on 127.0.0.1 with
  free ports, waits until the broker logs that it started and its port answers, and stops it by
  the process id it started (SIGTERM: clean shutdown; SIGKILL: crash).
- `KafkaJars.run_tool(main_class, args)` runs a Kafka tool (DumpLogSegments, TopicCommand,
  ConsoleProducer, ConsoleConsumer, GetOffsetShell) in a small JVM.

A caller that cannot get the jars or a broker gets `KafkaUnavailable` with the reason; the
fixtures turn it into a skip, or a failure when ``SEGLOG_REQUIRE_KAFKA=1`` (CI on a machine that
must not skip).
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

KAFKA_VERSION = os.environ.get("SEGLOG_KAFKA_VERSION", "4.1.1")
# Kafka's release ships log4j2 with the slf4j 1.x binding (Kafka's code logs through slf4j 1.7).
LOG4J_VERSION = "2.24.3"
TOOL_HEAP = "-Xmx512m"
BROKER_HEAP = "-Xmx512m"
START_TIMEOUT_S = float(os.environ.get("SEGLOG_KAFKA_START_TIMEOUT", "120"))
MVN_TIMEOUT_S = 900

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>seglog.reference</groupId>
  <artifactId>kafka-reference</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

# Tools log WARN and above to stderr; the broker logs INFO to a file (`broker.log` in its workdir).
_LOG4J_TOOLS = """status = error
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = ERR
"""
_LOG4J_BROKER = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:seglog.kafka.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
"""
_STARTED_LINE = "Kafka Server started"


class KafkaUnavailable(RuntimeError):
    """The jars or the broker could not be had; the message says why."""


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    base = os.environ.get("SEGLOG_KAFKA_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "seglog-kafka"
    return root / version


def random_cluster_id() -> str:
    """A Kafka Uuid: 16 random bytes, URL-safe base64 without padding (22 characters). Like
    Kafka's Uuid.randomUuid, never one starting with '-' (a command line would read it as an
    option: kafka-storage format -t refuses it)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def free_port() -> int:
    from zookeeper_reference import free_ports
    return free_ports(1)[0]


@dataclass
class KafkaJars:
    version: str
    folder: Path                      # the cache folder of this version
    jars: list[Path]
    _classes: dict[str, bool] = field(default_factory=dict, repr=False)

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(j) for j in self.jars)

    def has_class(self, name: str) -> bool:
        """Whether some jar holds class `name` (dotted), for classes that moved between versions."""
        if name not in self._classes:
            entry = name.replace(".", "/") + ".class"
            found = False
            for jar in self.jars:
                if jar.name.startswith(("kafka", "connect")):
                    with zipfile.ZipFile(jar) as z:
                        try:
                            z.getinfo(entry)
                            found = True
                            break
                        except KeyError:
                            pass
            self._classes[name] = found
        return self._classes[name]

    def first_class(self, *names: str) -> str:
        for name in names:
            if self.has_class(name):
                return name
        raise KafkaUnavailable(f"none of {', '.join(names)} is in Kafka {self.version}'s jars")

    @property
    def dump_class(self) -> str:
        return self.first_class("org.apache.kafka.tools.DumpLogSegments", "kafka.tools.DumpLogSegments")

    @property
    def storage_tool(self) -> str:
        return self.first_class("org.apache.kafka.tools.StorageTool", "kafka.tools.StorageTool")

    @property
    def console_consumer(self) -> str:
        return self.first_class("org.apache.kafka.tools.consumer.ConsoleConsumer", "kafka.tools.ConsoleConsumer")

    @property
    def console_producer(self) -> str:
        return self.first_class("org.apache.kafka.tools.ConsoleProducer", "kafka.tools.ConsoleProducer")

    @property
    def topic_command(self) -> str:
        return self.first_class("org.apache.kafka.tools.TopicCommand", "kafka.admin.TopicCommand")

    def java_command(self, main_class: str, args: list[str], heap: str = TOOL_HEAP,
                     log4j: Path | None = None, extra_jvm: list[str] | None = None) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise KafkaUnavailable("no `java` on PATH (Kafka needs Java 17+)")
        return [java, heap, "-Xss1m", "-XX:+UseSerialGC", "-Djava.awt.headless=true", "-Dfile.encoding=UTF-8",
                "-Dsun.stdout.encoding=UTF-8", "-Dsun.stderr.encoding=UTF-8",
                f"-Dlog4j2.configurationFile={log4j or self.folder / 'log4j2-tools.properties'}",
                *(extra_jvm or []), "-cp", self.classpath, main_class, *args]

    def run_tool(self, main_class: str, args: list[str], timeout: float = 120, input: bytes | None = None,
                 check: bool = False) -> subprocess.CompletedProcess:
        """Run one Kafka tool to completion; stdout/stderr as text. Tools start quickly with C1 only."""
        cmd = self.java_command(main_class, args, extra_jvm=["-XX:TieredStopAtLevel=1", "-Xshare:auto"])
        proc = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
        result = subprocess.CompletedProcess(proc.args, proc.returncode,
                                             proc.stdout.decode("utf-8", errors="replace"),
                                             proc.stderr.decode("utf-8", errors="replace"))
        if check and result.returncode != 0:
            raise RuntimeError(f"{main_class} {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}")
        return result

    def run_tools(self, runs: list[tuple[str, list[str]]], timeout: float = 300) -> list[subprocess.CompletedProcess]:
        """Several tool runs (main class, args) in one JVM, in order (ToolBatch.java): what
        run_tool would give each, for runs that read no stdin and whose JVM-wide state (static
        fields, shutdown hooks) does not matter between them."""
        import sys
        import tempfile
        helpers = str(Path(__file__).with_name("kafka_clients"))   # java_program.py: javac, cached
        if helpers not in sys.path:
            sys.path.append(helpers)
        from java_program import JavaProgram
        java = self.java_command("ToolBatch", [])[0]      # KafkaUnavailable without java
        workdir = Path(tempfile.mkdtemp(prefix="seglog-tool-batch-"))
        try:
            program = JavaProgram.compile([Path(__file__).with_name("ToolBatch.java")], self.jars, workdir,
                                          self.folder / "log4j2-tools.properties")
            lines = []
            for main_class, args in runs:
                fields = [main_class, *args]
                if any("\n" in f or "\x01" in f for f in fields):
                    raise ValueError(f"a batched tool argument holds a newline or \\x01: {fields}")
                lines.append("\x01".join(fields) + "\n")
            runs_file = workdir / "runs"
            runs_file.write_text("".join(lines), encoding="utf-8")
            marker = f"@@seglog-tool-batch-{uuid.uuid4().hex}@@"
            cmd = [java, TOOL_HEAP, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                   "-Djava.awt.headless=true", "-Dfile.encoding=UTF-8", "-Dsun.stdout.encoding=UTF-8",
                   "-Dsun.stderr.encoding=UTF-8", f"-Dlog4j2.configurationFile={program.log4j}",
                   "-cp", program.classpath, "ToolBatch", str(runs_file), marker]
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        out = proc.stdout.decode("utf-8", errors="replace").split(marker + " ")
        err = proc.stderr.decode("utf-8", errors="replace").split(marker + " ")
        if proc.returncode != 0 or len(out) != len(runs) + 1 or len(err) != len(runs) + 1:
            raise RuntimeError(f"ToolBatch exited {proc.returncode} after {len(out) - 1} of {len(runs)} runs:\n"
                               f"{err[-1][-4000:]}")
        results = []
        for i, (main_class, args) in enumerate(runs):
            # each piece after the first starts with "<index> <status>\n" (stderr: "<index>\n")
            stdout = out[i] if i == 0 else out[i].split("\n", 1)[1]
            stderr = err[i] if i == 0 else err[i].split("\n", 1)[1]
            status = int(out[i + 1].split("\n", 1)[0].split()[1])
            results.append(subprocess.CompletedProcess([main_class, *args], status, stdout, stderr))
        return results

    def dump_log_segments(self, files: list[str | Path], *options: str,
                          timeout: float = 180) -> subprocess.CompletedProcess:
        """kafka-dump-log (DumpLogSegments) on `files` in one JVM."""
        return self.run_tool(self.dump_class, ["--files", ",".join(str(f) for f in files), *options],
                             timeout=timeout)


def _copy_dependencies(pom: Path, pom_text: str, jar_dir: Path, done: Path, artifact: str) -> None:
    """The runtime dependencies of POM_TEXT (written to POM) copied into JAR_DIR by Maven, once:
    DONE lists them afterwards. The caller holds the cache folder's lock; ARTIFACT names what is
    resolved in the errors."""
    if done.exists():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(f"no `mvn` on PATH: install Maven (apt-get install -y maven) to resolve {artifact}")
    pom.write_text(pom_text)
    if jar_dir.exists():
        shutil.rmtree(jar_dir)
    try:
        proc = subprocess.run(
            [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             f"-DoutputDirectory={jar_dir}", "-DincludeScope=runtime"],
            capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise KafkaUnavailable(f"mvn did not resolve {artifact} within {MVN_TIMEOUT_S}s") from None
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise KafkaUnavailable(f"mvn could not resolve {artifact}: " + " | ".join(tail))
    done.write_text("\n".join(sorted(p.name for p in jar_dir.glob("*.jar"))) + "\n")


def _jars_with(jar_dir: Path, main_jar: str) -> list[Path]:
    """The jars of JAR_DIR, which must hold MAIN_JAR."""
    jars = sorted(jar_dir.glob("*.jar"))
    if not any(j.name == main_jar for j in jars):
        raise KafkaUnavailable(f"{main_jar} is missing from {jar_dir}; delete the folder to resolve again")
    return jars


def resolve_jars(version: str = KAFKA_VERSION) -> KafkaJars:
    """The jars of Kafka `version` (broker, tools, storage, log4j2), resolved with Maven once."""
    folder = cache_dir(version)
    jar_dir = folder / "jars"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)           # another process may be resolving the same version
        _copy_dependencies(folder / "pom.xml", _POM.format(kafka=version, log4j=LOG4J_VERSION), jar_dir,
                           folder / "resolved", f"org.apache.kafka:kafka_2.13:{version}")
        (folder / "log4j2-tools.properties").write_text(_LOG4J_TOOLS)
        (folder / "log4j2-broker.properties").write_text(_LOG4J_BROKER)
    return KafkaJars(version, folder, _jars_with(jar_dir, f"kafka_2.13-{version}.jar"))


_STREAMS_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>seglog.reference</groupId>
  <artifactId>kafka-streams-reference</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


def resolve_streams_jars(version: str = KAFKA_VERSION) -> list[Path]:
    """Kafka Streams `version` and what it needs at run time (kafka-clients, RocksDB's JNI jar,
    slf4j and log4j2), resolved with Maven once into ``<cache>/streams-jars`` beside the broker's
    jars (a pom of its own: the broker's classpath stays as Kafka's release has it)."""
    folder = cache_dir(version)
    jar_dir = folder / "streams-jars"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _copy_dependencies(folder / "streams-pom.xml", _STREAMS_POM.format(kafka=version, log4j=LOG4J_VERSION),
                           jar_dir, folder / "streams-resolved", f"org.apache.kafka:kafka-streams:{version}")
    return _jars_with(jar_dir, f"kafka-streams-{version}.jar")


def server_properties(node_id: int, port: int, controller_port: int, log_dirs: Path, metadata_dir: Path,
                      overrides: dict[str, str] | None = None) -> dict[str, str]:
    """A combined broker+controller on loopback with replication factor 1 everywhere."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        "metadata.log.dir": str(metadata_dir),     # keeps __cluster_metadata out of the data dir
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.io.threads": "2",
        "num.network.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 << 20),
    }
    props.update(overrides or {})
    return props


class _FormattedDirs:
    """What kafka-storage format wrote for one single-node configuration, kept for this process:
    a broker of the same settings gets a copy with a meta.properties of its own (its cluster id,
    new directory ids), which is all format varies between runs (bootstrap.checkpoint holds the
    feature levels; only its timestamps and CRCs differ), instead of a format JVM each time."""

    # settings that name this broker's ports and folders: the same for the format's output
    _PLACES = ("listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs", "metadata.log.dir")

    def __init__(self) -> None:
        self._templates: dict[tuple, Path] = {}

    def _key(self, broker: "KafkaBroker", overrides: dict[str, str] | None) -> tuple | None:
        if any(k in self._PLACES for k in (overrides or {})):
            return None                      # other folders or voters: format as given
        props = server_properties(1, 0, 0, Path("data"), Path("metadata"), overrides)
        return (broker.jars.version, str(broker.jars.folder), tuple(sorted(props.items())))

    def keep(self, broker: "KafkaBroker", overrides: dict[str, str] | None) -> None:
        key = self._key(broker, overrides)
        if key is None or key in self._templates:
            return
        import atexit
        import tempfile
        template = Path(tempfile.mkdtemp(prefix="seglog-kafka-format-"))
        atexit.register(shutil.rmtree, template, True)
        for name, src in (("data", broker.log_dirs), ("metadata", broker.metadata_dir)):
            shutil.copytree(src, template / name)
        self._templates[key] = template

    def copy_formatted(self, broker: "KafkaBroker", overrides: dict[str, str] | None) -> bool:
        key = self._key(broker, overrides)
        template = self._templates.get(key) if key is not None else None
        if template is None or not template.is_dir():
            return False
        for name, dest in (("data", broker.log_dirs), ("metadata", broker.metadata_dir)):
            shutil.copytree(template / name, dest)
            meta = dest / "meta.properties"
            fields = dict(line.split("=", 1) for line in meta.read_text().splitlines()
                          if "=" in line and not line.startswith("#"))
            fields["cluster.id"] = broker.cluster_id
            fields["directory.id"] = random_cluster_id()
            meta.write_text("#\n" + "".join(f"{k}={v}\n" for k, v in fields.items()))
        return True


_FORMATS = _FormattedDirs()


@dataclass
class KafkaBroker:
    """A running Apache Kafka (KRaft, combined roles) that this process started."""

    jars: KafkaJars
    workdir: Path
    log_dirs: Path
    metadata_dir: Path
    port: int
    controller_port: int
    cluster_id: str
    proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    @classmethod
    def create(cls, jars: KafkaJars, workdir: Path, overrides: dict[str, str] | None = None,
               cluster_id: str | None = None) -> "KafkaBroker":
        """Write server.properties and format fresh log dirs (nothing started yet)."""
        workdir.mkdir(parents=True, exist_ok=True)
        broker = cls(jars, workdir, workdir / "data", workdir / "metadata", free_port(), free_port(),
                     cluster_id or random_cluster_id())
        broker.write_config(overrides)
        if _FORMATS.copy_formatted(broker, overrides):
            return broker
        broker.format()
        _FORMATS.keep(broker, overrides)
        return broker

    def format(self) -> None:
        """kafka-storage format of the log dirs (a JVM of its own, ~2 s)."""
        fmt = self.jars.run_tool(self.jars.storage_tool, ["format", "-t", self.cluster_id, "-c", str(self.config_path),
                                                          "--ignore-formatted"], timeout=120)
        if fmt.returncode != 0:
            raise KafkaUnavailable(f"kafka-storage format failed ({fmt.returncode}): {fmt.stderr[-2000:]}")

    def write_config(self, overrides: dict[str, str] | None = None) -> None:
        props = server_properties(1, self.port, self.controller_port, self.log_dirs, self.metadata_dir, overrides)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self, timeout: float = START_TIMEOUT_S) -> "KafkaBroker":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        cmd = self.jars.java_command(
            "kafka.Kafka", [str(self.config_path)], heap=BROKER_HEAP,
            log4j=self.jars.folder / "log4j2-broker.properties",
            extra_jvm=[f"-Dseglog.kafka.log={self.log_path}", "-XX:TieredStopAtLevel=1"])
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.workdir / "broker.out", "ab") as out:
            # cwd: the broker's own folder, so that nothing it writes lands in the caller's folder
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KafkaUnavailable(f"Kafka exited with {self.proc.returncode} while starting: "
                                       f"{self._tail()}")
            if self._log_since(offset).find(_STARTED_LINE) >= 0 and self._port_answers():
                return self
            time.sleep(0.05)
        self.stop(signal.SIGKILL)
        raise KafkaUnavailable(f"Kafka did not start within {timeout:.0f}s: {self._tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        """Stop the broker by its pid: SIGTERM is Kafka's clean shutdown, SIGKILL a crash."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
        return proc.returncode

    def copy_log_dirs(self, dest: Path) -> Path:
        """A copy of the data dir (while stopped, or a crash-consistent copy while running)."""
        shutil.copytree(self.log_dirs, dest)
        return dest

    def _port_answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def _tail(self, lines: int = 30) -> str:
        text = ""
        for name in ("broker.out", "broker.log"):
            path = self.workdir / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text[-6000:]

    # -- Kafka's tools against this broker ----------------------------------------------------------

    def _create_args(self, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> list[str]:
        args = ["--bootstrap-server", self.bootstrap, "--create", "--topic", topic,
                "--partitions", str(partitions), "--replication-factor", "1"]
        for k, v in (configs or {}).items():
            args += ["--config", f"{k}={v}"]
        return args

    def create_topic(self, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        self.jars.run_tool(self.jars.topic_command, self._create_args(topic, partitions, configs), check=True)

    def create_topics(self, topics: list[tuple[str, int, dict[str, str] | None]]) -> None:
        """Several create_topic calls (topic, partitions, configs) in one JVM."""
        runs = [(self.jars.topic_command, self._create_args(*t)) for t in topics]
        for (_, args), done in zip(runs, self.jars.run_tools(runs)):
            if done.returncode != 0:
                raise RuntimeError(f"TopicCommand {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")

    def console_consume(self, topic: str, max_messages: int, *extra: str, timeout_ms: int = 20000,
                        properties: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Kafka's console consumer from the beginning; `extra` e.g. --property print.key=true."""
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic, "--from-beginning",
                "--max-messages", str(max_messages), "--timeout-ms", str(timeout_ms), *extra]
        for k, v in (properties or {}).items():
            args += ["--consumer-property", f"{k}={v}"]
        return self.jars.run_tool(self.jars.console_consumer, args, timeout=timeout_ms / 1000 + 120)


class KafkaCluster:
    """`size` Apache Kafka processes in KRaft combined mode on loopback, each a broker and a
    controller voter, internal topics replicated `size` ways with a min ISR of size - 1 (a
    cluster that keeps serving while one node is down). Nodes are `KafkaBroker`s: kill one
    with `.nodes[i].stop(signal.SIGKILL)` and bring it back with `.nodes[i].start()`."""

    def __init__(self, nodes: list[KafkaBroker]):
        self.nodes = nodes

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @classmethod
    def create(cls, jars: KafkaJars, workdir: Path, size: int = 3,
               overrides: dict[str, str] | None = None) -> "KafkaCluster":
        """Write each node's server.properties and format its dirs (nothing started yet)."""
        cluster_id = random_cluster_id()
        ports = [free_port() for _ in range(2 * size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{ports[size + i]}" for i in range(size))
        replicated = {
            "default.replication.factor": str(size), "min.insync.replicas": str(max(1, size - 1)),
            "offsets.topic.replication.factor": str(size),
            "transaction.state.log.replication.factor": str(size),
            "transaction.state.log.min.isr": str(max(1, size - 1)),
            "share.coordinator.state.topic.replication.factor": str(size),
            "share.coordinator.state.topic.min.isr": str(max(1, size - 1)),
            "controller.quorum.voters": voters,
        }
        nodes = []
        for i in range(size):
            wd = workdir / f"kafka-{i + 1}"
            wd.mkdir(parents=True, exist_ok=True)
            node = KafkaBroker(jars, wd, wd / "data", wd / "metadata", ports[i], ports[size + i], cluster_id)
            props = server_properties(i + 1, node.port, node.controller_port, node.log_dirs, node.metadata_dir,
                                      {**replicated, **(overrides or {})})
            node.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            fmt = jars.run_tool(jars.storage_tool, ["format", "-t", cluster_id, "-c", str(node.config_path),
                                                    "--ignore-formatted"], timeout=120)
            if fmt.returncode != 0:
                raise KafkaUnavailable(f"kafka-storage format of node {i + 1} failed: {fmt.stderr[-2000:]}")
            nodes.append(node)
        return cls(nodes)

    def start(self, timeout: float = START_TIMEOUT_S) -> "KafkaCluster":
        """Start every node at once (a node finishes starting only once a quorum of voters runs)."""
        import threading
        errors: list[BaseException] = []

        def start(node: KafkaBroker) -> None:
            try:
                node.start(timeout)
            except BaseException as exc:   # noqa: BLE001 - reported below, all nodes stopped
                errors.append(exc)
        threads = [threading.Thread(target=start, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop(signal.SIGKILL)
            raise errors[0]
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """All nodes at once: one by one, the last ones would wait for a quorum that is gone."""
        import threading
        threads = [threading.Thread(target=n.stop, args=(sig,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """A Kafka offset checkpoint file (version line, count line, `topic partition offset` lines)."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        rows[(topic, int(partition))] = int(offset)
    return rows


def write_checkpoint(path: Path, rows: dict[tuple[str, int], int]) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(rows.items()))
    path.write_text(f"0\n{len(rows)}\n{body}")


def adopt_seglog_root(broker: KafkaBroker, seglog_root: Path, topics: dict[str, int],
                      configs: dict[str, dict[str, str]] | None = None) -> None:
    """Make the (formatted, stopped-or-not) `broker` serve a seglog root's `topics`
    ({name: partitions}, created with `configs[name]`); the broker is stopped afterwards. The
    steps (docs/engine.md):

    1. Kafka creates each topic (its controller assigns the topic id, it writes partition.metadata
       and leader-epoch-checkpoint), then stops cleanly (`.kafka_cleanshutdown`).
    2. In each partition folder, Kafka's empty segment files are replaced by seglog's .log,
       .index, .timeindex, .txnindex and .snapshot files, unchanged. Kafka's partition.metadata
       (its topic id) and leader-epoch-checkpoint stay.
    3. The root's replication-offset-checkpoint and recovery-point-offset-checkpoint get
       seglog's high watermark per partition, log-start-offset-checkpoint seglog's log start.
    """
    if broker.proc is None or broker.proc.poll() is not None:
        broker.start()
    for topic, partitions in topics.items():
        broker.create_topic(topic, partitions, (configs or {}).get(topic))
    broker.stop(signal.SIGTERM)
    hw = read_checkpoint(seglog_root / "replication-offset-checkpoint")
    seglog_start = read_checkpoint(seglog_root / "log-start-offset-checkpoint")
    kafka_hw = read_checkpoint(broker.log_dirs / "replication-offset-checkpoint")
    recovery = read_checkpoint(broker.log_dirs / "recovery-point-offset-checkpoint")
    starts = read_checkpoint(broker.log_dirs / "log-start-offset-checkpoint")
    for topic, partitions in topics.items():
        for p in range(partitions):
            src, dst = seglog_root / f"{topic}-{p}", broker.log_dirs / f"{topic}-{p}"
            for f in dst.iterdir():
                if f.suffix in SEGMENT_SUFFIXES:
                    f.unlink()
            bases = []
            for f in src.iterdir():
                if f.suffix in SEGMENT_SUFFIXES:
                    shutil.copy2(f, dst / f.name)
                    if f.suffix == ".log":
                        bases.append(int(f.stem))
            if (topic, p) not in hw:
                raise ValueError(f"{seglog_root / 'replication-offset-checkpoint'} has no {topic} {p}")
            kafka_hw[(topic, p)] = recovery[(topic, p)] = hw[(topic, p)]
            starts[(topic, p)] = seglog_start.get((topic, p), min(bases, default=0))
    write_checkpoint(broker.log_dirs / "replication-offset-checkpoint", kafka_hw)
    write_checkpoint(broker.log_dirs / "recovery-point-offset-checkpoint", recovery)
    write_checkpoint(broker.log_dirs / "log-start-offset-checkpoint", starts)


def force_recovery(broker: KafkaBroker, topics: dict[str, int], drop_indexes: bool = True) -> None:
    """Make the stopped `broker` recover `topics` from offset 0 at its next start: no
    `.kafka_cleanshutdown`, recovery points 0 and (by default) no .index/.timeindex files, so that
    Kafka validates every batch and rebuilds the indexes and producer state from the logs."""
    (broker.log_dirs / ".kafka_cleanshutdown").unlink(missing_ok=True)
    recovery = read_checkpoint(broker.log_dirs / "recovery-point-offset-checkpoint")
    for topic, partitions in topics.items():
        for p in range(partitions):
            recovery[(topic, p)] = 0
            if drop_indexes:
                for f in (broker.log_dirs / f"{topic}-{p}").iterdir():
                    if f.suffix in (".index", ".timeindex", ".snapshot"):
                        f.unlink()
    write_checkpoint(broker.log_dirs / "recovery-point-offset-checkpoint", recovery)


def require_kafka() -> bool:
    """Whether a missing Kafka must fail instead of skip (CI on a machine that has Maven)."""
    return os.environ.get("SEGLOG_REQUIRE_KAFKA", "") not in ("", "0")


def kafka_unavailable(reason: str):
    """Skip (or fail under SEGLOG_REQUIRE_KAFKA=1) a test that cannot have Kafka's software."""
    import pytest
    if require_kafka():
        pytest.fail(f"Apache Kafka is required (SEGLOG_REQUIRE_KAFKA=1): {reason}")
    pytest.skip(f"Apache Kafka unavailable: {reason}")


# -- pytest fixtures (tests/conftest.py alone imports them) -----------------------------------------

def _fixtures():
    import pytest

    @pytest.fixture(scope="session")
    def kafka_jars() -> KafkaJars:
        """The Kafka jars (resolved once per machine into the cache folder); skips with the reason."""
        try:
            return resolve_jars()
        except (KafkaUnavailable, OSError) as exc:
            kafka_unavailable(str(exc))

    @pytest.fixture(scope="module")
    def kafka_broker_factory(kafka_jars, tmp_path_factory):
        """`factory(overrides=None)` starts a fresh broker; all are stopped by pid after the module."""
        started: list[KafkaBroker] = []

        def factory(overrides: dict[str, str] | None = None) -> KafkaBroker:
            workdir = tmp_path_factory.mktemp("kafka")
            try:
                broker = KafkaBroker.create(kafka_jars, workdir, overrides)
                started.append(broker)
                return broker.start()
            except KafkaUnavailable as exc:
                kafka_unavailable(str(exc))

        yield factory
        for broker in started:
            broker.stop()

    @pytest.fixture(scope="session")
    def kafka_session_broker(kafka_jars, tmp_path_factory):
        """One broker of the default settings for the whole session (a start costs several
        seconds). tests/conftest.py alone defines it, so that it is one; modules take it through
        `kafka_shared`."""
        broker = None
        try:
            broker = KafkaBroker.create(kafka_jars, tmp_path_factory.mktemp("kafka-shared"))
            yield broker.start()
        except KafkaUnavailable as exc:
            kafka_unavailable(str(exc))
        finally:
            if broker is not None:
                broker.stop()

    @pytest.fixture(scope="module")
    def kafka_shared(kafka_session_broker):
        """The session's broker for one module, which must not change broker-wide state (dynamic
        broker configs, quotas, ACLs: those start their own with kafka_broker_factory). The
        module's topics and groups are deleted after it, so the next module finds none."""
        pytest.importorskip("confluent_kafka", reason="the shared Kafka broker is cleaned with confluent-kafka's admin")
        yield kafka_session_broker
        forget_topics_and_groups(kafka_session_broker.bootstrap)

    return kafka_jars, kafka_broker_factory, kafka_session_broker, kafka_shared


def forget_topics_and_groups(bootstrap: str) -> None:
    """Delete every topic but the internal ones and every group that has no members (a member
    a test left behind, e.g. one that never sent its leave, expires with its session)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result(60)
    groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=30).result(60).valid]
    if groups:
        for group, future in admin.delete_consumer_groups(groups, request_timeout=30).items():
            try:
                future.result(60)
            except Exception as exc:  # noqa: BLE001 - only a group with members may stay
                if not (exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.NON_EMPTY_GROUP):
                    raise RuntimeError(f"group {group} of the shared Kafka broker cannot be deleted: {exc}") from exc


kafka_jars, kafka_broker_factory, kafka_session_broker, kafka_shared = _fixtures()
