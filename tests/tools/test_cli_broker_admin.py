"""`seglog topics --bootstrap-server` and `seglog leader-election` through main(), against a real
`seglog broker` and Apache Kafka 4.1 (KRaft), whose own kafka-topics / kafka-leader-election
(TopicCommand, LeaderElectionCommand) print the reference output: the comparisons are exact."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from logcore.log.partition_metadata import PartitionMetadata, format_topic_id  # noqa: E402
from logcore.tools.cli import main  # noqa: E402

sys.path.insert(0, str(TESTS))

LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
COLLISION = ("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could"
             " collide. To avoid issues it is best to use either, but not both.\n")


@pytest.fixture(scope="module")
def kafka(kafka_shared):
    """Apache Kafka's broker the session shares (tests/conftest.py): no topics of other modules."""
    return kafka_shared


def seglog(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------ seglog broker

def test_topics_through_the_seglog_broker(capsys, seglog_broker):
    bs = ("--bootstrap-server", seglog_broker.bootstrap)
    code, out, err = seglog(capsys, "topics", *bs, "--create", "--topic", "adm.orders", "--partitions", "2",
                            "--replication-factor", "1", "--config", "cleanup.policy=compact",
                            "--config", "retention.ms = 1000")
    assert (code, out, err) == (0, COLLISION + "Created topic adm.orders.\n", "")
    assert seglog(capsys, "topics", *bs, "--create", "--topic", "adm-clicks", "--partitions", "1")[:2] == \
        (0, "Created topic adm-clicks.\n")

    code, out, err = seglog(capsys, "topics", *bs, "--create", "--topic", "adm-clicks", "--partitions", "1")
    assert code == 1 and out == ""
    assert err.startswith("seglog: error: TOPIC_ALREADY_EXISTS: ") and "adm-clicks" in err
    assert seglog(capsys, "topics", *bs, "--create", "--topic", "adm-clicks", "--partitions", "1",
                  "--if-not-exists") == (0, "", "")

    assert seglog(capsys, "topics", *bs, "--list", "--topic", "adm.*") == (0, "adm-clicks\nadm.orders\n", "")

    metadata = PartitionMetadata.from_bytes((seglog_broker.root / "adm.orders-0" / "partition.metadata").read_bytes())
    topic_id = format_topic_id(metadata.topic_id)
    code, out, _ = seglog(capsys, "topics", *bs, "--describe", "--topic", "adm.orders")
    assert code == 0
    # seglog's broker answers Metadata (no DescribeTopicPartitions): no ELR, as Kafka's tool prints then
    assert out == (f"Topic: adm.orders\tTopicId: {topic_id}\tPartitionCount: 2\tReplicationFactor: 1\t"
                   "Configs: cleanup.policy=compact,retention.ms=1000\n"
                   "\tTopic: adm.orders\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A\n"
                   "\tTopic: adm.orders\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A\n")

    assert seglog(capsys, "topics", *bs, "--alter", "--topic", "adm-clicks", "--partitions", "3") == (0, "", "")
    code, out, _ = seglog(capsys, "topics", *bs, "--describe", "--topic", "adm-clicks")
    assert code == 0 and "PartitionCount: 3" in out and "\tPartition: 2\tLeader: 0" in out
    code, _, err = seglog(capsys, "topics", *bs, "--alter", "--topic", "adm-clicks", "--partitions", "2")
    assert code == 1 and err.startswith("seglog: error: INVALID_PARTITIONS: ")

    assert seglog(capsys, "topics", *bs, "--delete", "--topic", "adm-clicks") == (0, "", "")
    assert seglog(capsys, "topics", *bs, "--list", "--topic", "adm.*")[1] == "adm.orders\n"
    code, _, err = seglog(capsys, "topics", *bs, "--describe", "--topic", "adm-clicks")
    assert (code, err) == (1, "seglog: error: Topic 'adm-clicks' does not exist as expected\n")
    assert seglog(capsys, "topics", *bs, "--delete", "--topic", "adm-clicks", "--if-exists") == (0, "", "")


@pytest.mark.parametrize("argv, fragment", [
    (["--create", "--partitions", "1"], "--create needs --topic T"),
    (["--create", "--topic", "x", "--replication-factor", "0"], "between 1 and 32767"),
    (["--create", "--topic", "x", "--partitions", "0"], "The partitions must be greater than 0"),
    (["--create", "--topic", "x", "--config", "a"], "must be in the format \"key=val\""),
    (["--create", "--topic", "x", "--replica-assignment", "1:1"], "duplicate entries: 1"),
    (["--create", "--topic", "x", "--replica-assignment", "1:2,3"], "Partition 1 has different replication factor"),
    (["--create", "--topic", "x", "--replica-assignment", "1", "--partitions", "1"], "cannot be used with --partitions"),
    (["--list", "--config", "a=b"], "--config applies to --create and --alter only"),
    (["--describe", "--all-configs"], "--all-configs applies to --root only"),
    (["--list", "--topic", "("], "invalid regex"),
])
def test_topics_broker_mode_bad_input(capsys, seglog_broker, argv, fragment):
    code, out, err = seglog(capsys, "topics", "--bootstrap-server", seglog_broker.bootstrap, *argv)
    assert code == 1 and fragment in err, err


def test_topics_modes_are_exclusive_and_root_mode_keeps_its_flags(capsys, tmp_path):
    assert main(["topics", "--list"]) == 2                       # neither --root nor --bootstrap-server
    assert main(["topics", "--root", str(tmp_path), "--bootstrap-server", "h:1", "--list"]) == 2
    capsys.readouterr()
    code, _, err = seglog(capsys, "topics", "--root", str(tmp_path / "r"), "--create", "x", "--partitions", "1",
                          "--replication-factor", "1")
    assert code == 1 and "--replication-factor applies to --bootstrap-server only" in err
    root = str(tmp_path / "r2")
    assert seglog(capsys, "topics", "--root", root, "--create", "--topic", "x", "--partitions", "1")[:2] == \
        (0, "Created topic x.\n")                                # kafka-topics' spelling works on a root too


def test_leader_election_on_a_broker_without_electleaders(capsys, seglog_broker):
    code, out, err = seglog(capsys, "leader-election", "--bootstrap-server", seglog_broker.bootstrap,
                            "--election-type", "preferred", "--all-topic-partitions")
    assert (code, out) == (1, "")
    assert err == (f"seglog: error: the broker at {seglog_broker.bootstrap} (--bootstrap-server="
                   f"{seglog_broker.bootstrap}) does not serve ElectLeaders (api key 43): it is not advertised"
                   " in its ApiVersions response\n")


@pytest.mark.parametrize("argv, fragment", [
    (["--topic", "t"], "--topic needs --partition P"),
    (["--partition", "0", "--all-topic-partitions"], "--partition applies with --topic only"),
    (["--topic", "t", "--partition", "0", "--all-topic-partitions"], "give exactly one of"),
    ([], "give exactly one of"),
])
def test_leader_election_bad_input(capsys, argv, fragment):
    code, _, err = seglog(capsys, "leader-election", "--bootstrap-server", "127.0.0.1:1",
                          "--election-type", "preferred", *argv)
    assert code == 1 and fragment in err, err


# ------------------------------------------------------------------------------ Apache Kafka

def test_topics_output_matches_kafka_topics(capsys, kafka):
    """Create through seglog with five configs (their printed order is Java's HashMap order),
    then describe and list with both seglog and Kafka's own TopicCommand: identical output."""
    bs = ("--bootstrap-server", kafka.bootstrap)
    jars = kafka.jars
    code, out, _ = seglog(capsys, "topics", *bs, "--create", "--topic", "cmp", "--partitions", "3",
                          "--replication-factor", "1", "--config", "cleanup.policy=compact",
                          "--config", "retention.ms=1000", "--config", "max.message.bytes=2000",
                          "--config", "segment.bytes=1048576", "--config", "min.insync.replicas=1")
    assert (code, out) == (0, "Created topic cmp.\n")
    assert seglog(capsys, "topics", *bs, "--create", "--topic", "cmp_2", "--replica-assignment", "1,1")[:2] == \
        (0, COLLISION + "Created topic cmp_2.\n")
    theirs = jars.run_tool(jars.topic_command, [*bs, "--create", "--topic", "cmp3", "--partitions", "1"])
    assert theirs.stdout == "Created topic cmp3.\n"

    outputs = {}
    for argv in (["--describe", "--topic", "cmp"], ["--describe", "--topic", "cmp_2"], ["--list"]):
        code, out, _ = seglog(capsys, "topics", *bs, *argv)
        theirs = jars.run_tool(jars.topic_command, [*bs, *argv])
        assert code == 0 and theirs.returncode == 0, theirs.stderr[-2000:]
        assert out == theirs.stdout
        outputs[argv[-1]] = out
    assert "\tConfigs: min.insync.replicas=1,cleanup.policy=compact,segment.bytes=1048576," \
           "retention.ms=1000,max.message.bytes=2000\n" in outputs["cmp"]
    assert outputs["cmp_2"].count("\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: \n") == 2
    # internal topics (__consumer_offsets) are there once any module of the session used groups
    assert [t for t in outputs["--list"].split() if not t.startswith("__")] == ["cmp", "cmp3", "cmp_2"]

    # --alter grows the topic; an error carries Kafka's name and the broker's message
    assert seglog(capsys, "topics", *bs, "--alter", "--topic", "cmp3", "--partitions", "2") == (0, "", "")
    code, _, err = seglog(capsys, "topics", *bs, "--alter", "--topic", "cmp3", "--partitions", "1")
    theirs = jars.run_tool(jars.topic_command, [*bs, "--alter", "--topic", "cmp3", "--partitions", "1"])
    message = theirs.stdout.removeprefix("Error while executing topic command : ").strip()
    assert code == 1 and message and err == f"seglog: error: INVALID_PARTITIONS: {message}\n"
    code, _, err = seglog(capsys, "topics", *bs, "--create", "--topic", "cmp", "--partitions", "1")
    assert (code, err) == (1, "seglog: error: TOPIC_ALREADY_EXISTS: Topic 'cmp' already exists.\n")

    assert seglog(capsys, "topics", *bs, "--delete", "--topic", "cmp3") == (0, "", "")
    assert "cmp3" not in seglog(capsys, "topics", *bs, "--list")[1].split()


def test_leader_election_output_matches_kafka(capsys, kafka, tmp_path):
    """Single broker, RF=1: a preferred election is not needed (ELECTION_NOT_NEEDED); an unknown
    partition fails with exit 1. The same lines as LeaderElectionCommand's."""
    bs = ("--bootstrap-server", kafka.bootstrap)
    jars = kafka.jars
    kafka.create_topic("el", 2)
    cases = [["--election-type", "preferred", "--topic", "el", "--partition", "1"],
             ["--election-type", "PREFERRED", "--all-topic-partitions"]]
    spec = tmp_path / "el.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "el", "partition": 0}, {"topic": "el", "partition": 1}]}))
    cases.append(["--election-type", "unclean", "--path-to-json-file", str(spec)])
    for argv in cases:
        code, out, err = seglog(capsys, "leader-election", *bs, *argv)
        theirs = jars.run_tool(LEADER_ELECTION, [*bs, *argv])
        assert (code, err) == (0, "") and theirs.returncode == 0, (err, theirs.stderr[-2000:])
        assert sorted(out.splitlines()) == sorted(_sorted_partitions(theirs.stdout).splitlines())
    assert seglog(capsys, "leader-election", *bs, *cases[0])[1] == "Valid replica already elected for partitions el-1\n"

    argv = ["--election-type", "unclean", "--topic", "el", "--partition", "9"]
    code, out, err = seglog(capsys, "leader-election", *bs, *argv)
    theirs = jars.run_tool(LEADER_ELECTION, [*bs, *argv])
    assert code == 1 and theirs.returncode == 1
    prefix = "Error completing leader election (UNCLEAN) for partition: el-9: "
    assert out == prefix + "UNKNOWN_TOPIC_OR_PARTITION: No such partition as el-9\n"
    assert theirs.stdout.startswith(prefix) and theirs.stdout.endswith(": No such partition as el-9\n")
    assert err == "seglog: error: 1 replica(s) could not be elected\n"
    assert theirs.stderr.startswith("1 replica(s) could not be elected\n")


def _sorted_partitions(text: str) -> str:
    """Kafka prints a HashSet of partitions; seglog sorts them: compare the lines with sorted lists."""
    lines = []
    for line in text.splitlines():
        head, sep, parts = line.rpartition("partitions ")
        if sep:
            line = head + sep + ", ".join(sorted(parts.split(", "), key=lambda tp: (tp.rsplit("-", 1)[0],
                                                                                      int(tp.rsplit("-", 1)[1]))))
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")
