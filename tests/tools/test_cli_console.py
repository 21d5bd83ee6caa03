"""`seglog produce` / `seglog consume` through the brokers (`--bootstrap-server`), as a user types
them (a `python -m logcore.tools.cli` subprocess) against one real `seglog broker`, with Kafka's
flag names; `consume --group` commits offsets that Kafka's own kafka-consumer-groups and a
confluent-kafka consumer of the group see. Also the command line's usage errors (a misspelled
flag's "did you mean", --command-config refusals, an --override error naming --override).
"""
from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from logcore.tools.cli import main  # noqa: E402

sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    started: list = []
    yield broker_process.start_factory(tmp_path_factory.mktemp("console-broker"), started)(
        **{"group.initial.rebalance.delay.ms": "0"})
    for b in started:
        b.stop()


def seglog_process(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    """The command as a user types it: a `python -m logcore.tools.cli` process."""
    return subprocess.run([sys.executable, "-m", "logcore.tools.cli", *args], input=stdin, capture_output=True,
                          env=broker_process.subprocess_env(), timeout=timeout)


def seglog(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """The same command through main() in this process, its stdin, stdout and stderr as bytes
    (a process costs a second of imports; this module runs some thirty commands)."""
    streams = [io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="") for data in (stdin, b"", b"")]
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        code = main(list(args))
    finally:
        for stream in streams[1:]:
            stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved
    return subprocess.CompletedProcess(args, code, streams[1].buffer.getvalue(), streams[2].buffer.getvalue())


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_produce_and_consume_through_the_broker(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert ok(seglog("topics", *bs, "--create", "--topic", "console", "--partitions", "3")) == "Created topic console.\n"
    done = seglog_process("produce", *bs, "--topic", "console", "--property", "parse.key=true", "--property",
                  "key.separator=:", "--compression-codec", "zstd", stdin=b"k1:v1\nk2:v2\nk1:v3\n")
    assert "Produced 3 records to topic console" in done.stderr.decode(), done.stderr.decode()
    ok(done)
    ok(seglog("produce", *bs, "--topic", "console", "--partition", "1", "--request-required-acks", "1",
              stdin=b"plain\n"))

    out = ok(seglog("consume", *bs, "--topic", "console", "--from-beginning", "--max-messages", "4",
                    "--timeout-ms", "10000", "--property", "print.key=true", "--property", "print.partition=true",
                    "--property", "print.offset=true", "--property", "key.separator=|"))
    lines = sorted(out.splitlines())
    from logcore.records.partitioner import murmur2_partition
    p1, p2 = murmur2_partition(b"k1", 3), murmur2_partition(b"k2", 3)
    expected = sorted([f"Partition:{p1}|Offset:0|k1|v1", f"Partition:{p1}|Offset:1|k1|v3",
                       f"Partition:{p2}|Offset:{1 if p2 == p1 else 0}|k2|v2",
                       f"Partition:1|Offset:{sum(p == 1 for p in (p1, p2, p1))}|null|plain"])
    assert lines == expected

    # --partition/--offset, print.value=false, a header, the batches' codec is the one asked
    done = seglog("consume", *bs, "--topic", "console", "--partition", str(p1), "--offset", "1",
                  "--max-messages", "1", "--timeout-ms", "10000", "--property", "print.value=false",
                  "--property", "print.key=true")
    assert ok(done) == "k1\n" and "Processed a total of 1 messages" in done.stderr.decode()
    dumped = ok(seglog("dump", "--files", str(broker.root / f"console-{p1}" / "00000000000000000000.log")))
    assert "compresscodec: zstd" in dumped and "compresscodec: none" not in dumped, dumped

    # --timeout-ms with nothing new: ends, 0 records (the default start is the end)
    done = seglog("consume", *bs, "--topic", "console", "--timeout-ms", "300")
    assert ok(done) == "" and "Processed a total of 0 messages" in done.stderr.decode()

    # a topic the broker does not have: Kafka's error name and the bootstrap server
    done = seglog("consume", *bs, "--topic", "nowhere", "--timeout-ms", "300")
    assert done.returncode == 1
    assert done.stderr.decode() == (f"seglog: error: Topic nowhere does not exist on --bootstrap-server="
                                    f"{broker.bootstrap} (UNKNOWN_TOPIC_OR_PARTITION)\n")


def test_consume_reads_committed_transactions_only(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bs = ("--bootstrap-server", broker.bootstrap)
    ok(seglog("topics", *bs, "--create", "--topic", "txn-console", "--partitions", "1"))
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "console-t"})
    producer.init_transactions(20)
    for values, commit in (([b"c1", b"c2"], True), ([b"aborted"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce("txn-console", v, partition=0)
        producer.flush(20)                   # written before the end of the transaction, even the aborted one
        producer.commit_transaction(20) if commit else producer.abort_transaction(20)
    common = ("consume", *bs, "--topic", "txn-console", "--from-beginning", "--timeout-ms", "800")
    assert ok(seglog(*common, "--isolation-level", "read_committed")) == "c1\nc2\nc3\n"
    # read_uncommitted (Kafka's consumer default) shows the aborted record too
    assert ok(seglog(*common)) == "c1\nc2\naborted\nc3\n"


def test_consume_group_commits_offsets_kafka_tools_see(broker, kafka_jars):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bs = ("--bootstrap-server", broker.bootstrap)
    ok(seglog("topics", *bs, "--create", "--topic", "grouped", "--partitions", "2"))
    ok(seglog("produce", *bs, "--topic", "grouped", "--partition", "0", stdin=b"a0\na1\na2\n"))
    ok(seglog("produce", *bs, "--topic", "grouped", "--partition", "1", stdin=b"b0\nb1\n"))

    first = seglog("consume", *bs, "--topic", "grouped", "--group", "cli-group", "--from-beginning",
                   "--max-messages", "4", "--timeout-ms", "10000")
    got = ok(first).splitlines()
    assert len(got) == 4
    # the second member run of the group starts at what the first committed: the rest, once
    second = seglog("consume", *bs, "--topic", "grouped", "--group", "cli-group", "--from-beginning",
                    "--timeout-ms", "2000")
    rest = ok(second).splitlines()
    assert sorted(got + rest) == ["a0", "a1", "a2", "b0", "b1"]

    # the group's offsets as a Kafka client reads them ...
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-group"})
    try:
        committed = consumer.committed([confluent_kafka.TopicPartition("grouped", p) for p in (0, 1)], timeout=20)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 3), (1, 2)]
    # ... and as Kafka's kafka-consumer-groups describes them: no lag
    described = kafka_jars.run_tool(CONSUMER_GROUPS, ["--bootstrap-server", broker.bootstrap, "--describe",
                                                      "--group", "cli-group"])
    assert described.returncode == 0, described.stderr[-2000:]
    rows = {tuple(line.split()[1:6]) for line in described.stdout.splitlines() if line.startswith("cli-group ")}
    assert rows == {("grouped", "0", "3", "3", "0"), ("grouped", "1", "2", "2", "0")}, described.stdout


def _wait_for_members(confluent_kafka, bootstrap: str, group: str, count: int, timeout: float = 30) -> None:
    """Until the group is Stable with `count` members (a started process may take seconds to join
    on a busy machine)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    described = None
    while time.monotonic() < deadline:
        described = admin.describe_consumer_groups([group])[group].result(10)
        if str(described.state).endswith("STABLE") and len(described.members) == count:
            return
        time.sleep(0.2)
    pytest.fail(f"group {group} not stable with {count} members in {timeout} s: {described}")


def test_consume_group_shares_partitions_with_a_kafka_consumer(broker):
    """A confluent-kafka member (range assignor) joins while `seglog consume --group` runs: the
    group rebalances, each member owns a part, and between them every record is read."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bs = ("--bootstrap-server", broker.bootstrap)
    ok(seglog("topics", *bs, "--create", "--topic", "shared", "--partitions", "4"))
    for p in range(4):
        ok(seglog("produce", *bs, "--topic", "shared", "--partition", str(p), stdin=b"".join(
            b"p%d-%d\n" % (p, i) for i in range(3))))
    cli = subprocess.Popen([sys.executable, "-m", "logcore.tools.cli", "consume", *bs, "--topic", "shared",
                            "--group", "mixed", "--from-beginning", "--timeout-ms", "4000",
                            "--consumer-property", "heartbeat.interval.ms=300",
                            "--consumer-property", "session.timeout.ms=10000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=broker_process.subprocess_env())
    try:
        _wait_for_members(confluent_kafka, broker.bootstrap, "mixed", 1)   # the CLI member has joined
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": "mixed", "partition.assignment.strategy": "range",
            "auto.offset.reset": "earliest", "enable.auto.commit": True, "session.timeout.ms": 10000})
        theirs = []
        try:
            consumer.subscribe(["shared"])
            deadline = time.monotonic() + 20
            assigned = []
            while time.monotonic() < deadline and not assigned:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    theirs.append(msg.value().decode())
                assigned = consumer.assignment()
            assert assigned, "the Kafka consumer got no partitions"
            assert len(assigned) < 4, "the seglog member kept none"
        finally:
            consumer.close()
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, err.decode()
    ours = out.decode().splitlines()
    # every record read by the group, by one member or the other (a handover may repeat some)
    assert set(ours) | set(theirs) >= {f"p{p}-{i}" for p in range(4) for i in range(3)}, (ours, theirs)


# ------------------------------------------------------------------------------ usage errors

def test_misspelled_flag_gets_the_commands_usage_and_a_suggestion():
    done = seglog_process("consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--max-mesages", "3")
    err = done.stderr.decode()
    assert done.returncode == 2
    assert err.startswith("usage: seglog consume ") and "--max-messages N" in err
    assert "unrecognized arguments: --max-mesages 3" in err and "did you mean --max-messages?" in err
    # a misspelled required flag: the missing one and the suggestion
    done = seglog("produce", "--bootstrap-sever", "127.0.0.1:1", "--topic", "t")
    err = done.stderr.decode()
    assert done.returncode == 2 and "did you mean --bootstrap-server?" in err, err
    done = seglog("topics", "--bootstrap-server", "127.0.0.1:1", "--under-replicated-partitons", "--describe")
    assert "did you mean --under-replicated-partitions?" in done.stderr.decode()


@pytest.mark.parametrize("lines, fragment", [
    ("security.protocol=SASL_SSL\n", "security.protocol=SASL_SSL needs sasl.mechanism"),
    ("ssl.truststore.location=/x\n", "ssl.truststore.location given but security.protocol=PLAINTEXT does not use TLS"),
    ("ssl.cipher.suites=x\n", "ssl.cipher.suites is not supported by seglog's clients"),
    ("linger.ms=5\n", "linger.ms is unknown to or not supported by seglog produce --bootstrap-server"),
    ("acks=0\n", "acks=0 is not supported"),
])
def test_command_config_refuses_what_it_does_not_apply(tmp_path, lines, fragment):
    config = tmp_path / "client.properties"
    config.write_text(lines)
    done = seglog("produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--command-config", str(config))
    assert done.returncode == 1 and fragment in done.stderr.decode(), done.stderr.decode()


def test_command_config_applies_client_properties(broker, tmp_path):
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=PLAINTEXT\nclient.id=from-file\nrequest.timeout.ms=20000\n")
    bs = ("--bootstrap-server", broker.bootstrap)
    assert ok(seglog("topics", *bs, "--create", "--topic", "cfg", "--partitions", "1",
                     "--command-config", str(config))) == "Created topic cfg.\n"
    # a report of an under-replicated partition: none on one broker, nothing printed (as kafka-topics)
    assert ok(seglog("topics", *bs, "--describe", "--under-replicated-partitions", "--command-config",
                     str(config))) == ""
    config.write_text("isolation.level=read_sideways\n")
    done = seglog("consume", *bs, "--topic", "cfg", "--command-config", str(config))
    assert done.returncode == 1 and "isolation.level must be read_committed or read_uncommitted" in \
        done.stderr.decode()


def test_produce_codec_flags_must_agree():
    done = seglog("produce", "--root", "nowhere", "--topic", "t", "--compression-type", "lz4",
                  "--compression-codec", "gzip")
    assert done.returncode == 1
    assert "--compression-type lz4 and --compression-codec gzip disagree" in done.stderr.decode()


def test_override_error_names_the_override(tmp_path):
    config = tmp_path / "broker.properties"
    config.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'logs'}\n")
    done = seglog_process("broker", "--config", str(config), "--override", "log.retention.ms=soon")
    err = done.stderr.decode()
    assert done.returncode == 1
    assert err.startswith("seglog: error: --override log.retention.ms=soon: ") and str(config) not in err, err
    # an error of the file itself still names the file
    config.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'logs'}\nlog.retention.ms=soon\n")
    done = seglog("broker", "--config", str(config), "--override", "log.retention.ms=1000",
                  "--override", "num.partitions=x")
    assert done.stderr.decode().startswith("seglog: error: --override num.partitions=x: "), done.stderr.decode()
    done = seglog("broker", "--config", str(config))
    assert done.stderr.decode().startswith(f"seglog: error: {config}: "), done.stderr.decode()
