"""A scenario of `kafka-consumer-groups --reset-offsets` (every mode, --dry-run, the default dry
run, --execute, an active group refused), `--describe --members` / `--state` and `--list --state`,
run by Kafka 4.1's ConsumerGroupCommand and by `seglog consumer-groups` against the same seglog
server (one broker: tests/kafka_ref/test_group_admin_tools.py; a cluster, whose groups have their
coordinators on different brokers: tests/cluster/test_cli_on_cluster.py). Each tool resets its
own copy of a group; the parsed answers must be alike and what Kafka's semantics say
(RESET_EXPECTED). Kafka's tool runs its invocations in one JVM (ToolBatch.java)."""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logcore.tools import cli

HERE = Path(__file__).resolve().parent
GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
T0 = 1_767_225_600_000          # 2026-01-01T00:00:00Z: record i of each partition is T0 + i s
RESETS = {
    "earliest": ["--all-topics", "--to-earliest", "--dry-run"],
    "latest_default_dry_run": ["--topic", "r", "--to-latest"],
    "offset_past_the_end": ["--topic", "r:1", "--to-offset", "100", "--dry-run"],
    "shift_before_the_start": ["--all-topics", "--shift-by", "-15", "--dry-run"],
    "datetime": ["--all-topics", "--to-datetime", "2026-01-01T00:00:12.000Z", "--dry-run"],
}
RESET_EXPECTED = {
    "earliest": {("r", 0): 5, ("r", 1): 0},                  # r-0 starts at 5 (DeleteRecords)
    "latest_default_dry_run": {("r", 0): 30, ("r", 1): 30},
    "offset_past_the_end": {("r", 1): 30},                   # to the nearest end
    "shift_before_the_start": {("r", 0): 5, ("r", 1): 5},    # 10-15 -> log start 5; 20-15
    "datetime": {("r", 0): 12, ("r", 1): 12},
    "execute": {("r", 0): 7},
    "after_execute": {("r", 0): 7, ("r", 1): 20},            # the other partition untouched
    "active": "Stable",
    "members": [("active", "/127.0.0.1", "rdkafka-active", 2)],     # Kafka names hosts so
    "state": [("active", "range", "Stable", 1)],
    "list_state": [("active", "Stable")],
}


def prepare(bootstrap: str) -> Consumer:
    """Topic r (2 x 30 timestamped records, r-0 trimmed to 5), groups ra/rb and ra-exec/rb-exec
    committed at {r-0: 10, r-1: 20}, and `active`, a subscribed consumer (returned: close it)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("r", 2, 1)])["r"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in (0, 1):
        for i in range(30):
            producer.produce("r", b"v%d" % i, partition=p, timestamp=T0 + i * 1000)
    assert producer.flush(30) == 0
    for group in ("ra", "rb", "ra-exec", "rb-exec"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("r", 0, 10), TopicPartition("r", 1, 20)], asynchronous=False)
        c.close()
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        offsets = Path(folder) / "offsets.json"
        offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": "r", "partition": 0, "offset": 5}]}))
        with contextlib.redirect_stdout(out):
            assert cli.main(["delete-records", "--bootstrap-server", bootstrap, "--offset-json-file",
                             str(offsets)]) == 0, out.getvalue()
    active = Consumer({"bootstrap.servers": bootstrap, "group.id": "active", "client.id": "rdkafka-active",
                       "enable.auto.commit": False, "session.timeout.ms": 10000})
    active.subscribe(["r"])
    deadline = time.monotonic() + 30
    while len(active.assignment()) < 2 and time.monotonic() < deadline:
        active.poll(0.1)
    assert len(active.assignment()) == 2
    return active


def compile_tool_batch(kafka_jars, classes: Path):
    """ToolBatch.java compiled against Kafka's jars (JavaUnavailable without a JDK)."""
    sys.path.insert(0, str(HERE.parent / "kafka_clients"))
    from java_program import JavaProgram
    return JavaProgram.compile([HERE / "ToolBatch.java"], kafka_jars.jars, classes,
                               kafka_jars.folder / "log4j2-tools.properties")


def kafka_tool(program, bootstrap: str):
    """Kafka's ConsumerGroupCommand: run_all([args, ...]) -> each invocation's output, one JVM."""
    def run_all(calls: list[list[str]]) -> list[str]:
        lines = "".join("\t".join(["--bootstrap-server", bootstrap, *args]) + "\n" for args in calls)
        proc = subprocess.run(program.command([GROUP_COMMAND]), input=lines, capture_output=True, text=True,
                              timeout=180)
        parts = re.split(r"^=== (\d+) -?\d+\n", proc.stdout, flags=re.M)
        outputs = dict(zip(map(int, parts[1::2]), parts[2::2]))
        assert sorted(outputs) == list(range(len(calls))), proc.stdout[-3000:] + proc.stderr[-3000:]
        return [outputs[i] for i in range(len(calls))]
    return run_all


def seglog_tool(bootstrap: str):
    """`seglog consumer-groups` in this process: run_all([args, ...]) -> each invocation's output."""
    def run(args: list[str]) -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main(["consumer-groups", "--bootstrap-server", bootstrap, *args])
        return out.getvalue() + err.getvalue()
    return lambda calls: [run(args) for args in calls]


def answers(run_all, group: str, bootstrap: str) -> dict:
    """Every reset mode on `group`, an --execute on `<group>-exec`, the refusal on the active
    group, --describe --members and --state of it, --list --state."""
    calls = {name: ["--reset-offsets", "--group", group, *args] for name, args in RESETS.items()}
    calls["execute"] = ["--reset-offsets", "--group", f"{group}-exec", "--topic", "r:0", "--to-offset", "7",
                        "--execute"]
    calls["active"] = ["--reset-offsets", "--group", "active", "--all-topics", "--to-earliest", "--execute"]
    calls["members"] = ["--describe", "--group", "active", "--members"]
    calls["state"] = ["--describe", "--group", "active", "--state"]
    calls["list_state"] = ["--list", "--state"]
    outputs = dict(zip(calls, run_all(list(calls.values()))))
    out = {name: _parse_reset(outputs[name], group) for name in RESETS}
    out["execute"] = _parse_reset(outputs["execute"], f"{group}-exec")
    out["after_execute"] = _committed(bootstrap, f"{group}-exec")
    state = re.search(r"current state is (\w+)", outputs["active"])
    out["active"] = state.group(1) if state else outputs["active"][-500:]
    out["members"] = _parse_members(outputs["members"])
    out["state"] = _parse_state(outputs["state"])
    out["list_state"] = _parse_list_state(outputs["list_state"])
    out["dry_run_warning"] = "No action will be performed as the --execute option is missing" in \
        outputs["latest_default_dry_run"]
    return out


def check(kafka_run_all, seglog_run_all, bootstrap: str) -> None:
    """Both tools' answers: as Kafka says, and alike."""
    kafka = answers(kafka_run_all, "ra", bootstrap)
    seglog = answers(seglog_run_all, "rb", bootstrap)
    assert kafka.pop("dry_run_warning") and seglog.pop("dry_run_warning")
    assert kafka == RESET_EXPECTED
    assert seglog == kafka


def _committed(bootstrap: str, group: str) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in c.committed([TopicPartition("r", 0), TopicPartition("r", 1)], timeout=20)}
    finally:
        c.close()


def _parse_reset(text: str, group: str) -> dict:
    out = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 4 and cells[0] == group and cells[2].isdigit():
            out[(cells[1], int(cells[2]))] = int(cells[3])
    return out


def _parse_members(text: str) -> list:
    """(group, host, client id, #partitions) of each member row (member ids differ by run)."""
    return sorted((c[0], c[2], c[3], int(c[4])) for c in (ln.split() for ln in text.splitlines())
                  if len(c) == 5 and c[0] == "active" and c[4].isdigit())


def _parse_state(text: str) -> list:
    """(group, strategy, state, #members); the COORDINATOR (ID) cell holds a space."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+(\S+)\s+\((\d+)\)\s+(\S+)\s+(\S+)\s+(\d+)\s*$", line)
        if m and m.group(1) == "active":
            rows.append((m.group(1), m.group(4), m.group(5), int(m.group(6))))
    return rows


def _parse_list_state(text: str) -> list:
    return sorted(tuple(c) for c in (ln.split() for ln in text.splitlines()) if len(c) == 2 and c[0] == "active")
