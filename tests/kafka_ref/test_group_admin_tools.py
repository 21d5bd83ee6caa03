"""Kafka 4.1's own kafka-consumer-groups and kafka-delete-records against a seglog broker give
the same answers as against Apache Kafka, and so do `seglog consumer-groups` and `seglog
delete-records` (issue 28, items 1 and 2).

One scenario runs on each broker: a topic of two partitions with 30 records each; groups
`idle` and `trim` with standalone commits (10 and 20), `busy` an active subscribed consumer.
Then, with Kafka's tools (one JVM each) and with seglog's: --describe of `idle`, --delete of
`idle` and `busy` (the active one refused with NON_EMPTY_GROUP), --delete-offsets of `trim` on
t:0, delete-records (t-0 before 10, t-1 before 100: past the high watermark, refused), and a
consumer from earliest on t-0 then starts at 10. The parsed answers are compared, not the
formatting. Then group_reset_scenario's --reset-offsets (every mode), --describe --members /
--state and --list --state, by both tools on one seglog broker.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from logcore.tools import cli  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import group_reset_scenario  # noqa: E402
import broker_spawner  # noqa: E402
from broker_process import subprocess_env  # noqa: E402

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
# The exception a Kafka tool prints -> the error name seglog's tools print.
EXCEPTIONS = {"GroupNotEmptyException": "NON_EMPTY_GROUP", "GroupIdNotFoundException": "GROUP_ID_NOT_FOUND",
              "OffsetOutOfRangeException": "OFFSET_OUT_OF_RANGE",
              "GroupSubscribedToTopicException": "GROUP_SUBSCRIBED_TO_TOPIC"}


@pytest.fixture(scope="module")
def seglog_broker(tmp_path_factory):
    """`start()`: a new `seglog broker` subprocess; its bootstrap address. All stopped after the module."""
    started: list[subprocess.Popen] = []

    def start() -> str:
        base = tmp_path_factory.mktemp("seglog")
        conf = base / "broker.properties"
        conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={base / 'logs'}\nnode.id=0\n"
                        "num.partitions=1\ngroup.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=1\n")
        with open(base / "stderr", "wb") as err:
            proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                                        stdout=subprocess.PIPE, stderr=err, env=subprocess_env())
        started.append(proc)
        line = proc.stdout.readline().decode()
        assert "listening on PLAINTEXT://" in line, (base / "stderr").read_text()
        return line.strip().rsplit("//", 1)[1]

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _setup(bootstrap: str) -> Consumer:
    """The topic, its records, the groups; the active consumer of `busy` (close it after)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 2, 1)])["t"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in (0, 1):
        for i in range(30):
            producer.produce("t", b"v%d" % i, partition=p)
    assert producer.flush(30) == 0
    for group, offset in (("idle", 10), ("trim", 20)):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("t", 0, offset), TopicPartition("t", 1, offset)], asynchronous=False)
        c.close()
    busy = Consumer({"bootstrap.servers": bootstrap, "group.id": "busy", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 10000})
    busy.subscribe(["t"])
    deadline = time.monotonic() + 30
    while len(busy.assignment()) < 2 and time.monotonic() < deadline:
        busy.poll(0.1)
    assert len(busy.assignment()) == 2
    return busy


def _first_offset(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fresh", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("t", 0)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                return m.offset()
        raise AssertionError("nothing consumed")
    finally:
        c.close()


def _error(text: str) -> str:
    """An error a tool printed, as an error name."""
    for exc, name in EXCEPTIONS.items():
        if exc in text:
            return name
    found = re.search(r"\b([A-Z][A-Z_]+[A-Z])\b", text)
    return found.group(1) if found else text.strip()


def _parse_describe(text: str) -> dict:
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 9 and cells[0] != "GROUP":
            rows[(cells[1], int(cells[2]))] = tuple(cells[3:6])
    return {"no_members": "has no active members" in text, "rows": rows}


def _parse_delete(text: str) -> dict:
    out = {}
    ok = re.search(r"Deletion of requested consumer groups \((.*)\) was successful", text) or \
        re.search(r"These consumer groups were deleted successfully: (.*)", text)
    for g in re.findall(r"'([^']+)'", ok.group(1)) if ok else ():
        out[g] = "ok"
    for g, why in re.findall(r"\* Group '([^']+)' could not be deleted due to: (.*)", text):
        out[g] = _error(why)
    return out


def _parse_delete_offsets(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        cells = line.split(None, 2)
        if len(cells) == 3 and cells[0] == "t" and cells[1].isdigit():
            out[int(cells[1])] = "ok" if cells[2].strip() == "Successful" else _error(cells[2])
    return out


def _parse_delete_records(text: str) -> dict:
    out = {}
    for part, rest in re.findall(r"partition: (\S+)\s+(.*)", text):
        low = re.match(r"low_watermark: (\d+)", rest)
        out[part] = int(low.group(1)) if low else _error(rest)
    return out


def _answers(bootstrap: str, run, offsets_file: Path) -> dict:
    return {
        "describe": _parse_describe(run("groups", "--describe", "--group", "idle")),
        "delete": _parse_delete(run("groups", "--delete", "--group", "idle", "--group", "busy")),
        "delete_offsets": _parse_delete_offsets(run("groups", "--delete-offsets", "--group", "trim",
                                                    "--topic", "t:0")),
        "delete_records": _parse_delete_records(run("records", "--offset-json-file", str(offsets_file))),
    }


def _kafka_tools(kafka_jars, bootstrap: str):
    def run(which: str, *args: str) -> str:
        main = GROUP_COMMAND if which == "groups" else DELETE_RECORDS
        done = kafka_jars.run_tool(main, ["--bootstrap-server", bootstrap, *args], timeout=120)
        return done.stdout + done.stderr
    return run


def _seglog_tools(bootstrap: str):
    def run(which: str, *args: str) -> str:
        command = "consumer-groups" if which == "groups" else "delete-records"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main([command, "--bootstrap-server", bootstrap, *args])
        return out.getvalue() + err.getvalue()
    return run


def _scenario(bootstrap: str, run, tmp_path: Path) -> dict:
    offsets_file = tmp_path / "offsets.json"
    offsets_file.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 10},
                                                       {"topic": "t", "partition": 1, "offset": 100}],
                                        "version": 1}))
    busy = _setup(bootstrap)
    try:
        answers = _answers(bootstrap, run, offsets_file)
    finally:
        busy.close()
    answers["first_offset"] = _first_offset(bootstrap)
    return answers


EXPECTED = {
    "describe": {"no_members": True, "rows": {("t", 0): ("10", "30", "20"), ("t", 1): ("10", "30", "20")}},
    "delete": {"idle": "ok", "busy": "NON_EMPTY_GROUP"},
    "delete_offsets": {0: "ok"},
    "delete_records": {"t-0": 10, "t-1": "OFFSET_OUT_OF_RANGE"},
    "first_offset": 10,
}


@pytest.fixture(scope="module")
def kafka_answers(kafka_jars, kafka_shared, tmp_path_factory):
    kafka = kafka_shared
    return _scenario(kafka.bootstrap, _kafka_tools(kafka_jars, kafka.bootstrap), tmp_path_factory.mktemp("k"))


def test_kafka_tools_answer_on_kafka_as_expected(kafka_answers):
    assert kafka_answers == EXPECTED


def test_kafka_tools_answer_alike_on_seglog(kafka_jars, kafka_answers, seglog_broker, tmp_path):
    bootstrap = seglog_broker()
    assert _scenario(bootstrap, _kafka_tools(kafka_jars, bootstrap), tmp_path) == kafka_answers


def test_seglog_tools_answer_as_kafka_tools(kafka_answers, seglog_broker, tmp_path):
    bootstrap = seglog_broker()
    assert _scenario(bootstrap, _seglog_tools(bootstrap), tmp_path) == kafka_answers



# ------------------------------------------------------------------ --reset-offsets, --members, --state
@pytest.fixture(scope="module")
def reset_broker(seglog_broker):
    """One seglog broker with group_reset_scenario's topic and groups."""
    bootstrap = seglog_broker()
    active = group_reset_scenario.prepare(bootstrap)
    yield bootstrap
    active.close()


@pytest.fixture(scope="module")
def tool_batch(kafka_jars, tmp_path_factory):
    sys.path.insert(0, str(REPO / "tests" / "kafka_clients"))
    from java_program import JavaUnavailable
    from kafka_reference import kafka_unavailable
    try:
        return group_reset_scenario.compile_tool_batch(kafka_jars, tmp_path_factory.mktemp("tool-batch"))
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))


def test_reset_offsets_and_describe_alike_with_kafka_and_seglog_tools(tool_batch, reset_broker):
    group_reset_scenario.check(group_reset_scenario.kafka_tool(tool_batch, reset_broker),
                               group_reset_scenario.seglog_tool(reset_broker), reset_broker)
